#!/usr/bin/env bash
# A second zeroshard-server started on a busy port (the gRPC port, the
# health port or the metrics port) is refused with a line naming the
# address, and writes no --port_file; the first keeps its port alone.
# gRPC's default SO_REUSEPORT used to let the second listen beside the
# first, and the kernel then split new connections between the two.
set -uo pipefail
R="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-zeroshard}"
SERVER="$R/server/zeroshard-server"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

"$SERVER" --insecure --host=127.0.0.1 --port=0 --port_file="$T/first.port" \
  --health_port=0 --metrics_port=0 >"$T/first.log" 2>&1 &
first=$!
trap 'kill -9 $first 2>/dev/null' EXIT
for _ in $(seq 600); do
  grep -q "listening on" "$T/first.log" && break
  kill -0 $first 2>/dev/null || break
  sleep 0.05
done
port=$(cat "$T/first.port" 2>/dev/null)
health=$(sed -n 's/.*health on 127.0.0.1:\([0-9]*\)$/\1/p' "$T/first.log")
metrics=$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$T/first.log")
[ -n "$port" ] && [ -n "$health" ] && [ -n "$metrics" ]
check "the first server listens on $port (health $health, metrics $metrics)" $?
[ -n "$port" ] && [ -n "$health" ] && [ -n "$metrics" ] || { cat "$T/first.log"; exit 1; }

# second NAME WHAT-THE-ERROR-NAMES FLAGS...: a server that must not start.
second() {
  local name=$1 names=$2
  shift 2
  rm -f "$T/$name.port"
  # One that starts would serve forever: 30 s at most.
  timeout -s KILL 30 "$SERVER" --insecure --host=127.0.0.1 \
    --port_file="$T/$name.port" "$@" >"$T/$name.out" 2>"$T/$name.err"
  local rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 137 ] && grep -q -- "$names" "$T/$name.err" &&
    [ ! -e "$T/$name.port" ]
  local refused=$?
  check "a second server on the busy $name port exits $rc: $(tail -1 "$T/$name.err")" $refused
}
second grpc "cannot listen on 127.0.0.1:$port" --port="$port"
second health "health checks on 127.0.0.1:$health" --port=0 --health_port="$health"
second metrics "127.0.0.1:$metrics" --port=0 --metrics_port="$metrics"

kill -0 $first 2>/dev/null; check "the first server still runs" $?
printf 'GET /metrics HTTP/1.0\r\n\r\n' >/dev/tcp/127.0.0.1/"$metrics" 2>/dev/null
check "its metrics port still answers" $?

echo "$fails failed"
[ $fails -eq 0 ]
