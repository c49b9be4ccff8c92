# The two commands of the README: `make demo` and `make test`. Both install what is missing,
# configure and build first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build demo demo-ddp test bench clean format

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Trains the default CNN on Fashion-MNIST and prints the summary.
demo: build
	$(BUILD)/bin/loom train --out runs/demo

# The same training on two data-parallel ranks of this machine (global batch 64, as the demo).
demo-ddp: build
	$(BUILD)/bin/loom launch --nproc-per-node 2 -- $(BUILD)/bin/loom train --out runs/demo-ddp \
	    --set data.global_batch=64

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	bench/run_all.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD)
