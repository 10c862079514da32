#!/usr/bin/env bash
# DeepSpeed's monitor sections with a real server and a real worker: the
# ds_config enables tensorboard, csv_monitor and wandb (fp16, so the loss
# scale is logged too). Rank 0's TensorBoard event file is read back with
# TensorBoard's own reader (the PyPI package in $ZEROSHARD_VENV, see
# tools/bootstrap_pypi.sh; that part is skipped, with the reason, when the
# package is absent), the CSV files with Python's csv module; both must hold
# DeepSpeed's tags at global-sample steps with the values of the worker's
# --metrics_file. wandb draws one "not available offline" warning.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
VENV="${ZEROSHARD_VENV:-/opt/zeroshard/venv}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
wait_for() {  # file, pattern: up to 60 s for a line to appear
  for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

"$R/server/zeroshard-server" --insecure --port=0 --num_shards=1 >"$T/server.log" 2>&1 &
server=$!; pids+=($server)
wait_for "$T/server.log" "listening on"; check "server starts" $?
saddr=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$T/server.log")

cat >"$T/ds.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4}},
  "fp16": {"enabled": true, "initial_scale_power": 8},
  "zero_optimization": {"stage": 3},
  "zeroshard": {"servers": 1},
  "tensorboard": {"enabled": true, "output_path": "$T/tb/", "job_name": "run1"},
  "csv_monitor": {"enabled": true, "output_path": "$T/csv", "job_name": "run1"},
  "wandb": {"enabled": true, "project": "zeroshard-test"}
}
JSON
ZEROSHARD_RANK=0 ZEROSHARD_WORLD_SIZE=1 ZEROSHARD_COORD=127.0.0.1:0 \
  "$R/worker/train/zeroshard-worker" --config="$T/ds.json" --servers="$saddr" \
  --steps=6 --seq_len=8 --metrics_file="$T/metrics.jsonl" >"$T/worker.log" 2>&1
check "worker trains 6 steps (rc $?)" $?
grep 'monitors:\|wandb' "$T/worker.log" | sed 's/^/    | /'
[ "$(grep -c 'wandb: not available offline' "$T/worker.log")" -eq 1 ]
check "wandb: one 'not available offline' warning" $?
(cd "$T" && find tb csv -type f | sort | sed "s/^/    | /")

/usr/bin/python3 "$R/tests/metrics_monitor_check.py" csv "$T/csv/run1" "$T/metrics.jsonl" 4
check "csv_monitor: DeepSpeed's files, header and rows match the metrics file" $?
if "$VENV/bin/python3" -c "import tensorboard" 2>/dev/null; then
  "$VENV/bin/python3" "$R/tests/metrics_monitor_check.py" tensorboard "$T/tb/run1" \
    "$T/metrics.jsonl" 4
  check "tensorboard: TensorBoard's reader finds the scalars of the metrics file" $?
else
  echo "SKIP tensorboard read-back: no tensorboard in $VENV (run tools/bootstrap_pypi.sh)"
fi

kill -TERM "$server"; wait "$server" 2>/dev/null
if [ $fails -ne 0 ]; then
  echo "--- server log"; cat "$T/server.log"; echo "--- worker log"; tail -30 "$T/worker.log"
  echo "$fails check(s) failed"; exit 1
fi
echo "metrics_monitor_test: PASS"
