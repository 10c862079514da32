#!/usr/bin/env bash
# The GPU check kit (docs/cuda.md). Two halves:
#
#   tools/gpu_check.sh [collect]
#       On this build machine: builds --config=cuda, gathers the device
#       tests and the binaries they need with every shared library that is
#       not part of the CUDA toolkit or glibc into gpu_kit/, packs it as
#       gpu_kit.tar.xz (must stay under 64 MiB: what a GPU machine gets)
#       and prints the command to run there.
#
#   tools/gpu_check.sh run [RESULTS_DIR]
#       On the GPU machine, from a copy of this working tree holding
#       gpu_kit.tar.xz: unpacks it, runs every check with a time limit and
#       writes their output to RESULTS_DIR/gpu_results.txt ($OUT, else
#       ./gpu_results): the device and library versions, the dtype and CUDA
#       kernel parity tests (per layer), GPT-2 on the CUDA device against
#       the CPU model, the NCCL communicator tests, the
#       servers' gather/push bandwidth (transfer_bench), and the torch
#       check (tests/python/gpu_torch_check.py: zeroshard's engine on the
#       device against torch, parity and benchmark). Last
#       line: "gpu_check: N passed, N failed, N skipped". Exit status 1 when
#       a check failed.
#
#   tools/gpu_check.sh train-bench KIT PYTHON DEVICE STAGE [train flags]
#       The kit's `zeroshard train` benchmark alone (run calls it with
#       DEVICE cuda and GPT-2 124M, stages 0 and 2): one worker, 2 servers.
#
#   tools/gpu_check.sh summarize RESULTS_FILE
#       Prints the RESULT line `run` ends with from a results file:
#       gpu_stage0_vs_torch, gpu_offload_vs_fsdp2, mfu (stage 0's; the
#       torch check's flops per token and peak) and mfu_stage0/_stage2.
#
# Environment for `run`: GPU_CHECK_PYTHON (a python with torch; default
# /opt/torch/.venv/bin/python3, else python3), GPU_CHECK_TORCH_ARGS (extra
# flags for gpu_torch_check.py, e.g. "--rounds=5"), GPU_CHECK_TRAIN_ARGS
# (extra zeroshard train flags for the train benchmark, e.g. "--steps=50").
set -uo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.." || exit 1

KIT=gpu_kit
TARBALL=gpu_kit.tar.xz
MAX_BYTES=$((64 * 1024 * 1024))
# label:bazel target:path inside the kit
BINARIES=(
  "common/cuda/cuda_info:bin/cuda_info"
  "common/cuda/dtype_cuda_test:bin/dtype_cuda_test"
  "worker/gpt2/cuda/cuda_kernels_test:bin/cuda_kernels_test"
  "worker/gpt2/cuda/cuda_model_test:bin/cuda_model_test"
  "worker/engine/cuda_engine_test:bin/cuda_engine_test"
  "worker/train/multiprocess_test:bin/multiprocess_test"
  "worker/collective/nccl_communicator_test:bin/nccl_communicator_test"
  "server/zeroshard-server:bin/zeroshard-server"
  "tests/bench/transfer_bench:bin/transfer_bench"
  "launcher/zeroshard:bin/zeroshard"
  "worker/train/zeroshard-worker:bin/zeroshard-worker"
  "client/libzeroshard.so:lib/libzeroshard.so"
)

die() { echo "gpu_check: $*" >&2; exit 1; }

