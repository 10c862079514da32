#!/usr/bin/env bash
# README command 2 (and what CI runs): installs what is missing, builds the
# CUDA configuration and packs the GPU check kit where nvcc exists, then
# builds and runs every test. The last line is the summary: "N passed, N
# failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh || exit 1
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  # Every source that ZEROSHARD_HAVE_CUDA changes is in these packages;
  # the kit (docs/cuda.md) builds what links them (server, worker,
  # launcher, libzeroshard) in the same configuration, checks that it still
  # gathers and fits in 64 MiB. The rest of //... is the same code as below.
  cuda_pkgs="//common/cuda/... //worker/collective/... //worker/gpt2/cuda/... //worker/engine:cuda_engine_test"
  echo "test: building the CUDA configuration (bazel build --config=cuda $cuda_pkgs)"
  # shellcheck disable=SC2086  # a list of target patterns
  bazel build --noshow_progress --config=cuda $cuda_pkgs || { echo "0 passed, 1 failed"; exit 1; }
  tools/gpu_check.sh collect || { echo "0 passed, 1 failed"; exit 1; }
fi
log=$(mktemp)
bazel test --noshow_progress //... 2>&1 | tee "$log" | grep -v '^[0-9.]*: src/main/tools/linux-sandbox'
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//.* PASSED' "$log")
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log")
rm -f "$log"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # build failure
echo "${passed} passed, ${failed} failed"
exit "$rc"
