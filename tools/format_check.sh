#!/usr/bin/env bash
# Fails if any C++/CUDA file of the workspace differs from clang-format's
# output (.clang-format, Google style). Run tools/format_check.sh --fix to
# reformat in place.
set -uo pipefail
# Under bazel test the data file is a symlink into the source tree.
marker="${TEST_SRCDIR:+$TEST_SRCDIR/zeroshard/}.clang-format"
[ -e "$marker" ] || marker="$(dirname "$0")/../.clang-format"
root=$(dirname "$(readlink -f "$marker")")
cd "$root" || exit 1
command -v clang-format >/dev/null || { echo "clang-format missing: install Debian package clang-format" >&2; exit 1; }
mapfile -t files < <(git ls-files -co --exclude-standard '*.cc' '*.h' '*.cu' 2>/dev/null || find . -name '*.cc' -o -name '*.h' -o -name '*.cu')
if [ "${1:-}" = "--fix" ]; then clang-format -i "${files[@]}"; exit 0; fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run tools/format_check.sh --fix)"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "format: ${#files[@]} files clean"
exit $bad