collect() {
  [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null ||
    die "no nvcc here: the kit is built on a machine with the CUDA toolkit"
  local targets=()
  for b in "${BINARIES[@]}"; do
    local t=${b%%:*}
    targets+=("//${t%/*}:${t##*/}")
  done
  echo "gpu_check: bazel build --config=cuda ${targets[*]}"
  bazel build --noshow_progress --config=cuda "${targets[@]}" ||
    die "the CUDA build failed"
  local bin
  bin=$(bazel info --config=cuda bazel-bin 2>/dev/null) ||
    die "bazel info bazel-bin failed"
  rm -rf "$KIT" "$TARBALL"
  mkdir -p "$KIT/bin" "$KIT/lib" "$KIT/compat"
  local deps
  deps=$(mktemp)
  for b in "${BINARIES[@]}"; do
    local src="$bin/${b%%:*}" dst="$KIT/${b#*:}"
    [ -f "$src" ] || die "missing $src after the build"
    cp "$src" "$dst" && chmod u+w "$dst" && strip --strip-debug "$dst" ||
      die "could not copy $src"
    ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' >>"$deps"
  done
  # Shared libraries: the CUDA toolkit's (cudart, cuBLAS, NCCL) come from
  # the GPU machine's own toolkit (the driver must match them there);
  # glibc's are the system's. libstdc++/libgcc_s go to compat/, used only
  # where the machine's own libstdc++ is older than this build's.
  sort -u "$deps" | while read -r soname path; do
    case "$path" in
      /usr/local/cuda*) continue ;;
    esac
    case "$soname" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*) continue ;;
      libstdc++.so.*|libgcc_s.so.*) cp -L "$path" "$KIT/compat/$soname" ;;
      *) cp -L "$path" "$KIT/lib/$soname" ;;
    esac
  done
  rm -f "$deps"
  # transfer_bench finds the server as server/zeroshard-server from its
  # working directory (the kit), multiprocess_test the worker as
  # worker/train/zeroshard-worker.
  ln -s bin "$KIT/server"
  mkdir -p "$KIT/worker" && ln -s ../bin "$KIT/worker/train"
  git rev-parse HEAD >"$KIT/REVISION" 2>/dev/null
  # xz on every core: half the wall time of tar -J's one thread on 2 cores.
  tar -cf - "$KIT" | xz -T0 >"$TARBALL" || die "could not pack $TARBALL"
  local size
  size=$(stat -c %s "$TARBALL")
  echo "gpu_check: $TARBALL: $((size / 1024)) KiB packed" \
    "($(du -sk "$KIT" | cut -f1) KiB unpacked," \
    "$(find "$KIT/lib" -type f | wc -l) libraries)"
  [ "$size" -le "$MAX_BYTES" ] ||
    die "$TARBALL is $size bytes, over the 64 MiB a GPU machine receives"
  echo "gpu_check: on the GPU machine, in a copy of this tree with $TARBALL:"
  echo "  bash tools/gpu_check.sh run \"\$OUT\""
}

# --------------------------------------------------------------- run
results=""
passed=0
failed=0
skipped=0

log() { echo "$*" | tee -a "$results"; }

# check NAME SECONDS COMMAND...: runs it, its output into the results;
# a test that skipped for want of a device or of CUDA counts as skipped
# (a GPU machine should skip nothing; the reasons are in the output).
check() {
  local name=$1 limit=$2
  shift 2
  log ""
  log "=== $name: $*"
  local out rc start
  out=$(mktemp)
  start=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$out" 2>&1
  rc=$?
  cat "$out" >>"$results"
  tail -n 60 "$out"
  local secs
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if [ "$rc" -eq 0 ] &&
     grep -qE 'no CUDA device|built without --config=cuda' "$out"; then
    log "=== $name: SKIPPED (${secs} s)"
    skipped=$((skipped + 1))
  elif [ "$rc" -eq 0 ]; then
    log "=== $name: PASSED (${secs} s)"
    passed=$((passed + 1))
  else
    [ "$rc" -eq 124 ] && log "=== $name: timed out after ${limit} s"
    log "=== $name: FAILED (exit $rc, ${secs} s)"
    failed=$((failed + 1))
  fi
  rm -f "$out"
}

# train_bench KIT PYTHON DEVICE STAGE ARGS...: `zeroshard train` (one
# worker, 2 servers, ZeRO stage STAGE, the model on DEVICE) on synthetic
# tokens. Prints the median step's split by phase (metrics.jsonl, steps
# after the first 3) and "train_bench device=D stage=S tokens_per_s=N" from
# that median step (the report's whole-run figure, first steps included,
# beside it). ARGS: the model's shape and steps (zeroshard train's flags).
# TRAIN_BENCH_ZERO: more "zero_optimization" keys, e.g.
# '"reduce_bucket_size": 20000000'.
train_bench() {
  local kit=$1 py=$2 device=$3 stage=$4
  shift 4
  local dir
  dir=$(mktemp -d) || return 1
  # An llm.c token file: 256 int32 header (magic, version, count), uint16s.
  "$py" - "$dir/tokens.bin" <<'PY' || return 1
import random, struct, sys
n = 1 << 20
random.seed(1)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H",
                        *(random.randrange(50257) for _ in range(n))))
