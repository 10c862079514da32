#!/usr/bin/env bash
# zero_hosts_bench end to end, small: one round of four variants on the 10g
# profile, 3 steps each, and stage 2 with the delayed update from step 2.
# Checks that the benchmark runs on the hosts, that every run had DDP's
# losses (the delayed one in its first two steps), and that its RESULT line
# (last) carries the keys docs/benchmarks.md reads, with numbers where
# variants ran and nan where they did not; and that a bad --profiles is
# refused by name. Timings are not checked. Prints "SKIP: <reason>" and
# passes where namespaces cannot be made.
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then R="$TEST_SRCDIR/zeroshard"; else R="$(cd "$(dirname "$0")/../.." && pwd)"; fi
BENCH="$R/tests/hosts/zero_hosts_bench"
export TMPDIR="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

out=$("$BENCH" --profiles=5g 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "no profile '5g'" <<<"$out"; check "bad --profiles: exit 2 ($out)" $?

out=$("$BENCH" --profiles=10g --rounds=1 --steps=3 \
  --only=ddp,ddp_no_overlap,zero2,zero3,zero2_delayed 2>&1); rc=$?
if grep -q '^SKIP:' <<<"$out"; then
  echo "$(grep -m1 '^SKIP:' <<<"$out") (zero_hosts_bench_test skipped)"
  exit 0
fi
[ $rc -eq 0 ]; check "the benchmark exits 0 (exit $rc)" $?
last=$(tail -1 <<<"$out")
val() { tr ' ' '\n' <<<"$last" | sed -n "s/^$1=//p"; }
number() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
[[ "$last" == RESULT* ]]; check "the last line is RESULT ($last)" $?
[ "$(val correct)" = 1 ]; check "every run had DDP's losses" $?
for k in zero2_vs_ddp_hosts zero3_vs_ddp_hosts zero2_vs_ddp_hosts_hi \
  zero3_vs_ddp_hosts_hi overlap_vs_no_overlap_worst zero2_delayed_vs_ddp_hosts; do
  number "$(val $k)"; check "$k is a number ($(val $k))" $?
done
[[ "$(val overlap_slower_stages)" =~ ^[012]$ ]]
check "overlap_slower_stages counts the one stage run both ways, at two bucket sizes ($(val overlap_slower_stages))" $?
grep -q "overlap_ddp_b500000000 .*\[" <<<"$out"; check "overlap on / off at each bucket size" $?
grep -Eq "fastest zero2 +zero2_b" <<<"$out"; check "each stage's fastest setting is named" $?
for k in zero3_offload_vs_ddp_hosts zero2_vs_ddp_hosts_1g; do
  [ "$(val $k)" = nan ]; check "$k is nan: not run ($(val $k))" $?
done
grep -q "overlap_ddp .*\[" <<<"$out"; check "the ratios are printed with their intervals" $?
grep -Eq "^zero2_delayed_b131072 .* 1 of 1$" <<<"$out" &&
  grep -Eq "^zero2_delayed_b500000000 .* 1 of 1$" <<<"$out"
check "the delayed variant ran, its first steps with DDP's losses" $?

if [ $fails -ne 0 ]; then
  echo "$out" | tail -40
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
