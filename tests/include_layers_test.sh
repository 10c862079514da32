#!/usr/bin/env bash
# The include-direction check (tools/include_layers.py): the tree passes,
# and a planted tree with upward includes fails naming each of them while
# its allowed includes pass.
set -uo pipefail
marker="${TEST_SRCDIR:+$TEST_SRCDIR/zeroshard/}README.md"
[ -e "$marker" ] || marker="$(dirname "$0")/../README.md"
root=$(dirname "$(readlink -f "$marker")")
check="$root/tools/include_layers.py"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }

out=$(python3 "$check" --root="$root" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "the tree has no upward include ($out)"; else bad "the tree: $out"; fi

# A planted tree: each upward include must be named, the rest must pass.
P="$T/planted"
rm -rf "$P"
plant() { mkdir -p "$P/$(dirname "$1")"; printf '#include "%s"\n' "$2" >"$P/$1"; }
plant server/store/up.cc client/shard_client.h        # server -> client
plant server/up2.h worker/engine/engine.h             # server -> worker
plant common/up.h server/store/shard_store.h          # common -> server
plant worker/engine/up.cc server/store/shard_store.h  # worker -> server
plant client/up.cc worker/gpt2/model.h                # client -> worker
plant worker/engine/prod.cc fleet/local_fleet.h       # fleet: tests only
plant worker/engine/fine_test.cc fleet/local_fleet.h  # allowed
plant worker/train/fine.cc client/shard_client.h      # allowed
plant ctl/fine.cc worker/io/model_file.h              # allowed
plant tests/fine.cc server/store/shard_store.h        # allowed
plant common/fine.cc absl/status/status.h             # third party
out=$(python3 "$check" --root="$P" 2>&1); rc=$?
[ $rc -eq 1 ] && ok "the planted tree fails (exit 1)" || bad "the planted tree exits $rc: $out"
for f in server/store/up.cc server/up2.h common/up.h worker/engine/up.cc client/up.cc worker/engine/prod.cc; do
  grep -q "^$f:1: " <<<"$out" && ok "names $f" || bad "does not name $f: $out"
done
n=$(grep -c ': layer ' <<<"$out")
[ "$n" -eq 6 ] && ok "only the 6 upward includes" || bad "$n violations reported: $out"

echo "$fails failed"
[ $fails -eq 0 ]
