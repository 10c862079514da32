#!/usr/bin/env bash
# tools/netlab.sh itself: hosts reach each other only by their addresses
# over the bridge, the byte counters count, a cut to one peer blocks only
# that peer and heals, carrier down/up, loss drops some but not all
# datagrams, CMD's exit status comes back, and nothing is left behind:
# not after a normal exit, not after SIGTERM, not after SIGKILL (the keepers
# die with their owner, `netlab.sh clean` removes what ran in the hosts).
# Prints "SKIP: <reason>" and passes where namespaces cannot be made.
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then R="$TEST_SRCDIR/zeroshard"; else R="$(cd "$(dirname "$0")/../.." && pwd)"; fi
NL="$R/tools/netlab.sh"
export TMPDIR="${TEST_TMPDIR:-$(mktemp -d)}"
T="$TMPDIR"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
why=$("$NL" check 2>&1); rc=$?
if [ $rc -eq 77 ]; then echo "$why (netlab_test skipped)"; exit 0; fi
[ $rc -eq 0 ]; check "netlab.sh check: $why" $?

ours_here() { ip -o link 2>/dev/null | grep -cE '^[0-9]+: (br0|p[0-9]+)[:@]'; }  # netlab's names
links_before=$(ours_here)

# Bad usage: exit 2 and one line naming the problem.
out=$("$NL" run --hosts "a a" -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "host 'a' named twice" <<<"$out"; check "duplicate host: exit 2 ($out)" $?
out=$("$NL" run --profile 5g --hosts a -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "unknown --profile '5g'" <<<"$out"; check "bad profile: exit 2 ($out)" $?
out=$("$NL" run --profile custom --rate 1.5gbit --hosts a -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "rate '1.5gbit'" <<<"$out"; check "bad rate: exit 2 ($out)" $?
out=$("$NL" exec a true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "NETLAB_DIR is not set" <<<"$out"; check "exec outside a lab: exit 2 ($out)" $?

# Inside a lab. The body runs in the caller's namespace with NETLAB_* set.
cat >"$T/body.sh" <<'EOF'
NL="$1"; T="$2"
serve() {  # host proto: count what arrives on port 7000 into $T/<host>.<proto>
  "$NL" exec "$1" python3 -c "
import socket, sys
host, proto, out = sys.argv[1], sys.argv[2], sys.argv[3]
if proto == 'tcp':
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 7000)); s.listen()
    while True:
        c, _ = s.accept()
        while c.recv(65536): pass
        c.close()
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((host, 7000)); n = 0
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22); s.settimeout(0.2)
    while True:
        try:
            s.recv(2048); n += 1
        except socket.timeout:
            open(out, 'w').write(str(n))
" "$2" "$3" "$T/$1.$3" &
}
reach() {  # from to: 0 if a TCP connection from host 'from' to 'to' works
  local ip="NETLAB_IP_$2"
  "$NL" exec "$1" python3 -c "
import socket, sys
s = socket.create_connection((sys.argv[1], 7000), timeout=1.5); s.sendall(b'x' * 100000)" "${!ip}" 2>/dev/null
}
serve srv0 "$NETLAB_IP_srv0" tcp; serve node1 "$NETLAB_IP_node1" tcp
serve node1 "$NETLAB_IP_node1" udp
for _ in $(seq 100); do reach node0 srv0 && reach node0 node1 && break; sleep 0.1; done
reach node0 srv0; echo "reach node0 srv0 $?"
echo "bytes node0 srv0 $("$NL" bytes node0 srv0)"
"$NL" link node0 cut srv0
reach node0 srv0; echo "cut node0 srv0 $?"
reach node0 node1; echo "cut-other node0 node1 $?"
echo "cut-dropped $("$NL" dropped node0 cut)"
"$NL" link node0 heal
reach node0 srv0; echo "healed node0 srv0 $?"
"$NL" link node0 down
reach node0 node1; echo "down node0 node1 $?"
"$NL" link node0 up
for _ in $(seq 50); do reach node0 node1 && break; sleep 0.1; done
reach node0 node1; echo "up node0 node1 $?"
"$NL" link node0 loss 5
"$NL" exec node0 python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(2000): s.sendto(b'y' * 100, (sys.argv[1], 7000))" "$NETLAB_IP_node1"
prev=x
for _ in $(seq 50); do  # until the count stops moving
  sleep 0.3; now=$(cat "$T/node1.udp" 2>/dev/null)
  [ -n "$now" ] && [ "$now" = "$prev" ] && break; prev=$now
done
echo "udp-received $now"
echo "udp-dropped $("$NL" dropped node0 loss)"
"$NL" link node0 loss 0
"$NL" link nobody down 2>/dev/null; echo "unknown-host $?"
rate() { "$NL" exec "$1" tc qdisc show dev "$2" | grep -o 'rate [0-9A-Za-z]*' | tr ' ' =; }
echo "rate-1g $(rate node0 eth0) $(rate bridge p2)"
"$NL" link node0 rate 200mbit
echo "rate-200m $(rate node0 eth0) $(rate bridge p2)"
echo "dir $NETLAB_DIR"
exit 7
EOF
out=$("$NL" run --profile 1g --hosts "srv0 node0 node1" -- bash "$T/body.sh" "$NL" "$T" 2>&1); rc=$?
echo "$out" | sed 's/^/    | /'
field() { grep "^$1 " <<<"$out" | awk '{print $NF}'; }
[ $rc -eq 7 ]; check "CMD's exit status comes back (rc $rc)" $?
[ "$(field "reach node0")" = 0 ]; check "node0 reaches srv0 by its address" $?
[ "$(field "bytes node0")" -ge 100000 ]; check "byte counter node0 -> srv0: $(field "bytes node0") >= 100000" $?
[ "$(field "cut node0")" != 0 ]; check "cut node0 from srv0 blocks it" $?
[ "$(field "cut-other node0")" = 0 ]; check "... but not node1" $?
[ "$(field cut-dropped)" -gt 0 ]; check "the cut rules count $(field cut-dropped) dropped packets" $?
[ "$(field "healed node0")" = 0 ]; check "heal restores srv0" $?
[ "$(field "down node0")" != 0 ]; check "carrier down blocks node0" $?
[ "$(field "up node0")" = 0 ]; check "carrier up restores it" $?
got=$(field udp-received)
[ -n "$got" ] && [ "$got" -gt 0 ] && [ "$got" -lt 2000 ]; check "5 % loss: $got of 2000 datagrams arrived" $?
[ "$(field udp-dropped)" -ge $((2000 - got)) ]; check "the loss rules count $(field udp-dropped) dropped packets" $?
[ "$(field unknown-host)" = 2 ]; check "unknown host: exit 2" $?
[ "$(grep '^rate-1g ' <<<"$out")" = "rate-1g rate=1Gbit rate=1Gbit" ]
check "profile 1g: tbf at 1 Gbit/s on node0's eth0 and its bridge port" $?
[ "$(grep '^rate-200m ' <<<"$out")" = "rate-200m rate=200Mbit rate=200Mbit" ]
check "link node0 rate 200mbit: both ends changed" $?
dir=$(field dir)
[ -n "$dir" ] && [ ! -e "$dir" ]; check "lab directory removed" $?
left() { pgrep -f "zsnetlab-$1" | wc -l; }
prefix=${dir##*netlab-}
[ "$(left "$prefix")" -eq 0 ]; check "no keeper left" $?
[ "$(pgrep -f "$T/node1.udp" | wc -l)" -eq 0 ]; check "no process left in the hosts" $?
[ "$(ours_here)" -eq "$links_before" ]; check "no interface added to the caller's namespace" $?

# SIGTERM: exit 143 and nothing left. SIGKILL: the keepers leave by
# themselves; clean removes the process that ran in a host.
inside() {  # processes of lab $1 inside its hosts
  local q n=0 mine; mine=$(readlink /proc/self/ns/net)
  for q in $(pgrep -fx "sleep 300"); do
    tr '\0' '\n' 2>/dev/null <"/proc/$q/environ" | grep -q "^NETLAB_PREFIX=$1$" &&
      [ "$(readlink "/proc/$q/ns/net" 2>/dev/null)" != "$mine" ] && n=$((n + 1))
  done
  echo $n
}
for sig in TERM KILL; do
  "$NL" run --profile none --hosts "a b" -- bash -c \
    "echo \$NETLAB_PREFIX \$\$ >$T/prefix.$sig; \"$NL\" exec a sleep 300 & wait" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -s "$T/prefix.$sig" ] && break; sleep 0.1; done
  read -r prefix cmdpid <"$T/prefix.$sig"
  for _ in $(seq 100); do [ "$(inside "$prefix")" -eq 1 ] && break; sleep 0.1; done
  [ "$(left "$prefix")" -eq 3 ] && [ "$(inside "$prefix")" -eq 1 ]
  check "SIG$sig case: 3 keepers, a process in host a" $?
  kill -"$sig" "$pid"; wait "$pid" 2>/dev/null; rc=$?
  [ "$sig" = KILL ] || { [ $rc -eq 143 ]; check "SIGTERM: exit 143 (rc $rc)" $?; }
  for _ in $(seq 50); do [ "$(left "$prefix")" -eq 0 ] && break; sleep 0.1; done
  [ "$(left "$prefix")" -eq 0 ]; check "SIG$sig: keepers gone" $?
  if [ "$sig" = KILL ]; then
    kill -KILL "$cmdpid" 2>/dev/null  # CMD itself outlives a SIGKILLed run
    "$NL" clean
  else
    for _ in $(seq 50); do kill -0 "$cmdpid" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$cmdpid" 2>/dev/null; check "SIGTERM reaches CMD" $?
  fi
  [ "$(inside "$prefix")" -eq 0 ]; check "SIG$sig: no process left in the hosts" $?
  [ ! -e "$TMPDIR/netlab-$prefix" ]; check "SIG$sig: lab directory removed" $?
done

echo "$fails failed"
[ $fails -eq 0 ]
