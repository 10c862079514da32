#!/usr/bin/env bash
# The C API end to end, as an outside program uses it: tools/install.sh
# puts the header, libzeroshard.so and zeroshard.pc under a prefix; C
# programs are compiled as C99 by the system cc through pkg-config (outside
# Bazel's rules) and train against 2 real zeroshard-server processes:
#   1. README's example (client/examples/train_linear.c, the README's copy
#      diffed against it) learns its target;
#   2. train_check.c, 2 ranks, the norm from the ranks' sums of squares,
#      clipping and a NaN step: every step's parameters equal
#      torch.optim.AdamW's on the same gradients bit for bit
#      (capi/adamw_replay.py);
#   3. the same with the norm from the servers' prepare;
#   4. checkpoints every 5 steps, and a server SIGKILLed after step 12 and
#      restarted: the ranks roll back, and the final parameters equal run
#      2's bit for bit;
#   5. a job that stops after step 12 and a new one started against the
#      same servers: it resumes at step 12 and ends at the same bits;
#   6. the ranks' first connect() calls to server 1 fail (capi/
#      refuse_connect.c, preloaded): their retries reconnect and the run
#      ends at the same bits;
#   7. with checkpoints every 5 steps, one rank's push of step 13 fails
#      (UNAVAILABLE: its retries ran out) with every server healthy: the
#      ranks redo step 13 with a new epoch and end at run 2's bits; a push
#      the servers refused (INVALID_ARGUMENT) fails the step instead;
#   8. at step 4 one rank passes another max_norm: every rank's step is
#      refused (INVALID_ARGUMENT naming it, nothing written), the call
#      with the same arguments goes on, and the run ends at run 2's bits.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
SERVER="$R/server/zeroshard-server"
fails=0
pids=()
check() {  # description, then the condition's exit status in $?
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

# A port below the kernel's ephemeral range (zeroshard._ports): a server
# restarted on it cannot find it taken by another process's outgoing
# connection, as one from --port=0 could be.
quiet_port() {
  PYTHONPATH="$R/python" /usr/bin/python3 -c \
    'from zeroshard._ports import quiet_port; print(quiet_port())'
}
# start_server K DIR PORT [flags...]: shard K of 2 on PORT, its port in
# DIR/portK. PORT "quiet": a quiet_port, chosen again (5 tries) if another
# program binds it first.
start_server() {
  local k=$1 dir=$2 want=$3 port
  shift 3
  for _try in 1 2 3 4 5; do
    port=$want
    [ "$want" = quiet ] && port=$(quiet_port)
    rm -f "$dir/port$k"
    "$SERVER" --insecure --host=127.0.0.1 --port="$port" --port_file="$dir/port$k" \
      --shard_index="$k" --num_shards=2 "$@" >>"$dir/server$k.log" 2>&1 &
    pids[$k]=$!
    for _ in $(seq 400); do
      [ -s "$dir/port$k" ] && return 0
      kill -0 "${pids[$k]}" 2>/dev/null || break
      sleep 0.05
    done
    [ "$want" = quiet ] && tail -n 1 "$dir/server$k.log" | grep -q "cannot listen on" || break
  done
  echo "server $k did not start:"; cat "$dir/server$k.log"; return 1
}
# fleet DIR [flags...]: 2 fresh servers; $servers: their addresses.
fleet() {
  local dir=$1
  shift
  mkdir -p "$dir"
  start_server 0 "$dir" quiet "$@" && start_server 1 "$dir" quiet "$@" || return 1
  servers="127.0.0.1:$(cat "$dir/port0"),127.0.0.1:$(cat "$dir/port1")"
}
stop_fleet() { { kill -9 "${pids[0]}" "${pids[1]}"; wait "${pids[0]}" "${pids[1]}"; } 2>/dev/null; }

# Install, then build as an outsider would.
out=$("$R/tools/install.sh" --prefix "$T/prefix" --library "$R/client/libzeroshard.so" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] && [ -f "$T/prefix/include/zeroshard.h" ] && [ -f "$T/prefix/lib/libzeroshard.so" ] &&
  grep -q "^prefix=$T/prefix$" "$T/prefix/lib/pkgconfig/zeroshard.pc"
check "install.sh puts header, library and zeroshard.pc (prefix baked in) under the prefix" $?
export PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs zeroshard); check "pkg-config knows zeroshard ($flags)" $?
CFLAGS=(-std=c99 -Wall -Wextra -pedantic -Werror)
cc "${CFLAGS[@]}" "$R/client/examples/train_linear.c" $flags -o "$T/train_linear"
check "README's example compiles as C99 against the installed library" $?
cc "${CFLAGS[@]}" -pthread "$R/tests/capi/train_check.c" $flags -lm -o "$T/train_check"
check "train_check.c compiles as C99" $?

