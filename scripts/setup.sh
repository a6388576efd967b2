#!/usr/bin/env bash
# Installs everything gpu-slice-extender needs to build, run and test on Debian bookworm:
# the libraries (all Debian packages), clang with libFuzzer (fuzz/), the real tools the tests drive (Prometheus/promtool,
# kubectl is expected on PATH for manifest tests), and the npm packages of the offline
# validators. Idempotent: packages already present are not fetched again.
#
# Usage: scripts/setup.sh [--build-only] [--image]
#   --build-only  only what building the binaries needs (the container image's build stage)
#   --image       also the container tools scripts/image.sh uses (podman, buildah, runc,
#                 fuse-overlayfs, debootstrap); not needed by the default test run
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0 image=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --image) image=1 ;;
    *) echo "setup: unknown argument $arg (want --build-only or --image)" >&2; exit 2 ;;
  esac
done

BUILD_PACKAGES=(cmake g++ make pkg-config git ca-certificates openssl
  ccache libcpp-httplib-dev rapidjson-dev libabsl-dev prometheus-cpp-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libyaml-cpp-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  clang libclang-rt-14-dev)  # clang + libFuzzer and its sanitizer runtimes: the fuzz tree
TEST_PACKAGES=(prometheus curl nodejs npm)
IMAGE_PACKAGES=(podman buildah runc fuse-overlayfs debootstrap containernetworking-plugins)
((build_only)) && TEST_PACKAGES=()
((image)) && TEST_PACKAGES+=("${IMAGE_PACKAGES[@]}")

missing=()
for p in "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]+"${TEST_PACKAGES[@]}"}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js may come from outside Debian (node and npm on PATH): then the Debian packages are not needed.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  # --no-install-recommends keeps the prometheus package from pulling in its web UI extras.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Offline validators for deploy/ (kubernetes-models) and the Grafana dashboard (@grafana/schema).
((build_only)) && { echo "setup: ok (build only)" >&2; exit 0; }
for dir in tests/deploy tests/grafana; do
  if [[ -f "$dir/package-lock.json" && ! -d "$dir/node_modules" ]]; then
    (cd "$dir" && npm ci --silent --no-audit --no-fund >/dev/null)
  fi
done
echo "setup: ok" >&2
