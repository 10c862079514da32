#!/usr/bin/env bash
# deploy/ manifests: renders every overlay with `kubectl kustomize`,
# validates each object against the Kubernetes 1.32 API schema offline
# (kubernetes-validate from tools/bootstrap_pypi.sh) and checks the
# cross-references against the real binaries' --help
# (tests/deploy_check.py, which also proves it reports broken manifests).
set -euo pipefail
VENV="${ZEROSHARD_VENV:-/opt/zeroshard/venv}"
py="$VENV/bin/python3"
[ -x "$py" ] || { echo "deploy_test: no $py: run tools/bootstrap.sh" >&2; exit 1; }
kubectl=$(command -v kubectl) ||
  { echo "deploy_test: kubectl not found (the 1.32 client is preinstalled on this project's machines)" >&2; exit 1; }
r="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-zeroshard}"
# kustomize refuses files that resolve outside the kustomization: copy the
# runfiles' symlinks into real files.
work="${TEST_TMPDIR:-$(mktemp -d)}/deploy"
rm -rf "$work"
cp -rL "$r/deploy" "$work"
"$py" "$r/tests/deploy_check.py" --deploy "$work" --kubectl "$kubectl" --self_test \
  --binary zeroshard-server="$r/server/zeroshard-server" \
  --binary zeroshard-worker="$r/worker/train/zeroshard-worker"
echo "deploy_test: PASS"
