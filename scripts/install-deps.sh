#!/usr/bin/env bash
# Installs the Debian packages Loom needs to build, test, benchmark and run its demo, and only
# those that are missing. Idempotent; fetches nothing outside Debian's archive.
#   scripts/install-deps.sh           what `make demo` and `make test` need
#   scripts/install-deps.sh --fuzz    and clang with libFuzzer and the sanitizers (`make fuzz`)
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ ccache
  # libraries
  libtorch-dev libgloo-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev zlib1g-dev
  # LibTorch's fp32 matrix products go to libblas.so.3: OpenBLAS built for OpenMP (LibTorch's
  # threading) takes it over from netlib's reference BLAS, 16-30x slower; libblas3 (the
  # reference) stays for the test that checks Loom names it
  libopenblas0-openmp libblas3
  libjpeg62-turbo-dev libpng-dev libopencv-imgproc-dev
  # the remote data workers' service: gRPC, protobuf, OpenSSL (challenge-response), LZ4
  libgrpc++-dev protobuf-compiler protobuf-compiler-grpc libssl-dev liblz4-dev
  # the multi-host test bed: network namespaces, veth links, tc; certificates for the TLS test
  iproute2 openssl
  # the engines users launch ranks with, tested against the real thing: a one-node Slurm that the
  # tests start themselves (scripts/one-node-slurm.sh: munged, slurmctld, slurmd, srun) and Open
  # MPI's mpirun. On a host with systemd the packages also enable system services (munge's starts;
  # slurmd's and slurmctld's stop for want of /etc/slurm/slurm.conf); the tests use none of them
  munge slurmctld slurmd slurm-client openmpi-bin
  # the loom Python package (pybind11 over libloom, for Debian's python3 and its torch) and its tests
  pybind11-dev python3-dev python3-pytest
  # tests (GoogleTest; the benchmarks in bench/ are Python scripts timing whole commands)
  libgtest-dev
  # data: Fashion-MNIST for the demo and tests; the Jargon File (public domain English text,
  # /usr/share/doc/jargon-text/jargon.txt.gz) for language models, and SentencePiece to tokenize it
  dataset-fashion-mnist jargon-text libsentencepiece-dev
  # peers for benchmarks and the TorchScript test (same LibTorch version as libtorch-dev)
  python3 python3-torch python3-torchvision
  # the HTML report's test renders it in a headless browser
  chromium
)
if [ "${1:-}" = "--fuzz" ]; then
  # libFuzzer and the ASan/UBSan runtimes for clang; PIL regenerates the seed corpus
  packages+=(clang libclang-rt-14-dev libfuzzer-14-dev python3-pil)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
