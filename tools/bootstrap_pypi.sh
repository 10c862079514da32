#!/usr/bin/env bash
# Installs the Python tools from PyPI that the deploy/ tests need, into one
# virtual environment (Debian's python3 -m venv, so nothing touches the
# system's packages): kubernetes-validate, which bundles the Kubernetes API
# JSON schemas and so validates manifests offline; tensorboard, whose own
# event-file reader checks the files of the ds_config "tensorboard" monitor
# (tests/metrics_monitor_test.sh; TensorBoard only, no TensorFlow). Called by
# tools/bootstrap.sh; idempotent (checks the pinned version first). The
# environment lives in $ZEROSHARD_VENV (default /opt/zeroshard/venv, a fixed
# path because Bazel tests do not see $HOME); tests/deploy_test.sh reads the
# same variable.
set -euo pipefail

VENV="${ZEROSHARD_VENV:-/opt/zeroshard/venv}"
PYPI_PACKAGES=(kubernetes-validate==1.37.0 tensorboard==2.20.0)

have() {
  local spec name version
  for spec in "${PYPI_PACKAGES[@]}"; do
    name=${spec%%==*}
    version=${spec##*==}
    [ -x "$VENV/bin/python3" ] || return 1
    [ "$("$VENV/bin/python3" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null)" = "$version" ] || return 1
  done
}

if have; then
  echo "bootstrap: PyPI tools present in $VENV (${PYPI_PACKAGES[*]})"
  exit 0
fi
SUDO=""
parent=$(dirname "$VENV")
if [ "$(id -u)" -ne 0 ] && ! { mkdir -p "$parent" 2>/dev/null && [ -w "$parent" ]; }; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "bootstrap: cannot write $VENV and not root; run as root or set ZEROSHARD_VENV" >&2
    exit 1
  fi
fi
echo "bootstrap: installing ${PYPI_PACKAGES[*]} from PyPI into $VENV"
$SUDO mkdir -p "$parent"
$SUDO /usr/bin/python3 -m venv "$VENV" ||
  { echo "bootstrap: python3 -m venv $VENV failed (Debian package python3-venv)" >&2; exit 1; }
if ! $SUDO "$VENV/bin/pip" install -q --disable-pip-version-check "${PYPI_PACKAGES[@]}" \
    >/tmp/zeroshard-bootstrap-pypi.log 2>&1; then
  echo "bootstrap: could not install ${PYPI_PACKAGES[*]} from PyPI (see /tmp/zeroshard-bootstrap-pypi.log)" >&2
  exit 1
fi
have || { echo "bootstrap: ${PYPI_PACKAGES[*]} still not in $VENV" >&2; exit 1; }
echo "bootstrap: installed ${PYPI_PACKAGES[*]} into $VENV"
