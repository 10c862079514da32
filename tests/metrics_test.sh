#!/usr/bin/env bash
# Prometheus metrics of real processes over HTTP (curl): a shard server
# (--metrics_port, --health_port) and a training worker (--metrics_port)
# training through it. Checks the text format (tests/metrics_check.py) and
# the listed metrics: step, loss, bytes in/out, RPC latencies, optimizer
# throughput, memory; that the values move with training; that the health
# port answers grpc.health.v1 and closes when the server exits; that health
# answers by service name and reflection lists the services (grpc_probe).
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
PY=/usr/bin/python3
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
wait_for() {  # file, pattern: up to 60 s for a line to appear
  for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
scrape() {  # url, output file
  curl -sf --max-time 10 "$1" -o "$2"
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

# A shard server with metrics and a health port.
"$R/server/zeroshard-server" --insecure --port=0 --metrics_port=0 --health_port=0 \
  --num_shards=1 >"$T/server.log" 2>&1 &
server=$!; pids+=($server)
wait_for "$T/server.log" "listening on"; check "server starts" $?
cat "$T/server.log" | sed 's/^/    | /'
smetrics=$(grep -o 'http://[^ ]*/metrics' "$T/server.log")
saddr=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$T/server.log")
health=$(sed -n 's/.*health on \(.*\)$/\1/p' "$T/server.log")
scrape "$smetrics" "$T/server0.prom"; check "curl the server's metrics" $?
head -c 4096 "$T/server0.prom" | head -12 | sed 's/^/    | /'
$PY "$R/tests/metrics_check.py" "$T/server0.prom" zeroshard_server_step \
  zeroshard_server_received_bytes_total zeroshard_server_sent_bytes_total \
  zeroshard_server_optimizer_parameters_per_second zeroshard_server_state_bytes \
  process_resident_memory_bytes'>=1' zeroshard_server_info'>=1'
check "server metrics: valid text with the listed metrics" $?
curl -sf "${smetrics%/metrics}/healthz" | grep -q '^ok$'; check "metrics port /healthz" $?
"$R/ctl/zeroshard-ctl" health --servers="$health" >"$T/health.txt" 2>&1
check "health port answers grpc.health.v1 (zeroshard-ctl health): $(tr '\n' ' ' <"$T/health.txt")" $?
# grpcurl-style tools (tests/grpc_probe): health by service name on both
# ports, server reflection on the shard port only.
P="$R/tests/grpc_probe"
for addr in "$saddr" "$health"; do
  out=$("$P" health "$addr" zeroshard.v1.ShardService 2>&1)
  [ "$out" = SERVING ]; check "$addr: health of zeroshard.v1.ShardService by name: $out" $?
done
out=$("$P" health "$saddr" zeroshard.v1.MembershipService 2>&1)
[ "$out" = SERVING ]; check "shard 0: health of zeroshard.v1.MembershipService: $out" $?
out=$("$P" health "$saddr" no.such.Service 2>&1)
case "$out" in NOT_FOUND*) true ;; *) false ;; esac
check "health of an unknown service: $out" $?
"$P" list "$saddr" >"$T/services.txt" 2>&1
grep -qx zeroshard.v1.ShardService "$T/services.txt" && grep -qx grpc.health.v1.Health "$T/services.txt"
check "reflection lists the services: $(tr '\n' ' ' <"$T/services.txt")" $?
"$P" describe "$saddr" zeroshard.v1.ShardService >"$T/describe.txt" 2>&1
grep -qx 'method zeroshard.v1.ShardService.PushGradients' "$T/describe.txt"
check "reflection describes zeroshard.v1.ShardService ($(grep -c '^method' "$T/describe.txt") methods)" $?
out=$("$P" list "$health" 2>&1)
case "$out" in UNIMPLEMENTED*) true ;; *) false ;; esac
check "the health port has no reflection: $out" $?

# One worker (W = 1, ZeRO-3) training through it.
cat >"$T/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 3},
  "zeroshard": {"servers": 1}
}
JSON
ZEROSHARD_RANK=0 ZEROSHARD_WORLD_SIZE=1 ZEROSHARD_COORD=127.0.0.1:0 \
  "$R/worker/train/zeroshard-worker" --config="$T/ds.json" --servers="$saddr" \
  --steps=1000000 --seq_len=8 --metrics_port=0 >"$T/worker.log" 2>&1 &
