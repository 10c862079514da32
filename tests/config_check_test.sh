#!/usr/bin/env bash
# `zeroshard config check` (exit 0 with the resolved table, exit 2 with the
# error naming the key or flag) and `zeroshard train` with a Hugging
# Face-style config: "auto" values filled from the flags and the model (the
# table printed once, the workers train with the same values), each config
# warning shown once, and an NVMe offload config starting the servers with
# --storage=nvme (their state lands in nvme_path).
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
Z="$R/launcher/zeroshard"
TOKENIZE="$R/worker/io/zeroshard-tokenize"
DATA="$R/worker/config/testdata"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
show() { sed 's/^/    | /' <<<"$1"; }

HF=(--learning_rate=3e-4 --precision=bf16 --per_device_train_batch_size=4 --steps=1000)

# 1. A Hugging Face ZeRO-3 config with every "auto" filled.
out=$("$Z" config check "$DATA/hf_zero3.json" "${HF[@]}" --channels=32 2>&1); rc=$?
show "$out"
[ $rc -eq 0 ]; check "hf_zero3 with its inputs: exit 0 (rc $rc)" $?
grep -Eq "^  optimizer\.params\.lr +0\.0003 +auto←--learning_rate$" <<<"$out"
check "lr row: value and source" $?
grep -Eq "^  bf16\.enabled +true +auto←--precision=bf16$" <<<"$out"; check "bf16 row" $?
grep -Eq "^  zero_optimization\.reduce_bucket_size +1024 +auto←model \(hidden size 32 from --channels\)" <<<"$out"
check "bucket size from the model's hidden size" $?
grep -Eq "^  scheduler\.params\.total_num_steps +1000 +auto←--steps$" <<<"$out"; check "total steps from --steps" $?
grep -Eq "^  zero_optimization\.stage +3 +file$" <<<"$out"; check "a row from the file" $?
grep -Eq "^  zeroshard\.alignment +64 +default$" <<<"$out"; check "a default row" $?

# 2. Errors: exit 2, naming the key or flag.
bad() {  # description, expected text, then the arguments
  local what="$1" want="$2"; shift 2
  out=$("$Z" config check "$@" 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out"
  check "$what: exit 2 naming it (rc $rc: $(tail -1 <<<"$out"))" $?
}
bad "no --learning_rate" 'optimizer.params.lr: "auto" with nothing to fill it: give --learning_rate' \
  "$DATA/hf_zero3.json" --precision=bf16 --per_device_train_batch_size=4
bad "no --precision" 'fp16.enabled: "auto" with nothing to fill it: give --precision' \
  "$DATA/hf_zero3.json" --learning_rate=1e-3 --per_device_train_batch_size=4
printf '{"train_batch_size": 8, "zero_optimisation": {"stage": 3}}' >"$T/typo.json"
bad "misspelt section" "unknown key zero_optimisation (did you mean zero_optimization?)" "$T/typo.json"
printf '{"train_batch_size": 8,}' >"$T/comma.json"
bad "trailing comma" "invalid JSON at line 1, column 23: trailing comma before '}'" "$T/comma.json"
bad "misspelt flag" "unknown flag --stpes (did you mean --steps?)" "$DATA/hf_zero3.json" --stpes=3
bad "missing file" "$T/none.json" "$T/none.json"
bad "--save in a missing directory" "--save $T/nodir/m.bin: directory $T/nodir: No such file or directory" \
  "$DATA/hf_zero3.json" "${HF[@]}" --channels=32 --save="$T/nodir/m.bin"
out=$("$Z" config --help 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "zeroshard config check ds.json" <<<"$out"; check "config --help: exit 0 with usage (rc $rc)" $?
out=$("$Z" config check --help 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q -- "--workers" <<<"$out"; check "config check --help: exit 0 with the flags (rc $rc)" $?
out=$("$Z" --help 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "config check" <<<"$out"; check "zeroshard --help lists config check (rc $rc)" $?

# 3. Training with "auto": the table once, the workers use the values.
head -c 20000 "$R/README.md" >"$T/text.txt"
"$TOKENIZE" --input="$T/text.txt" --output="$T/tokens.bin" >/dev/null
cat >"$T/hf.json" <<'JSON'
{
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "bf16": {"enabled": "auto"},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
  "my_notes": "a key zeroshard does not know"
}
JSON
TINY=(--data="$T/tokens.bin" --layers=1 --heads=2 --channels=32 --seq-len=16 --workers=2)
out=$("$Z" train --config="$T/hf.json" "${TINY[@]}" --servers=1 --steps=3 \
  --learning_rate=0.002 --precision=fp32 --per_device_train_batch_size=2 \
  --work-dir="$T/hf" --print_every=1 2>&1); rc=$?
show "$out"
[ $rc -eq 0 ]; check "train with an auto config exits 0 (rc $rc)" $?
grep -Eq "^  optimizer\.params\.lr +0\.002 +auto←--learning_rate$" <<<"$out"
check "the auto table is printed" $?
[ "$(grep -c 'unknown key my_notes ignored' <<<"$out")" -eq 1 ]
check "the config warning is shown once (not again from rank 0)" $?
grep -q '"lr":0.002' "$T/hf/metrics-rank0.jsonl" && grep -q '"lr":0.002' "$T/hf/metrics-rank1.jsonl"
check "both workers train at --learning_rate 0.002" $?

# 4. An NVMe offload config: the servers the launcher starts use the tier.
mkdir -p "$T/nvme"
cat >"$T/nvme.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 2,
    "offload_optimizer": {"device": "nvme", "nvme_path": "$T/nvme", "pin_memory": true}},
  "aio": {"block_size": 65536, "queue_depth": 4, "thread_count": 2, "single_submit": false, "overlap_events": true}
}
JSON
out=$("$Z" config check "$T/nvme.json" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qF "servers: --storage=nvme --nvme_path=$T/nvme --aio_block_size=65536 --aio_queue_depth=4 --aio_intra_op_parallelism=2" <<<"$out" \
  && grep -qF "zeroshard train passes these to the servers it starts" <<<"$out"
check "config check names the server flags of the NVMe offload" $?
out=$("$Z" train --config="$T/nvme.json" "${TINY[@]}" --servers=2 --steps=2 \
  --work-dir="$T/nv" 2>&1); rc=$?
show "$out"
[ $rc -eq 0 ]; check "train with NVMe offload exits 0 (rc $rc)" $?
grep -qF "config: the servers start with --storage=nvme --nvme_path=$T/nvme" <<<"$out"
check "the launcher says which server flags it passes" $?
[ -s "$T/nvme/shard-0/MANIFEST" ] && [ -s "$T/nvme/shard-1/MANIFEST" ]
check "each server kept its state in nvme_path/shard-k (NVMe tier)" $?
! grep -q 'config warning: .*"nvme": the shard servers keep' <<<"$out"
check "no advice to start the servers by hand when the launcher starts them" $?

echo "$fails failed"
[ $fails -eq 0 ]
