# The README's commands. CMake (CMakeLists.txt) is the build system; this file only drives it.
#   make demo   build everything and run the main job: a real C training run, profiled
#   make test   build everything and run every test: C (plain, ASan+UBSan, TSan) and Python
#   make bench  the overhead benchmarks; a table on stdout, JSON under build/bench/, docs/overhead.md
#   make wheel  dist/: an sdist that builds with only a compiler, manylinux2014 wheels (zig cc)
#   make fault-long  the fault-injection suite at length (docs/reliability.md): 75 rounds of
#               random kills (60 SIGKILLs), 5000 forks while flushing, 8000 short-lived threads
#   make fuzz   every libFuzzer target for FUZZ_SECONDS each (make test runs 3 s each)
#   make gpu-check  device time on a real GPU (scripts/gpu-check.sh; docs/device.md): one run
#               of about 6 minutes, a table and JSON; "no GPU: skipped" without one. WHEEL=
#               a carried wheel to check instead of the importable stepwatch
BUILD   ?= build
MAKEFLAGS += --no-print-directory
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE   ?= cmake
CONFIG_FLAGS ?=

FUZZ_SECONDS ?= 300

.PHONY: all build demo test test-c test-asan test-tsan test-python test-fuzz bench venv wheel \
	clean deps-demo deps-test fault-long fuzz gpu-check

all: build

# What a fresh Debian machine lacks is installed with apt-get when it can be (scripts/deps.sh):
# the demo needs a C compiler, CMake and SQLite; the tests need more (cmocka, Python, Chromium).
deps-demo:
	@scripts/deps.sh demo

deps-test:
	@scripts/deps.sh test

build: deps-demo
	@$(CMAKE) -S . -B $(BUILD)/release -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CONFIG_FLAGS) >/dev/null
	@$(CMAKE) --build $(BUILD)/release -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: deps-test test-c test-asan test-tsan test-python test-fuzz

# --no-tests=error: a build configured without cmocka has no C tests, and must not pass.
test-c: deps-test build
	@cd $(BUILD)/release && ctest --output-on-failure --no-tests=error -j $(JOBS)

# ASan+UBSan with clang where it is installed (.ci/run and scripts/deps.sh install it); its
# UBSan checks more than GCC's. test_fault_fork skips itself under a sanitizer runtime older
# than LLVM 18 (no allocator lock around fork). ASAN_CC= a compiler to use instead; empty: cc.
ASAN_CC ?= $(shell command -v clang 2>/dev/null)

test-asan: deps-test
	@$(CMAKE) -S . -B $(BUILD)/asan -DCMAKE_BUILD_TYPE=Debug -DSW_SANITIZE=address,undefined \
	    $(if $(ASAN_CC),-DCMAKE_C_COMPILER=$(ASAN_CC)) -DSW_BUILD_BENCH=OFF >/dev/null
	@$(CMAKE) --build $(BUILD)/asan -j $(JOBS)
	@cd $(BUILD)/asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure --no-tests=error -j $(JOBS)

test-tsan: deps-test
	@$(CMAKE) -S . -B $(BUILD)/tsan -DCMAKE_BUILD_TYPE=Debug -DSW_SANITIZE=thread \
	    -DSW_TSAN_ONLY_MT=ON -DSW_BUILD_BENCH=OFF -DSW_BUILD_EXAMPLES=OFF -DSW_BUILD_CLI=OFF >/dev/null
	@$(CMAKE) --build $(BUILD)/tsan -j $(JOBS)
	@cd $(BUILD)/tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure --no-tests=error -j $(JOBS)

venv:
	@scripts/venv.sh $(BUILD)/venv

# The function profiler on 3.12 and 3.13 too, where found (scripts/test-python-versions.sh).
test-python: build venv
	@scripts/test-python.sh $(BUILD)
	@scripts/test-python-versions.sh $(BUILD)

test-fuzz:
	@scripts/fuzz.sh $(BUILD) 3

fuzz:
	@scripts/fuzz.sh $(BUILD) $(FUZZ_SECONDS)

fault-long: build
	@cd $(BUILD)/release && export SW_BUILD_DIR=$$PWD SW_FAULT_KILLS=75 SW_FAULT_FORKS=5000 \
	    SW_FAULT_THREADS=8000 && ./tests/test_fault_kill && ./tests/test_fault_fork && \
	    ./tests/test_fault_threads_mt

bench: build venv
	@scripts/bench.sh $(BUILD)

# Device time on a real GPU: needs only python3 with CUDA torch (and stepwatch, or WHEEL=).
gpu-check:
	@scripts/gpu-check.sh $(WHEEL)

# The release files in dist/: an sdist carrying SQLite, manylinux2014 wheels (scripts/wheel.sh):
# only the build tools (a venv of its own), not the test environment.
wheel:
	@scripts/deps.sh wheel
	@scripts/wheel.sh dist

clean:
	rm -rf $(BUILD)
