#!/usr/bin/env bash
# Manual (tags = ["manual"]; needs podman and root, ~1 minute): packages the
# built binaries into the runtime images with podman, FROM scratch
# (deploy/images/build_offline.sh --bin), checks that each binary runs
# inside its root file system, and prints the image sizes.
#   bazel test //tests:deploy_image_test
set -euo pipefail
R="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-zeroshard}"
command -v podman >/dev/null || { echo "deploy_image_test: podman not found (tools/bootstrap.sh --images installs it)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "deploy_image_test: needs root (podman storage, chroot)" >&2; exit 1; }
cd "$R"
bash deploy/images/build_offline.sh --bin "$R"
for name in zeroshard-server zeroshard-worker; do
  podman image exists "localhost/$name:latest" || { echo "no image $name" >&2; exit 1; }
done
echo "deploy_image_test: PASS"
