#!/usr/bin/env bash
# Installs the Debian 12 packages ktune's build needs. Idempotent: when
# everything is present it prints nothing and changes nothing.
#
# The CUDA toolkit is not a Debian package here; CMake finds it in its
# standard place (/usr/local/cuda). Without it everything but the GPU
# backend builds.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libboost-dev libsqlite3-dev zlib1g-dev libeigen3-dev
  libgtest-dev libgmock-dev openssl python3-grpcio python3-protobuf python3-yaml shellcheck
  clang-tidy clang libclang-rt-dev python3 git libfaketime libpq-dev postgresql
  prometheus-cpp-dev libssl-dev prometheus chromium
)
# Node.js and npm fetch the dashboard's charting library (and the browser
# tests' driver) from the npm registry; any Node.js 18 or later will do.
command -v npm >/dev/null || packages+=(nodejs npm)

# server/web's npm packages, pinned by its package-lock.json: installed
# again only when the lock file changes.
npm_packages() {
  local web
  web="$(cd "$(dirname "$0")/.." && pwd)/server/web"
  local want have=""
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
