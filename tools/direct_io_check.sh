#!/usr/bin/env bash
# Fails if a non-test C++ file outside common/env does file I/O itself:
# calls open(, fopen(, rename( or uses std::ifstream, std::ofstream or
# std::fstream, instead of going through the Env (common/env/env.h:
# ReadSmallFile, WriteFileAtomic, ReadOnlyFile, AtomicFileWriter,
# AppendableFile, Env::LockFile, ...). Comments are ignored.
#
# Test code may do as it likes: files under tests/, and *_test.cc,
# *_test_util.*, *testing.*, *_bench.cc, *_fuzzer.cc anywhere.
#
# Run by //tests:direct_io_test; by hand: tools/direct_io_check.sh
set -uo pipefail
# Under bazel test the data file is a symlink into the source tree.
marker="${TEST_SRCDIR:+$TEST_SRCDIR/zeroshard/}README.md"
[ -e "$marker" ] || marker="$(dirname "$0")/../README.md"
root=$(dirname "$(readlink -f "$marker")")
cd "$root" || exit 1

# The only files allowed to call the OS directly, each with its reason.
# An entry that no longer needs to be here fails the check: remove it.
allowed=(
  # A child's log file: a raw descriptor to dup2 onto its stdout/stderr
  # before exec, which an Env's File does not hand out.
  common/subprocess.cc
  # A client's shared-memory segment: /proc/<pid>/fd/<fd> opened to mmap
  # it (with its seals checked on the descriptor), not a file to read.
  server/shared_memory.cc
)

pattern='(^|[^A-Za-z0-9_])(open|fopen|rename)[[:space:]]*\(|std::(i|o)?fstream([^A-Za-z0-9_]|$)'

is_test() {
  case "$1" in
    tests/* | *_test.cc | *_test_util.cc | *_test_util.h | *testing.cc | \
      *testing.h | *_bench.cc | *_fuzzer.cc) return 0 ;;
  esac
  return 1
}

is_allowed() {
  local a
  for a in "${allowed[@]}"; do [ "$a" = "$1" ] && return 0; done
  return 1
}

# The lines of $1 that do direct I/O, as "file:line: code" (comments cut).
violations() {
  sed -e 's://.*$::' "$1" | grep -nE "$pattern" | sed -e "s|^|$1:|"
}

mapfile -t files < <(git ls-files -co --exclude-standard '*.cc' '*.h' \
  2>/dev/null || find . -name '*.cc' -o -name '*.h' | sed 's|^\./||')
bad=0
checked=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in common/env/*) continue ;; esac
  is_test "$f" && continue
  checked=$((checked + 1))
  found=$(violations "$f")
  if is_allowed "$f"; then
    [ -n "$found" ] && continue
    echo "stale allow-list entry: $f no longer does direct I/O;" \
      "remove it from tools/direct_io_check.sh"
    bad=1
  elif [ -n "$found" ]; then
    echo "direct file I/O outside common/env (use Env," \
      "common/env/env.h and files.h):"
    echo "$found" | sed 's/^/  /'
    bad=1
  fi
done
for a in "${allowed[@]}"; do
  [ -f "$a" ] || { echo "allow-list entry $a: no such file"; bad=1; }
done
[ $bad -eq 0 ] && echo "direct I/O: $checked non-test files clean" \
  "(${#allowed[@]} allowed: ${allowed[*]})"
exit $bad
