#!/usr/bin/env bash
# Issue 23 item 13, with the real launcher (`zeroshard train`) and worker:
# - a token file holding an id >= the vocabulary, or fewer tokens than one
#   step needs, is refused up front: exit 2, one line naming the file and
#   the problem, nothing started (no work dir, no server, no worker);
# - the worker binary refuses such a file itself, naming it;
# - an fp16 run whose steps all overflow (a huge initial loss scale) writes
#   metrics files whose every line is strict JSON, with null where a value
#   is not finite.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
LAUNCHER="$R/launcher/zeroshard"
WORKER="$R/worker/train/zeroshard-worker"
T="${TEST_TMPDIR:-$(mktemp -d)}"
PY=/usr/bin/python3
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# An llm.c token file: OUT COUNT [POSITION ID] (ids i % 256, and ID at
# POSITION).
tokens() {
  $PY - "$@" <<'EOF'
import struct, sys
out, count = sys.argv[1], int(sys.argv[2])
ids = [i % 256 for i in range(count)]
if len(sys.argv) > 3:
    ids[int(sys.argv[3])] = int(sys.argv[4])
header = struct.pack("<256i", 20240520, 1, count, *([0] * 253))
with open(out, "wb") as f:
    f.write(header + struct.pack("<%dH" % count, *ids))
EOF
}
tokens "$T/good.bin" 4000
tokens "$T/bad_id.bin" 4000 123 300
tokens "$T/short.bin" 20
cat >"$T/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 3},
  "zeroshard": {"servers": 2}
}
JSON
# --vocab 256 (the default); one step of 2 workers needs 2*2*16 + 1 = 65.
TINY=(--config="$T/ds.json" --layers=1 --heads=2 --channels=32 --seq-len=16
  --workers=2 --steps=2)

bad() {  # description, then texts the one line must hold, then "--", args
  local what="$1"; shift
  local want=()
  while [ "$1" != "--" ]; do want+=("$1"); shift; done
  shift
  rm -rf "$T/bad"
  out=$("$LAUNCHER" train --work_dir="$T/bad" "$@" 2>&1); rc=$?
  local ok=0
  [ $rc -eq 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || ok=1
  for w in "${want[@]}"; do grep -qF -- "$w" <<<"$out" || ok=1; done
  # Nothing started: the launcher makes the work dir (logs of servers and
  # workers) only after its checks; no process runs with it.
  [ ! -e "$T/bad" ] && ! pgrep -f "$T/bad" >/dev/null || ok=1
  check "$what: exit 2, one line, nothing started (rc $rc: $out)" $ok
}
bad "token id >= vocab" "$T/bad_id.bin" "token 300 at index 123" \
  "vocab_size 256" -- "${TINY[@]}" --data="$T/bad_id.bin"
bad "bad id in the second file" "$T/bad_id.bin" "token 300" \
  -- "${TINY[@]}" --data="$T/good.bin,$T/bad_id.bin"
bad "fewer tokens than one step" "$T/short.bin" "20 tokens" "65" \
  -- "${TINY[@]}" --data="$T/short.bin"
bad "vocab smaller than the data" "$T/good.bin" "vocab_size 200" \
  -- "${TINY[@]}" --vocab=200 --data="$T/good.bin"

# The worker binary alone (W = 1, stage 0: no servers) refuses them too.
cat >"$T/ds0.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 0}
}
JSON
worker() {  # data file, then the text its error must hold
  out=$(ZEROSHARD_RANK=0 ZEROSHARD_WORLD_SIZE=1 ZEROSHARD_COORD=127.0.0.1:0 \
    timeout 120 "$WORKER" --config="$T/ds0.json" --data="$1" --layers=1 \
    --heads=2 --channels=32 --seq_len=16 --steps=2 2>&1); rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -- "$1" <<<"$out" &&
    grep -qF -- "$2" <<<"$out" && ! grep -q "^step " <<<"$out"
  local ok=$?
  check "worker refuses $(basename "$1") (rc $rc: $(tail -1 <<<"$out"))" $ok
}
worker "$T/bad_id.bin" "token 300 at index 123"
worker "$T/short.bin" "20 tokens"  # W = 1 needs 33

# fp16 whose every step overflows (scale 2^60, halved once a step): the
# gradient norm is inf. Every line of the rank file and of the merged
# metrics.jsonl must parse as strict JSON (no NaN/Infinity/inf/-nan).
sed 's/"stage": 0}/"stage": 0},\n  "fp16": {"enabled": true, "initial_scale_power": 60, "hysteresis": 1}/' \
  "$T/ds0.json" >"$T/fp16.json"
W="$T/fp16"
out=$("$LAUNCHER" train --config="$T/fp16.json" --data="$T/good.bin" \
  --layers=1 --heads=2 --channels=32 --seq-len=16 --workers=1 --steps=3 \
  --work_dir="$W" 2>&1); rc=$?
[ $rc -eq 0 ]; ok=$?
check "fp16 overflow run exits 0 (rc $rc: $(tail -3 <<<"$out"))" $ok
$PY - "$W/metrics-rank0.jsonl" "$W/metrics.jsonl" <<'EOF'
import json, sys
def reject(name):
    raise ValueError("not JSON: " + name)
status = 0
for path in sys.argv[1:]:
    lines = open(path).read().splitlines()
    if not lines:
        print("%s: empty" % path)
        status = 1
    for n, line in enumerate(lines, 1):
        try:
            json.loads(line, parse_constant=reject)
        except ValueError as e:
            print("%s:%d: %s: %s" % (path, n, e, line[:160]))
            status = 1
sys.exit(status)
EOF
check "every metrics line is strict JSON" $?
grep -q '"grad_norm":null,.*"skipped":true' "$W/metrics-rank0.jsonl"
check "overflowed steps: grad_norm null in the rank file" $?
[ "$(grep -c '"grad_norm":null' "$W/metrics.jsonl")" -eq 3 ]
check "overflowed steps: grad_norm null in metrics.jsonl" $?

echo "$fails failure(s)"
[ $fails -eq 0 ]
