#!/usr/bin/env bash
# `zeroshard train` end to end on a tiny GPT-2 (2 shard servers, 2 workers,
# ZeRO-3): exit 0, metrics.jsonl / loss.svg / report, a saved model whose
# loss in the PyTorch reference equals the logged eval loss; bad input exits
# 2 with one line and starts nothing; a failing worker stops the job naming
# its rank and status; SIGTERM leaves no process behind.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
LAUNCHER="$R/launcher/zeroshard"
TOKENIZE="$R/worker/io/zeroshard-tokenize"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
left_of() { pgrep -f "$1" | wc -l; }

# Data and config.
head -c 20000 "$R/README.md" >"$T/text.txt"
"$TOKENIZE" --input="$T/text.txt" --output="$T/tokens.bin" >/dev/null
cat >"$T/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}},
  "zero_optimization": {"stage": 3},
  "zeroshard": {"servers": 2}
}
JSON
sed -e 's/"stage": 3}/"stage": 0}/' \
  -e 's/"servers": 2}/"servers": 2, "server_aggregation": true}/' \
  "$T/ds.json" >"$T/agg0.json"
TINY=(--config="$T/ds.json" --data="$T/tokens.bin" --layers=1 --heads=2 --channels=32 --seq-len=16)
# The worker with failure points (ZEROSHARD_TEST_FAIL_AT); zeroshard-worker has none.
TEST_WORKER="$R/worker/train/zeroshard-worker-for-tests"

# Bad input: exit 2, one line naming the problem, nothing started.
bad() {  # description, expected text, then the launcher's arguments
  local what="$1" want="$2"; shift 2
  out=$("$LAUNCHER" train --work_dir="$T/bad" "$@" 2>&1); rc=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" <<<"$out" && [ ! -e "$T/bad" ]
  check "$what: exit 2, one line, nothing started (rc $rc: $out)" $?
}
bad "unknown flag" "unknown flag --bogus" "${TINY[@]}" --bogus=1
bad "missing data" "$T/nope.bin" --config="$T/ds.json" --data="$T/nope.bin"
bad "engine rejects aggregation at stage 0" "server_aggregation" \
  --config="$T/agg0.json" --data="$T/tokens.bin"
bad "missing config" "$T/none.json" --config="$T/none.json" --data="$T/tokens.bin"
bad "checkpoint dir with external servers" "for the servers the launcher starts" \
  "${TINY[@]}" --server-addrs=127.0.0.1:1 --checkpoint-dir="$T/ckpt"
bad "checkpoint interval" "--checkpoint_dir needs --checkpoint_interval >= 1" "${TINY[@]}" \
  --checkpoint-dir="$T/ckpt" --checkpoint-interval=0
# A port gRPC would take modulo 2^16 (reaching whatever listens there).
bad "server address port out of range" 'port "101077" is not a number in 1..65535' \
  "${TINY[@]}" --server-addrs=127.0.0.1:101077
bad "nodes must divide workers" "must be >= 1 and divide --workers 2" "${TINY[@]}" --nodes=3
bad "bad model shape" "--heads 3 does not divide --channels 32" "${TINY[@]}" --heads=3
bad "bad number" "flag --steps: 'x' is not an integer" "${TINY[@]}" --steps=x
bad "missing worker binary" "--worker_binary $T/none does not exist" "${TINY[@]}" \
  --worker_binary="$T/none"
bad "missing val data" "--val_data: open $T/nope.bin" "${TINY[@]}" --val_data="$T/nope.bin"
bad "checkpoint interval without a dir" "--checkpoint_interval 2 needs --checkpoint_dir" \
  "${TINY[@]}" --checkpoint-interval=2
bad "save in a missing directory" "--save $T/nodir/m.bin: cannot write in directory $T/nodir: .*No such file or directory (create it first)" \
  "${TINY[@]}" --save="$T/nodir/m.bin"
bad "save in an unwritable directory" "--save /proc/m.bin: cannot write in directory /proc" \
  "${TINY[@]}" --save=/proc/m.bin
