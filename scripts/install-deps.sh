#!/usr/bin/env bash
# Installs what meshtrain needs to build, test and run, from Debian's apt only.
# Idempotent: a package that is already installed is skipped, and apt is not
# touched at all when nothing is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-openmp-dev          # BLAS sharing the OpenMP thread pool with our kernels
  libdnnl-dev                     # oneDNN: bf16 matrix products on the CPU's bf16 units (optional at build)
  libopenmpi-dev openmpi-bin      # the transport between ranks
  iproute2                        # ip, tc: scripts/cluster.sh (nodes as network namespaces)
  nlohmann-json3-dev              # metrics, config.json, safetensors headers
  libcli11-dev                    # command line
  libtomlplusplus-dev             # config files
  libsentencepiece-dev sentencepiece  # BPE tokenizer
  fortunes                        # the built-in corpus
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang-format
  python3-torch python3-numpy     # reference implementation in tests and benchmarks (never at run time)
  libjs-vega                      # meshtrain report: the charts' library, inlined into the page
  chromium                        # the report test renders the page headless (skipped without it)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
