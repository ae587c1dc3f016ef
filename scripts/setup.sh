#!/usr/bin/env bash
# Installs the Debian 12 packages ktune's build and tests need, and the
# dashboard's npm packages. Idempotent: when everything is present it
# prints nothing and changes nothing.
#   scripts/setup.sh               the build and the tests (what CI needs)
#   scripts/setup.sh --build-only  the build alone (a container image)
#
# The CUDA toolkit is not a Debian package here; CMake finds it in its
# standard place (/usr/local/cuda). Without it everything but the GPU
# backend builds.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libboost-dev libsqlite3-dev zlib1g-dev libeigen3-dev libpq-dev
  prometheus-cpp-dev libssl-dev nlohmann-json3-dev libgtest-dev libgmock-dev python3 git
)
# What the tests run: a real PostgreSQL, promtool (in prometheus) and
# Chromium for the dashboard, sanitizers, fuzzers and the checks.
if [ "${1:-}" != "--build-only" ]; then
  packages+=(
    openssl python3-grpcio python3-protobuf python3-yaml shellcheck
    clang-tidy clang libclang-rt-dev libfaketime postgresql prometheus chromium
  )
fi
# Node.js and npm fetch the dashboard's charting library (and the browser
# tests' driver) from the npm registry; any Node.js 18 or later will do.
command -v npm >/dev/null || packages+=(nodejs npm)

# server/web's npm packages, pinned by its package-lock.json: installed
# again only when the lock file changes.
npm_packages() {
  local web
  web="$(cd "$(dirname "$0")/.." && pwd)/server/web"
  local want have=""
  [ -f "$web/package-lock.json" ] || return 0  # not copied here (yet)
  want="$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)"
  [ -f "$web/node_modules/.ktune-lock" ] && have="$(cat "$web/node_modules/.ktune-lock")"
  [ "$want" = "$have" ] && return 0
  echo "setup: npm ci in server/web" >&2
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" >"$web/node_modules/.ktune-lock"
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  npm_packages
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
npm_packages