cp "$T/tokens.bin" "$T/tokens.copy"
bad "save over the data" "--save $T/./tokens.copy is the --data file $T/tokens.copy" \
  "${TINY[@]}" --data="$T/tokens.copy" --save="$T/./tokens.copy"
bad "save over the val data" "is the --val_data file $T/tokens.copy" \
  "${TINY[@]}" --val_data="$T/tokens.copy" --save="$T/tokens.copy"
cmp -s "$T/tokens.bin" "$T/tokens.copy"; check "the data survive --save naming them" $?

# End to end.
W="$T/run"
out=$("$LAUNCHER" train "${TINY[@]}" --servers=2 --workers=2 --steps=6 \
  --save="$T/final.bin" --work-dir="$W" --print_every=2 2>&1); rc=$?
echo "$out" | sed 's/^/    | /'
[ $rc -eq 0 ]; check "train exits 0 (rc $rc)" $?
grep -q "^step 6/6  loss.*  server step 6$" <<<"$out"; check "plain progress lines; the last shows the servers' step 6" $?
grep -q "model-state memory per worker" <<<"$out"; check "summary table printed" $?
[ "$(wc -l <"$W/metrics.jsonl")" -eq 6 ]; check "metrics.jsonl has 6 steps" $?
for key in step loss lr grad_norm loss_scale tokens_per_s bytes_moved model_state_bytes_per_worker; do
  grep -q "\"$key\":" "$W/metrics.jsonl"; check "metrics.jsonl has $key" $?
done
grep -q "<polyline" "$W/loss.svg" && grep -q "</svg>" "$W/loss.svg"; check "loss.svg is a loss curve" $?
logged=$(grep -o '"eval_loss":[0-9.e+-]*' "$W/metrics-rank0.jsonl" | cut -d: -f2)
torch=$(/usr/bin/python3 "$R/tests/launcher_eval.py" "$T/final.bin" "$T/tokens.bin" 2 16 | awk '{print $2}')
/usr/bin/python3 -c "import sys; a, b = float('$logged'), float('$torch'); sys.exit(abs(a - b) > 1e-4 * max(1, abs(a)))"
check "saved model's PyTorch loss $torch = logged eval loss $logged" $?
[ "$(left_of "$W/")" -eq 0 ]; check "no process of the job left" $?

