#!/usr/bin/env bash
# The Python package as a user installs it (docs/python.md, "Install"):
# a copy of python/ gets libzeroshard.so from tools/install.sh --python,
# then, offline, into a venv with the system's site packages:
#   pip install --no-build-isolation --no-index ./python
# The installed zeroshard.fleet imports from outside the source tree, the
# package carries the library, and the library loads.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH ZEROSHARD_LIB
fails=0
check() {  # description, then the condition's exit status in $?
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# A writable copy of python/ (the runfiles hold links to the sources).
mkdir -p "$T/src" "$T/elsewhere"
cp -rL "$R/python" "$T/src/python" && chmod -R u+w "$T/src/python"
check "copied python/ ($(cd "$T/src/python" && find . -type f | sort | tr '\n' ' '))" $?
"$R/tools/install.sh" --python "$T/src/python" --library "$R/client/libzeroshard.so"
check "install.sh --python copies libzeroshard.so into the tree" $?
[ -f "$T/src/python/zeroshard/libzeroshard.so" ]; check "the tree has zeroshard/libzeroshard.so" $?

/usr/bin/python3 -m venv --system-site-packages "$T/venv"; check "venv with the system's site packages" $?
(cd "$T/src" && "$T/venv/bin/pip" install --no-build-isolation --no-index ./python)
check "pip install --no-build-isolation --no-index ./python (offline)" $?

py="$T/venv/bin/python"
cd "$T/elsewhere" || exit 1
out=$("$py" -c 'import zeroshard.fleet as f; print(f.__file__)' 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] && [[ "$out" == "$T/venv/"*"/site-packages/zeroshard/fleet.py" ]]
check "import zeroshard.fleet from outside the source tree: the installed copy" $?
"$py" -c 'from zeroshard.fleet import LocalFleet' 2>&1; check "LocalFleet imports" $?

files=$("$T/venv/bin/pip" show -f zeroshard 2>&1); rc=$?
echo "$files"
[ $rc -eq 0 ] && grep -q "^Version: 0.1.0$" <<<"$files"; check "pip knows zeroshard 0.1.0" $?
grep -q "^ *zeroshard/libzeroshard.so$" <<<"$files"; check "the installed package lists libzeroshard.so" $?
grep -q "^ *zeroshard/fleet.py$" <<<"$files"; check "the installed package lists fleet.py" $?

site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
lib="$site/zeroshard/libzeroshard.so"
cmp "$lib" "$R/client/libzeroshard.so"; check "the installed library is the built one" $?
version=$("$py" -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.zs_version.restype = ctypes.c_char_p
print(lib.zs_version().decode())' "$lib" 2>&1)
[ "$version" = "0.1.0" ]; check "the installed library loads (zs_version: $version)" $?

"$T/venv/bin/pip" uninstall -y zeroshard >/dev/null 2>&1 && [ ! -e "$lib" ]
check "pip uninstall removes it" $?

echo "$fails failed"
[ $fails -eq 0 ]
