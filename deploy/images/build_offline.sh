#!/usr/bin/env bash
# Builds the runtime images without a registry (nothing to pull): Bazel
# builds the binaries on this bookworm machine, collect_rootfs.sh gathers
# them with their shared libraries, and `podman build` packages each root
# file system FROM scratch (Containerfile.rootfs).
#
#   deploy/images/build_offline.sh [--cuda] [--save DIR] [--bin DIR]
#
# Images: localhost/zeroshard-server, localhost/zeroshard-worker and, with
# --cuda, localhost/zeroshard-worker-cuda (bazel --config=cuda; needs
# /usr/local/cuda). --save DIR also writes each as DIR/<name>.tar
# (podman save), e.g. to load on a machine without a registry. Prints
# each image's size. --bin DIR takes the binaries from DIR (laid out like
# bazel-bin) instead of building them (//tests:deploy_image_test). As root,
# each binary must also run `--help` inside its root file system (chroot):
# the library closure is complete. Needs podman (tools/bootstrap.sh --images
# installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda=0; save=""; prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) cuda=1 ;;
    --save) save=$2; shift ;;
    --bin) prebuilt=$2; shift ;;
    *) echo "usage: $0 [--cuda] [--save DIR] [--bin DIR]" >&2; exit 2 ;;
  esac
  shift
done
command -v podman >/dev/null || tools/bootstrap.sh --images || { echo "build_offline: podman could not be installed (tools/bootstrap.sh --images)" >&2; exit 1; }
SERVER_BINS=(server/zeroshard-server ctl/zeroshard-ctl)
WORKER_BINS=(worker/train/zeroshard-worker worker/io/zeroshard-tokenize ctl/zeroshard-ctl)
targets() { for b in "$@"; do echo "//${b%/*}:${b##*/}"; done | sort -u; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
image() {  # name, bazel-bin, binaries...
  local name=$1 bin=$2; shift 2
  local ctx="$work/$name" paths=()
  for b in "$@"; do paths+=("$bin/$b"); done
  deploy/images/collect_rootfs.sh "$ctx/rootfs" "${paths[@]}"
  if [ "$(id -u)" -eq 0 ]; then
    for b in "$@"; do
      "$(command -v chroot || echo /usr/sbin/chroot)" "$ctx/rootfs" "/usr/local/bin/${b##*/}" --help >/dev/null ||
        { echo "build_offline: ${b##*/} --help fails inside the $name root file system" >&2; exit 1; }
    done
    echo "build_offline: every binary of $name runs inside its root file system"
  fi
  podman build --quiet -f deploy/images/Containerfile.rootfs -t "localhost/$name:latest" "$ctx" >/dev/null
  echo "build_offline: localhost/$name:latest $(podman image inspect --format '{{.Size}}' "localhost/$name:latest" | awk '{printf "%.1f MiB", $1/1048576}')"
  if [ -n "$save" ]; then
    mkdir -p "$save"
    rm -f "$save/$name.tar"
    podman save --quiet -o "$save/$name.tar" "localhost/$name:latest"
  fi
}

if [ -n "$prebuilt" ]; then
  image zeroshard-server "$prebuilt" "${SERVER_BINS[@]}"
  image zeroshard-worker "$prebuilt" "${WORKER_BINS[@]}"
  exit 0
fi
# --symlink_prefix=/: leave the bazel-bin symlink of the tree alone.
bazel build --noshow_progress --symlink_prefix=/ \
  $(targets "${SERVER_BINS[@]}" "${WORKER_BINS[@]}")
bin=$(bazel info bazel-bin 2>/dev/null)
image zeroshard-server "$bin" "${SERVER_BINS[@]}"
image zeroshard-worker "$bin" "${WORKER_BINS[@]}"
if [ $cuda -eq 1 ]; then
  bazel build --noshow_progress --symlink_prefix=/ --config=cuda $(targets "${WORKER_BINS[@]}")
  bin=$(bazel info --config=cuda bazel-bin 2>/dev/null)
  image zeroshard-worker-cuda "$bin" "${WORKER_BINS[@]}"
fi
