#!/usr/bin/env bash
# --version on every binary: exit 0, one line "<program> 0.1.0 (revision
# R)", the same R everywhere, R a git commit (+dirty) or "unknown"
# (common/version.h).
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
fails=0
revs=()
for bin in launcher/zeroshard server/zeroshard-server worker/train/zeroshard-worker \
  ctl/zeroshard-ctl worker/io/zeroshard-tokenize; do
  prog=$(basename "$bin")
  out=$("$R/$bin" --version 2>&1); rc=$?
  if [ $rc -eq 0 ] && [[ "$out" =~ ^$prog\ 0\.1\.0\ \(revision\ ([0-9a-f]{40}(\+dirty)?|unknown)\)$ ]]; then
    echo "ok   $prog --version: $out"
    revs+=("${BASH_REMATCH[1]}")
  else
    echo "FAIL $prog --version (rc $rc): $out"; fails=$((fails + 1))
  fi
done
if [ "$(printf '%s\n' "${revs[@]}" | sort -u | wc -l)" -eq 1 ]; then
  echo "ok   one revision: ${revs[0]}"
else
  echo "FAIL revisions differ: ${revs[*]}"; fails=$((fails + 1))
fi
echo "$fails failed"
[ $fails -eq 0 ]
