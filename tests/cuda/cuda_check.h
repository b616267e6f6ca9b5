// Helpers shared by the CUDA tests, benchmarks and examples.
//   CHECK(cudaCall)      on error: the file, line, call and CUDA's message, then abort_run
//   EXPECT(cond, ...)    count a failed check of the current test, with a message
//   test_begin/test_end  one PASS/FAIL line per test
//   wait_stream          wait for a stream with a deadline, so that a hang
//                        (a controller that never got an SM, a client that
//                        never gets an answer) is a failure, not a hang
//   wait_kernels         the same for the legacy default stream (kernels
//                        launched with <<<grid, block>>>)
//   AbortHook            while one lives, abort_run stops (and reports) what
//                        it names: a running controller (watch.h registers them)
//   abort_run            stop every hooked controller, print their state and
//                        end the process at once, with status 1
//   DeviceRetry          device side: a bounded retry of GPUMEM_EAGAIN with
//                        __nanosleep between tries
//   no_gpu()             true (with a message) only where there is no CUDA
//                        device or no driver; any other CUDA error fails the
//                        program; GPUMEM_REQUIRE_GPU=1 turns the skip into a
//                        failure (make gpu-* sets it where nvidia-smi lists a GPU)
//   parse_args           --small (fewer threads, for compute-sanitizer), --fused
#ifndef GPUMEM_TEST_CUDA_CHECK_H
#define GPUMEM_TEST_CUDA_CHECK_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// ---- ending a run that has gone wrong ----------------------------------------

/* What abort_run stops and reports: the hooks of the controllers running now
 * (the watchdogs of watch.h register theirs for as long as they watch). */
struct AbortHook {
    void (*stop)(void *);
    size_t (*report)(void *, char *, size_t);
    void *ctx;
};
static AbortHook abort_hooks[8];
static int n_abort_hooks = 0;

/* Stop every hooked controller, print its state, and end the process with
 * status 1. _exit, not exit: exit's handlers include CUDA's teardown, which
 * may wait for kernels that never end (a client spinning on a controller
 * that died). The report reads GPU memory, which a wedged device may never
 * answer: alarm bounds the whole of it (SIGALRM ends the process, status
 * 142). */
[[noreturn]] static inline void abort_run(const char *why) {
    static char text[1 << 20];
    alarm(20);
    fprintf(stderr, "abort: %s: stopping %d controller(s) and ending the run\n", why, n_abort_hooks);
    for (int i = n_abort_hooks - 1; i >= 0; i--)
        if (abort_hooks[i].stop) abort_hooks[i].stop(abort_hooks[i].ctx);
    for (int i = n_abort_hooks - 1; i >= 0; i--)
        if (abort_hooks[i].report) {
            text[0] = 0;
            abort_hooks[i].report(abort_hooks[i].ctx, text, sizeof text);
            fputs(text, stderr);
        }
    fflush(NULL);
    _exit(1);
}

/* While one lives, abort_run stops and reports what it names. Made and
 * destroyed on one thread, innermost last (a stack). */
struct AbortScope {
    int index;
    AbortScope(void (*stop)(void *), size_t (*report)(void *, char *, size_t), void *ctx) {
        if (n_abort_hooks == (int)(sizeof abort_hooks / sizeof abort_hooks[0])) {
            fprintf(stderr, "AbortScope: more than %d at once\n", n_abort_hooks);
            abort_run("too many abort hooks");
        }
        index = n_abort_hooks;
        abort_hooks[n_abort_hooks++] = AbortHook{stop, report, ctx};
    }
    ~AbortScope() { n_abort_hooks = index; }
    AbortScope(const AbortScope &) = delete;
    AbortScope &operator=(const AbortScope &) = delete;
};

#define CHECK(x)                                                                                \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            abort_run("CUDA call failed");                                                      \
        }                                                                                       \
    } while (0)

// ---- tests ---------------------------------------------------------------------

static int test_failures = 0; /* in the current test */
static int tests_failed = 0;  /* tests of this program that failed */

