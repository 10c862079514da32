#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc): the source revision that
# `--version` prints (common/version.h), as a STABLE key so that only the
# stamped version library and the binaries' links redo when it changes.
#   STABLE_ZEROSHARD_REVISION <commit>[+dirty]
# Prints nothing outside a git checkout (or without git): the binaries
# then say "unknown". Offline; never fails the build.
cd "$(dirname "$0")/.." 2>/dev/null || exit 0
commit=$(git rev-parse HEAD 2>/dev/null) || exit 0
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit+dirty"
fi
echo "STABLE_ZEROSHARD_REVISION $commit"
