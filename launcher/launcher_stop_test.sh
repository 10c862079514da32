#!/usr/bin/env bash
# `zeroshard train` stopped by SIGTERM mid-run still writes metrics.jsonl,
# loss.svg and report.md up to the last step, saying "stopped at step N of
# M", with the version, the command line and the resolved configuration;
# --val_data's held-out tokens are evaluated every --eval_every steps (eval
# points on the curve, eval_loss in metrics.jsonl); without --val_data the
# fallback is said once; a --val_data that names no file exits 2 before
# anything starts.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
LAUNCHER="$R/launcher/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
head -c 40000 "$R/README.md" >"$T/text.txt"
"$R/worker/io/zeroshard-tokenize" --input="$T/text.txt" --output="$T/train.bin" \
  --val_fraction=0.2 --val_output="$T/val.bin" >/dev/null
cat >"$T/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 3}}
JSON
TINY=(--config="$T/ds.json" --data="$T/train.bin" --layers=1 --heads=2 --channels=32 --seq-len=16)

# A bad --val_data: exit 2, one line naming it, nothing started.
out=$("$LAUNCHER" train "${TINY[@]}" --val-data="$T/none.bin" --work-dir="$T/bad" 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && grep -q -- "--val_data" <<<"$out" \
  && [ ! -e "$T/bad/rank-0.log" ]
check "missing --val_data: exit 2, one line naming it (rc $rc: $out)" $?

# Stopped mid-run.
W="$T/stop"
"$LAUNCHER" train "${TINY[@]}" --val-data="$T/val.bin" --eval-every=2 --steps=1000000 \
  --print_every=1 --work-dir="$W" >"$T/stop.log" 2>&1 &
lpid=$!
for _ in $(seq 1200); do grep -q "^step 8/" "$T/stop.log" 2>/dev/null && break; sleep 0.05; done
grep -q "^step 8/" "$T/stop.log"; check "the job reached step 8" $?
kill -TERM $lpid
wait $lpid; rc=$?
sed 's/^/    | /' "$T/stop.log" | grep -v '^    | step ' | tail -14
[ $rc -eq 143 ]; check "exit 143 on SIGTERM (rc $rc)" $?
n=$(grep -o "Stopped at step [0-9]* of 1000000" "$W/report.md" | grep -o "step [0-9]*" | cut -d' ' -f2)
[ -n "$n" ] && [ "$n" -ge 8 ]; check "report.md: stopped at step $n of 1000000" $?
grep -q "stopped at step $n of 1000000 by SIGTERM" "$T/stop.log"; check "printed summary says it" $?
[ "$(wc -l <"$W/metrics.jsonl")" -eq "$n" ]; check "metrics.jsonl has the $n steps run" $?
last=$(tail -1 "$W/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
[ "$last" = "$n" ]; check "its last line is step $n (got $last)" $?
# Every 2nd step; the last one may have been cut off by the signal.
evals=$(grep -c '"eval_loss":[0-9]' "$W/metrics.jsonl")
odd=$(grep '"eval_loss":' "$W/metrics.jsonl" | grep -c '"step":[0-9]*[13579],')
[ "$evals" -ge $((n / 2 - 1)) ] && [ "$evals" -le $((n / 2)) ] && [ "$odd" -eq 0 ] \
  && [ "$evals" -eq "$(grep -c '"event":"eval"' "$W/metrics-rank0.jsonl")" ]
check "eval_loss on every 2nd step: $evals of $n steps" $?
[ "$(grep -c '<circle class="eval"' "$W/loss.svg")" -eq "$evals" ]; check "loss.svg: $evals eval points" $?
grep -q 'class="lr"' "$W/loss.svg" && grep -q "</svg>" "$W/loss.svg"; check "loss.svg: lr panel" $?
grep -q "| version | zeroshard 0.1.0 (revision [0-9a-f+dirty]*\|unknown) |" "$W/report.md"
check "report.md: version and revision" $?
grep -q "| command | \`.*zeroshard train .*--steps=1000000 .*--work-dir=$W\` |" "$W/report.md"
check "report.md: the command line" $?
grep -q "## Configuration" "$W/report.md" && grep -q "| eval | every 2 steps on held-out $T/val.bin |" "$W/report.md"
check "report.md: the resolved configuration" $?
grep -q "| eval loss (held-out, 256 tokens) |" "$W/report.md"; check "report.md: held-out eval row" $?
sleep 0.5
[ "$(pgrep -f "$W/" | wc -l)" -eq 0 ]; check "no process left" $?

# To the end, without --val_data: the fallback is said once.
out=$("$LAUNCHER" train "${TINY[@]}" --steps=4 --work-dir="$T/noval" 2>&1); rc=$?
[ $rc -eq 0 ]; check "run without --val_data exits 0 (rc $rc)" $?
[ "$(grep -c "no --val_data" <<<"$out")" -eq 1 ]; check "no --val_data said once" $?
grep -q "| eval loss (training data, 32 tokens) |" "$T/noval/report.md"; check "training-data eval row" $?
! grep -q "Stopped" "$T/noval/report.md"; check "a finished run is not 'stopped'" $?
echo "$fails failed"
[ $fails -eq 0 ]
