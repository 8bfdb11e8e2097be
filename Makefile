# Alloy: the two commands of the README.
#   make demo  - installs what is missing, builds, runs the example kernels on the best device
#   make test  - installs what is missing, builds, runs every C++ and Python test
BUILD ?= build
JOBS ?= $(shell nproc)
PYTHON ?= python3
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all deps build demo test test-cpp test-python bench python format clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@$(BUILD)/alloy demo

test: build
	@$(MAKE) --no-print-directory test-cpp
	@$(MAKE) --no-print-directory test-python

test-cpp:
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

python: deps
	@$(PYTHON) -m pip install -q --no-build-isolation . 2>&1 | tail -n 3

test-python: python
	@cd python && $(PYTHON) -m pytest -q tests

bench: build
	@$(BUILD)/alloy_bench

format:
	@clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	@rm -rf $(BUILD)
