#!/usr/bin/env bash
# Production binaries carry no test hooks: zeroshard-worker,
# zeroshard-server and zeroshard hold no "ZEROSHARD_TEST_" string (the
# failure points live in the testonly zeroshard-worker-for-tests, which
# must hold it: the check can fail).
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
grep -qaF ZEROSHARD_TEST_FAIL_AT "$R/worker/train/zeroshard-worker-for-tests"
check "zeroshard-worker-for-tests has the fail-at hook" $?
for b in worker/train/zeroshard-worker server/zeroshard-server launcher/zeroshard; do
  [ -x "$R/$b" ] && ! grep -qaF ZEROSHARD_TEST_ "$R/$b"
  check "$b: no ZEROSHARD_TEST_ string" $?
done
echo "$fails failed"
[ $fails -eq 0 ]
