# gpumem: header-only; this Makefile builds and runs its tests, examples and
# benchmarks. `make help` lists the targets by topic (the HELP text below).
# Each target first checks the tools it needs and installs what is missing
# (tools/deps.sh; GPUMEM_NO_INSTALL=1 only names the install command).
#
# Sections, in order: settings; the suite (make test); sanitizers and soaks;
# examples and the main job; benchmarks on the host; GPU runs; QEMU; install;
# help and clean.

# ============================================================================
# settings
# ============================================================================

CC      ?= gcc
CXX     ?= g++
NVCC    ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_ARCH ?= sm_90
WARN    := -Wall -Wextra -Werror -pedantic
CFLAGS  ?= -O2 -g
BUILD   := build
# One header a line, lowest first (docs/headers.md's order), so that branches merge without conflict.
HEADERS := gpumem.h
HEADERS += gpumem_watchdog.h
HEADERS += gpumem_policy.h
HEADERS += gpumem_nvme.h
HEADERS += gpumem_target.h
HEADERS += gpumem_swctl.h
HEADERS += gpumem_nvmectl.h
HEADERS += gpumem_uring.h
HEADERS += gpumem_cache_core.h
HEADERS += gpumem_tier_path.h
HEADERS += gpumem_share_path.h
HEADERS += gpumem_cache.h
HEADERS += gpumem_tier.h
HEADERS += gpumem_share.h
HEADERS += gpumem_doctor.h
# One test a line, so that branches adding tests merge without conflict.
TESTS   := $(BUILD)/test_core
TESTS   += $(BUILD)/test_nvme
TESTS   += $(BUILD)/test_target
TESTS   += $(BUILD)/test_cache
TESTS   += $(BUILD)/test_robust
TESTS   += $(BUILD)/test_wakeup
TESTS   += $(BUILD)/test_graph
TESTS   += $(BUILD)/test_policy
TESTS   += $(BUILD)/test_hints
TESTS   += $(BUILD)/test_xproc
TESTS   += $(BUILD)/test_tier
TESTS   += $(BUILD)/test_notier
TESTS   += $(BUILD)/test_nostats
TESTS   += $(BUILD)/test_faults
TESTS   += $(BUILD)/test_faults_ndebug
TESTS   += $(BUILD)/test_warp
TESTS   += $(BUILD)/test_uring
TESTS   += $(BUILD)/test_share
TESTS   += $(BUILD)/test_doctor
TESTS   += $(BUILD)/test_handle
TESTS   += $(BUILD)/test_trace_input
TESTS   += $(BUILD)/test_null_table
TESTS   += $(BUILD)/test_defaults
TESTS   += $(BUILD)/test_table
CUDA_SRCS := $(wildcard tests/cuda/*.cu bench/cuda/*.cu examples/cuda/*.cu)
CUDA_OBJS := $(patsubst %.cu,$(BUILD)/cuda/%.o,$(CUDA_SRCS))
export GPUMEM_TEST_SCALE
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
# Checks (and installs) what a target needs before it builds: tools/deps.sh NEED...
DEPS    = CC="$(CC)" CXX="$(CXX)" sh tools/deps.sh
# Runs write here, never into tracked files; `make results` copies them to bench/results/.
RESULTS := $(BUILD)/results

# Every target that names no file, in one place (by section, as below).
.PHONY: all test help help-check docs-check deps-test headers layers usage user-warnings registers cuda-compile \
	share-cuda spin run-tests \
	stress tsan asan share-soak fuzz \
	examples demo graph-sweep gnn-sweep analytics-sweep doctor \
	bench plot bench-queue bench-cache bench-doorbell policy-sim bench-share tier-bench results \
	gpu-test gpu-bench gpu-bench-plot gpu-plot gpu-prebuild gpu-dryrun gpu-examples \
	qemu-test qemu-uring qemu-bench \
	install uninstall install-test dist clean

# ============================================================================
# the suite: make test
# ============================================================================

all: test

# deps-test comes first: make builds prerequisites left to right.
test: deps-test help-check docs-check headers layers usage user-warnings cuda-compile share-cuda registers examples \
	run-tests gpu-dryrun $(BUILD)/spin/passed
deps-test:
	@$(DEPS) cc criterion python3 networkx duckdb pyarrow

$(BUILD):
	mkdir -p $(BUILD)

# Every header alone, as C11 (-O0 and -O2) and C++17 (with the host shim
# implementation), and with nvcc; and as strict C11 with nothing defined
# first (no POSIX, no implementation), as a user who only includes it builds
# it; a stamp per header so that a second make
# compiles nothing. Each header must carry the SPDX line (vendored copies
# travel without LICENSE).
HEADER_STAMPS := $(patsubst %,$(BUILD)/hdr/%.ok,$(HEADERS))
headers: $(HEADER_STAMPS)
$(BUILD)/hdr/%.ok: % $(HEADERS)
	@mkdir -p $(dir $@)
	@head -n 1 $< | grep -q 'SPDX-License-Identifier: MIT' || { echo "$<: first line must be the SPDX line"; exit 1; }
	@printf '#define _POSIX_C_SOURCE 200809L\n#define GPUMEM_IMPLEMENTATION\n#include "%s"\nint main(void){return 0;}\n' \
	  $< > $(BUILD)/hdr/$<.c
	@cp $(BUILD)/hdr/$<.c $(BUILD)/hdr/$<.cpp
	@printf '#include "%s"\nint main(void){return 0;}\n' $< > $(BUILD)/hdr/$<.plain.c
	$(CC) -std=c11 $(WARN) -I. -c $(BUILD)/hdr/$<.plain.c -o $(BUILD)/hdr/$<.plain.o
	$(CC) -std=c11 $(WARN) -I. -c $(BUILD)/hdr/$<.c -o $(BUILD)/hdr/$<.c.o
	$(CC) -std=c11 $(WARN) -I. -O2 -c $(BUILD)/hdr/$<.c -o $(BUILD)/hdr/$<.c.o
	$(CXX) -std=c++17 $(WARN) -I. -c $(BUILD)/hdr/$<.cpp -o $(BUILD)/hdr/$<.cpp.o
ifneq ($(HAVE_NVCC),)
	@cp $(BUILD)/hdr/$<.c $(BUILD)/hdr/$<.cu
	$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -I. \
	  -c $(BUILD)/hdr/$<.cu -o $(BUILD)/hdr/$<.cu.o
endif
	@echo "header $<: C11, C++17$(if $(HAVE_NVCC), and nvcc,) ok"
	@touch $@

# No header includes one above it in docs/headers.md's order
# (tools/check_layers.py), and the check refuses a tree where one does
# (tests/test_layers.sh: the old cache -> tier edge put back).
layers:
	@python3 tools/check_layers.py
	@sh tests/test_layers.sh

# What README.md and docs/*.md name exists: links, repository paths, make
# targets, the options given to the repository's programs, and every version
# claimed as the current one is gpumem.h's (tools/check_docs.py).
docs-check:
	@python3 tools/check_docs.py

# Every header's USAGE block compiles as written (tools/check_usage.py).
usage:
	@python3 tools/check_usage.py $(BUILD)/usage $(CC)

# A user's file that gets and puts 1-, 2-, 4-, 8- and 16-byte elements
# through the cache, built by gcc, clang, g++ and clang++ at -O0..-O3 with
# -Wall -Wextra -Werror and run (tests/user_warnings.sh; the USAGE blocks all
# use double). Through a stamp: again when a header or the script changes.
user-warnings: $(BUILD)/user-warnings/passed
$(BUILD)/user-warnings/passed: tests/user_warnings.sh $(HEADERS)
	@sh tests/user_warnings.sh $(BUILD)
	@touch $@

# Registers per thread (tools/registers.sh): compiled only, so it runs in
# make test, which fails when a kernel is over its target (the cached
# element read 48, the blocking read 32); rewritten when a header or the
# kernels change. Made in
# build/results (so that a checkout or merge, which touches the committed
# copy, never makes it look current) and copied to bench/results, where the
# table for CUDA_ARCH is committed.
REG_TABLE := $(RESULTS)/registers-$(CUDA_ARCH).md
registers: $(if $(HAVE_NVCC),$(REG_TABLE),)
ifeq ($(HAVE_NVCC),)
	@echo "registers: nvcc not found: register report not written"
endif
$(REG_TABLE): bench/registers/kernels.cu tools/registers.sh $(HEADERS)
	@mkdir -p $(RESULTS)
	sh tools/registers.sh $(NVCC) $(CUDA_ARCH) $@
	cp $@ bench/results/

cuda-compile: $(CUDA_OBJS)
ifeq ($(HAVE_NVCC),)
	@echo "nvcc not found: CUDA sources not compiled"
endif

$(BUILD)/cuda/%.o: %.cu $(HEADERS) $(wildcard tests/cuda/*.h bench/*.h examples/*.h examples/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -I. -Xcompiler -Wall -c $< -o $@

# The share's CPU tests built as CUDA (issue 32: "the same tests compile for
# CUDA"): nvcc, and libcu++'s atomics in place of C11's, with host threads
# standing for the GPUs as in test_share. Run where no GPU is listed; with
# one the queue's CUDA checks want managed memory, which these tests do not
# allocate, and tests/cuda/test_share_gpu.cu is the GPU's run (make gpu-test).
CUDA_SHARE_TEST := $(BUILD)/cuda/test_share_cpu
$(CUDA_SHARE_TEST): tests/test_share.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -I. -Itests -Xcompiler -Wall -x cu $< -o $@ -lcriterion -lpthread
share-cuda: $(if $(HAVE_NVCC),$(CUDA_SHARE_TEST),)
ifeq ($(HAVE_NVCC),)
	@echo "share-cuda: nvcc not found: the share's tests not built as CUDA"
else
	@if $(GPU_LISTED); then echo "share-cuda: a GPU is listed: built, not run (make gpu-test runs test_share_gpu)"; \
	else echo "== $(CUDA_SHARE_TEST) (tests/test_share.c built by nvcc)"; $(CUDA_SHARE_TEST); fi
endif

$(BUILD)/test_%: tests/test_%.c $(HEADERS) $(wildcard tests/*.h) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -DGPUMEM_BUILD_DIR='"$(BUILD)"' -I. $< -o $@ -lcriterion -pthread

$(BUILD)/test_policy $(BUILD)/test_hints: bench/policy_sim.h
$(BUILD)/test_trace_input: $(BUILD)/policy_sim $(BUILD)/policy_sim_lsan
# The simulator once more under AddressSanitizer, whose LeakSanitizer ends a
# run that leaves memory allocated with exit 23: test_trace_input runs the
# refused traces through it (a refusal used to return with everything held).
$(BUILD)/policy_sim_lsan: bench/policy_sim.c bench/policy_sim.h bench/policy_traces.h examples/graph.h \
	$(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O1 -g -fsanitize=address -fno-omit-frame-pointer -I. $< -o $@ -lm -pthread

# The NULL table, generated from the headers' declarations (issue 30): a
# new public function gets its row without anyone writing it, and a new
# header is read without anyone listing it (every gpumem*.h at the root).
NULL_TABLE_HEADERS := $(sort $(wildcard gpumem*.h))
$(BUILD)/test_null_table.c: tools/null_table.py $(NULL_TABLE_HEADERS) | $(BUILD)
	python3 tools/null_table.py $@ $(NULL_TABLE_HEADERS)
# (gcc warns of NULL passed where a size is implied, which is the point of
# the table: -Wno-stringop-overflow; clang has no such warning, nor the flag.)
NULL_TABLE_FLAGS := $(if $(findstring clang,$(CC)),,-Wno-stringop-overflow)
$(BUILD)/test_null_table: $(BUILD)/test_null_table.c tests/log_capture.h | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) $(NULL_TABLE_FLAGS) -I. -Itests $< -o $@ -lcriterion -pthread

# The fault tests once more with NDEBUG: a faulty controller must meet the
# same checks when assertions are compiled out (no check rests on GPUMEM_ASSERT).
$(BUILD)/test_faults_ndebug: tests/test_faults.c $(HEADERS) $(wildcard tests/*.h) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -DNDEBUG -I. $< -o $@ -lcriterion -pthread

# The doctor (gpumem_doctor.h, tools/gpumem-doctor.c) is told what the build
# targets: the compute capability of CUDA_ARCH and nvcc's CUDA version (0:
# not known here, and the doctor does not compare). CUDA itself is loaded at
# run time: no -lcuda.
DOCTOR_ARCH := $(patsubst sm_%,%,$(filter sm_%,$(CUDA_ARCH)))
DOCTOR_CUDA := $(if $(HAVE_NVCC),$(shell $(NVCC) --version 2>/dev/null | \
	sed -n 's/.*release \([0-9]*\)\.\([0-9]*\),.*/\1 \2/p' | awk '{print $$1 * 1000 + $$2 * 10}'),)
$(BUILD)/gpumem-doctor: tools/gpumem-doctor.c $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -I. -DGPUMEM_DOCTOR_BUILD_ARCH=$(or $(DOCTOR_ARCH),0) \
	  -DGPUMEM_DOCTOR_BUILD_CUDA=$(or $(DOCTOR_CUDA),0) $< -o $@ -pthread -ldl
# Exit 1 when a check fails is the answer, not a build failure: make says so once.
doctor:
	@$(DEPS) cc
	@$(MAKE) --no-print-directory $(BUILD)/gpumem-doctor
	$(BUILD)/gpumem-doctor $(DOCTOR_ARGS)
# The doctor's tests run the program too (exit codes, --json). They are
# built with UBSan, stopping at the first report: the doctor parses what
# machines and snapshots say, and an overflow there (a compute capability,
# a kernel release) is undefined behaviour that no assertion would see.
$(BUILD)/test_doctor: tests/test_doctor.c $(HEADERS) $(wildcard tests/*.h) $(BUILD)/gpumem-doctor | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -fsanitize=undefined -fno-sanitize-recover=undefined \
	  -DGPUMEM_BUILD_DIR='"$(BUILD)"' -I. $< -o $@ -lcriterion -pthread

# The graph test runs the graph program as well as including its header,
# and, to show a full disk without filling one, with statvfs replaced
# (LD_PRELOAD; no sanitizer in the preloaded object: it must load first).
$(BUILD)/test_graph: examples/graph.h examples/graph_formats.h $(BUILD)/graph $(BUILD)/fake_statvfs.so
# The table test runs the table program on files it writes (bad ones too);
# tests/test_table.py checks every answer against DuckDB's (make test).
$(BUILD)/test_table: examples/table.h examples/table_csv.h examples/tool_cli.h $(BUILD)/table
$(BUILD)/fake_statvfs.so: tests/fake_statvfs.c | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -shared -fPIC $< -o $@

# The lock-free protocols as Spin models (tests/spin/*.pml, docs/models.md):
# the submission queue's turns and tail markers, the completion queue's
# harvest, head markers and command-ID reuse, the reset gate, the share's
# miss-queue cells, the cache's line protocol with a prefetcher.
# tests/spin/run.sh exhausts every real configuration (0 errors, the
# search complete) and checks that pan finds every seeded bug, and prints
# states, depth and time for each run, two at a time (SPIN_JOBS); 25 runs,
# about 45 s of CPU in all (49 s wall on 2 cores). In make test, through a stamp:
# run again when a model or the script changes. Each run's pan, output
# and trail stay in $(BUILD)/spin/<run>.
SPIN_JOBS ?= 2
spin:
	@$(DEPS) cc spin
	@nice sh tests/spin/run.sh -j $(SPIN_JOBS) $(BUILD)/spin
$(BUILD)/spin/passed: $(wildcard tests/spin/*.pml) tests/spin/run.sh
	@$(MAKE) --no-print-directory spin
	@touch $@

RACE_TESTS := $(BUILD)/race_stats $(BUILD)/race_orphan $(BUILD)/race_reset $(BUILD)/race_hints
run-tests: $(TESTS) $(BUILD)/asan_kept $(RACE_TESTS) $(BUILD)/hello $(BUILD)/bench_doorbell $(BUILD)/graph \
	$(BUILD)/own_kernel
	@for t in $(TESTS); do echo "== $$t"; $$t $(CRITERION_FLAGS) || exit 1; done
	@echo "== $(BUILD)/asan_kept (AddressSanitizer, stack use after return)"
	@ASAN_OPTIONS=detect_stack_use_after_return=1:detect_leaks=0 $(BUILD)/asan_kept $(CRITERION_FLAGS)
	@echo "== build/hello (README's quickstart program)"; $(BUILD)/hello
	@echo "== build/own_kernel (docs/cuda.md's kernel on host threads: 4-byte floats in and out, flushed, read back)"; \
	  $(BUILD)/own_kernel
	@sed -n '/^```c$$/,/^```$$/p' README.md | sed '1d;$$d' | cmp -s - examples/hello.c || \
	  { echo "README.md: the quickstart program differs from examples/hello.c; paste the file in"; exit 1; }
	@echo "== $(BUILD)/race_stats (ThreadSanitizer)"; TSAN_OPTIONS="halt_on_error=1" $(BUILD)/race_stats
	@echo "== $(BUILD)/race_orphan (ThreadSanitizer: reusing an early-ended blocking call's buffer)"; \
	  TSAN_OPTIONS="halt_on_error=1" $(BUILD)/race_orphan
	@echo "== $(BUILD)/race_reset (ThreadSanitizer: a pair reset while threads call into it)"; \
	  TSAN_OPTIONS="halt_on_error=1" $(BUILD)/race_reset
	@echo "== $(BUILD)/race_hints (ThreadSanitizer: both hinted policies under writers, evictions and hinting threads)"; \
	  TSAN_OPTIONS="halt_on_error=1" $(BUILD)/race_hints
	@echo "== tests/test_plot_gpu.py (the GPU benchmark's plot, on made-up rows)"; python3 tests/test_plot_gpu.py
	@echo "== tests/graph_peer.py (build/graph's --out in the file's ids, against networkx)"; \
	  python3 tests/graph_peer.py $(BUILD)
	@echo "== tests/test_table.py (build/table's answers in every mode against DuckDB's)"; \
	  python3 tests/test_table.py $(BUILD)/table
	@echo "== $(BUILD)/bench_doorbell at a tenth of its size (silent vs waking clients per idle setting;"; \
	  echo "   it fails on a failed command or a violation, never on time)"; \
	  GPUMEM_BENCH_SCALE=0.1 $(BUILD)/bench_doorbell $(BUILD)/doorbell-check.md > $(BUILD)/doorbell-check.log 2>&1 || \
	  { cat $(BUILD)/doorbell-check.log; echo "bench_doorbell failed"; exit 1; }; tail -n 12 $(BUILD)/doorbell-check.md

# Init functions keep no caller pointer: an ASan build that frees the
# caller's frames before the objects are used (tests/test_kept.c).
$(BUILD)/asan_kept: tests/test_kept.c $(HEADERS) $(wildcard tests/*.h) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O1 -g -fsanitize=address -fno-omit-frame-pointer -I. $< -o $@ -lcriterion -pthread

# Statistics read while everything runs, under ThreadSanitizer whatever the
# build's own sanitizer (a plain program: Criterion cannot start under TSan).
$(BUILD)/race_stats: tests/race_stats.c $(wildcard tests/*.h) $(HEADERS) | $(BUILD)
	clang -std=c11 $(WARN) -O1 -g -fsanitize=thread -I. $< -o $@ -pthread
$(BUILD)/race_orphan: tests/race_orphan.c $(HEADERS) | $(BUILD)
	clang -std=c11 $(WARN) -O1 -g -fsanitize=thread -I. $< -o $@ -pthread
$(BUILD)/race_reset: tests/race_reset.c $(HEADERS) | $(BUILD)
	clang -std=c11 $(WARN) -O1 -g -fsanitize=thread -I. $< -o $@ -pthread
$(BUILD)/race_hints: tests/race_hints.c $(HEADERS) | $(BUILD)
	clang -std=c11 $(WARN) -O1 -g -fsanitize=thread -I. $< -o $@ -pthread

# ============================================================================
# sanitizers and soaks (make tsan, asan, stress, share-soak)
# ============================================================================

$(BUILD)/stress: tests/stress.c $(wildcard tests/*.h) $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -I. $< -o $@ -pthread

$(BUILD)/stress_warp: tests/stress_warp.c $(wildcard tests/*.h) $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -I. $< -o $@ -pthread

# Soak: the concurrency workloads, then random mixes (threads, depth,
# command IDs, reordering, injected errors, latency; statistics read
# throughout) for a set time, under each sanitizer.
SOAK_SECONDS = $${GPUMEM_SOAK_SECONDS:-60}
stress:
	$(MAKE) BUILD=build/tsan CC=clang SANITIZE="-fsanitize=thread" CFLAGS="-O1 -g" build/tsan/stress build/tsan/stress_warp
	TSAN_OPTIONS="halt_on_error=1" GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.5} build/tsan/stress_warp
	$(MAKE) $(ASAN_VARS) build/asan/stress
	TSAN_OPTIONS="halt_on_error=1" GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.5} GPUMEM_SOAK_SECONDS=$(SOAK_SECONDS) \
	  build/tsan/stress
	GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.5} GPUMEM_SOAK_SECONDS=$(SOAK_SECONDS) build/asan/stress

# Sanitizers run the concurrency workloads through stress (Criterion's
# fixed-address arena cannot start under ThreadSanitizer); ASan also runs the suite.
tsan:
	@$(DEPS) clang
	$(MAKE) BUILD=build/tsan CC=clang SANITIZE="-fsanitize=thread" CFLAGS="-O1 -g" build/tsan/stress build/tsan/stress_warp
	TSAN_OPTIONS="halt_on_error=1" GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.2} \
	  GPUMEM_SOAK_SECONDS=$${GPUMEM_SOAK_SECONDS:-10} build/tsan/stress
	TSAN_OPTIONS="halt_on_error=1" GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.2} build/tsan/stress_warp
ASAN_VARS := BUILD=build/asan CC=clang SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all" CFLAGS="-O1 -g"
asan:
	@$(DEPS) clang criterion
	$(MAKE) $(ASAN_VARS) build/asan/stress
	GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.3} GPUMEM_SOAK_SECONDS=$${GPUMEM_SOAK_SECONDS:-10} build/asan/stress
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp GPUMEM_TEST_SCALE=$${GPUMEM_TEST_SCALE:-0.3} \
	  $(MAKE) $(ASAN_VARS) run-tests

# The share's served random mixes, SOAK_ROUNDS runs of each shape (a soak,
# not part of make test; they found a request served twice, issue 32);
# exit 1 if any lost a write. Built by nvcc where it is installed: its
# timing showed that bug more often than cc's.
SOAK_ROUNDS ?= 40
$(BUILD)/share_soak: tests/share_soak.c $(HEADERS) $(wildcard tests/*.h) | $(BUILD)
	$(if $(HAVE_NVCC),$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -I. -Itests -x cu $< -o $@ -lpthread, \
	  $(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -I. -Itests $< -o $@ -pthread)
share-soak: $(BUILD)/share_soak
	$(BUILD)/share_soak $(SOAK_ROUNDS)

# The libFuzzer harnesses of tests/fuzz/ (README.md there), one per parser and
# per device-written path, built by clang with ASan and UBSan (UBSan stops at
# its first report). Each checks properties, not only crashes: against a
# reference reader where there is one, that errors name their place, that
# nothing is left behind, that --json parses, that every completion is
# delivered once. `make fuzz` runs each over its committed seeds, then for
# FUZZ_SECONDS (default 60; 0: the seeds alone); tools/fuzz.sh reports inputs
# run and corpus size, keeps what fails in build/fuzz/artifacts and exits 1.
# Not part of make test: what a campaign finds becomes a Criterion test.
# One harness a line, so that branches adding one merge without conflict.
FUZZ_TARGETS := nvme_cq
FUZZ_TARGETS += graph_text
FUZZ_TARGETS += graph_sg
FUZZ_TARGETS += trace
FUZZ_TARGETS += doctor
FUZZ_TARGETS += uring_prp
FUZZ_TARGETS += share_api
FUZZ_TARGETS += cache_hints
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 $(WARN) -O1 -g -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_BINS := $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_TARGETS))
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -I. $< -o $@ -lm -pthread -ldl
$(BUILD)/fuzz/fuzz_graph_text $(BUILD)/fuzz/fuzz_graph_sg: examples/graph.h examples/graph_formats.h \
	tests/fuzz/graph_ref.h \
	tests/fuzz/graph_rig.h
$(BUILD)/fuzz/fuzz_trace: bench/policy_sim.c bench/policy_sim.h bench/policy_traces.h examples/graph.h
$(BUILD)/fuzz/fuzz_share_api: tests/share_rig.h
$(BUILD)/fuzz/fuzz_doctor: tests/doctor_machine.h
fuzz:
	@$(DEPS) libfuzzer
	@$(MAKE) --no-print-directory $(FUZZ_BINS)
	@sh tools/fuzz.sh $(BUILD)/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# ============================================================================
# examples and the main job
# ============================================================================

EXAMPLES := $(BUILD)/hello $(BUILD)/array_sum $(BUILD)/graph $(BUILD)/table $(BUILD)/policy_sim $(BUILD)/own_kernel
$(BUILD)/%: examples/%.c $(HEADERS) $(wildcard examples/*.h) | $(BUILD)
	$(CC) -std=c11 $(WARN) $(CFLAGS) $(SANITIZE) -I. $< -o $@ -pthread -lm

examples: $(EXAMPLES)

# The main job: generates build/kron.graph (scale 20, 128 MiB) on first use.
demo:
	@$(DEPS) cc
	@$(MAKE) --no-print-directory $(BUILD)/graph
	$(BUILD)/graph demo $(BUILD)/kron.graph

# I/O amplification and hit rate against cache size (about 2 minutes), plotted
# if gnuplot is there (or can be installed); the table is kept either way.
graph-sweep:
	@$(DEPS) cc
	@$(MAKE) --no-print-directory $(BUILD)/graph
	@mkdir -p $(RESULTS)
	test -f $(BUILD)/kron.graph || $(BUILD)/graph gen $(BUILD)/kron.graph
	$(BUILD)/graph sweep $(BUILD)/kron.graph $(RESULTS)/graph-sweep.tsv --machine "$$(sh tools/machine.sh)"
	@if $(DEPS) gnuplot; then \
	  gnuplot -e "in='$(RESULTS)/graph-sweep.tsv'; out='$(RESULTS)/graph-sweep.png'" bench/graph_sweep.gp && \
	  echo "wrote $(RESULTS)/graph-sweep.png"; \
	else echo "graph-sweep: plot skipped (no gnuplot); the table is $(RESULTS)/graph-sweep.tsv"; fi

# GNN feature gathering: rows/s through the cache, by direct reads and by
# pread, against the feature cache's size and the row size (a few minutes on
# 2 cores; the tables go to build/), drawn with gnuplot or matplotlib where
# either is there, else the table is printed and kept.
GNN_SCALE ?= 16
gnn-sweep:
	@$(DEPS) cc python3
	@$(DEPS) gnuplot || \
	  echo "gnn-sweep: no gnuplot (tools/deps.sh could not install gnuplot-nox): the plot needs matplotlib"
	@$(MAKE) --no-print-directory $(BUILD)/graph
	@mkdir -p $(RESULTS)
	test -f $(BUILD)/kron-s$(GNN_SCALE).graph || $(BUILD)/graph gen $(BUILD)/kron-s$(GNN_SCALE).graph --scale $(GNN_SCALE)
	$(BUILD)/graph gnn-sweep $(BUILD)/kron-s$(GNN_SCALE).graph $(RESULTS)/gnn-sweep.tsv \
	  --threads 8 --machine "$$(sh tools/machine.sh)"
	@python3 bench/plot_gnn.py $(RESULTS)/gnn-sweep.tsv $(RESULTS)/gnn-sweep.png; rc=$$?; \
	  if [ $$rc = 3 ]; then \
	    echo "gnn-sweep: plot skipped (no gnuplot or matplotlib); the table is $(RESULTS)/gnn-sweep.tsv"; \
	  elif [ $$rc != 0 ]; then exit $$rc; fi

# The dissertation's data-dependent queries (docs/analytics.md): a taxi-like
# table of ANALYTICS_ROWS rows, Q0..Q5 at the 0.47 % and 0.03 % bounds with
# 512-byte and 4 KiB lines, each in the three modes; read/needed against k,
# plotted with gnuplot where it is installed, else printed as a table.
ANALYTICS_ROWS ?= 4000000
analytics-sweep:
	@$(DEPS) cc
	@$(MAKE) --no-print-directory $(BUILD)/table
	@mkdir -p $(RESULTS)
	test -f $(BUILD)/taxi-$(ANALYTICS_ROWS).table || \
	  $(BUILD)/table gen $(BUILD)/taxi-$(ANALYTICS_ROWS).table --rows $(ANALYTICS_ROWS)
	$(BUILD)/table sweep $(BUILD)/taxi-$(ANALYTICS_ROWS).table $(RESULTS)/analytics-sweep.tsv \
	  --machine "$$(sh tools/machine.sh)" > $(RESULTS)/analytics-sweep.log
	@grep -E '^(Q[0-5] |table )' $(RESULTS)/analytics-sweep.log | tail -n 3
	@if command -v gnuplot >/dev/null 2>&1; then \
	  gnuplot -e "in='$(RESULTS)/analytics-sweep.tsv'; out='$(RESULTS)/analytics-sweep.png'" bench/analytics_sweep.gp && \
	  echo "wrote $(RESULTS)/analytics-sweep.png (the table: $(RESULTS)/analytics-sweep.tsv)"; \
	else python3 bench/analytics_table.py $(RESULTS)/analytics-sweep.tsv; \
	  echo "analytics-sweep: no gnuplot, so no plot: sudo apt-get install gnuplot-nox, then make analytics-sweep again"; fi

# ============================================================================
# benchmarks on the host
# ============================================================================

$(BUILD)/bench_%: bench/bench_%.cpp $(HEADERS) | $(BUILD)
	$(CXX) -std=c++17 -O2 -g -I. $< -o $@ -lbenchmark -pthread

# Each benchmark's JSON (the machine in its context) and a table of its ratios
# to the baseline of the same run, then one plot of both (gnuplot).
bench: bench-queue bench-cache
	$(MAKE) plot
plot:
	@if $(DEPS) python3 gnuplot; then \
	  python3 bench/plot.py $(RESULTS)/queue.json $(RESULTS)/cache.json $(RESULTS)/bench.png; \
	else echo "plot: skipped (needs python3 and gnuplot); the tables are $(RESULTS)/*.md"; fi
BENCH_RUN = $(BUILD)/bench_$(1) --benchmark_out=$(RESULTS)/$(1).json --benchmark_out_format=json \
	  --benchmark_context=machine="$$(sh tools/machine.sh)"
bench-queue bench-cache: bench-%:
	@$(DEPS) cc benchmark python3
	@$(MAKE) --no-print-directory $(BUILD)/bench_$*
	@mkdir -p $(RESULTS)
	$(call BENCH_RUN,$*)
	python3 bench/ratios.py $(RESULTS)/$*.json "$(BENCH_TITLE_$*)" $(BENCH_PAIRS_$*) > $(RESULTS)/$*.md
	cat $(RESULTS)/$*.md
BENCH_TITLE_queue := Queue pair: submissions per second (submit + complete), instant software controller
BENCH_PAIRS_queue := lockfree:mutex ideal:mutex lockfree:ideal
BENCH_TITLE_cache := Cache: hits (fetch-add vs compare-and-swap reference count) and \
	misses (through the cache vs direct reads)
BENCH_PAIRS_cache := hit_faa:hit_cas miss_cache:miss_direct

# How the host-thread controller hears doorbells that wake nobody (GPU
# clients), and the CPU each idle setting costs (issue 12): a plain C program,
# no Google Benchmark; never asserts on time.
$(BUILD)/bench_doorbell: bench/bench_doorbell.c $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -I. $< -o $@ -pthread
bench-doorbell:
	@$(DEPS) cc
	@$(MAKE) --no-print-directory $(BUILD)/bench_doorbell
	@mkdir -p $(RESULTS)
	GPUMEM_MACHINE="$$(sh tools/machine.sh)" $(BUILD)/bench_doorbell \
	  $(RESULTS)/issue12-doorbell.md $(RESULTS)/issue12-doorbell.tsv
	cat $(RESULTS)/issue12-doorbell.md

# The policy simulator (bench/policy_sim.c): `make policy-sim` generates every
# workload's trace, runs every policy at 50% and 75% of its footprint next to
# OPT and LRU, GMT's two tiers and the prefetchers, then writes the table and
# the plot to $(RESULTS)/policy-sim.{tsv,md,png} (about a minute here, more
# the first time, when the GNN trace writes its 256 MiB feature table; `make
# results` commits them). The graph traces are recorded from examples/graph.c's
# BFS, CC and PageRank (scale 18, a 4 MiB cache, 16 threads, 5 iterations) and GNN's feature
# cache (scale 16, --lookahead 4) through the
# cache's trace hook, with the hints each round gives (--hints on, issue 43;
# re-recorded when build/graph changes); the hinted policy replays them, every
# other policy ignores them. Last, the real cache runs BFS and CC under CLOCK
# and BRRIP (policy-graph.txt).
$(BUILD)/policy_sim: bench/policy_sim.c bench/policy_sim.h bench/policy_traces.h examples/graph.h $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -I. $< -o $@ -lm -pthread
GRAPH_TRACES := build/traces/graph-bfs.trace build/traces/graph-cc.trace build/traces/graph-pagerank.trace \
  build/traces/graph-gnn.trace
$(BUILD)/kron18.graph: | $(BUILD)/graph
	$(BUILD)/graph gen $@ --scale 18
$(BUILD)/kron16.graph: | $(BUILD)/graph
	$(BUILD)/graph gen $@ --scale 16
# GNN: the feature cache (1/8 of a 256 MiB table) of 100 mini-batches, hinted 4 batches ahead
build/traces/graph-gnn.trace: $(BUILD)/graph | $(BUILD)/kron16.graph
	mkdir -p build/traces
	$(BUILD)/graph gnn $(BUILD)/kron16.graph --threads 8 --batches 100 --lookahead 4 --trace $@
build/traces/graph-%.trace: $(BUILD)/graph | $(BUILD)/kron18.graph
	mkdir -p build/traces
	$(BUILD)/graph $* $(BUILD)/kron18.graph --cache-mib 4 --threads 16 --hints on $(if $(filter pagerank,$*),--iterations 5) \
	  --trace $@
policy-sim: $(BUILD)/policy_sim $(BUILD)/graph $(GRAPH_TRACES)
	@$(DEPS) cc python3 gnuplot
	mkdir -p build/traces $(RESULTS)
	$(BUILD)/policy_sim table $(RESULTS)
	python3 bench/policy_table.py $(RESULTS)/policy-sim.tsv $(RESULTS)/policy-sim.dat > $(RESULTS)/policy-sim.md
	gnuplot -e "in='$(RESULTS)/policy-sim.dat'; out='$(RESULTS)/policy-sim.png'" bench/policy_sim.gp
	cat $(RESULTS)/policy-sim.md
	$(BUILD)/graph policies $(BUILD)/kron18.graph --policy brrip --cache-mib 4 | tail -6 | tee $(RESULTS)/policy-graph.txt

# One storage, several caches (bench/share_bench.c, issue 32): false sharing
# against private buffers and a strict single-writer ping-pong, peer reads
# against storage, the cost of acquire and release, the merge per 4 KiB line,
# batch readahead against none; software controller at 130 us per command;
# about a minute. Writes $(RESULTS)/share-bench.{md,tsv}.
$(BUILD)/share_bench: bench/share_bench.c $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -I. $< -o $@ -pthread
bench-share:
	@$(DEPS) cc
	@$(MAKE) --no-print-directory $(BUILD)/share_bench
	@mkdir -p $(RESULTS)
	$(BUILD)/share_bench --out $(RESULTS) --machine "$$(sh tools/machine.sh)"
	cat $(RESULTS)/share-bench.md

# Three tiers against two (bench/tier_bench.c): the simulator's loop, zipf,
# Kronecker BFS and phase-mix traces replayed by 64 threads through the cache,
# the host tier (never-host, tier-order, GMT-Reuse) and the queue pairs of a
# software controller at 130 us per command; a few minutes. Writes
# $(RESULTS)/tier-bench.{md,tsv} (`make results` commits them).
$(BUILD)/tier_bench: bench/tier_bench.c bench/policy_sim.h bench/policy_traces.h examples/graph.h $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -I. $< -o $@ -lm -pthread
tier-bench:
	@$(DEPS) cc
	@$(MAKE) --no-print-directory $(BUILD)/tier_bench
	@mkdir -p $(RESULTS)
	$(BUILD)/tier_bench --out $(RESULTS) --machine "$$(sh tools/machine.sh)"
	cat $(RESULTS)/tier-bench.md

# A run becomes a committed result only by this explicit copy, under a name
# chosen for the machine: build/results/queue.json -> bench/results/queue-$(MACHINE).json.
results:
	@test -n "$(MACHINE)" || { echo "make results MACHINE=name: name the machine (the files say which it was)"; exit 2; }
	@test -d $(RESULTS) || { echo "results: nothing in $(RESULTS); run make bench or make graph-sweep first"; exit 2; }
	@for f in $(RESULTS)/*; do b=$$(basename "$$f"); d="bench/results/$${b%%.*}-$(MACHINE).$${b#*.}"; \
	  cp "$$f" "$$d" && echo "$$f -> $$d"; done

# ============================================================================
# GPU runs
# ============================================================================

# Where nvidia-smi lists a GPU, the gpu-* targets run their programs with
# GPUMEM_REQUIRE_GPU=1: a program that then finds no usable GPU fails instead
# of skipping (tests/cuda/cuda_check.h, no_gpu). Without one they compile
# everything and say that nothing ran.
GPU_LISTED = nvidia-smi -L 2>/dev/null | grep -q '^GPU '
# A gpu-* target's prerequisites, or none with GPU_PREBUILT=1: run what is
# built, build nothing (tools/gpu-session.sh, on a machine lent briefly).
gpu_needs = $(if $(filter 1,$(GPU_PREBUILT)),,$(1))
# Seconds between the TERM at a program's bound and the KILL (tools/gpu-runs.sh -g).
GPU_RUN_GRACE ?= 5
# -lineinfo: compute-sanitizer's reports name source lines.
NVCC_RUN_FLAGS := -std=c++17 -arch=$(CUDA_ARCH) -lineinfo -I.

CUDA_TEST_BINS := $(patsubst tests/cuda/%.cu,$(BUILD)/cuda/%.bin,$(wildcard tests/cuda/*.cu))
$(BUILD)/cuda/%.bin: tests/cuda/%.cu $(HEADERS) $(wildcard tests/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_RUN_FLAGS) -O2 $< -o $@ -lpthread

# The CUDA examples as programs; run where a GPU is present.
CUDA_EXAMPLE_BINS := $(patsubst examples/cuda/%.cu,$(BUILD)/cuda/examples/%,$(wildcard examples/cuda/*.cu))
$(BUILD)/cuda/examples/%: examples/cuda/%.cu $(HEADERS) $(wildcard examples/*.h examples/cuda/*.h tests/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_RUN_FLAGS) -O2 $< -o $@ -lpthread
# The graph example's Kronecker file, made here by the host tool (seconds
# here; `make gpu-prebuild` carries it to a GPU machine, where no device time
# goes to it). Scale 17 (16 MiB, not the demo's 128 MiB): what a device call
# carries must fit in 64 MiB, and the programs take 33 (at scale 18 the
# whole was 65). The example's cache is a quarter of the file, so it evicts
# at any scale. The scale is in the name: a file of another scale is
# another file.
GPU_GRAPH_SCALE ?= 17
GPU_GRAPH := $(BUILD)/kron-gpu-s$(GPU_GRAPH_SCALE).graph
$(GPU_GRAPH): | $(BUILD)/graph
	$(BUILD)/graph gen $@ --scale $(GPU_GRAPH_SCALE)

# The examples share GPU_EXAMPLES_DEADLINE seconds by weight, each within its
# own bound (tools/gpu-runs.sh); the file must be there (GPU_PREBUILT=1 makes
# nothing: gpu-prebuild carried it). gnn writes its feature table there (1 KiB
# rows: 128 MiB at scale 17, seconds on the GPU machine's disk), and
# analytics its taxi-like table (2M rows, 112 MiB) when it is missing.
GPU_EXAMPLES_DEADLINE ?= 1320
gpu-examples: $(call gpu_needs,$(CUDA_EXAMPLE_BINS) $(GPU_GRAPH))
	@if ! $(GPU_LISTED); then \
	  echo "gpu-examples: NO GPU on this machine: the CUDA examples were built, NOT run"; exit 0; fi; \
	GPUMEM_REQUIRE_GPU=1 sh tools/gpu-runs.sh -n gpu-examples -d $(GPU_EXAMPLES_DEADLINE) -g $(GPU_RUN_GRACE) \
	  "hello 1:120 $(BUILD)/cuda/examples/hello" "array_sum 2:300 $(BUILD)/cuda/examples/array_sum 256" \
	  "graph 4:600 $(BUILD)/cuda/examples/graph $(GPU_GRAPH)" \
	  "graph_hints 2:300 $(BUILD)/cuda/examples/graph $(GPU_GRAPH) --hints" \
	  "gnn 2:300 $(BUILD)/cuda/examples/gnn $(GPU_GRAPH) 8 1024" \
	  "gnn_hints 2:300 $(BUILD)/cuda/examples/gnn $(GPU_GRAPH) 8 1024 --hints" \
	  "own_kernel 2:300 $(BUILD)/cuda/examples/own_kernel 64" \
	  "analytics 2:300 $(BUILD)/cuda/examples/analytics $(BUILD)/taxi-gpu.table"

# compute-sanitizer: on PATH, or next to nvcc (bin/ or the toolkit's compute-sanitizer/).
COMPUTE_SANITIZER ?= $(shell command -v compute-sanitizer 2>/dev/null || \
	for d in $(dir $(NVCC)) $(dir $(NVCC))../compute-sanitizer; do \
	  [ -x $$d/compute-sanitizer ] && echo $$d/compute-sanitizer && break; done)
# Arguments for the sanitizer runs: fewer threads (every test takes --small);
# the tests with a GPU-resident controller run it in block 0 of a cooperative
# launch with its clients (--fused: co-resident by construction).
SANITIZE_ARGS_test_nvme_gpu := --small --fused
SANITIZE_ARGS_test_cache_gpu := --small --fused
GPU_SANITIZE ?= 1

# Run every CUDA test; then each under compute-sanitizer memcheck and
# synccheck. (Not racecheck: it checks shared memory only, and no code here
# uses __shared__, so its runs could find nothing and would take a third of
# the sanitizer time.) Every run is bounded twice: the tests' own watchdogs and
# waits (a stall prints the queue pairs' state and fails; the waits end below
# the run's bound, GPUMEM_RUN_BOUND_S, tests/cuda/cuda_check.h), and
# `timeout` around each process. The runs share GPU_TEST_DEADLINE seconds
# equally, each at most GPU_TEST_BOUND (tools/gpu-runs.sh: a run that ends
# early leaves its time to the rest, so the bounds add up within the
# deadline and the first cannot starve the others). A failed, timed-out or
# stopped run does not stop the others (a GPU session is short: it should
# say everything it can), and the last line names every run that failed,
# timed out or did not run. GPU_TEST_PLAIN=0 skips the plain runs (a session
# that ran them already and has time for the sanitizer only).
GPU_TEST_PLAIN ?= 1
GPU_TEST_BOUND ?= 200
GPU_TEST_DEADLINE ?= 560
sanitize_args = $(or $(SANITIZE_ARGS_$(basename $(notdir $(1)))),--small)
GPU_TEST_RUNS = $(if $(filter 0,$(GPU_TEST_PLAIN)),,$(foreach t,$(CUDA_TEST_BINS),"$(t) 1 $(t)")) \
	$(if $(and $(filter-out 0,$(GPU_SANITIZE)),$(COMPUTE_SANITIZER)),$(foreach tool,memcheck synccheck, \
	  $(foreach t,$(CUDA_TEST_BINS), \
	    "$(tool):$(t) 1 $(COMPUTE_SANITIZER) --tool $(tool) --error-exitcode=1 $(t) $(call sanitize_args,$(t))")))
gpu-test: $(call gpu_needs,cuda-compile $(CUDA_TEST_BINS))
	@if ! $(GPU_LISTED); then \
	  echo "gpu-test: NO GPU on this machine: the CUDA tests were compiled, NOT run"; exit 0; fi; \
	[ "$(GPU_TEST_PLAIN)" != 0 ] || echo "gpu-test: plain runs skipped (GPU_TEST_PLAIN=0)"; \
	if [ "$(GPU_SANITIZE)" = 0 ]; then echo "gpu-test: sanitizer runs skipped (GPU_SANITIZE=0)"; missing=""; \
	elif [ -z "$(COMPUTE_SANITIZER)" ]; then missing="-f compute-sanitizer"; \
	  echo "gpu-test: compute-sanitizer not found (PATH, next to nvcc): sanitizer runs NOT done; \
	GPU_SANITIZE=0 skips them"; \
	else missing=""; fi; \
	GPUMEM_REQUIRE_GPU=1 sh tools/gpu-runs.sh -n gpu-test -d $(GPU_TEST_DEADLINE) -m $(GPU_TEST_BOUND) \
	  -g $(GPU_RUN_GRACE) \
	  -e GPUMEM_RUN_BOUND_S $$missing $(GPU_TEST_RUNS)

# CUDA benchmarks: each writes $(RESULTS)/<name>-<gpu>.{json,md} with ratios
# to the baseline measured in the same run.
CUDA_BENCH_BINS := $(patsubst bench/cuda/%.cu,$(BUILD)/cuda/%.bin,$(wildcard bench/cuda/*.cu))
$(BUILD)/cuda/%.bin: bench/cuda/%.cu $(HEADERS) $(wildcard tests/cuda/*.h bench/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_RUN_FLAGS) -O3 -Itests/cuda $< -o $@ -lpthread

# The same benchmark with the statistics compiled out (the cache groups only).
$(BUILD)/cuda/%_nostats.bin: bench/cuda/%.cu $(HEADERS) $(wildcard tests/cuda/*.h bench/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_RUN_FLAGS) -O3 -DGPUMEM_NO_STATS -Itests/cuda $< -o $@ -lpthread
CUDA_BENCH_BINS += $(BUILD)/cuda/bench_gpu_nostats.bin

# The whole target ends within GPU_BENCH_BOUND seconds (default 1500; at
# least 160 for both builds to run in full). tools/gpu-runs.sh splits it by weight:
# bench_gpu 9, the nostats build (the cheap cache groups only) 3, the plot 1,
# each slot less 5 s for `timeout`'s KILL, and time one leaves unused goes to
# those after it. So at gpu-session's 200 s bench_gpu is bounded at 132 s,
# the nostats build at 41 s or more, the plot at 11 s or more; below 160 s the
# nostats build gets under 30 s (its rows end 20 s before its bound), and
# below about 120 s it may not run at all. Each benchmark is
# told its bound (GPU_BENCH_BOUND, as bench_gpu.cu reads it) and sizes its
# rows from a short probe to end within it; `timeout` is the backstop. The
# nostats binary runs even if the first one failed; the target fails if
# either did, and names it. Rows go to $(RESULTS)/gpu-run-<gpu name>.jsonl,
# so runs on different GPUs keep their own files (and plots). A run starts
# $(RESULTS)' gpu-run files afresh (one machine's scratch: make results keeps
# a run), so that a plot and its ratios come from one run. The plot is drawn with
# gnuplot or matplotlib where either is there (nothing is installed: a GPU
# machine may reach no registry), else later by `make gpu-plot`.
GPU_BENCH_BOUND ?= 1500
GPU_PLOT_PNG = $(RESULTS)/gpu-clients-$$(basename $$f .jsonl | sed 's/^gpu-run-//').png
gpu-bench: $(call gpu_needs,$(CUDA_BENCH_BINS))
	@if ! $(GPU_LISTED); then \
	  echo "gpu-bench: NO GPU on this machine: the CUDA benchmarks were compiled, NOT run"; exit 0; fi; \
	[ $(GPU_BENCH_BOUND) -ge 160 ] || \
	  echo "gpu-bench: GPU_BENCH_BOUND=$(GPU_BENCH_BOUND) is under the 160 s that both builds need in full"; \
	mkdir -p $(RESULTS); rm -f $(RESULTS)/gpu-run-*.jsonl; \
	GPUMEM_REQUIRE_GPU=1 sh tools/gpu-runs.sh -n gpu-bench -d $(GPU_BENCH_BOUND) -g $(GPU_RUN_GRACE) -e GPU_BENCH_BOUND \
	  $(foreach b,$(CUDA_BENCH_BINS),"$(b) $(if $(findstring nostats,$(b)),3,9) $(b) $(RESULTS)") \
	  "plot 1 $(MAKE) --no-print-directory gpu-bench-plot"

# gpu-bench's last step: plot every gpu-run file if python3 and a plotter are there.
gpu-bench-plot:
	@if ! command -v python3 >/dev/null; then \
	  echo "gpu-bench: plot skipped (no python3 here): make gpu-plot draws it"; exit 0; fi; \
	for f in $(RESULTS)/gpu-run-*.jsonl; do [ -f "$$f" ] || continue; \
	  python3 bench/plot_gpu.py $$f $(GPU_PLOT_PNG); rc=$$?; \
	  if [ $$rc = 3 ]; then echo "gpu-bench: plot skipped (no gnuplot or matplotlib here): make gpu-plot draws it"; \
	  elif [ $$rc != 0 ]; then exit 1; fi; done

# Build every GPU program here (nvcc needs no GPU) and put them, with the
# graph example's Kronecker file, in $(BUILD)/gpu, for tools/gpu-session.sh
# to run on a lent GPU machine without building anything there (see the
# script).
GPU_SESSION_BINS = $(CUDA_TEST_BINS) $(CUDA_EXAMPLE_BINS) $(CUDA_BENCH_BINS) $(GPU_GRAPH)
# What a device call carries (build/gpu) and the working tree together must
# fit in 64 MiB: this leaves the tree 8.
GPU_PREBUILD_MAX_MIB := 56
gpu-prebuild: $(GPU_SESSION_BINS)
	@rm -rf $(BUILD)/gpu && mkdir -p $(BUILD)/gpu
	@cd $(BUILD) && cp -p --parents $(patsubst $(BUILD)/%,%,$(GPU_SESSION_BINS)) gpu/
	@mkdir -p $(BUILD)/gpu/bin && cp "$$(command -v make)" $(BUILD)/gpu/bin/ # in case the GPU machine has none
	@mib=$$(du -sm $(BUILD)/gpu | cut -f1); echo "gpu-prebuild: $(BUILD)/gpu is $$mib MiB"; \
	[ $$mib -le $(GPU_PREBUILD_MAX_MIB) ] || { \
	  echo "gpu-prebuild: over the $(GPU_PREBUILD_MAX_MIB) MiB a device call can"; \
	  echo "  carry beside the tree: lower GPU_GRAPH_SCALE ($(GPU_GRAPH_SCALE))"; exit 1; }
	@echo 'gpu-prebuild: on the GPU machine: bash tools/gpu-session.sh, carrying $(BUILD)/gpu (the script says more)'

# The gpu-* targets and tools/gpu-session.sh on stand-in programs that never
# end, fail or pass, with no GPU (tools/gpu-dryrun.sh says what it checks).
gpu-dryrun:
	bash tools/gpu-dryrun.sh

# Draw the plot of every gpu-run-*.jsonl in $(RESULTS) (or of JSONL=file, one
# fetched from a GPU machine), installing python3 and gnuplot if they are
# missing: for runs made where neither gnuplot nor matplotlib was. The plot
# goes to $(RESULTS) (a fetched file's folder may be read-only).
JSONL ?= $(wildcard $(RESULTS)/gpu-run-*.jsonl)
gpu-plot:
	@test -n "$(JSONL)" || { echo "gpu-plot: no gpu-run-*.jsonl in $(RESULTS); JSONL=file names one"; exit 2; }
	@$(DEPS) python3 gnuplot
	@mkdir -p $(RESULTS); for f in $(JSONL); do python3 bench/plot_gpu.py $$f $(GPU_PLOT_PNG) || exit 1; done

# ============================================================================
# QEMU
# ============================================================================

# The real-controller conformance test: a static guest program run as init in
# qemu-system-x86_64 (TCG) with an emulated NVMe disk; see tests/qemu/run.sh.
$(BUILD)/guest_test: tests/qemu/guest_test.c tests/block_content.h $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -static -I. $< -o $@ -pthread

$(BUILD)/image: tests/qemu/image.c tests/block_content.h | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -g -I. $< -o $@

# The doctor in the guest (issue 33): its vfio verdict against whether the
# shim then opens the controller (tests/qemu/doctor_check.sh). Static, as
# guest_test (the linker warns that dlopen in a static program needs the
# build's glibc at run time: the guest has none, and the vfio path loads no
# CUDA).
$(BUILD)/gpumem-doctor-static: tools/gpumem-doctor.c $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -static -I. $< -o $@ -pthread -ldl
$(BUILD)/guest_open: tests/qemu/guest_open.c $(HEADERS) | $(BUILD)
	$(CC) -std=c11 $(WARN) -O2 -static -I. $< -o $@ -pthread
qemu-test: $(BUILD)/gpumem-doctor-static $(BUILD)/guest_open

qemu-test:
	@$(DEPS) cc qemu
	@$(MAKE) --no-print-directory $(BUILD)/guest_test $(BUILD)/image
	bash tests/qemu/run.sh $(BUILD)

# The io_uring passthrough forwarder (gpumem_uring.h) in QEMU alone (qemu-test
# runs it too, first): the guest's kernel owns the disks; local /dev/ngXn1,
# then nvmet over nvme-tcp, the port removed mid-run, nvmet over nvme-rdma
# (soft-RoCE), and native multipath (tcp+tcp, rdma+tcp) with one path removed
# mid-run (one boot).
qemu-uring:
	@$(DEPS) cc qemu
	@$(MAKE) --no-print-directory $(BUILD)/guest_test $(BUILD)/image $(BUILD)/gpumem-doctor-static $(BUILD)/guest_open
	GPUMEM_QEMU_BOOTS=uring nice bash tests/qemu/run.sh $(BUILD)

# The benchmark of issues 35 and 46, not part of qemu-test: 4 KiB random reads
# at one depth on one QEMU disk through the forwarder (its variants:
# registered buffer, SQPOLL), Debian's fio (io_uring_cmd, batched) and the
# VFIO shim, and the forwarder and fio over nvme-tcp and nvme-rdma, one boot;
# prints the table and the ratios (build/qemu/bench.md).
# GPUMEM_QEMU_BENCH_DEPTH, _SECONDS, _ROUNDS, _CPUS, _VARIANTS: run.sh.
qemu-bench:
	@$(DEPS) cc qemu fio python3
	@$(MAKE) --no-print-directory $(BUILD)/guest_test $(BUILD)/image $(BUILD)/gpumem-doctor-static $(BUILD)/guest_open
	GPUMEM_QEMU_BOOTS=bench nice bash tests/qemu/run.sh $(BUILD)

# ============================================================================
# install
# ============================================================================

# ---- install -----------------------------------------------------------------
# Headers into PREFIX/include, gpumem.pc into PREFIX/share/pkgconfig (a
# header-only package is the same on every architecture), the CMake package
# into PREFIX/share/gpumem/cmake, LICENSE and CHANGELOG into PREFIX/share/doc/gpumem.
# uninstall removes exactly the files install writes (INSTALLED lists them),
# then the directories of ours that are left empty.
PREFIX  ?= /usr/local
DESTDIR ?=
VERSION := $(shell sed -n 's/^\#define GPUMEM_VERSION_STRING "\(.*\)"/\1/p' gpumem.h)
I_ROOT  := $(DESTDIR)$(PREFIX)
INSTALLED = $(addprefix $(I_ROOT)/include/,$(HEADERS)) $(I_ROOT)/share/pkgconfig/gpumem.pc \
	$(I_ROOT)/share/gpumem/cmake/gpumemConfig.cmake $(I_ROOT)/share/gpumem/cmake/gpumemConfigVersion.cmake \
	$(I_ROOT)/share/doc/gpumem/LICENSE $(I_ROOT)/share/doc/gpumem/CHANGELOG.md
# gpumem.pc's text, the three %s being the prefix, the description and the version.
PC_FORMAT_HEAD = prefix=%s\nincludedir=$${prefix}/include\n\nName: gpumem\nDescription: %s\nVersion: %s\n
PC_FORMAT = $(PC_FORMAT_HEAD)Cflags: -I$${includedir}\nLibs: -pthread\n
install:
	install -d $(I_ROOT)/include $(I_ROOT)/share/pkgconfig $(I_ROOT)/share/gpumem/cmake $(I_ROOT)/share/doc/gpumem
	install -m 644 $(HEADERS) $(I_ROOT)/include/
	printf '$(PC_FORMAT)' \
	  '$(PREFIX)' 'Header-only lock-free GPU queue and cache primitives for NVMe' '$(VERSION)' \
	  > $(I_ROOT)/share/pkgconfig/gpumem.pc
	install -m 644 cmake/gpumemConfig.cmake $(I_ROOT)/share/gpumem/cmake/
	sed -e 's/@VERSION@/$(VERSION)/' -e 's/@MAJOR@/$(word 1,$(subst ., ,$(VERSION)))/' \
	  -e 's/@MINOR@/$(word 2,$(subst ., ,$(VERSION)))/' cmake/gpumemConfigVersion.cmake.in \
	  > $(I_ROOT)/share/gpumem/cmake/gpumemConfigVersion.cmake
	install -m 644 LICENSE CHANGELOG.md $(I_ROOT)/share/doc/gpumem/
	@echo "installed gpumem $(VERSION) into $(I_ROOT)"
uninstall:
	rm -f $(INSTALLED)
	-rmdir $(I_ROOT)/share/gpumem/cmake $(I_ROOT)/share/gpumem $(I_ROOT)/share/doc/gpumem 2>/dev/null
	@echo "removed gpumem from $(I_ROOT)"

# The release tarball: what a vendored copy and FetchContent's URL need (the
# headers, CMakeLists.txt and cmake/ for add_subdirectory, LICENSE) and the
# README and CHANGELOG, under gpumem-VERSION/; file times of the last commit,
# owner 0, sorted, so the same tree gives the same bytes.
DIST := $(BUILD)/gpumem-$(VERSION).tar.gz
DIST_FILES := $(HEADERS) CMakeLists.txt cmake/gpumemConfig.cmake cmake/gpumemConfigVersion.cmake.in \
	LICENSE README.md CHANGELOG.md
dist: | $(BUILD)
	tar -czf $(DIST) --sort=name --owner=0 --group=0 --numeric-owner \
	  --mtime="$$(git log -1 --format=@%ct 2>/dev/null || echo @0)" --transform 's,^,gpumem-$(VERSION)/,' $(DIST_FILES)
	@echo "dist: $(DIST) ($$(tar -tzf $(DIST) | wc -l) files)"

# Install into a fresh prefix, build the consumer in tests/consumer out of the
# tree every way a user would and README's pkg-config and CMake lines as
# written (tests/consumer/check.sh, readme.sh), uninstall, and check that
# nothing of gpumem is left.
install-test:
	@$(DEPS) cc cmake pkg-config git
	@$(MAKE) --no-print-directory dist
	NVCC="$(if $(HAVE_NVCC),$(NVCC))" CUDA_ARCH=$(CUDA_ARCH) DIST=$(DIST) sh tests/consumer/check.sh

# ============================================================================
# help and clean
# ============================================================================

define HELP
Tests (no GPU needed)
  make test          the suite: every header as C11/C++17/CUDA, the layering and USAGE checks,
                     every CUDA source compiled, the register table, the Criterion tests
  make tsan          the concurrency workloads under ThreadSanitizer
  make asan          the suite and the workloads under ASan + UBSan
  make stress        the soak: workloads, then random mixes for GPUMEM_SOAK_SECONDS (60) each
  make share-soak    the share's served random mixes, SOAK_ROUNDS (40) runs of each shape
  make fuzz          the libFuzzer harnesses (graph readers, trace reader, doctor, CQ validation,
                     forwarder PRP translation, share API, cache API with hints)
                     over their seeds, then FUZZ_SECONDS (60) each
  make share-cuda    the share's CPU tests built by nvcc (part of make test)
  make spin          Spin models of the lock-free protocols, each exhausted, each shown to find
                     its seeded bugs (tests/spin, docs/models.md; part of make test)
  make headers | layers | usage | user-warnings | docs-check | registers   one check of make test alone
  make install-test  install into a temporary prefix, build README's pkg-config and CMake lines as
                     written and tests/consumer every way, uninstall
The main job and examples
  make demo          BFS and CC over a 128 MiB Kronecker graph through cache, queues, controller
  make examples      build/graph, build/table, build/hello, build/array_sum, build/policy_sim,
                     build/own_kernel
  make graph-sweep   I/O amplification and hit rate against cache size, plotted
  make gnn-sweep     GNN feature gathering against cache and row size, plotted
  make analytics-sweep   the taxi queries Q0..Q5: bytes read / needed, cache vs tiles vs pread
  make doctor        why this machine cannot run GPU-initiated storage (DOCTOR_ARGS=...)
Benchmarks (host; each against its baseline in the same run)
  make bench         queue vs mutex queue, fetch-add vs CAS, misses vs direct reads; then make plot
  make bench-queue | bench-cache | plot   one of them
  make bench-doorbell   the host controller hearing doorbells nobody notifies, per idle setting
  make bench-share   several caches over one storage
  make tier-bench    three tiers against two
  make policy-sim    every replacement policy next to OPT, table and plot
  make results MACHINE=name   copy build/results/* to bench/results/ (committed results)
GPU runs (a GPU machine; without one they compile and say so)
  make gpu-prebuild  build every GPU program here for tools/gpu-session.sh
  make gpu-test      CUDA tests, then under compute-sanitizer memcheck and synccheck
  make gpu-bench     CUDA benchmarks, plotted; make gpu-plot draws a fetched run
  make gpu-examples  the CUDA examples
  make gpu-dryrun    the gpu-* scripts on stand-in programs (part of make test)
QEMU (qemu-system-x86, no KVM needed)
  make qemu-test     the queue pairs drive QEMU's NVMe controller (VFIO, uio) and the forwarder
  make qemu-uring    the io_uring forwarder alone: local, nvme-tcp, nvme-rdma, a path removed mid-run
  make qemu-bench    the forwarder vs fio (io_uring_cmd) vs the VFIO shim; over tcp and rdma
Install
  make install PREFIX=/usr/local   headers, gpumem.pc, CMake package; make uninstall
  make dist          build/gpumem-VERSION.tar.gz: what add_subdirectory and FetchContent's URL take
Other
  make help          this list
  make clean         remove build/
endef
export HELP

help:
	@printf '%s\n' "$$HELP"
# HELP and the .PHONY rule agree (tools/check_help.py): a step of make test.
help-check:
	@python3 tools/check_help.py Makefile

clean:
	rm -rf build