worker=$!; pids+=($worker)
wait_for "$T/worker.log" "metrics on"; check "worker serves metrics" $?
wmetrics=$(grep -o 'http://[^ ]*/metrics' "$T/worker.log")
# Until the worker reports step 3 (or 60 s).
for _ in $(seq 300); do
  scrape "$wmetrics" "$T/worker.prom" && $PY "$R/tests/metrics_check.py" "$T/worker.prom" \
    zeroshard_worker_step'>=3' >/dev/null && break
  sleep 0.2
done
$PY "$R/tests/metrics_check.py" "$T/worker.prom" zeroshard_worker_step'>=3' \
  zeroshard_worker_loss'>=0.1' zeroshard_worker_learning_rate'>=0.000001' \
  zeroshard_worker_tokens_per_second'>=1' zeroshard_worker_sent_bytes_total'>=1' \
  zeroshard_worker_received_bytes_total'>=1' zeroshard_worker_model_state_bytes'>=1' \
  grpc_client_handling_seconds'>=3' process_resident_memory_bytes'>=1'
check "worker metrics: valid text, step >= 3, loss, bytes, client RPC latencies, memory" $?
$PY "$R/tests/metrics_check.py" "$T/worker.prom" \
  zeroshard_worker_step_duration_seconds:histogram'>=3' \
  zeroshard_worker_steps_total:counter'>=3' zeroshard_worker_tokens_total:counter'>=1' \
  zeroshard_worker_sent_bytes_total:counter'>=1'
check "worker: step time as a histogram (>= 3 steps observed), steps and tokens as counters" $?
grep -q 'zeroshard_worker_step_duration_seconds_bucket{phase="server_wait",le="+Inf"}' "$T/worker.prom"
check "worker: a step-time histogram per phase" $?
grep -q 'grpc_client_handling_seconds_count{grpc_service="zeroshard.v1.ShardService",grpc_method="PushGradients",grpc_code="OK"}' "$T/worker.prom"
check "worker: PushGradients latency by method and code" $?

scrape "$smetrics" "$T/server1.prom"; check "curl the server's metrics again" $?
$PY "$R/tests/metrics_check.py" "$T/server1.prom" zeroshard_server_step'>=3' \
  zeroshard_server_optimizer_steps_total'>=3' zeroshard_server_received_bytes_total'>=1' \
  zeroshard_server_sent_bytes_total'>=1' zeroshard_server_optimizer_parameters_per_second'>=1' \
  zeroshard_server_owned_parameters'>=1' zeroshard_server_state_bytes'>=1' \
  grpc_server_handling_seconds'>=3'
check "server metrics moved with training: steps, bytes in/out, optimizer throughput, RPC latencies" $?
$PY "$R/tests/metrics_check.py" "$T/server1.prom" \
  zeroshard_server_optimizer_parameters_total:counter'>=3' \
  zeroshard_server_optimizer_steps_total:counter'>=3' grpc_server_handling_seconds:histogram'>=3'
check "server: optimizer work and steps as counters, RPC (CommitStep = step) latencies as histograms" $?
grep -q 'grpc_server_handling_seconds_bucket{grpc_service="zeroshard.v1.ShardService",grpc_method="CommitStep",grpc_code="OK",le="+Inf"}' "$T/server1.prom"
check "server: CommitStep latency histogram" $?

kill -TERM "$worker"; wait "$worker" 2>/dev/null
kill -TERM "$server"; wait "$server"; rc=$?
[ $rc -eq 0 ]; check "server exits 0 on SIGTERM (rc $rc)" $?
! "$R/ctl/zeroshard-ctl" health --servers="$health" --deadline_ms=2000 >/dev/null 2>&1
check "health port gone after exit" $?

if [ $fails -ne 0 ]; then
  echo "--- server log"; cat "$T/server.log"; echo "--- worker log"; tail -20 "$T/worker.log"
  echo "$fails check(s) failed"; exit 1
fi
echo "metrics_test: PASS"
