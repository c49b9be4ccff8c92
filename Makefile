# The two commands of the README: `make demo` and `make test`. Both install what is missing,
# configure and build first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build demo demo-ddp test test-asan fuzz bench clean format

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

# The build also lets Debian's python3 `import loom` from this tree (scripts/link-python.sh).
build: configure
	cmake --build $(BUILD) -j $(JOBS)
	@scripts/link-python.sh $(BUILD)

# Trains the default CNN on Fashion-MNIST and prints the summary.
demo: build
	$(BUILD)/bin/loom train --out runs/demo

# The same training on two data-parallel ranks of this machine (global batch 64, as the demo).
demo-ddp: build
	$(BUILD)/bin/loom launch --nproc-per-node 2 -- $(BUILD)/bin/loom train --out runs/demo-ddp \
	    --set data.global_batch=64

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite built with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan.
# LibTorch itself is not instrumented; see docs/reliability.md for the options used.
ASAN_BUILD ?= build-asan
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DLOOM_SANITIZE=address,undefined
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=0:detect_odr_violation=0} \
	    UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# libFuzzer targets (clang, ASan, UBSan) in build-fuzz, each run FUZZ_SECONDS (default 60) from
# the corpus in tests/fuzz/corpus; scripts/fuzz.sh says what is found where.
fuzz:
	scripts/install-deps.sh --fuzz
	FUZZ_SECONDS=$${FUZZ_SECONDS:-60} scripts/fuzz.sh

bench: build
	bench/run_all.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD)
