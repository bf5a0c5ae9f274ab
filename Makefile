# weightcast: the two set-up commands are `make demo` and `make test` (see README.md).
# Every target installs missing Debian packages first (cmake/install_deps.sh).

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build pyenv demo demo-delta demo-python test test-asan bench fuzz format clean gpu-bundle

all: build

deps:
	@cmake/install_deps.sh

# After pyenv: CMake builds the Python package (python/) with that environment's nanobind.
configure: deps pyenv
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DWEIGHTCAST_INTEROP_PYTHON=$(CURDIR)/$(BUILD)/pyenv/bin/python $(CMAKE_ARGS)

# Python with torch (Debian) and safetensors, nanobind, pytest (PyPI): the interop tests and
# the Python package (cmake/setup_python_env.sh).
pyenv: deps
	@cmake/setup_python_env.sh $(BUILD)/pyenv

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job on one machine: a rank group (coordinator, a publisher of a ~268 M-parameter
# Qwen3-MoE-shaped bf16 model, subscribers) on loopback with CURVE keys, started through
# deploy/local/weightcast-local; a subscriber is killed and restarted, another joins late.
demo: build
	@$(BUILD)/examples/weightcast_group_demo

# The Python package: a small transformer trained with AdamW in one process and served by an
# engine process through a rank group started from Python (examples/python/train_and_serve.py).
demo-python: build
	@PYTHONPATH=$(CURDIR)/$(BUILD)/python WEIGHTCASTD=$(CURDIR)/$(BUILD)/src/weightcastd \
	  $(BUILD)/pyenv/bin/python examples/python/train_and_serve.py

# The codec alone: Adam-bf16 steps as sparse deltas applied and verified in one process.
demo-delta: build
	@$(BUILD)/examples/weightcast_demo

test: build pyenv
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer build with clang, including the libFuzzer runs.
# Not run there: the benches that bound time or peak RSS (the sanitizers' shadow memory and
# slowdown are not what they measure): Cli.BenchDelta and bench.group_subscriber_rss; and the
# launchers' and multi-host tests (deploy.*, multihost), which run whole groups of daemons
# against deadlines and repeat code that group_tests and ucx_transport_tests run here.
test-asan: deps pyenv
	@CC=clang CXX=clang++ cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DWEIGHTCAST_SANITIZE=ON -DWEIGHTCAST_FUZZ=ON \
	  -DWEIGHTCAST_INTEROP_PYTHON=$(CURDIR)/$(BUILD)/pyenv/bin/python $(CMAKE_ARGS)
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --output-on-failure -j $(JOBS) -E 'Cli\.BenchDelta|bench\.group_subscriber_rss|deploy\.|multihost'

bench: build
	@bench/run_delta_bench.sh $(BUILD)/src/weightcast
	@$(BUILD)/bench/fp8_quantize_bench
	@bench/run_group_bench.sh $(BUILD)
	@$(BUILD)/src/weightcast bench group --transports fs,ucx
	@bench/run_ucx_bench.sh $(BUILD)/src/weightcast
	@$(BUILD)/pyenv/bin/python bench/multihost_bench.py --bin $(BUILD)/src

# A longer coverage-guided run of every fuzz target (FUZZ_SECONDS each, default 60).
fuzz: test-asan
	@for t in delta safetensors zip torch_artifact part_compression chunk_hd journal_files group_config control_message curve_key nccl_round ucx_blob; do \
	  if [ ! -x $(ASAN_BUILD)/tests/fuzz/$${t}_fuzz ]; then echo "fuzz: $$t not built (optional part missing)"; continue; fi; \
	  mkdir -p $(ASAN_BUILD)/fuzz-corpus/$$t; \
	  $(ASAN_BUILD)/tests/fuzz/$${t}_smoke --write-seeds $(ASAN_BUILD)/fuzz-corpus/$$t; \
	  $(ASAN_BUILD)/tests/fuzz/$${t}_fuzz -max_total_time=$${FUZZ_SECONDS:-60} $(ASAN_BUILD)/fuzz-corpus/$$t || exit 1; \
	done

# GPU test bundle for a lent GPU machine (tests/gpu/README.md).
gpu-bundle: deps
	@JOBS=$(JOBS) tests/gpu/build_bundle.sh build-gpu build-gpu/bundle

format:
	@git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
