# Quick start: `make run` (build, then `vramkit probe --quick`), `make test` (build, then CTest).
# Both run scripts/setup first, which installs the Debian packages the build needs (idempotent).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build run test test-asan test-tsan fuzz-build fuzz-smoke clean

all: build

setup:
	@bash scripts/setup

$(BUILD_DIR)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

configure: setup $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/vramkit probe --quick

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# Sanitizer builds of the CPU tests (separate build folders; CUDA off to keep them fast).
test-asan: setup
	cmake -S . -B build-asan -G Ninja -DVRAMKIT_CUDA=OFF -DVRAMKIT_SANITIZE=address -DVRAMKIT_BUILD_BENCH=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -LE 'gpu|slow'

test-tsan: setup
	cmake -S . -B build-tsan -G Ninja -DVRAMKIT_CUDA=OFF -DVRAMKIT_SANITIZE=thread -DVRAMKIT_BUILD_BENCH=OFF
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && ctest --output-on-failure -j $(JOBS) -LE 'gpu|slow' -L 'sanitize'

# libFuzzer harnesses (tests/fuzz), clang with ASan+UBSan; fuzz-smoke runs each for
# FUZZ_SECONDS (at most 10) on its committed corpus.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 10
fuzz-build: setup
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DVRAMKIT_FUZZ=ON -DVRAMKIT_CUDA=OFF -DVRAMKIT_BUILD_TESTS=OFF -DVRAMKIT_BUILD_BENCH=OFF -DVRAMKIT_FUZZ_SMOKE_SECONDS=$(FUZZ_SECONDS)
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target vramkit_fuzzers

fuzz-smoke: fuzz-build
	cd $(FUZZ_DIR) && ctest --output-on-failure -j $(JOBS) -L fuzz

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan $(FUZZ_DIR)
