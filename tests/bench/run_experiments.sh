#!/bin/bash
# Runs transfer_experiments over the matrix of proposed data-plane changes,
# one process per configuration (each measures its own raw-TCP reference,
# so compare ratios, not GB/s, across lines), and prints a summary.
#
#   tests/bench/run_experiments.sh [--mib=256] [--iters=3] [--shards=1,4]
#
# Extra arguments are passed to every run. Needs `bazel build
# //tests/bench:transfer_experiments` (done here unless NO_BUILD=1; BIN=
# overrides the binary, e.g. a copy taken out of bazel-bin).
#
# A  stock ShardClient, stock server (what transfer_bench measures)
# B  as A with 1 channel per server (same as A: the 2nd channel is unused)
# C  ShardClient's data path re-implemented (RawClient --client=proto,
#    channel picked by piece begin offset, as ShardClient does): C == A
# D  as C, pieces round-robin over the channels (the salt fix)
# E  as A plus glibc mallopt (thresholds, one arena) in the client process
# F  RawClient with ByteBuffer messages (copy-free client), round-robin
# G  stock client, variant_server with raw ByteBuffer handlers
# H  F + E + G: everything proposed
# I  H plus larger HTTP/2 window and frame size on both ends
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${NO_BUILD:-0}" != 1 ]]; then
  bazel build //tests/bench:transfer_experiments >&2
fi
bin=${BIN:-bazel-bin/tests/bench/transfer_experiments}
win="grpc.http2.lookahead_bytes=8388608,grpc.http2.max_frame_size=1048576"
swin="grpc.http2.lookahead_bytes=8388608;grpc.http2.max_frame_size=1048576"

configs=(
  "A_stock|--client=stock"
  "B_stock_1ch|--client=stock --channels_per_server=1"
  "C_proto_by_begin|--client=proto --spread=false"
  "D_proto_spread|--client=proto --spread=true"
  "E_stock_client_malloc|--client=stock --client_mallopt --client_arena_max=1"
  "F_raw_client|--client=raw --spread=true"
  "G_raw_server|--client=stock --server=variant --server_args=--raw=true,--mallopt=true"
  "H_all|--client=raw --spread=true --client_mallopt --client_arena_max=1 --server=variant --server_args=--raw=true,--mallopt=true,--arena_max=1"
  "I_all_window|--client=raw --spread=true --client_mallopt --client_arena_max=1 --client_channel_args=$win --server=variant --server_args=--raw=true,--mallopt=true,--arena_max=1,--channel_args=$swin"
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
