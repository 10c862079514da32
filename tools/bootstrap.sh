#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the demo need,
# then the PyPI tools of the deploy/ tests (tools/bootstrap_pypi.sh).
# Idempotent: checks first and installs only what is missing. Fails loudly,
# naming the package, if one cannot be installed. Needs root (or sudo) only
# when something is missing.
set -euo pipefail

PACKAGES=(
  # build (pkg-config: the C API's users and its test)
  bazel-bootstrap g++ git pkg-config
  # protocol and RPC
  libgrpc++-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev
  # collectives, BLAS, storage
  libucx-dev ucx-utils libopenblas-dev liburing-dev libaio-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev clang clang-format
  libclang-rt-14-dev python3-torch python3-numpy fio openssl procps
  # test hosts (tools/netlab.sh): namespaces, veth, tc, nftables
  iproute2 nftables
  # metrics (HTTP endpoint) and the deploy/ tests
  libcpp-httplib-dev python3-prometheus-client curl python3-venv
  # the Python package, installed offline by pip (docs/python.md)
  python3-pip python3-setuptools python3-wheel
)
# --images: also what building the container images needs (deploy/images).
if [ "${1:-}" = "--images" ]; then PACKAGES+=(podman); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#PACKAGES[@]} packages present"
  exec "$(dirname "$0")/bootstrap_pypi.sh"
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "bootstrap: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "bootstrap: apt-get update failed" >&2; exit 1; }
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/zeroshard-bootstrap.log 2>&1; then
  # Say which package failed.
  for p in "${missing[@]}"; do
    if ! $SUDO apt-get install -y -qq --no-install-recommends "$p" >>/tmp/zeroshard-bootstrap.log 2>&1; then
      echo "bootstrap: could not install Debian package '$p' (see /tmp/zeroshard-bootstrap.log)" >&2
      exit 1
    fi
  done
fi
for p in "${missing[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "bootstrap: Debian package '$p' is still not installed" >&2
    exit 1
  fi
done
echo "bootstrap: installed ${#missing[@]} packages"
exec "$(dirname "$0")/bootstrap_pypi.sh"
