#!/usr/bin/env bash
# Every binary answers --help (exit 0) and rejects bad flags (exit 2, naming
# the flag); zeroshard-server serves health and exits 0 on SIGTERM; ctl fails
# cleanly against a dead address. (`zeroshard train` end to end, and
# SIGTERM to it: launcher_test.sh.)
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
SERVER="$R/server/zeroshard-server"
WORKER="$R/worker/train/zeroshard-worker"
CTL="$R/ctl/zeroshard-ctl"
LAUNCHER="$R/launcher/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status in $?
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

for b in "$SERVER" "$WORKER" "$CTL" "$LAUNCHER"; do
  name=$(basename "$b")
  out=$("$b" --help 2>&1); rc=$?
  [ $rc -eq 0 ] && grep -q "Usage" <<<"$out"; check "$name --help exits 0 with usage" $?
  out=$("$b" --no_such_flag=1 2>&1); rc=$?
  if [ "$name" = zeroshard ]; then out=$("$b" train --no_such_flag=1 2>&1); rc=$?; fi
  [ $rc -eq 2 ] && grep -q "no_such_flag" <<<"$out"; check "$name bad flag exits 2 naming it (got $rc: $out)" $?
done
out=$("$SERVER" --num_shards=2 --shard_index=5 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "shard_index 5 must be below --num_shards 2" <<<"$out"; check "server rejects shard_index >= num_shards" $?
out=$("$SERVER" --port=abc 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "'abc' is not an integer" <<<"$out"; check "server rejects a non-integer port" $?
out=$("$CTL" frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "unknown command 'frobnicate'" <<<"$out"; check "ctl rejects an unknown command" $?
out=$("$CTL" plan 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "plan needs --servers or --spec" <<<"$out"; check "ctl plan alone names both sources ($out)" $?
out=$("$CTL" health --servers=127.0.0.1:101077 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'port "101077" is not a number in 1..65535' <<<"$out"
check "ctl refuses a port above 65535 instead of wrapping it (rc $rc: $out)" $?
# import checks its file before any server (none listens on port 1).
out=$("$CTL" import --servers=127.0.0.1:1 --model="$T/missing.bin" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^zeroshard-ctl: --model: open $T/missing.bin: No such file" <<<"$out" && ! grep -q "127.0.0.1:1" <<<"$out"
check "ctl import checks --model before the servers (rc $rc: $out)" $?
# --checkpoint_dir is created, or refused at start naming the flag.
out=$("$SERVER" --insecure --port=0 --checkpoint_dir=/proc/zeroshard-ckpt 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^zeroshard-server: --checkpoint_dir /proc/zeroshard-ckpt: cannot create" <<<"$out"
check "server refuses a --checkpoint_dir it cannot create (rc $rc: $out)" $?
out=$("$SERVER" --insecure --port=0 --checkpoint_dir=/proc 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^zeroshard-server: --checkpoint_dir /proc: cannot create a file in it" <<<"$out"
check "server refuses a --checkpoint_dir it cannot write (rc $rc: $out)" $?

# Server lifecycle: start, health, SIGTERM, clean exit.
out=$("$SERVER" --port=0 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "give --tls_cert and --tls_key (TLS), or --insecure" <<<"$out"; check "server refuses plaintext without --insecure" $?
"$SERVER" --port=0 --port_file="$T/port" --insecure --checkpoint_dir="$T/new/ckpt" >"$T/server.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -s "$T/port" ] && break; sleep 0.05; done
port=$(cat "$T/port" 2>/dev/null)
[ -n "$port" ]; check "server wrote its port" $?
[ -d "$T/new/ckpt" ]; check "server created its --checkpoint_dir" $?
out=$("$CTL" health --servers="127.0.0.1:$port" 2>&1)
grep -q SERVING <<<"$out"; check "ctl health reports SERVING ($out)" $?
out=$("$CTL" stats --servers="127.0.0.1:$port" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "shard" <<<"$out"; check "ctl stats answers" $?
# A server with no model registered: say so, and what registers one.
for cmd in plan "gather --tensor=wte --out=$T/g.bin" checkpoint; do
  out=$("$CTL" $cmd --servers="127.0.0.1:$port" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "no model is registered on the servers (127.0.0.1:$port): a job's workers register one" <<<"$out"
  check "ctl ${cmd%% *} without a model says none is registered (rc $rc: $out)" $?
done
kill -TERM $pid
wait $pid; rc=$?
[ $rc -eq 0 ] && grep -q "stopped" "$T/server.log"; check "server exits 0 on SIGTERM (rc $rc)" $?

# ctl against an address nobody serves fails cleanly (exit 1).
out=$("$CTL" health --servers=127.0.0.1:1 2>&1); rc=$?
[ $rc -eq 1 ]; check "ctl health on a dead address exits 1" $?

echo "$fails failed"
[ $fails -eq 0 ]
