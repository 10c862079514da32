#!/bin/bash
# Builds a libFuzzer target with clang++ -fsanitize=fuzzer,address,undefined
# straight from the sources: the ShardStore (tests/fuzz/store_fuzzer.cc,
# the default) or, with FUZZ_TARGET=service, the service layer through the
# real gRPC handlers (tests/fuzz/service_fuzzer.cc), built from the sources
# (Bazel builds the project with gcc, which has no libFuzzer), then fuzzes
# for SECONDS starting from a generated seed corpus. Exits non-zero on any
# crash, sanitizer report, leak, timeout or OOM, leaving the input in the
# artifacts directory.
#
#   tests/fuzz/build_and_run.sh [SECONDS] [extra libFuzzer flags...]
#
# Environment:
#   FUZZ_TARGET  store (default) or service
#   CXX          compiler (default: clang++-14, else clang++)
#   FUZZ_WORKDIR build and run directory (default: $TEST_TMPDIR, else a new
#                /tmp/<target>_fuzzer.XXXXXX, kept for reproducing crashes)
#   CORPUS_DIR   a corpus directory to use and grow (default: a fresh one
#                under FUZZ_WORKDIR, seeded each run)
#   JOBS         parallel compiles (default: nproc)
#   COVERAGE=1   afterwards, rebuild with clang source coverage, replay the
#                corpus and print line/branch coverage of the store sources
#                (llvm-profdata-14 / llvm-cov-14, package 'llvm-14')
#   ZS_FUZZ_LAX=1|2|3  also break the store's calling contract: 1 chunks
#                for duplicate sessions, 2 unaligned chunk pointers (see
#                store_fuzzer.cc; 1 crashes today, see README.md)
#
# Reproduce a crash:  $FUZZ_WORKDIR/<target>_fuzzer <artifact file>
# Also the `bazel test //tests/fuzz:store_fuzz_short_test` body (~25 s of
# fuzzing); under Bazel, crash inputs are copied to the test's undeclared
# outputs (bazel-testlogs/tests/fuzz/store_fuzz_short_test/test.outputs).
set -euo pipefail

target="${FUZZ_TARGET:-store}"
case "$target" in
  store | service) ;;
  *)
    echo "build_and_run.sh: FUZZ_TARGET=$target: expected 'store' or 'service'" >&2
    exit 2
    ;;
