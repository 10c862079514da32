#!/bin/bash
# Runs transfer_experiments over the matrix of proposed data-plane changes,
# one process per configuration (each measures its own raw-TCP reference,
# so compare ratios, not GB/s, across lines), and prints a summary.
#
#   tests/bench/run_experiments.sh [--mib=256] [--iters=3] [--shards=1,4]
#
# Extra arguments are passed to every run. Needs `bazel build
# //tests/bench:transfer_experiments` (done here unless NO_BUILD=1).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${NO_BUILD:-0}" != 1 ]]; then
  bazel build //tests/bench:transfer_experiments >&2
fi
bin=bazel-bin/tests/bench/transfer_experiments
tunables="GLIBC_TUNABLES=glibc.malloc.mmap_threshold=16777216:glibc.malloc.trim_threshold=1073741824:glibc.malloc.top_pad=67108864"
win="grpc.http2.lookahead_bytes=8388608,grpc.http2.max_frame_size=1048576"
swin="grpc.http2.lookahead_bytes=8388608;grpc.http2.max_frame_size=1048576"

configs=(
  "A_stock|--client=stock"
  "B_stock_1ch|--client=stock --channels_per_server=1"
  "C_proto_by_begin|--client=proto --spread=false"
  "D_proto_spread|--client=proto --spread=true"
  "E_stock_malloc|--client=stock --client_mallopt --server_env=$tunables"
  "F_raw_client|--client=raw --spread=true"
  "G_raw_server|--client=stock --server=variant --server_args=--raw=true,--mallopt=false"
  "H_all|--client=raw --spread=true --client_mallopt --server=variant --server_args=--raw=true,--mallopt=true"
  "I_all_window|--client=raw --spread=true --client_mallopt --client_channel_args=$win --server=variant --server_args=--raw=true,--mallopt=true,--channel_args=$swin"
)
summary=()
for c in "${configs[@]}"; do
  name=${c%%|*}
  args=${c#*|}
  echo "=== $name: $args" >&2
  # shellcheck disable=SC2086
  out=$("$bin" $args "$@" 2>&1) || { echo "$out" >&2; echo "$name FAILED" >&2; exit 1; }
  echo "$out" >&2
  summary+=("$(printf '%-18s %s' "$name" "$(echo "$out" | grep '^RESULT' | tail -1 |
    grep -oE '(gather|push)_vs_tcp(_k[0-9]+)?=[0-9.]+' | tr '\n' ' ')")")
done
echo
echo "summary (ratio to raw TCP with the same number of connections, same run):"
printf '%s\n' "${summary[@]}"
