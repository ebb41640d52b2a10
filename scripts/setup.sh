#!/usr/bin/env bash
# Installs the Debian packages loom needs to build and test, and nothing else.
# Idempotent: packages already installed are left alone, and apt-get (update
# included) runs only when something is missing. Runs as root, or through
# sudo when it is available. Needs no stdin (CI).
set -euo pipefail

packages=(
  cmake ninja-build pkg-config g++
  libtbb-dev libxxhash-dev
  googletest libgtest-dev libbenchmark-dev
  libopenblas-dev  # loom-bench's vendor rows (W6, G1) only; loom links no BLAS
  llvm-16-dev
  # What a static link against LLVM 16 pulls in (llvm-config --system-libs,
  # and CURL::libcurl named by LLVM's exported CMake targets).
  zlib1g-dev libzstd-dev libedit-dev libffi-dev libxml2-dev libcurl4-openssl-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ "$status" == ii* ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo -n)
else
  echo "setup: missing ${missing[*]}; run this script as root or install sudo" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
# Wait for another apt/dpkg run to let go of its lock instead of failing.
apt=(apt-get -q -y -o DPkg::Lock::Timeout=600)
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends "${missing[@]}"