esac
name="${target}_fuzzer"
seconds=${1:-60}
if [[ $# -gt 0 ]]; then shift; fi
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 [SECONDS] [libFuzzer flags...]" >&2
  exit 2
fi

die() {
  echo "$name: error: $*" >&2
  exit 1
}

# Sources: this test's runfiles under `bazel test`, else the workspace.
# The list of files to compile and the libraries to link come from
# //tests/fuzz:<target>_sources (the closure of //server/store:shard_store,
# or of //tests/fuzz:service_fuzzer, see sources.bzl); outside Bazel's test runner it is built first, and if that
# is impossible a built-in list is used.
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-zeroshard}"
  manifest_dir="$root/tests/fuzz"
else
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  manifest_dir="$root/bazel-bin/tests/fuzz"
  if command -v bazel >/dev/null; then
    (cd "$root" && bazel build "//tests/fuzz:${target}_sources" >&2) ||
      echo "$name: warning: bazel build //tests/fuzz:${target}_sources" \
        "failed; using the built-in source list" >&2
  fi
fi
sources=()
linkopts=()
if [[ -f "$manifest_dir/${target}_sources.srcs" ]]; then
  while IFS= read -r f; do
    [[ -n "$f" ]] && sources+=("$f")
  done <"$manifest_dir/${target}_sources.srcs"
  while IFS= read -r f; do
    [[ -n "$f" ]] && linkopts+=("$f")
  done <"$manifest_dir/${target}_sources.linkopts"
elif [[ "$target" == service ]]; then
  die "missing $manifest_dir/service_sources.srcs: run bazel build //tests/fuzz:service_sources"
else
  sources=(
    server/store/shard_store.cc common/optim/adamw.cc common/dtype.cc
    common/dtype_avx2.cc common/dtype_avx512.cc common/model_spec.cc
    common/partition.cc common/thread_pool.cc
  )
fi
# The service target's own files are in its closure; the store fuzzer is
# not part of the store's.
if [[ "$target" == store ]]; then
  sources+=(tests/fuzz/store_fuzzer.cc)
fi
for f in "${sources[@]}" proto/zeroshard.proto; do
  [[ -f "$root/$f" ]] || die "missing source $root/$f"
done

# Tools (Debian packages named for tools/bootstrap.sh).
if [[ -z "${CXX:-}" ]]; then
  if command -v clang++-14 >/dev/null; then
    CXX=clang++-14
  elif command -v clang++ >/dev/null; then
    CXX=clang++
  else
    die "clang++ not found: install the Debian packages 'clang' (clang-14) and 'libclang-rt-14-dev' (libFuzzer and sanitizer runtimes)"
  fi
fi
command -v "$CXX" >/dev/null ||
  die "$CXX not found: install the Debian packages 'clang' (clang-14) and 'libclang-rt-14-dev' (libFuzzer and sanitizer runtimes)"
command -v protoc >/dev/null ||
  die "protoc not found: install the Debian package 'protobuf-compiler'"

work="${FUZZ_WORKDIR:-${TEST_TMPDIR:-}}"
if [[ -z "$work" ]]; then
  work=$(mktemp -d "/tmp/$name.XXXXXX")
fi
mkdir -p "$work/obj" "$work/gen" "$work/artifacts"
echo "$name: building in $work with $CXX" >&2

# libFuzzer present? (clang without libclang-rt-14-dev links nothing.)
cat >"$work/probe.cc" <<'EOF'
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
EOF
if ! "$CXX" -fsanitize=fuzzer,address,undefined "$work/probe.cc" \
    -o "$work/probe" 2>"$work/probe.log"; then
  cat "$work/probe.log" >&2
  die "$CXX cannot link -fsanitize=fuzzer,address,undefined: install the Debian package 'libclang-rt-14-dev' (libFuzzer and sanitizer runtimes)"
fi

protoc --proto_path="$root" --cpp_out="$work/gen" \
  "$root/proto/zeroshard.proto" ||
  die "protoc failed on proto/zeroshard.proto"
generated=(zeroshard.pb)
if [[ "$target" == service ]]; then
  plugin=$(command -v grpc_cpp_plugin) ||
    die "grpc_cpp_plugin not found: install the Debian package 'protobuf-compiler-grpc'"
  protoc --proto_path="$root" --grpc_out="$work/gen" \
    --plugin=protoc-gen-grpc="$plugin" "$root/proto/zeroshard.proto" ||
    die "protoc --grpc_out failed on proto/zeroshard.proto"
  generated+=(zeroshard.grpc.pb)
fi

# shellcheck disable=SC2054  # the commas are in -fsanitize=...
cflags=(
  -std=c++17 -O1 -gline-tables-only -fno-omit-frame-pointer
  -ffp-contract=off  # as common/optim/BUILD compiles adamw.cc
  -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
  -I"$root" -I"$work/gen"
  -Wno-unused-command-line-argument -Wno-unknown-warning-option
)
# One compile per source, in parallel; the flags go through a response
# file (paths are quoted for clang's response-file syntax).
: >"$work/cflags.rsp"
for f in "${cflags[@]}"; do
  printf '"%s"\n' "${f//\"/\\\"}" >>"$work/cflags.rsp"
done
objs=()
jobs=()
for f in "${sources[@]}"; do
  obj="$work/obj/$(echo "$f" | tr / _).o"
  objs+=("$obj")
  jobs+=("$root/$f" "$obj")
done
for g in "${generated[@]}"; do
  objs+=("$work/obj/$g.o")
  jobs+=("$work/gen/proto/$g.cc" "$work/obj/$g.o")
done
# shellcheck disable=SC2016  # $0..$3 are sh -c's arguments
printf '%s\0' "${jobs[@]}" |
  xargs -0 -n 2 -P "${JOBS:-$(nproc)}" \
    sh -c '"$0" @"$1" -c "$2" -o "$3"' "$CXX" "$work/cflags.rsp" ||
  die "compilation failed"

# System libraries: as the closure links them (manifest), else the
# //tools:protobuf and //tools:absl lists.
if [[ ${#linkopts[@]} -eq 0 ]]; then
  linkopts=(
    "$(pkg-config --libs protobuf 2>/dev/null || echo -lprotobuf)"
    -labsl_flags_parse -labsl_statusor -labsl_status -labsl_cord
    -labsl_cordz_info -labsl_cord_internal -labsl_cordz_functions
    -labsl_cordz_handle -labsl_exponential_biased -labsl_str_format_internal
    -labsl_synchronization -labsl_graphcycles_internal -labsl_stacktrace
    -labsl_symbolize -labsl_debugging_internal -labsl_demangle_internal
    -labsl_malloc_internal -labsl_time -labsl_civil_time -labsl_time_zone
    -labsl_strings -labsl_strings_internal -labsl_hash -labsl_city
    -labsl_low_level_hash -labsl_raw_hash_set -labsl_hashtablez_sampler
    -labsl_int128 -labsl_base -labsl_spinlock_wait
    -labsl_raw_logging_internal -labsl_log_severity -labsl_throw_delegate
    -labsl_bad_optional_access -labsl_bad_variant_access -labsl_strerror
    -lpthread
  )
fi
"$CXX" -fsanitize=fuzzer,address,undefined "${objs[@]}" "${linkopts[@]}" \
  -o "$work/$name" ||
  die "link failed (needs libprotobuf-dev and libabsl-dev; the service target also libgrpc++-dev)"
echo "$name: built $work/$name" >&2

corpus="${CORPUS_DIR:-$work/corpus}"
mkdir -p "$corpus"
ZS_FUZZ_WRITE_SEEDS="$corpus" "$work/$name"

# The service target starts a gRPC server per input (gRPC's own caches
# are not leaks of ours) and waits up to 20 s for a call.
leaks=1
timeout=20
if [[ "$target" == service ]]; then
  leaks=0
  timeout=60
fi
status=0
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
ASAN_OPTIONS=detect_leaks=$leaks:abort_on_error=0 \
  "$work/$name" -max_total_time="$seconds" -max_len=16384 \
  -timeout="$timeout" -rss_limit_mb=2048 -print_final_stats=1 -print_funcs=0 \
  -artifact_prefix="$work/artifacts/" "$@" "$corpus" || status=$?

if [[ $status -ne 0 ]]; then
  echo "$name: FAILED (exit $status); crash inputs:" >&2
  ls -l "$work/artifacts" >&2 || true
  if [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]]; then
    cp "$work"/artifacts/* "$TEST_UNDECLARED_OUTPUTS_DIR"/ 2>/dev/null || true
  fi
  echo "$name: reproduce with $work/$name <input>" >&2
  exit 1
fi
echo "$name: PASSED (${seconds}s, no crash)" >&2

if [[ "${COVERAGE:-0}" == 1 ]]; then
  cov="$work/cov"
  mkdir -p "$cov/obj"
  : >"$cov/cflags.rsp"
  for f in -std=c++17 -O1 -ffp-contract=off -fsanitize=fuzzer-no-link \
      -fprofile-instr-generate -fcoverage-mapping "-I$root" "-I$work/gen"; do
    printf '"%s"\n' "$f" >>"$cov/cflags.rsp"
  done
  cobjs=()
  cjobs=()
  for f in "${sources[@]}"; do
    obj="$cov/obj/$(echo "$f" | tr / _).o"
    cobjs+=("$obj")
    cjobs+=("$root/$f" "$obj")
  done
  for g in "${generated[@]}"; do
    cobjs+=("$cov/obj/$g.o")
    cjobs+=("$work/gen/proto/$g.cc" "$cov/obj/$g.o")
  done
  # shellcheck disable=SC2016
  printf '%s\0' "${cjobs[@]}" |
    xargs -0 -n 2 -P "${JOBS:-$(nproc)}" \
      sh -c '"$0" @"$1" -c "$2" -o "$3"' "$CXX" "$cov/cflags.rsp" ||
    die "coverage compilation failed"
  "$CXX" -fsanitize=fuzzer -fprofile-instr-generate "${cobjs[@]}" \
    "${linkopts[@]}" -o "$cov/${name}_cov"
  LLVM_PROFILE_FILE="$cov/replay.profraw" "$cov/${name}_cov" -runs=0 \
    "$corpus" >"$cov/replay.log" 2>&1
  llvm-profdata-14 merge -sparse "$cov/replay.profraw" -o "$cov/replay.profdata"
  if [[ "$target" == service ]]; then
    report=(server/shard_service.cc server/data_plane.cc
      server/membership_service.cc server/membership/membership.cc)
  else
    report=(server/store/shard_store.cc common/model_spec.cc
      common/partition.cc)
  fi
  (cd "$root" && llvm-cov-14 report "$cov/${name}_cov" \
    -instr-profile="$cov/replay.profdata" "${report[@]}")
  echo "$name: line-by-line: llvm-cov-14 show $cov/${name}_cov" \
    "-instr-profile=$cov/replay.profdata $root/${report[0]}" >&2
fi