PY
  cat >"$dir/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "weight_decay": 0.1}},
 "zero_optimization": {"stage": $stage${TRAIN_BENCH_ZERO:+, $TRAIN_BENCH_ZERO}},
 "zeroshard": {"servers": 2, "device": "$device"}}
JSON
  "$kit/bin/zeroshard" train --config="$dir/ds.json" --data="$dir/tokens.bin" \
    --workers=1 --work_dir="$dir/run" --eval_every=-1 --print_every=5 "$@" ||
    return 1
  local whole metrics=$dir/run/metrics-rank0.jsonl
  whole=$(awk -F'|' '/tokens\/s \(all workers\)/ {
            gsub(/ /, "", $3); print $3}' "$dir/run/report.md")
  "$py" - "$metrics" "$device" "$stage" "$whole" <<'PY' || return 1
import json, statistics, sys
steps = [r for r in map(json.loads, open(sys.argv[1]))
         if r.get("event") == "step"][3:]
if not steps:
    sys.exit("train_bench: fewer than 4 steps in " + sys.argv[1])
med = statistics.median(r["step_seconds"] for r in steps)
phases = {k: statistics.median(r["phase_seconds"][k] for r in steps)
          for k in steps[0]["phase_seconds"]}
print("train_bench phases_ms step=%.1f %s" % (med * 1e3, " ".join(
    "%s=%.1f" % (k, v * 1e3) for k, v in phases.items())))
print("train_bench device=%s stage=%s tokens_per_s=%.0f whole_run=%s "
      "device_mib=%.0f" %
      (sys.argv[2], sys.argv[3], steps[0]["tokens"] / med, sys.argv[4],
       steps[0].get("device_bytes", 0) / 2**20))
PY
  rm -rf "$dir"
}

# first_tokens_per_s PATTERN: N of "tokens_per_s=N" on the first line of
# the results matching PATTERN (an awk regex); nothing if none does.
first_tokens_per_s() {
  awk -F'tokens_per_s=' -v pat="$1" \
    '$0 ~ pat {split($2, a, " "); print a[1]; exit}' "$results"
}

# The kit's RESULT line from $results: the train benchmark's tokens/s over
# the torch check's (the same model, batch and precision), and its MFU with
# the torch check's flops per token and peak (`bench params=…` line). The
# default attention's stage 0 run comes before the one-block one, so the
# first match is its. mfu is stage 0's (the model on one GPU).
summarize() {
  local eager fsdp2 s0 s2 r0 r2 flops peak m0 m2
  eager=$(first_tokens_per_s 'bench variant=eager')
  fsdp2=$(first_tokens_per_s 'bench variant=fsdp2')
  s0=$(first_tokens_per_s '^train_bench device=cuda stage=0')
  s2=$(first_tokens_per_s '^train_bench device=cuda stage=2')
  flops=$(sed -n 's/^bench params=.* flops_per_token=\([0-9]*\).*/\1/p' \
            "$results" | head -1)
  peak=$(sed -n 's/^bench params=.* peak_tflops=\([0-9.]*\).*/\1/p' \
           "$results" | head -1)
  if [ -n "$eager" ] && [ -n "$fsdp2" ] && [ -n "$s0" ] && [ -n "$s2" ]; then
    r0=$(awk -v a="$s0" -v b="$eager" 'BEGIN{printf "%.3f", a / b}')
    r2=$(awk -v a="$s2" -v b="$fsdp2" 'BEGIN{printf "%.3f", a / b}')
    local mfu=""
    if [ -n "$flops" ] && [ -n "$peak" ]; then
      m0=$(awk -v t="$s0" -v f="$flops" -v p="$peak" \
             'BEGIN{printf "%.4f", t * f / (p * 1e12)}')
      m2=$(awk -v t="$s2" -v f="$flops" -v p="$peak" \
             'BEGIN{printf "%.4f", t * f / (p * 1e12)}')
      mfu=" mfu=$m0 mfu_stage0=$m0 mfu_stage2=$m2"
    fi
    log "RESULT gpu_stage0_vs_torch=$r0 gpu_offload_vs_fsdp2=$r2$mfu" \
      "zeroshard_stage0_tokens_per_s=$s0 zeroshard_stage2_tokens_per_s=$s2" \
      "torch_eager_tokens_per_s=$eager fsdp2_offload_tokens_per_s=$fsdp2"
  fi
}

