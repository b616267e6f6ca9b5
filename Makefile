# gpumem: header-only; this Makefile builds the tests, benchmarks and examples.
#   make test       Criterion suite + every header as C11/C++17/CUDA + every CUDA source compiled
#   make demo       the main job: BFS and CC over a Kronecker graph file through cache and queues
#   make examples   the example programs (examples/*.c; examples/cuda/*.cu with nvcc)
#   make bench      Google Benchmark, each against its baseline: queue vs mutex queue, fetch-add vs
#                   CAS reference count, cache misses vs direct reads (bench-queue, bench-cache),
#                   then `make plot` (gnuplot) draws them into bench/results/bench-<host>.png
#   make tsan/asan  the concurrency workloads under ThreadSanitizer / ASan+UBSan (asan: the suite too)
#   make stress     the concurrency workloads at 5x (soak)
#   make gpu-test   CUDA tests, then under compute-sanitizer memcheck/racecheck/synccheck (needs a GPU;
#                   without one it compiles them and says so); gpu-bench likewise for bench/cuda
#   make qemu-test  the queue pairs drive QEMU's NVMe controller (tests/qemu; needs
#                   qemu-system-x86, busybox-static, linux-image-amd64)
CC      ?= gcc
CXX     ?= g++
NVCC    ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_ARCH ?= sm_90
WARN    := -Wall -Wextra -Werror -pedantic
CFLAGS  ?= -O2 -g
BUILD   := build
HEADERS := gpumem.h gpumem_nvme.h gpumem_cache.h gpumem_policy.h
TESTS   := $(BUILD)/test_core $(BUILD)/test_nvme $(BUILD)/test_cache $(BUILD)/test_graph $(BUILD)/test_policy
CUDA_SRCS := $(wildcard tests/cuda/*.cu bench/cuda/*.cu examples/cuda/*.cu)
CUDA_OBJS := $(patsubst %.cu,$(BUILD)/cuda/%.o,$(CUDA_SRCS))
export GPUMEM_TEST_SCALE
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)

.PHONY: all test policy-sim headers cuda-compile run-tests demo graph-sweep examples gpu-examples bench plot bench-queue bench-cache stress tsan asan gpu-test gpu-bench qemu-test clean

all: test

test: headers cuda-compile examples run-tests

$(BUILD):
	mkdir -p $(BUILD)

# Every header alone, as C11 and C++17 (with the host shim implementation), and with nvcc.
headers: | $(BUILD)
	@for h in $(HEADERS); do \
	  printf '#define _POSIX_C_SOURCE 200809L\n#define GPUMEM_IMPLEMENTATION\n#include "%s"\nint main(void){return 0;}\n' $$h > $(BUILD)/hdr_$$h.c; \
	  cp $(BUILD)/hdr_$$h.c $(BUILD)/hdr_$$h.cpp; \
	  $(CC) -std=c11 $(WARN) -I. -c $(BUILD)/hdr_$$h.c -o $(BUILD)/hdr_c.o || exit 1; \
	  $(CC) -std=c11 $(WARN) -I. -O2 -c $(BUILD)/hdr_$$h.c -o $(BUILD)/hdr_c.o || exit 1; \
	  $(CXX) -std=c++17 $(WARN) -I. -c $(BUILD)/hdr_$$h.cpp -o $(BUILD)/hdr_cpp.o || exit 1; \
	  if [ -n "$(HAVE_NVCC)" ]; then cp $(BUILD)/hdr_$$h.c $(BUILD)/hdr_$$h.cu; \
	    $(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -I. -c $(BUILD)/hdr_$$h.cu -o $(BUILD)/hdr_cu.o || exit 1; fi; \
	  echo "header $$h: C11, C++17$(if $(HAVE_NVCC), and nvcc,) ok"; \
	done

cuda-compile: $(CUDA_OBJS)
ifeq ($(HAVE_NVCC),)
	@echo "nvcc not found: CUDA sources not compiled"
endif

$(BUILD)/cuda/%.o: %.cu $(HEADERS) $(wildcard tests/cuda/*.h bench/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -I. -Xcompiler -Wall -c $< -o $@

$(BUILD)/test_%: tests/test_%.c $(HEADERS) $(wildcard tests/*.h) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -DGPUMEM_BUILD_DIR='"$(BUILD)"' -I. $< -o $@ -lcriterion -pthread

$(BUILD)/test_policy: bench/policy_sim.h

# The graph test runs the graph program as well as including its header.
$(BUILD)/test_graph: examples/graph.h $(BUILD)/graph

run-tests: $(TESTS) $(BUILD)/asan_kept
	@for t in $(TESTS); do echo "== $$t"; $$t $(CRITERION_FLAGS) || exit 1; done
	@echo "== $(BUILD)/asan_kept (AddressSanitizer, stack use after return)"
	@ASAN_OPTIONS=detect_stack_use_after_return=1:detect_leaks=0 $(BUILD)/asan_kept $(CRITERION_FLAGS)

# Init functions keep no caller pointer: an ASan build that frees the
# caller's frames before the objects are used (tests/test_kept.c).
$(BUILD)/asan_kept: tests/test_kept.c $(HEADERS) $(wildcard tests/*.h) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O1 -g -fsanitize=address -fno-omit-frame-pointer -I. $< -o $@ -lcriterion -pthread

EXAMPLES := $(BUILD)/hello $(BUILD)/array_sum $(BUILD)/graph $(BUILD)/policy_sim
$(BUILD)/%: examples/%.c $(HEADERS) $(wildcard examples/*.h) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -I. $< -o $@ -pthread

examples: $(EXAMPLES)

# The main job: generates build/kron.graph (scale 20, 128 MiB) on first use.
demo: $(BUILD)/graph
	$(BUILD)/graph demo $(BUILD)/kron.graph

# I/O amplification and hit rate against cache size (about 2 minutes), plotted.
graph-sweep: $(BUILD)/graph
	test -f $(BUILD)/kron.graph || $(BUILD)/graph gen $(BUILD)/kron.graph
	$(BUILD)/graph sweep $(BUILD)/kron.graph $(call BENCH_OUT,graph-sweep).tsv
	gnuplot -e "in='$(call BENCH_OUT,graph-sweep).tsv'; out='$(call BENCH_OUT,graph-sweep).png'" bench/graph_sweep.gp

BENCH_OUT = bench/results/$(1)-$$(hostname -s)
$(BUILD)/bench_%: bench/bench_%.cpp $(HEADERS) | $(BUILD)
	$(CXX) -std=c++17 -O2 -g -I. $< -o $@ -lbenchmark -pthread

# Each benchmark's JSON and a table of its ratios to the baseline of the same run,
# then one plot of both (gnuplot).
bench: bench-queue bench-cache
	$(MAKE) plot
plot:
	python3 bench/plot.py $(call BENCH_OUT,queue).json $(call BENCH_OUT,cache).json $(call BENCH_OUT,bench).png
bench-queue: $(BUILD)/bench_queue
	mkdir -p bench/results
	$(BUILD)/bench_queue --benchmark_out=$(call BENCH_OUT,queue).json --benchmark_out_format=json
	python3 bench/ratios.py $(call BENCH_OUT,queue).json "Queue pair: submissions per second (submit + complete), instant software controller" lockfree:mutex > $(call BENCH_OUT,queue).md
	cat $(call BENCH_OUT,queue).md
bench-cache: $(BUILD)/bench_cache
	mkdir -p bench/results
	$(BUILD)/bench_cache --benchmark_out=$(call BENCH_OUT,cache).json --benchmark_out_format=json
	python3 bench/ratios.py $(call BENCH_OUT,cache).json "Cache: hits (fetch-add vs compare-and-swap reference count) and misses (through the cache vs direct reads)" hit_faa:hit_cas miss_cache:miss_direct > $(call BENCH_OUT,cache).md
	cat $(call BENCH_OUT,cache).md

$(BUILD)/stress: tests/stress.c $(wildcard tests/*.h) $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -I. $< -o $@ -pthread

# Soak: the concurrency workloads at 5x the suite's I/O counts.
stress: $(BUILD)/stress
	GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-5} $(BUILD)/stress

# Sanitizers run the concurrency workloads through stress (Criterion's
# fixed-address arena cannot start under ThreadSanitizer); ASan also runs the suite.
tsan:
	$(MAKE) BUILD=build/tsan CC=clang SANITIZE="-fsanitize=thread" CFLAGS="-O1 -g" build/tsan/stress
	TSAN_OPTIONS="halt_on_error=1" GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.2} build/tsan/stress
ASAN_VARS := BUILD=build/asan CC=clang SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all" CFLAGS="-O1 -g"
asan:
	$(MAKE) $(ASAN_VARS) build/asan/stress
	GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.3} build/asan/stress
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.3} $(MAKE) $(ASAN_VARS) run-tests

CUDA_TEST_BINS := $(patsubst tests/cuda/%.cu,$(BUILD)/cuda/%.bin,$(wildcard tests/cuda/*.cu))
$(BUILD)/cuda/%.bin: tests/cuda/%.cu $(HEADERS) $(wildcard tests/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -I. $< -o $@ -lpthread

# The CUDA examples as programs; run where a GPU is present.
CUDA_EXAMPLE_BINS := $(patsubst examples/cuda/%.cu,$(BUILD)/cuda/examples/%,$(wildcard examples/cuda/*.cu))
$(BUILD)/cuda/examples/%: examples/cuda/%.cu $(HEADERS) $(wildcard examples/*.h examples/cuda/*.h tests/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -I. $< -o $@ -lpthread
gpu-examples: $(CUDA_EXAMPLE_BINS) $(BUILD)/graph
	@if ! nvidia-smi -L >/dev/null 2>&1; then echo "gpu-examples: no GPU on this machine; CUDA examples built, not run"; exit 0; fi; \
	test -f $(BUILD)/kron.graph || $(BUILD)/graph gen $(BUILD)/kron.graph; \
	timeout -k 10 120 $(BUILD)/cuda/examples/hello && timeout -k 10 300 $(BUILD)/cuda/examples/array_sum 256 && \
	timeout -k 10 600 $(BUILD)/cuda/examples/graph $(BUILD)/kron.graph

# compute-sanitizer: on PATH, or next to nvcc (bin/ or the toolkit's compute-sanitizer/).
COMPUTE_SANITIZER ?= $(shell command -v compute-sanitizer 2>/dev/null || for d in $(dir $(NVCC)) $(dir $(NVCC))../compute-sanitizer; do [ -x $$d/compute-sanitizer ] && echo $$d/compute-sanitizer && break; done)
# Arguments for the sanitizer runs: fewer threads; the queue test runs the GPU
# controller in block 0 of a cooperative launch (co-resident by construction).
SANITIZE_ARGS_test_nvme_gpu := --small --fused
SANITIZE_ARGS_test_cache_gpu := --small
GPU_SANITIZE ?= 1

# Run every CUDA test; then each under compute-sanitizer memcheck, racecheck
# and synccheck. Every run is bounded twice: the tests' own watchdogs (a stall
# prints the queue pairs' state and fails), and `timeout` around each process,
# so that the whole target ends within ten minutes whatever happens: each run
# gets at most GPU_TEST_BOUND seconds, and never more than is left of
# GPU_TEST_DEADLINE seconds for the whole target.
GPU_TEST_BOUND ?= 200
GPU_TEST_DEADLINE ?= 560
GPU_RUN = left=$$(( end - $$(date +%s) )); [ $$left -gt $(GPU_TEST_BOUND) ] && left=$(GPU_TEST_BOUND); \
	  [ $$left -gt 0 ] || { echo "gpu-test: out of time ($(GPU_TEST_DEADLINE) s) before $$t"; exit 1; }; \
	  timeout -k 5 $$left
gpu-test: cuda-compile $(CUDA_TEST_BINS)
	@if ! nvidia-smi -L >/dev/null 2>&1; then \
	  echo "gpu-test: NO GPU on this machine: the CUDA tests were compiled, NOT run"; exit 0; fi; \
	end=$$(( $$(date +%s) + $(GPU_TEST_DEADLINE) )); \
	for t in $(CUDA_TEST_BINS); do echo "== $$t"; $(GPU_RUN) $$t || \
	  { echo "gpu-test: $$t failed, or was stopped at its time bound"; exit 1; }; done; \
	if [ "$(GPU_SANITIZE)" = 0 ]; then echo "gpu-test: sanitizer runs skipped (GPU_SANITIZE=0)"; exit 0; fi; \
	if [ -z "$(COMPUTE_SANITIZER)" ]; then \
	  echo "gpu-test: compute-sanitizer not found (PATH, next to nvcc): sanitizer runs NOT done; GPU_SANITIZE=0 skips them"; exit 1; fi; \
	for tool in memcheck racecheck synccheck; do for t in $(CUDA_TEST_BINS); do \
	  n=$$(basename $$t .bin); \
	  case $$n in test_nvme_gpu) a="$(SANITIZE_ARGS_test_nvme_gpu)";; test_cache_gpu) a="$(SANITIZE_ARGS_test_cache_gpu)";; *) a="--small";; esac; \
	  echo "== compute-sanitizer --tool $$tool $$t $$a"; \
	  $(GPU_RUN) $(COMPUTE_SANITIZER) --tool $$tool --error-exitcode=1 $$t $$a || \
	    { echo "gpu-test: $$tool on $$t failed, or was stopped at its time bound"; exit 1; }; \
	done; done; echo "gpu-test: all CUDA tests passed, and under memcheck, racecheck and synccheck"

# The real-controller conformance test: a static guest program run as init in
# qemu-system-x86_64 (TCG) with an emulated NVMe disk; see tests/qemu/run.sh.
$(BUILD)/guest_test: tests/qemu/guest_test.c tests/block_content.h $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -static -I. $< -o $@ -pthread

$(BUILD)/image: tests/qemu/image.c tests/block_content.h | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -I. $< -o $@

qemu-test: $(BUILD)/guest_test $(BUILD)/image
	bash tests/qemu/run.sh $(BUILD)

# CUDA benchmarks: each writes bench/results/<name>-<gpu>.{json,md} with ratios
# to the baseline measured in the same run.
CUDA_BENCH_BINS := $(patsubst bench/cuda/%.cu,$(BUILD)/cuda/%.bin,$(wildcard bench/cuda/*.cu))
$(BUILD)/cuda/%.bin: bench/cuda/%.cu $(HEADERS) $(wildcard tests/cuda/*.h bench/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O3 -arch=$(CUDA_ARCH) -I. -Itests/cuda $< -o $@ -lpthread

gpu-bench: cuda-compile $(CUDA_BENCH_BINS)
	@if ! nvidia-smi -L >/dev/null 2>&1; then \
	  echo "gpu-bench: NO GPU on this machine: the CUDA benchmarks were compiled, NOT run"; exit 0; fi; \
	mkdir -p bench/results; \
	for b in $(CUDA_BENCH_BINS); do echo "== $$b"; timeout -k 10 $${GPU_BENCH_BOUND:-1500} $$b bench/results || exit 1; done

clean:
	rm -rf build

# The policy simulator (bench/policy_sim.c): `make policy-sim` generates every
# workload's trace, runs every policy at 50% and 75% of its footprint next to
# OPT and LRU, GMT's two tiers and the prefetchers, then writes the table and
# the plot to bench/results/policy-sim-<host>.{tsv,md,png} (a few minutes).
# The graph traces are recorded from examples/graph.c's BFS and CC (scale 18,
# a 4 MiB cache) through the cache's trace hook; last, the real cache runs BFS
# and CC under CLOCK and BRRIP (policy-graph-<host>.txt).
$(BUILD)/policy_sim: bench/policy_sim.c bench/policy_sim.h bench/policy_traces.h examples/graph.h $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -I. $< -o $@ -lm -pthread
policy-sim: $(BUILD)/policy_sim $(BUILD)/graph
	mkdir -p build/traces bench/results
	test -f $(BUILD)/kron18.graph || $(BUILD)/graph gen $(BUILD)/kron18.graph --scale 18
	test -f build/traces/graph-bfs.trace || $(BUILD)/graph bfs $(BUILD)/kron18.graph --cache-mib 4 --trace build/traces/graph-bfs.trace
	test -f build/traces/graph-cc.trace || $(BUILD)/graph cc $(BUILD)/kron18.graph --cache-mib 4 --trace build/traces/graph-cc.trace
	$(BUILD)/policy_sim table bench/results
	python3 bench/policy_table.py $(call BENCH_OUT,policy-sim).tsv $(call BENCH_OUT,policy-sim).dat > $(call BENCH_OUT,policy-sim).md
	gnuplot -e "in='$(call BENCH_OUT,policy-sim).dat'; out='$(call BENCH_OUT,policy-sim).png'" bench/policy_sim.gp
	cat $(call BENCH_OUT,policy-sim).md
	$(BUILD)/graph policies $(BUILD)/kron18.graph brrip --cache-mib 4 | tail -6 | tee $(call BENCH_OUT,policy-graph).txt
