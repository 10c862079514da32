# shellcheck shell=bash disable=SC2034  # (MODEL, ... are for the sourcing script)
# Harness of the host tests (sourced by tests/hosts/*_test.sh): places real
# zeroshard-server and zeroshard-worker processes into the test hosts of
# tools/netlab.sh, or onto loopback for a reference run.
#
# Layout (netlab.sh run --hosts "srv0 srv1 node0 node1"): shard k on host
# srvk, listening on that host's address only; 2 nodes x 2 ranks, ranks 0-1
# on node0 and 2-3 on node1 (rank = node * 2 + local rank). UCX carries the
# collectives: across nodes over eth0 (the veth), inside a node on the
# host's own address, which never leaves the host. Placement "loop" runs
# everything on 127.0.0.1 in the caller's namespace instead.
#
# The test script defines nothing before sourcing; it calls hl_main "$@"
# first, which re-runs the script inside a lab (or prints SKIP and exits 0).
# Every function reports failures through check; the script ends with
# hl_finish.

# Under bazel test the runfiles; run by hand from a checkout, bazel-bin.
if [ -n "${TEST_SRCDIR:-}" ]; then
  R="$TEST_SRCDIR/zeroshard"; B="$R"
else
  R="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"; B="$R/bazel-bin"
fi
NL="$R/tools/netlab.sh"
SERVER="$B/server/zeroshard-server"
WORKER="$B/worker/train/zeroshard-worker"

export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
T="$TMPDIR"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
hl_finish() {
  pgrep -af "zeroshard-(server|worker) .*$T/" | sed "s/^/left: /"
  [ "$(pgrep -f "zeroshard-(server|worker) .*$T/" | wc -l)" -eq 0 ]; check "no server or worker left running" $?
  echo "$fails failed"; [ "$fails" -eq 0 ]
}

# hl_main PROFILE "$@": outside a lab, starts one and runs this script in it.
hl_main() {
  local profile="$1"; shift
  [ "${1:-}" = --inside ] && return 0
  local why rc
  why=$("$NL" check 2>&1); rc=$?
  if [ $rc -eq 77 ]; then echo "$why ($(basename "$0") skipped)"; exit 0; fi
  [ $rc -eq 0 ] || { echo "FAIL netlab.sh check: $why"; exit 1; }
  "$NL" run --profile "$profile" --hosts "srv0 srv1 node0 node1" -- bash "$0" --inside "$@"
  exit $?
}

# on PLACE CMD...: run CMD on host PLACE, or here when PLACE is "loop".
on() { local p="$1"; shift; if [ "$p" = loop ]; then "$@"; else "$NL" exec "$p" "$@"; fi; }
# spawn PLACE CMD... &: the same in the background, where $! is then CMD's
# own pid (every step execs), so signals reach the server or worker itself.
spawn() { local p="$1"; shift; if [ "$p" = loop ]; then exec "$@"; else exec "$NL" exec "$p" "$@"; fi; }
addr() { if [ "$1" = loop ]; then echo 127.0.0.1; else local v="NETLAB_IP_$1"; echo "${!v}"; fi; }
srv_place() { if [ "$1" = loop ]; then echo loop; else echo "srv$2"; fi; }   # mode k
node_place() { if [ "$1" = loop ]; then echo loop; else echo "node$2"; fi; } # mode n

wait_file() {  # path pid [seconds=60]: until it exists and is not empty, while pid runs
  local i
  for i in $(seq $((${3:-60} * 20))); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# A tiny GPT-2 run: 1 block, C=32, T=16, micro-batch 2, ZeRO-3, 2 servers.
write_config() {  # path [stage=3]
  cat >"$1" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}},
  "zero_optimization": {"stage": ${2:-3}, "stage3_param_persistence_threshold": 0},
  "zeroshard": {"servers": 2}
}
JSON
}
MODEL=(--layers=1 --heads=2 --channels=32 --seq_len=16 --threads=1)

