#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and trains a small
# GPT-2 (L=2, C=128, byte-level, T=64) with ZeRO-3 over 2 shard servers and
# 2 workers on text every Debian machine has (/usr/share/common-licenses;
# its last 10% held out for the eval loss), then prints the report. Everything goes to $DEMO_DIR (default
# /tmp/zeroshard-demo). Extra arguments go to `zeroshard train` (e.g.
# --steps=200).
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR="${DEMO_DIR:-/tmp/zeroshard-demo}"
tools/bootstrap.sh
bazel build --noshow_progress //launcher:zeroshard //worker/io:zeroshard-tokenize
mkdir -p "$DEMO_DIR"
cat /usr/share/common-licenses/* >"$DEMO_DIR/licenses.txt"
bazel-bin/worker/io/zeroshard-tokenize --input="$DEMO_DIR/licenses.txt" \
  --output="$DEMO_DIR/licenses.bin" --val_fraction=0.1 \
  --val_output="$DEMO_DIR/licenses.val.bin"
exec bazel-bin/launcher/zeroshard train \
  --config=launcher/demo/ds_config.json --data="$DEMO_DIR/licenses.bin" \
  --val-data="$DEMO_DIR/licenses.val.bin" \
  --servers=2 --workers=2 --layers=2 --heads=4 --channels=128 --seq-len=64 \
  --steps=1000 --save="$DEMO_DIR/final.bin" --work-dir="$DEMO_DIR/run" "$@"