#define EXPECT(cond, ...)                                        \
    do {                                                         \
        if (!(cond)) {                                           \
            fprintf(stderr, "  check failed %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fputc('\n', stderr);                                 \
            test_failures++;                                     \
        }                                                        \
    } while (0)

static inline void test_begin(void) { test_failures = 0; }

/* Prints "PASS name: detail" or "FAIL name: detail". */
static inline void test_end(const char *name, const char *detail) {
    printf("%s %s: %s\n", test_failures ? "FAIL" : "PASS", name, detail);
    fflush(stdout);
    if (test_failures) tests_failed++;
}

static inline double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// ---- bounded waits ---------------------------------------------------------------

/* Wait for `s` up to `seconds`; on timeout print FAIL naming `what` and
 * abort_run (which stops the hooked controllers: the process must end, and
 * must not block in a cudaFree that waits for the stuck kernels). A kernel
 * fault is reported through CHECK. */
static inline void wait_stream(cudaStream_t s, double seconds, const char *what) {
    double end = wall_s() + seconds;
    cudaError_t e;
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
        if (wall_s() > end) {
            printf("FAIL %s: not finished after %.0f s (hung?)\n", what, seconds);
            fflush(stdout);
            abort_run(what);
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (e != cudaSuccess) fprintf(stderr, "%s: ", what);
    CHECK(e);
}

/* The longest a test waits for its kernels, in seconds: 150, below make
 * gpu-test's most for one process (GPU_TEST_BOUND, 200 s), or 5 s under the
 * bound of this run when it is told one (GPUMEM_RUN_BOUND_S: make gpu-test
 * shares its deadline out, tools/gpu-runs.sh), so that a slow or stuck test
 * fails with its own report (abort_run) before `timeout` kills it without
 * one. The watchdogs catch a stall (no progress) sooner. */
static inline double test_wait_s() {
    const char *bound = getenv("GPUMEM_RUN_BOUND_S");
    const double s = bound && atof(bound) > 0 ? atof(bound) - 5 : 150;
    return s > 150 ? 150 : s < 1 ? 1 : s;
}
static const double kTestWaitS = test_wait_s();

/* Kernels launched on the legacy default stream (no persistent kernel runs
 * there: a GPU controller always has a stream of its own). */
static inline void wait_kernels(double seconds, const char *what) { wait_stream(0, seconds, what); }
// A kernel just launched: its launch error, then its end within the test's
// bound (kTestWaitS; what names the step when it hangs).
static inline void wait_launched(const char *what) {
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, what);
}

#if defined(__CUDACC__)
/* A device-side retry of a call that answered GPUMEM_EAGAIN (a full cache,
 * no command ID free): sleeps between tries (__nanosleep, doubling from 32 ns
 * to 4 us; a hot spin would steal issue slots from the threads that would
 * free what it waits for), and gives up once the refusals have lasted
 * kRetryLimitNs by the GPU's global timer, leaving the status EAGAIN for the
 * caller to count as a failure. The limit only bounds a hang.
 *   DeviceRetry retry;
 *   while ((st = gpumem_cache_ref_get(&r, w, &v)) == GPUMEM_EAGAIN && retry.pause()) eagain++;
 */
struct DeviceRetry {
    static constexpr unsigned long long kRetryLimitNs = 30000000000ull; // 30 s
    unsigned long long until = 0;
    unsigned ns = 32;
    __device__ bool pause() {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (until == 0) until = now + kRetryLimitNs;
        else if (now > until) return false;
        __nanosleep(ns);
        if (ns < 4096) ns *= 2;
        return true;
    }
};
#endif

// ---- is there a GPU? -------------------------------------------------------------

static inline bool gpu_required(void) {
    const char *r = getenv("GPUMEM_REQUIRE_GPU");
    return r && *r && strcmp(r, "0") != 0;
}

/* Returns 1 (with a message) where this machine has no CUDA device or no
 * driver for it: then a program has nothing to run. Any other CUDA error
 * means a GPU is there and something is wrong: it ends the program with
 * status 1. With GPUMEM_REQUIRE_GPU set (make gpu-* sets it where nvidia-smi
 * lists a GPU), no GPU is a failure too, never a silent skip. */
static inline int no_gpu(const char *prog) {
    int n = 0, driver = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    bool absent = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary ||
                  (e == cudaSuccess && n == 0);
    if (e == cudaSuccess && n > 0) return 0;
    cudaDriverGetVersion(&driver); // 0 where no driver (libcuda.so.1) is loaded
    if (!absent) {
        printf("FAIL %s: cudaGetDeviceCount: %s (%s); driver version %d: a GPU may be present but is unusable\n",
               prog, cudaGetErrorName(e), cudaGetErrorString(e), driver);
        exit(1);
    }
    const char *why = e == cudaSuccess ? "no CUDA device" : cudaGetErrorString(e);
    char drv[64];
    if (driver) snprintf(drv, sizeof drv, "driver version %d", driver);
    else snprintf(drv, sizeof drv, "no CUDA driver (libcuda.so.1) loaded");
    if (gpu_required()) {
        printf("FAIL %s: GPUMEM_REQUIRE_GPU is set, but %s (%s; %s)\n", prog, why, cudaGetErrorName(e), drv);
        exit(1);
    }
    printf("SKIP %s: no GPU here: %s (%s; %s); nothing run\n", prog, why, cudaGetErrorName(e), drv);
    return 1;
}

/* The arguments every CUDA test takes: --small (fewer threads and smaller
 * data, for compute-sanitizer, which runs kernels about 100x slower) and
 * --fused (tests that run a GPU-resident controller run it in block 0 of a
 * cooperative launch with the clients). Anything else ends the program with
 * its usage: a misspelt flag must not silently run the full-size test. */
struct TestArgs {
    bool small = false, fused = false;
};
static inline TestArgs parse_args(int argc, char **argv, bool takes_fused) {
    TestArgs a;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) a.small = true;
        else if (takes_fused && !strcmp(argv[i], "--fused")) a.fused = true;
        else {
            fprintf(stderr, "usage: %s [--small]%s\n", argv[0], takes_fused ? " [--fused]" : "");
            exit(2);
        }
    }
    return a;
}
#endif
