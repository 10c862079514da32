#!/usr/bin/env bash
# libzeroshard.so exports the C API and nothing else: every defined dynamic
# symbol starts with zs_, every function client/zeroshard.h declares is
# among them (the configuration functions named) and every exported one is
# declared there; the header compiles on its own as C99 (-pedantic) and as
# C++.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
LIB="$R/client/libzeroshard.so"
HEADER="$R/client/zeroshard.h"
fails=0
check() {  # description, then the condition's exit status in $?
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

nm -D --defined-only "$LIB" | awk '{print $NF}' | sort >"$T/exported"
[ -s "$T/exported" ]; check "nm -D --defined-only lists $(wc -l <"$T/exported") symbols" $?
grep -v '^zs_' "$T/exported" >"$T/foreign"
[ ! -s "$T/foreign" ]; check "every exported symbol starts with zs_ (others: $(tr '\n' ' ' <"$T/foreign"))" $?
# Functions the header declares: "type zs_name(" at a declaration's start
# (the callback typedefs are "(*zs_..._fn)" and do not match).
sed -n 's/^[a-z].*[ *]\(zs_[a-z0-9_]*\)(.*/\1/p' "$HEADER" | sort -u >"$T/declared"
[ "$(wc -l <"$T/declared")" -ge 30 ]; check "the header declares $(wc -l <"$T/declared") functions" $?
diff "$T/declared" "$T/exported" >"$T/diff"
check "declared and exported functions are the same ($(tr '\n' ' ' <"$T/diff"))" $?

# The configuration functions (worker/config/config_api.cc, linked in from
# outside client/capi) are among them.
for f in zs_config_parse zs_config_parse_file zs_config_describe zs_config_lr \
  zs_loss_scaler_init zs_loss_scaler_update; do
  grep -qx "$f" "$T/exported"; check "exports $f" $?
done

printf '#include "zeroshard.h"\nint main(void) { return zs_api_version() == ZS_API_VERSION ? 0 : 1; }\n' >"$T/c.c"
cc -std=c99 -pedantic -Wall -Wextra -Werror -I"$(dirname "$HEADER")" -c "$T/c.c" -o "$T/c.o"
check "the header compiles alone as C99 -pedantic" $?
cp "$T/c.c" "$T/cxx.cc"
c++ -std=c++11 -pedantic -Wall -Wextra -Werror -I"$(dirname "$HEADER")" -c "$T/cxx.cc" -o "$T/cxx.o"
check "the header compiles alone as C++11" $?
cc "$T/c.o" "$LIB" -Wl,-rpath,"$(dirname "$(readlink -f "$LIB")")" -o "$T/version" && "$T/version"
check "a program linked with the library sees the header's API version" $?

echo "$fails failed"
[ $fails -eq 0 ]
