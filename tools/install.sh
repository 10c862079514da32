#!/usr/bin/env bash
# Installs zeroshard's C API under a prefix:
#
#   DIR/include/zeroshard.h
#   DIR/lib/libzeroshard.so
#   DIR/lib/pkgconfig/zeroshard.pc      (the prefix written into it)
#
# Usage: tools/install.sh --prefix DIR [--library FILE]
#        tools/install.sh --python DIR [--library FILE]
#
# Without --library it builds //client:libzeroshard.so with Bazel first;
# --library takes a library already built (tests pass Bazel's output from
# their runfiles). Then a program builds with
#   PKG_CONFIG_PATH=DIR/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs zeroshard)
# (the .pc adds an rpath to DIR/lib, so the program runs without
# LD_LIBRARY_PATH). Running the library needs Debian's runtime packages of
# gRPC, protobuf and Abseil: docs/c_api.md, "What the machine needs".
# --python DIR (a copy of python/, or python/ itself) copies the library
# to DIR/zeroshard/libzeroshard.so, so that `pip install DIR` installs it
# with the Python package (docs/python.md); both options may be given.
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
fail() { echo "install.sh: $*" >&2; exit 2; }

prefix="" library="" python=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || fail "--prefix needs a directory"; prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#*=}"; shift ;;
    --python) [ $# -ge 2 ] || fail "--python needs a directory"; python="$2"; shift 2 ;;
    --python=*) python="${1#*=}"; shift ;;
    --library) [ $# -ge 2 ] || fail "--library needs a file"; library="$2"; shift 2 ;;
    --library=*) library="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) fail "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$prefix" ] || [ -n "$python" ] || fail "give --prefix DIR or --python DIR (see --help)"
if [ -n "$python" ] && ! { [ -f "$python/pyproject.toml" ] && [ -d "$python/zeroshard" ]; }; then
  fail "--python '$python' is not the Python package's tree (pyproject.toml, zeroshard/)"
fi
case "$prefix" in *[[:space:]]*) fail "--prefix '$prefix' has whitespace (pkg-config cannot quote it)" ;; esac

# The repository root, or a test's runfiles root: client/ lies beside tools/.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$library" ]; then
  command -v bazel >/dev/null || fail "bazel not found: install it or pass --library FILE"
  echo "install.sh: building //client:libzeroshard.so"
  (cd "$root" && bazel build //client:libzeroshard.so)
  library="$root/bazel-bin/client/libzeroshard.so"
fi
[ -f "$library" ] || fail "--library '$library' is not a file"

if [ -n "$python" ]; then
  install -m 0755 "$library" "$python/zeroshard/libzeroshard.so"
  echo "copied libzeroshard.so to $python/zeroshard/; install the package with:"
  echo "  pip install --no-build-isolation --no-index $python"
  [ -n "$prefix" ] || exit 0
fi

header="$root/client/zeroshard.h"
template="$root/client/zeroshard.pc.in"
[ -f "$header" ] || fail "missing $header"
[ -f "$template" ] || fail "missing $template"

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
prefix=$(cd "$prefix" && pwd)
version=$(sed -n 's/^#define ZS_VERSION "\(.*\)".*$/\1/p' "$header")
api=$(sed -n 's/^#define ZS_API_VERSION \([0-9]*\).*$/\1/p' "$header")
[ -n "$version" ] && [ -n "$api" ] || fail "no ZS_VERSION/ZS_API_VERSION in $header"
install -m 0644 "$header" "$prefix/include/zeroshard.h"
install -m 0755 "$library" "$prefix/lib/libzeroshard.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$template" \
  >"$prefix/lib/pkgconfig/zeroshard.pc"
echo "installed zeroshard $version (C API version $api):"
echo "  $prefix/include/zeroshard.h"
echo "  $prefix/lib/libzeroshard.so"
echo "  $prefix/lib/pkgconfig/zeroshard.pc"
echo "build a program with: PKG_CONFIG_PATH=$prefix/lib/pkgconfig cc prog.c \$(pkg-config --cflags --libs zeroshard)"