find_cuda_libs() {
  # The toolkit's libraries: /usr/local/cuda, else the NVIDIA wheels that
  # torch brings (site-packages/nvidia/*/lib).
  local dirs="" d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcudart.so.13" ] && dirs="$dirs:$d"
  done
  if [ -z "$dirs" ]; then
    while read -r f; do
      dirs="$dirs:$(dirname "$f")"
    done < <(find / -xdev \( -name 'libcudart.so.13' -o \
               -name 'libcublas.so.13' -o -name 'libnccl.so.2' \) 2>/dev/null |
             sort -u)
  fi
  echo "${dirs#:}"
}

run() {
  local dir=${1:-${OUT:-gpu_results}}
  mkdir -p "$dir" || die "cannot create $dir"
  results="$(cd "$dir" && pwd)/gpu_results.txt"
  : >"$results"
  [ -f "$TARBALL" ] ||
    die "no $TARBALL here: run 'tools/gpu_check.sh' on the build machine" \
      "and carry it"
  rm -rf "$KIT" && tar -xJf "$TARBALL" || die "could not unpack $TARBALL"
  local kit
  kit=$(cd "$KIT" && pwd)
  local libpath
  libpath="$kit/lib:$(find_cuda_libs)"
  # This build's libstdc++ only where the machine's own is older.
  local sys_cxx
  sys_cxx=$(ldconfig -p 2>/dev/null |
            awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  if [ -z "$sys_cxx" ] || ! grep -qa GLIBCXX_3.4.30 "$sys_cxx"; then
    libpath="$libpath:$kit/compat"
  fi
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "gpu_check: kit $(cat "$kit/REVISION" 2>/dev/null), $(date -u +%FT%TZ)"
  log "gpu_check: host $(uname -nrm), $(ldd --version 2>/dev/null | head -1)"
  log "gpu_check: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  command -v nvidia-smi >/dev/null &&
    check nvidia-smi 30 nvidia-smi --format=csv \
      --query-gpu=name,memory.total,driver_version,clocks.max.sm
  check cuda_info 60 "$kit/bin/cuda_info"
  check dtype_cuda_test 120 "$kit/bin/dtype_cuda_test"
  check cuda_kernels_test 120 "$kit/bin/cuda_kernels_test"
  check cuda_model_test 120 "$kit/bin/cuda_model_test"
  # Attention one batch entry at a time (the A/B of CudaAttention).
  check cuda_model_timing_per_entry 120 env ZEROSHARD_CUDA_ATTENTION=per-entry \
    "$kit/bin/cuda_model_test" --gtest_filter='*Timing*'
  # Attention's causal row blocks (CudaKernelsOptions::attention_blocks):
  # the default above against 1 (whole products), 2 and 8.
  local blocks
  for blocks in 1 2 8; do
    check "cuda_model_timing_blocks$blocks" 120 \
      env ZEROSHARD_CUDA_ATTENTION_BLOCKS=$blocks \
      "$kit/bin/cuda_model_test" --gtest_filter='*Timing*'
  done
  check nccl_communicator_test 120 "$kit/bin/nccl_communicator_test"
  # The engine on the device against the CPU engine, every stage; its
  # servers are found as server/zeroshard-server from the kit.
  check cuda_engine_test 240 env -C "$kit" bin/cuda_engine_test
  # The same in real worker processes on the GPU: two single-GPU nodes
  # joined by UCX (and one node of two ranks), stages 0-3 and 2 in bf16.
  check device_processes_test 300 env -C "$kit" bin/multiprocess_test \
    --gtest_filter='Devices/*cuda*'
  # The host's loopback link to the servers: gather/push against raw TCP.
  check transfer_bench 120 env -C "$kit" bin/transfer_bench
  # K = 2 as in the train benchmark, by the size of a shared-memory piece
  # (one request, copied on one thread at each end; default 16 MiB).
  local mib
  for mib in 64 16 4; do
    check "transfer_bench_k2_shared$mib" 120 env -C "$kit" bin/transfer_bench \
      --shards=2 --mib=512 --max_shared_piece_mib=$mib
  done
  local py=${GPU_CHECK_PYTHON:-}
  if [ -z "$py" ]; then
    py=/opt/torch/.venv/bin/python3
    [ -x "$py" ] || py=python3
  fi
  # shellcheck disable=SC2086  # GPU_CHECK_TORCH_ARGS is a list of flags
  PYTHONPATH="$PWD/python" ZEROSHARD_LIB="$kit/lib/libzeroshard.so" \
    ZEROSHARD_SERVER="$kit/bin/zeroshard-server" \
    check gpu_torch_check 300 "$py" tests/python/gpu_torch_check.py \
    --device=cuda ${GPU_CHECK_TORCH_ARGS:-}
  # zeroshard train on the GPU: GPT-2 124M (12 layers, 12 heads, 768
  # channels, T = 1024, batch 8, fp32): stage 0 (the optimizer on the
  # device) against eager torch's tokens/s from the torch check (the same
  # model, batch and precision); stage 2 (the optimizer on 2 servers here)
  # against FSDP2 with CPU offload from it.
  local stage
  for stage in 0 2; do
    # shellcheck disable=SC2086  # GPU_CHECK_TRAIN_ARGS is a list of flags
    check "gpu_train_bench_stage$stage" 300 bash "$SELF" train-bench \
      "$kit" "$py" cuda "$stage" --layers=12 --heads=12 --channels=768 \
      --vocab=50257 --seq_len=1024 --steps=20 ${GPU_CHECK_TRAIN_ARGS:-}
  done
  # Stage 2 with gradients in 20M-element buckets (DeepSpeed's default is
  # 5e8: one bucket for 124M, pushed after backward) so that pushes overlap
  # backward.
  # shellcheck disable=SC2086  # GPU_CHECK_TRAIN_ARGS is a list of flags
  check gpu_train_bench_stage2_buckets 300 \
    env TRAIN_BENCH_ZERO='"reduce_bucket_size": 20000000' bash "$SELF" \
    train-bench "$kit" "$py" cuda 2 --layers=12 --heads=12 --channels=768 \
    --vocab=50257 --seq_len=1024 --steps=20 ${GPU_CHECK_TRAIN_ARGS:-}
  # Stage 3: every block in the device's pool (DeepSpeed's default
  # stage3_max_live_parameters), then a pool of two blocks (0: the least),
  # which copies blocks up again within each pass: its cost, and the
  # device memory each holds (device_mib).
  local live
  for live in 1000000000 0; do
    # shellcheck disable=SC2086  # GPU_CHECK_TRAIN_ARGS is a list of flags
    check "gpu_train_bench_stage3_live$live" 300 \
      env TRAIN_BENCH_ZERO="\"stage3_max_live_parameters\": $live" bash \
      "$SELF" train-bench "$kit" "$py" cuda 3 --layers=12 --heads=12 \
      --channels=768 --vocab=50257 --seq_len=1024 --steps=20 \
      ${GPU_CHECK_TRAIN_ARGS:-}
  done
  # shellcheck disable=SC2086  # GPU_CHECK_TRAIN_ARGS is a list of flags
  check gpu_train_bench_stage0_blocks1 300 \
    env ZEROSHARD_CUDA_ATTENTION_BLOCKS=1 bash "$SELF" train-bench "$kit" \
    "$py" cuda 0 --layers=12 --heads=12 --channels=768 --vocab=50257 \
    --seq_len=1024 --steps=20 ${GPU_CHECK_TRAIN_ARGS:-}
  summarize
  log ""
  log "gpu_check: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}

case "${1:-collect}" in
  collect) collect ;;
  run) shift; run "$@" ;;
  train-bench) shift; train_bench "$@" ;;
  summarize)  # tools/gpu_check.sh summarize RESULTS_FILE: its RESULT line
    results=$2; log() { printf '%s\n' "$*"; }; summarize ;;
  -h|--help) sed -n '2,36p' "$0" ;;
  *) die "unknown command '$1' (collect or run; --help)" ;;
esac