# start_servers MODE DIR [server flags...]: shard k on srvk (or loopback);
# sets SERVERS (addr:port,addr:port) and SERVER_PID[k], SERVER_METRICS[k].
declare -a SERVER_PID SERVER_METRICS
start_servers() {
  local mode="$1" dir="$2" k place
  shift 2
  mkdir -p "$dir"
  SERVERS=""
  for k in 0 1; do
    place=$(srv_place "$mode" $k)
    spawn "$place" "$SERVER" --host="$(addr "$place")" --port=0 --port_file="$dir/port$k" \
      --metrics_port=0 --shard_index=$k --num_shards=2 --insecure "$@" >"$dir/server$k.log" 2>&1 &
    SERVER_PID[$k]=$!
  done
  for k in 0 1; do
    place=$(srv_place "$mode" $k)
    wait_file "$dir/port$k" "${SERVER_PID[$k]}" || { echo "server $k did not start:"; cat "$dir/server$k.log"; return 1; }
    SERVERS="$SERVERS${SERVERS:+,}$(addr "$place"):$(cat "$dir/port$k")"
    for _ in $(seq 100); do grep -q "metrics on" "$dir/server$k.log" && break; sleep 0.05; done
    SERVER_METRICS[$k]=$(sed -n 's/.*metrics on \(http:[^ ]*\).*/\1/p' "$dir/server$k.log" | head -1)
  done
}
stop_servers() { local k; for k in 0 1; do kill -TERM "${SERVER_PID[$k]}" 2>/dev/null; done; wait "${SERVER_PID[@]}" 2>/dev/null; }

# server_metric MODE k NAME: a metric of shard k, read on its own host (over
# its loopback route, so even while its link is cut).
server_metric() {
  local place; place=$(srv_place "$1" "$2")
  on "$place" curl -s --max-time 5 "${SERVER_METRICS[$2]}" | awk -v n="$3" '$1 == n { print $2 }'
}

# UCX: TCP on eth0 (UCX 1.13's shared-memory transports cannot report a
# dead peer, which the communicator asks for). Between the two ranks of a
# node that is TCP to the node's own address, which the kernel keeps inside
# the host (lo): only traffic across nodes crosses the veth.
ucx_env() {  # MODE
  if [ "$1" = loop ]; then echo "UCX_NET_DEVICES=lo"; else echo "UCX_NET_DEVICES=eth0"; fi
}

# start_workers MODE DIR [worker flags...]: ranks 0-3 of 2 nodes x 2, rank
# 0 first (its port for the others); WORKER_PID[r], logs DIR/rank<r>.log.
declare -a WORKER_PID
start_workers() {
  local mode="$1" dir="$2" r node place coord
  shift 2
  mkdir -p "$dir"
  for r in 0 1 2 3; do
    node=$((r / 2)); place=$(node_place "$mode" $node)
    if [ $r -eq 0 ]; then coord="$(addr "$place"):0"; else coord="$(addr "$(node_place "$mode" 0)"):$(cat "$dir/coord_port")"; fi
    local extra=(); [ $r -eq 0 ] && extra=(--port_file="$dir/coord_port")
    spawn "$place" env ZEROSHARD_RANK=$r ZEROSHARD_WORLD_SIZE=4 ZEROSHARD_LOCAL_RANK=$((r % 2)) \
      ZEROSHARD_LOCAL_SIZE=2 ZEROSHARD_COORD="$coord" "$(ucx_env "$mode")" \
      UCX_TLS="${HL_UCX_TLS:-tcp,self}" \
      "$WORKER" --insecure --servers="$SERVERS" --metrics_file="$dir/metrics-rank$r.jsonl" \
      "${extra[@]}" "$@" >"$dir/rank$r.log" 2>&1 &
    WORKER_PID[$r]=$!
    if [ $r -eq 0 ]; then wait_file "$dir/coord_port" "${WORKER_PID[0]}" || { echo "rank 0 did not start:"; cat "$dir/rank0.log"; return 1; }; fi
  done
}

# wait_workers DIR: 0 when every rank exits 0 (within 300 s).
wait_workers() {
  local r rc all=0
  for r in 0 1 2 3; do
    wait "${WORKER_PID[$r]}"; rc=$?
    if [ $rc -ne 0 ]; then all=1; echo "rank $r exited $rc; its log:"; tail -20 "$1/rank$r.log" | sed 's/^/    | /'; fi
  done
  return $all
}

# last_step FILE: the highest "step" in a metrics JSON-lines file (-1: none).
last_step() { grep -o '"step":[0-9]*' "$1" 2>/dev/null | tail -1 | cut -d: -f2 | grep . || echo -1; }
wait_step() {  # file step [seconds=120]
  local i
  for i in $(seq $((${3:-120} * 20))); do [ "$(last_step "$1")" -ge "$2" ] && return 0; sleep 0.05; done
  return 1
}
