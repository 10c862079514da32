#!/usr/bin/env bash
# Bad use of the C API (capi/bad_use.c, compiled as C99 by the system cc
# against the library installed by tools/install.sh): NULL, closed,
# invented and foreign handles, wrong lengths, ranges outside the model,
# calls out of order, a step before any push, an unreachable server and a
# server SIGKILLed under a live client each return the expected code and a
# message naming the problem, and change nothing. The same program runs
# under AddressSanitizer by hand (docs/c_api.md, "Checked under
# AddressSanitizer").
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
"$R/tools/install.sh" --prefix "$T/prefix" --library "$R/client/libzeroshard.so" >/dev/null || exit 1
export PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
cc -std=c99 -Wall -Wextra -pedantic -Werror "$R/tests/capi/bad_use.c" \
  $(pkg-config --cflags --libs zeroshard) -o "$T/bad_use" || { echo "FAIL bad_use.c does not compile"; exit 1; }

"$R/server/zeroshard-server" --insecure --host=127.0.0.1 --port=0 --port_file="$T/port" \
  --shard_index=0 --num_shards=1 >"$T/server.log" 2>&1 &
server=$!
for _ in $(seq 400); do [ -s "$T/port" ] && break; sleep 0.05; done
[ -s "$T/port" ] || { echo "FAIL the server did not start"; cat "$T/server.log"; exit 1; }
# bad_use SIGKILLs the server itself near the end (a server gone under a
# live client and trainer).
timeout 300 "$T/bad_use" "127.0.0.1:$(cat "$T/port")" "$server"
rc=$?
{ kill -9 "$server"; wait "$server"; } 2>/dev/null
[ $rc -eq 0 ] || echo "FAIL bad_use exited $rc"
exit $rc