# The README's copy of the example is the file.
sed -n '/^## Embed zeroshard in your training loop/,$p' "$R/README.md" |
  sed -n '/^```c$/,/^```$/p' | sed '1d;$d' >"$T/readme_example.c"
[ -s "$T/readme_example.c" ] && diff -u "$R/client/examples/train_linear.c" "$T/readme_example.c"
check "README's example is client/examples/train_linear.c" $?

# 1. The example learns y = sum_j (j+1)/8 x_j + 0.5.
fleet "$T/example" || exit 1
out=$(timeout 120 "$T/train_linear" "$servers" 2>&1); rc=$?
echo "$out"
stop_fleet
first=$(awk '$1 == "step" && $2 == 0 {print $4}' <<<"$out")
last=$(awk '$1 == "step" && $2 == 80 {print $4}' <<<"$out")
[ $rc -eq 0 ] && awk -v a="$first" -v b="$last" 'BEGIN {exit !(a > 0 && b < a / 100)}'
check "the example trains: loss $first at step 0, $last at step 80" $?
grep -q "^after 100 steps: w\[0\] 0.12" <<<"$out"; check "the example reaches w[0] ~ 1/8" $?

# run NAME SERVERS_FLAGS CHECK_ARGS...: train_check against a fresh fleet;
# $RUN_UNDER, if set, is a command (run once the fleet is up) to run it
# under.
run_check() {
  local name=$1 server_flags=$2
  shift 2
  mkdir -p "$T/$name/out"
  fleet "$T/$name" $server_flags || return 1
  ${RUN_UNDER:-} timeout 300 "$T/train_check" servers="$servers" out="$T/$name/out" "$@" >"$T/$name/log" 2>&1
  local rc=$?
  stop_fleet
  cat "$T/$name/log"
  return $rc
}
replay() { /usr/bin/python3 "$R/tests/capi/adamw_replay.py" "$T/$1/out"; }

# 2. Norm from the ranks.
run_check workers "" nan_step=7 max_norm=2; check "2 ranks, norm from the ranks: 20 steps" $?
replay workers; check "torch AdamW replay of the run (norm from the ranks)" $?

# 3. Norm from the servers' prepare.
run_check servers "" nan_step=7 max_norm=2 norm=servers; check "2 ranks, norm from the servers: 20 steps" $?
replay servers; check "torch AdamW replay of the run (norm from the servers)" $?
cmp "$T/workers/out/p20.bin" "$T/servers/out/p20.bin"; check "both runs end at the same bits" $?

# 4. Checkpoints every 5 steps; server 1 SIGKILLed after step 12, restarted.
d="$T/recovery"
mkdir -p "$d/out" "$d/pause"
fleet "$d" --checkpoint_dir="$d/ckpt" || exit 1
timeout 300 "$T/train_check" servers="$servers" out="$d/out" nan_step=7 max_norm=2 \
  checkpoint_interval=5 pause_at=12 pause_dir="$d/pause" >"$d/log" 2>&1 &
prog=$!
# Step 12 comes after two checkpoints (fsync'd): on a loaded machine that
# can take a while, so wait as long as the run lives (200 s at most), and
# if it never gets there, stop it and say so rather than kill a server
# under a run that is not paused.
for _ in $(seq 4000); do
  [ -e "$d/pause/reached" ] && break
  kill -0 "$prog" 2>/dev/null || break
  sleep 0.05
done
[ -e "$d/pause/reached" ]; check "the run reached step 12" $?
if [ -e "$d/pause/reached" ]; then
  port1=$(cat "$d/port1")
  { kill -9 "${pids[1]}"; wait "${pids[1]}"; } 2>/dev/null
  start_server 1 "$d" "$port1" --checkpoint_dir="$d/ckpt"; check "server 1 SIGKILLed and restarted on port $port1" $?
  touch "$d/pause/go"
  wait $prog; rc=$?
  stop_fleet
  cat "$d/log"
  [ $rc -eq 0 ]; check "the run with a server killed ends (exit $rc)" $?
  grep -q "rolled back to step 10" "$d/log"; check "the ranks rolled back to checkpoint 10" $?
  cmp "$T/workers/out/p20.bin" "$d/out/p20.bin"; check "the interrupted run ends bit-identical to the uninterrupted one" $?
  grep -q "restor" "$d/server1.log"; check "the restarted server restored a checkpoint" $?
