#!/usr/bin/env bash
# zeroshard-worker started by torchrun's agent (torchrun_launch.py), with
# only torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no ZEROSHARD_*), 2 ranks
# against 2 real servers: the c10d (--standalone) and the static
# rendezvous train and save the same bits as `zeroshard train`'s own
# launch of the same run.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
WORKER="$R/worker/train/zeroshard-worker"
SERVER="$R/server/zeroshard-server"
LAUNCHER="$R/launcher/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
head -c 20000 "$R/README.md" >"$T/text.txt"
"$R/worker/io/zeroshard-tokenize" --input="$T/text.txt" --output="$T/tokens.bin" >/dev/null
cat >"$T/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 3}}
JSON
ARGS=(--config="$T/ds.json" --data="$T/tokens.bin" --layers=1 --heads=2 --channels=32
  --seq_len=16 --steps=4)
unset ZEROSHARD_RANK ZEROSHARD_WORLD_SIZE ZEROSHARD_LOCAL_RANK ZEROSHARD_LOCAL_SIZE ZEROSHARD_COORD

# The reference: zeroshard train's own launch (ZEROSHARD_* variables).
"$LAUNCHER" train "${ARGS[@]}" --servers=2 --workers=2 --save="$T/ref.bin" \
  --work-dir="$T/ref" >"$T/ref.log" 2>&1
check "zeroshard train reference run" $?

servers=()
start_servers() {  # starts 2 fresh servers; their addresses in $ADDRS
  local d="$1"; mkdir -p "$d"; servers=()
  for k in 0 1; do
    "$SERVER" --insecure --shard_index=$k --num_shards=2 --port=0 \
      --port_file="$d/s$k.port" >"$d/s$k.log" 2>&1 &
    servers+=($!)
  done
  for _ in $(seq 300); do [ -s "$d/s0.port" ] && [ -s "$d/s1.port" ] && break; sleep 0.1; done
  ADDRS="127.0.0.1:$(cat "$d/s0.port"),127.0.0.1:$(cat "$d/s1.port")"
}
for backend in c10d static; do
  start_servers "$T/$backend"
  PYTHONPATH="$R/python" timeout 300 /usr/bin/python3 "$R/worker/train/torchrun_launch.py" "$backend" 2 \
    "$WORKER" "${ARGS[@]}" --servers="$ADDRS" --insecure --save="$T/$backend.bin" \
    >"$T/$backend.log" 2>&1
  rc=$?
  grep -E "^step|zeroshard-worker:" "$T/$backend.log" | sed 's/^/    | /'
  check "torchrun ($backend rendezvous): 2 workers exit 0 (rc $rc)" $rc
  cmp -s "$T/ref.bin" "$T/$backend.bin"
  check "torchrun ($backend): same bits as zeroshard train" $?
  kill "${servers[@]}" 2>/dev/null; wait "${servers[@]}" 2>/dev/null
done
echo "$fails failed"
[ $fails -eq 0 ]
