#!/usr/bin/env bash
# Installs the Debian packages weightcast builds and tests with, when any is missing.
# Runs as root on Debian 12 (what `make demo` and `make test` call first). Idempotent: with
# everything present it does nothing and needs no network.
#
#   cmake/install_deps.sh          packages for the build, tests and benchmarks
#   cmake/install_deps.sh --print  list the packages and exit
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev          # libFuzzer and the sanitizer build (make test-asan)
  libprotobuf-dev protobuf-compiler # proto/
  libxxhash-dev                     # XXH3 record and part hashes
  libstreamvbyte-dev                # Stream VByte gap coding
  libzstd-dev                       # entropy stage for the filesystem path
  libcli11-dev nlohmann-json3-dev   # command line and JSON output
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv python3-torch # interop tests: torch.load(weights_only=True) reads our files
  python3-dev                       # headers of the Python package's extension (python/)
  zlib1g-dev                        # CRC32 of zip entries (torch.save artifacts)
  libzmq3-dev cppzmq-dev libsodium-dev  # control plane (ZeroMQ with CURVE)
  libyaml-cpp-dev libspdlog-dev     # group config, weightcastd logs
  libtorch-dev                      # the libtorch trainer/engine examples (TensorRef adapter)
  libucx-dev ucx-utils              # the UCX transport; ucx_perftest for its benchmark
  iproute2 nftables                 # ip netns/link, tc and nft: the multi-host test bed (tests/multihost)
  slurm-wlm munge                   # a one-node Slurm the Slurm launcher's test starts (deploy/slurm)
  systemd                           # systemd-analyze verify of the unit template (deploy/systemd)
)

if [[ "${1:-}" == "--print" ]]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install_deps: missing packages: ${missing[*]}" >&2
  echo "install_deps: run as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
