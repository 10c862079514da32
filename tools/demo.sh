#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job
# on this machine (today: `zeroshard smoke`, shard servers and workers on
# loopback). Extra arguments go to the launcher.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
bazel build --noshow_progress //launcher:zeroshard //server:zeroshard-server //worker:zeroshard-worker
exec bazel-bin/launcher/zeroshard smoke "$@"