else
  { kill -9 "$prog"; wait "$prog"; } 2>/dev/null
  stop_fleet
  echo "the run's log:"; cat "$d/log"
  for k in 0 1; do echo "server $k's log:"; tail -20 "$d/server$k.log"; done
fi

# 5. Stop after 12 steps; a new job resumes at the servers' step 12.
d="$T/resume"
mkdir -p "$d/out"
fleet "$d" --checkpoint_dir="$d/ckpt" || exit 1
timeout 300 "$T/train_check" servers="$servers" out="$d/out" nan_step=7 max_norm=2 \
  checkpoint_interval=5 steps=12 >"$d/log" 2>&1; rc1=$?
timeout 300 "$T/train_check" servers="$servers" out="$d/out" nan_step=7 max_norm=2 \
  checkpoint_interval=5 steps=20 >>"$d/log" 2>&1; rc2=$?
stop_fleet
cat "$d/log"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]; check "12 steps, then a new job to step 20 (exit $rc1, $rc2)" $?
grep -q "rank 0: resumed at step 12" "$d/log"; check "the new job resumed at step 12" $?
cmp "$T/workers/out/p20.bin" "$d/out/p20.bin"; check "the resumed run ends bit-identical" $?
replay resume; check "torch AdamW replay of the stopped and resumed run" $?

# 6. Four failed connects to server 1 (both ranks' first calls and their
# reconnects): gRPC notices a new connection only while something polls the
# channel, which calls failing at once did not do, so the retries used to
# run out first ("failed to connect to all addresses").
cc -shared -fPIC "$R/tests/capi/refuse_connect.c" -ldl -o "$T/refuse_connect.so"
check "refuse_connect.c builds" $?
refusing() {
  ZS_REFUSE_PORT=$(cat "$T/refused/port1") ZS_REFUSE_COUNT=4 \
    LD_PRELOAD="$T/refuse_connect.so" "$@"
}
RUN_UNDER=refusing run_check refused "" nan_step=7 max_norm=2
check "2 ranks whose first 4 connects to server 1 fail: 20 steps" $?
cmp "$T/workers/out/p20.bin" "$T/refused/out/p20.bin"; check "they end at the same bits" $?

# 7. A failed push with healthy servers: the step is redone.
run_check pushfail "--checkpoint_dir=$T/pushfail/ckpt" nan_step=7 max_norm=2 \
  checkpoint_interval=5 fail_push_at=13
check "a push of step 13 failed (UNAVAILABLE), healthy servers: 20 steps" $?
grep -q "rank 0: step 13 rolled back to step 13 (epoch 1)" "$T/pushfail/log"
check "the ranks redo step 13 with epoch 1" $?
cmp "$T/workers/out/p20.bin" "$T/pushfail/out/p20.bin"
check "the run with the failed push ends at the same bits" $?
run_check pushrefused "--checkpoint_dir=$T/pushrefused/ckpt" nan_step=7 max_norm=2 \
  checkpoint_interval=5 fail_push_at=13 fail_push_code=3
[ $? -ne 0 ] && grep -q "zs_trainer_step: .*push failed" "$T/pushrefused/log" &&
  ! grep -q "rolled back" "$T/pushrefused/log"
check "a refused push (INVALID_ARGUMENT) fails the step, no roll back" $?

# 8. Ranks that disagree on the step's arguments.
run_check disagree "" nan_step=7 max_norm=2 disagree_at=4
check "a step whose ranks disagree on max_norm is refused, then 20 steps" $?
[ "$(grep -c "refused: zs_trainer_step: the ranks disagree on args->max_norm (rank 0: 2, rank 1: 4)" "$T/disagree/log")" = 2 ]
check "both ranks name the argument and the values" $?
cmp "$T/workers/out/p20.bin" "$T/disagree/out/p20.bin"
check "that run ends at the same bits" $?

echo "$fails failed"
[ $fails -eq 0 ]