# --servers over the config's zeroshard.servers: said, and what rank 0
# reports is what runs.
out=$("$LAUNCHER" train "${TINY[@]}" --servers=1 --workers=1 --steps=2 \
  --work-dir="$T/one" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q -- "--servers 1 overrides the config's zeroshard.servers (2)" <<<"$out" &&
  grep -q "\[rank 0\] config: .*, 1 servers" <<<"$out"
check "--servers overrides the config's count, said and reported (rc $rc)" $?

# A worker that fails stops the job, naming its rank and status (here
# with no restarts left). With checkpoints, it says that the same command
# continues the job.
out=$(ZEROSHARD_TEST_FAIL_AT=1:2 "$LAUNCHER" train "${TINY[@]}" --steps=1000 \
  --worker_binary="$TEST_WORKER" --work_dir="$T/fail" \
  --checkpoint_dir="$T/failck" --max_restarts=0 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "worker rank 1 (pid [0-9]*) failed with exit code 5" <<<"$out"
check "failing worker: exit 1 naming rank 1 and exit code 5 (rc $rc)" $?
grep -q "checkpoints are in $T/failck: the same command again continues" <<<"$out"
check "failing worker: the way to continue is named ($out)" $?
grep -q "stopped at step [0-9]* of 1000 by a failure (worker rank 1" "$T/fail/report.md"
check "failing worker: the report of the steps done is written" $?
[ "$(left_of "$T/fail/")" -eq 0 ]; check "no process left after the failure" $?

# A stopped shard server holds the job up: after --stall_seconds without
# a step the launcher says so, names the server that does not answer and
# says it is stopped; once it continues, the job ends normally.
"$LAUNCHER" train "${TINY[@]}" --steps=1000 --print_every=1 --stall_seconds=2 \
  --work_dir="$T/stall" >"$T/stall.log" 2>&1 &
lpid=$!
for _ in $(seq 600); do grep -q "^step " "$T/stall.log" 2>/dev/null && break; sleep 0.05; done
spid=$(pgrep -f "zeroshard-server.*$T/stall/server-1" | head -1)
if [ -n "$spid" ] && kill -STOP "$spid"; then
  for _ in $(seq 600); do grep -q "^no step for" "$T/stall.log" && break; sleep 0.05; done
  kill -CONT "$spid"
fi
wait $lpid; rc=$?
[ -n "$spid" ] && [ $rc -eq 0 ] &&
  grep -q "^no step for [0-9]* s (the last was step [0-9]*): GetStats on shard 1 (127.0.0.1:[0-9]*).*[Dd]eadline.*; the job waits for it" "$T/stall.log"
check "a stopped server: the launcher names it after --stall_seconds, the job ends (rc $rc): $(grep "no step" "$T/stall.log" | head -2)" $?
grep -q "the server of shard 1 (pid $spid) is stopped (SIGSTOP): \`kill -CONT $spid\` resumes the job; the job waits" "$T/stall.log"
check "a stopped server: the note says it is stopped and how to resume it" $?

# A --checkpoint-dir that another job's server of shard 0 holds: the
# launcher's server 0 is refused (after 10 s), and the launcher quotes why.
mkdir -p "$T/heldck"
"$R/server/zeroshard-server" --insecure --port=0 --num_shards=2 --shard_index=0 \
  --checkpoint_dir="$T/heldck" >"$T/held.log" 2>&1 &
hpid=$!
for _ in $(seq 200); do [ -e "$T/heldck/LOCK.shard-00000" ] && break; sleep 0.05; done
out=$("$LAUNCHER" train "${TINY[@]}" --steps=4 --checkpoint-dir="$T/heldck" \
  --work-dir="$T/held" 2>&1); rc=$?
kill -TERM $hpid; wait $hpid 2>/dev/null
[ $rc -eq 1 ] && grep -q "shard server 0 exited during start (exit code 1: zeroshard-server: .*LOCK.shard-00000 is locked (held by pid $hpid): another zeroshard-server of shard 0 uses this --checkpoint_dir" <<<"$out"
check "a checkpoint dir held by another job's server: refused, the reason quoted (rc $rc): $out" $?

# SIGTERM to the launcher mid-job leaves no process behind.
"$LAUNCHER" train "${TINY[@]}" --steps=1000000 --print_every=1 --work_dir="$T/sig" >"$T/sig.log" 2>&1 &
lpid=$!
for _ in $(seq 600); do grep -q "^step " "$T/sig.log" 2>/dev/null && break; sleep 0.05; done
grep -q "^step " "$T/sig.log"; check "long job shows progress" $?
# A second run in the same --work_dir (two runs with the default one):
# refused before it starts anything, naming the run that holds it.
before=$(ls "$T/sig" | sort | tr '\n' ' ')
out=$("$LAUNCHER" train "${TINY[@]}" --steps=2 --work_dir="$T/sig" 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
  grep -q -- "--work_dir $T/sig is in use by another run (pid $lpid): give another --work_dir, or wait for that run to end" <<<"$out" &&
  [ "$(ls "$T/sig" | sort | tr '\n' ' ')" = "$before" ]
check "a second run in a busy work dir: exit 2, one line naming pid $lpid, nothing changed (rc $rc: $out)" $?
kill -TERM $lpid
wait $lpid; rc=$?
[ $rc -eq 143 ]; check "launcher exits 143 on SIGTERM (rc $rc)" $?
sleep 0.5
[ "$(left_of "$T/sig/")" -eq 0 ]; check "no process left after SIGTERM" $?
pkill -KILL -f "$T/sig/" 2>/dev/null
pkill -KILL -f "$T/fail/" 2>/dev/null

# Checkpoints (issue 7). A run stopped at step 6 and started again with the
# same --checkpoint-dir resumes and saves the same bits as an uninterrupted
# 12-step run; a shard server killed with SIGKILL mid-run is restarted by
# the launcher from its newest checkpoint, the workers roll back, and the
# result is again bit-identical.
"$LAUNCHER" train "${TINY[@]}" --steps=12 --save="$T/ref12.bin" \
  --work-dir="$T/ref12" >/dev/null 2>&1
check "uninterrupted 12-step run" $?
"$LAUNCHER" train "${TINY[@]}" --steps=6 --checkpoint-dir="$T/ckpt" \
  --checkpoint-interval=3 --work-dir="$T/c6" >/dev/null 2>&1
check "6 steps with checkpoints" $?
[ -f "$T/ckpt/step-0000000006/MANIFEST" ] && [ -f "$T/ckpt/step-0000000006/shard-00001-of-00002.ckpt" ]
check "step 6 checkpoint: manifest and shard files" $?
out=$("$LAUNCHER" train "${TINY[@]}" --steps=12 --checkpoint-dir="$T/ckpt" \
  --checkpoint-interval=3 --save="$T/res12.bin" --work-dir="$T/c6" 2>&1)
check "resumed run exits 0" $?
grep -q "restored step 6" "$T/c6/server-0.log"; check "servers restored step 6" $?
grep -q "continuing the job at step 7 of 12" <<<"$out"; check "the resumed run says where it continues ($out)" $?
! grep -q "changed since" <<<"$out"; check "the same command changes nothing" $?
cmp -s "$T/ref12.bin" "$T/res12.bin"; check "resumed run saves the same bits" $?
# A permanent error (the servers hold another model: FAILED_PRECONDITION,
# worker exit code 3) is not met again by restarting the workers: the job
# stops at once and says to fix the cause first.
out=$("$LAUNCHER" train "${TINY[@]/--channels=32/--channels=64}" --steps=12 \
  --checkpoint-dir="$T/ckpt" --checkpoint-interval=3 --work-dir="$T/perm" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "worker rank [01] (pid [0-9]*) failed with exit code 3" <<<"$out" &&
  grep -q "a different model is already registered" <<<"$out" &&
  ! grep -q "starting the workers again" <<<"$out" &&
  grep -q "the error would come again (not restarting the workers): fix what it names, then the same command" <<<"$out"
check "a permanent error stops the job without restarts (rc $rc): $out" $?
# --steps below the servers' step: nothing is trained, and it says so.
out=$("$LAUNCHER" train "${TINY[@]}" --steps=6 --checkpoint-dir="$T/ckpt" \
  --checkpoint-interval=3 --work-dir="$T/short" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "nothing to train: the servers' job is at step 12, and --steps is 6" <<<"$out"
check "--steps below the servers' step says there is nothing to train (rc $rc)" $?
# A resume with another lr and fewer workers: it goes on, and says what
# changed against the run that recorded the state it continues.
sed 's/"lr": 3e-3/"lr": 1e-3/' "$T/ds.json" >"$T/lr.json"
out=$("$LAUNCHER" train "${TINY[@]/--config=*/--config=$T/lr.json}" --workers=1 --steps=13 \
  --checkpoint-dir="$T/ckpt" --checkpoint-interval=3 --work-dir="$T/changed" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "continuing the job at step 13 of 13" <<<"$out" &&
  grep -q "changed since the state of step 12 was recorded: workers 2 -> 1; lr 0.003 -> 0.001 (the data continue from the same position: epoch [0-9]*, shard 0, token offset [0-9]*)" <<<"$out"
check "a resume with another lr and fewer workers says so (rc $rc): $out" $?
# A worker that fails mid-job, with checkpoints: the launcher starts the
# workers again (torchrun's --max_restarts), they continue from the
# servers' state, and the job ends with the uninterrupted run's bits; the
# failed attempt's logs stay and the report covers every step.
out=$(ZEROSHARD_TEST_FAIL_AT=1:5 "$LAUNCHER" train "${TINY[@]}" --steps=12 \
  --worker_binary="$TEST_WORKER" --checkpoint-dir="$T/ckre" \
  --checkpoint-interval=3 --save="$T/re12.bin" --work-dir="$T/re12" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "worker rank 1 (pid [0-9]*) failed with exit code 5.*; starting the workers again (1 of 3)" <<<"$out"
check "a failed worker: the workers start again and the job ends (rc $rc)" $?
cmp -s "$T/ref12.bin" "$T/re12.bin"; check "restarted workers save the same bits" $?
[ -f "$T/re12/rank-1.attempt-1.log" ] && grep -q "ZEROSHARD_TEST_FAIL_AT" "$T/re12/rank-1.attempt-1.log" &&
  grep -q "parameters, 12 steps" "$T/re12/report.md"
check "the failed attempt's log is kept and the report covers 12 steps" $?
# The same work dir: the report and metrics.jsonl cover the whole job.
[ "$(wc -l <"$T/c6/metrics.jsonl")" -eq 12 ] && grep -q '^{"step":1,' "$T/c6/metrics.jsonl" &&
  grep -q "parameters, 12 steps |" "$T/c6/report.md"
check "the continued job's metrics and report cover steps 1-12" $?

"$LAUNCHER" train "${TINY[@]}" --steps=40 --save="$T/ref40.bin" \
  --work-dir="$T/ref40" >/dev/null 2>&1
check "uninterrupted 40-step run" $?
# Each rank logs its collectives (ZEROSHARD_COLLECTIVE_TRACE): what a hung
# job's ranks last ran (see the hang dump below).
ZEROSHARD_COLLECTIVE_TRACE=1 "$LAUNCHER" train "${TINY[@]}" --steps=40 --checkpoint-dir="$T/ckpt40" \
  --checkpoint-interval=4 --print_every=1 --save="$T/kill40.bin" \
  --work-dir="$T/kill40" >"$T/kill40.log" 2>&1 &
lpid=$!
for _ in $(seq 600); do grep -q "^step 10/" "$T/kill40.log" 2>/dev/null && break; sleep 0.02; done
victim=$(pgrep -f "zeroshard-server.*--shard_index=1 .*checkpoint_dir=$T/ckpt40" | head -1)
[ -n "$victim" ] && kill -KILL "$victim"; check "killed shard server 1 (pid $victim)" $?
# The job takes seconds; one still running after 150 s is hung: its
# processes' stacks and logs go to the test's outputs (test.outputs/) and
# the check below fails, instead of the test timing out with nothing.
for _ in $(seq 1500); do kill -0 $lpid 2>/dev/null || break; sleep 0.1; done
if kill -0 $lpid 2>/dev/null; then
  dump="${TEST_UNDECLARED_OUTPUTS_DIR:-$T}/kill40-hang"
  mkdir -p "$dump"
  cp -r "$T/kill40" "$T/kill40.log" "$dump/" 2>/dev/null
  for p in $(pgrep -f "$T/kill40/"); do
    { echo "=== pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-300)"
      timeout 60 gdb -p "$p" -batch -ex "thread apply all bt" 2>&1 ||
        cat "/proc/$p/task/"*/stack 2>/dev/null; } >>"$dump/stacks.txt"
  done
  echo "FAIL the killed-server job hung: stacks and logs in $dump"
  for f in "$T/kill40/"*.log; do echo "--- $f"; tail -5 "$f"; done
  kill -TERM $lpid
fi
wait $lpid; rc=$?
sed 's/^/    | /' "$T/kill40.log" | grep -v '^    | step \|collective: ' | tail -5
[ $rc -eq 0 ]; check "job with a killed server exits 0 (rc $rc)" $?
grep -q "shard server 1 exited with signal 9.*restarting it" "$T/kill40.log"
check "launcher says it restarted shard 1" $?
cmp -s "$T/ref40.bin" "$T/kill40.bin"; check "killed-server run saves the same bits" $?
[ "$(left_of "$T/kill40/")" -eq 0 ]; check "no process left" $?

echo "$fails failed"
[ $fails -eq 0 ]
