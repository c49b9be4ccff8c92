#!/usr/bin/env bash
# Installs what Loom needs to build, test, benchmark and run its demo, and only what is missing:
# Debian packages, and PyTorch from pip into the project's virtual environment .venv (made with
# Debian's python3; the versions are pinned in scripts/requirements.txt). Idempotent.
#   scripts/install-deps.sh           what `make demo` and `make test` need
#   scripts/install-deps.sh --fuzz    and clang with libFuzzer and the sanitizers (`make fuzz`)
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ ccache
  # libraries (LibTorch itself comes with torch from pip, below)
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev zlib1g-dev
  libjpeg62-turbo-dev libpng-dev libopencv-imgproc-dev
  # the remote data workers' service: gRPC, protobuf, OpenSSL (challenge-response), LZ4
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libssl-dev liblz4-dev
  # the multi-host test bed: network namespaces, veth links, tc; certificates for the TLS test
  iproute2 openssl
  # the engines users launch ranks with, tested against the real thing: a one-node Slurm that the
  # tests start themselves (scripts/one-node-slurm.sh: munged, slurmctld, slurmd, srun) and Open
  # MPI's mpirun. On a host with systemd the packages also enable system services (munge's starts;
  # slurmd's and slurmctld's stop for want of /etc/slurm/slurm.conf); the tests use none of them
  munge slurmctld slurmd slurm-client openmpi-bin
  # the project's virtual environment, made with Debian's python3, and the headers the loom
  # Python package (pybind11 over libloom) compiles against
  python3 python3-venv python3-dev
  # tests (GoogleTest; the benchmarks in bench/ are Python scripts timing whole commands)
  libgtest-dev
  # data: Fashion-MNIST for the demo and tests; the Jargon File (public domain English text,
  # /usr/share/doc/jargon-text/jargon.txt.gz) for language models, and SentencePiece to tokenize it;
  # PCRE2 for the expressions Hugging Face's byte-level BPE tokenizers (tokenizer.json) split by
  dataset-fashion-mnist jargon-text libsentencepiece-dev libpcre2-dev
  # the HTML report's test renders it in a headless browser
  chromium
)
if [ "${1:-}" = "--fuzz" ]; then
  # libFuzzer and the ASan/UBSan runtimes for clang; PIL regenerates the seed corpus
  packages+=(clang libclang-rt-14-dev libfuzzer-14-dev python3-pil)
fi

# Debian's LibTorch 1.13 and its Python packages, which Loom used before torch 2.11 from pip: its
# libc10.so and libtorch_python.so would answer for the wheel's in any search that reaches the
# system's library folders, and its pybind11 is older than the one torch's headers bundle.
# Debian's gloo goes too: the wheel's libtorch_cpu.so exports its own copy of gloo, and two
# copies in one process bind each other's symbols (Loom's collectives between hosts are its own).
stale=(libtorch-dev libtorch-test libtorch1.13 python3-torch python3-torchvision pybind11-dev
  libgloo-dev libgloo0)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

present=()
for p in "${stale[@]}"; do
  if installed "$p"; then present+=("$p"); fi
done
if [ ${#present[@]} -gt 0 ]; then
  echo "install-deps: removing ${present[*]} (Loom builds on torch from pip now)"
  "${sudo_cmd[@]}" apt-get purge -y -qq "${present[@]}"
fi

missing=()
for p in "${packages[@]}"; do
  if ! installed "$p"; then missing+=("$p"); fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# PyTorch and the rest of Loom's Python side, pinned in one file. The wheels (about 2.7 GB with
# NVIDIA's CUDA libraries, which libtorch_cpu.so loads even on a CPU) stay in pip's cache, so a
# fresh clone on the same machine installs without downloading again.
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
requirements="$root/scripts/requirements.txt"
# torchtune 0.6.1 (a benchmark's peer) imports what torchao 0.15 and older have (0.16 renamed
# int4_weight_only), and peft refuses a torchao older than 0.16 anywhere on its path: torchtune's
# goes into a folder of its own, which bench/peers/torchtune_finetune.py alone puts on its path.
# (0.14.1: 0.12 reaches for an inductor module torch 2.11 dropped.)
torchtune_torchao="torchao==0.14.1"
stamp="$venv/.requirements"
wanted() { cat "$requirements"; echo "$torchtune_torchao"; }
if [ -x "$venv/bin/python" ] && cmp -s <(wanted) "$stamp"; then
  echo "install-deps: $venv has scripts/requirements.txt"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  # Debian's python3 by name: PATH may lead to another (pyenv's), without Debian's headers.
  /usr/bin/python3 -m venv "$venv"
fi
echo "install-deps: installing scripts/requirements.txt into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
"$venv/bin/python" -m pip uninstall --quiet --yes torchao 2> /dev/null || true
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade \
  --target "$venv/torchtune-torchao" "$torchtune_torchao"
wanted > "$stamp"
