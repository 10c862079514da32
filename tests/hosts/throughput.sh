#!/usr/bin/env bash
# Inside `tools/netlab.sh run --hosts "a b" -- tests/hosts/throughput.sh [MB]`:
# one TCP stream of MB megabytes (default 500) from host a to host b; prints
# "throughput a->b: X MB/s (Y Gbit/s)". A measurement for docs/netlab.md, not a test.
set -euo pipefail
: "${NETLAB_IP_a:?run me inside netlab.sh run --hosts \"a b\"}" "${NETLAB_IP_b:?}"
NL="$(dirname "$0")/../../tools/netlab.sh"
MB="${1:-500}"
"$NL" exec b /usr/bin/python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$NETLAB_IP_b', 7300)); s.listen(); c, _ = s.accept()
while c.recv(1 << 20): pass
" &
sleep 0.3
"$NL" exec a /usr/bin/python3 -c "
import socket, time
for _ in range(50):
    try: s = socket.create_connection(('$NETLAB_IP_b', 7300)); break
    except OSError: time.sleep(0.1)
buf = b'x' * (1 << 20); t = time.monotonic()
for _ in range($MB): s.sendall(buf)
s.shutdown(socket.SHUT_WR); s.recv(1); dt = time.monotonic() - t
print(f'throughput a->b: {$MB * 1.048576 / dt:.0f} MB/s ({$MB * 8.388608e-3 / dt:.2f} Gbit/s), profile $NETLAB_PROFILE')
"
wait
