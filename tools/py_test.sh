#!/usr/bin/env bash
# The runner of zs_py_test (tools/defs.bzl): runs a Python test file with
# Debian's /usr/bin/python3 against this workspace's build.
#   PYTHONPATH        <runfiles>/python (the zeroshard package's sources)
#   ZEROSHARD_LIB     <runfiles>/client/libzeroshard.so
#   ZEROSHARD_SERVER  <runfiles>/server/zeroshard-server
#   TMPDIR            $TEST_TMPDIR
# Usage: py_test.sh TEST.py [ARGS...] (TEST.py relative to the runfiles root).
set -euo pipefail
# Under `bazel test` TEST_SRCDIR names the runfiles; under `bazel run` (the
# benchmarks) RUNFILES_DIR or <this script>.runfiles does.
R="${TEST_SRCDIR:-${RUNFILES_DIR:-$0.runfiles}}/zeroshard"
[ $# -ge 1 ] || { echo "py_test.sh: give the test file" >&2; exit 2; }
main="$1"
shift
export PYTHONPATH="$R/python${PYTHONPATH:+:$PYTHONPATH}"
export ZEROSHARD_LIB="$R/client/libzeroshard.so"
export ZEROSHARD_SERVER="$R/server/zeroshard-server"
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
cd "$R"
exec /usr/bin/python3 "$R/$main" "$@"
