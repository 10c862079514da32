#!/usr/bin/env bash
# The images for real (issue 25): builds zeroshard-server and
# zeroshard-worker offline with podman (deploy/images/build_offline.sh
# --bin, FROM scratch), runs an overlay's job — 2 shard servers and 2
# worker ranks — as containers with the manifests' images, commands,
# arguments, environment, users, groups and mounts (Secrets' files with the
# owner, group and mode the kubelet gives them), then the same job with
# the same binaries without containers, and requires the same loss at
# every step and a bit-identical saved model (tests/container_job.py).
# With --old_shape too, it also runs the workers as they were before
# issue 25 (no fsGroup) and requires them to fail to read their Secrets.
#
# Skips (passes, printing "SKIPPED: <why>") where containers cannot run:
# no podman (tools/bootstrap.sh installs it), not root, or `podman run`
# failing. Machines whose /sys/fs/cgroup is cgroup v1 with a cgroup2
# hierarchy at /sys/fs/cgroup/unified (this project's VMs) make crun
# refuse every container ("cgroups in hybrid mode not supported"): the
# test runs podman in a private mount namespace (unshare -m) without that
# mount, which changes nothing outside the test.
#   bazel test //tests:container_job_test     (overlays/tls and its old
#       shape, ~20-30 s)
#   bazel test //tests:container_job_dev_test  (manual: overlays/dev)
#   bazel test //tests:container_job_elastic_test
#       (manual: overlays/elastic, --elastic workers training on token
#       shards of README.md in the PersistentVolumeClaim's place, ~35-70 s)
# Arguments: the overlay (default dev), then --old_shape.
set -euo pipefail
R="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-zeroshard}"
VENV="${ZEROSHARD_VENV:-/opt/zeroshard/venv}"
# Bazel's strict environment leaves out /usr/sbin (iptables, which
# podman's networks use).
export PATH="$PATH:/usr/sbin:/sbin"
skip() { echo "container_job_test: SKIPPED: $*"; exit 0; }
command -v podman >/dev/null || skip "podman is not installed (tools/bootstrap.sh installs it)"
[ "$(id -u)" -eq 0 ] || skip "needs root (podman's image store, container networks)"
kubectl=$(command -v kubectl) ||
  { echo "container_job_test: kubectl not found (the 1.32 client is preinstalled on this project's machines)" >&2; exit 1; }
[ -x "$VENV/bin/python3" ] || { echo "container_job_test: no $VENV/bin/python3: run tools/bootstrap.sh" >&2; exit 1; }

if [ -z "${ZS_CONTAINER_NS:-}" ]; then
  # Re-run in a private mount namespace, without a hybrid cgroup2 mount.
  ZS_CONTAINER_NS=1 exec unshare -m --propagation private "$0" "$@"
fi
if [ "$(stat -f -c %T /sys/fs/cgroup)" = tmpfs ] &&
   [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
  # Only ever in the private namespace, never the machine's own.
  # (unshare execs this script in place: its parent is still outside.)
  [ "$(readlink /proc/self/ns/mnt)" != "$(readlink "/proc/$PPID/ns/mnt")" ] ||
    skip "not in a private mount namespace (unshare -m failed?); leaving the machine's cgroup mounts alone"
  umount /sys/fs/cgroup/unified ||
    skip "cgroup v1 with a cgroup2 mount at /sys/fs/cgroup/unified, which crun refuses, and it cannot be unmounted here"
fi

work="${TEST_TMPDIR:-$(mktemp -d)}/container_job"
rm -rf "$work"
mkdir -p "$work"
# kustomize refuses files that resolve outside the kustomization: real files.
cp -rL "$R/deploy" "$work/deploy"
cd "$R"
t0=$SECONDS
bash deploy/images/build_offline.sh --bin "$R"
echo "container_job_test: images built in $((SECONDS - t0)) s"

# Can this machine run a container at all? podman's own failures (exit
# 125-127) skip; the image's binary failing does not.
rc=0
probe=$(podman run --rm --network none --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  localhost/zeroshard-server:latest /usr/local/bin/zeroshard-server --help 2>&1) || rc=$?
if [ $rc -ge 125 ]; then
  skip "podman cannot run containers here: $(echo "$probe" | grep -v syslog | tail -1)"
elif [ $rc -ne 0 ]; then
  echo "container_job_test: zeroshard-server --help fails in its image (exit $rc):" >&2
  echo "$probe" | tail -5 >&2
  exit 1
fi

overlay=${1:-dev}
old_shape=${2:-}
data=()
if grep -q zeroshard-data <(kubectl kustomize "$work/deploy/overlays/$overlay"); then
  # token shards for the zeroshard-data claim
  "$R/worker/io/zeroshard-tokenize" --input="$R/README.md" --output="$work/train.bin"
  data=(--data "$work/train.bin")
fi
"$VENV/bin/python3" "$R/tests/container_job.py" --deploy "$work/deploy" --overlay "$overlay" \
  --kubectl "$kubectl" --bin "$R" --work "$work/run" --steps 10 "${data[@]}" 2>&1 |
  grep -v "failed to connect to syslog"
if [ "$old_shape" = --old_shape ]; then
  "$VENV/bin/python3" "$R/tests/container_job.py" --deploy "$work/deploy" --overlay "$overlay" \
    --kubectl "$kubectl" --bin "$R" --work "$work/old" --steps 10 --old_shape 2>&1 |
    grep -v "failed to connect to syslog"
fi
echo "container_job_test: PASS (build and run $((SECONDS - t0)) s)"
