// Helpers shared by the CUDA tests and benchmarks.
//   CHECK(cudaCall)      exit with the file, line, call and CUDA's message on error
//   EXPECT(cond, ...)    count a failed check of the current test, with a message
//   test_begin/test_end  one PASS/FAIL line per test
//   wait_stream          wait for a stream with a deadline, so that a hang
//                        (a controller that never got an SM) is a failure
//   no_gpu()             true (with a message) where no CUDA device exists
//   GpuctlWatch/SwctlWatch  a watchdog on a controller: a stall prints every
//                        pair's state and ends the run (include gpumem_nvme.h
//                        with GPUMEM_IMPLEMENTATION first)
#ifndef GPUMEM_TEST_CUDA_CHECK_H
#define GPUMEM_TEST_CUDA_CHECK_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                                \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

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

/* Wait for `s` up to `seconds`; on timeout report and exit (the process exit
 * takes the stuck kernels with it). */
static inline void wait_stream(cudaStream_t s, double seconds, const char *what) {
    double end = wall_s() + seconds;
    cudaError_t e;
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
        if (wall_s() > end) {
            printf("FAIL %s: no progress in %.0f s (hung?)\n", what, seconds);
            fflush(stdout);
            exit(1);
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    CHECK(e);
}

#if defined(GPUMEM_NVME_H) && defined(GPUMEM_IMPLEMENTATION)
/* A watchdog on a running GPU-resident controller (gpumem_watchdog): when
 * its command count stops for stall_ms it prints every pair's client and
 * controller state (copied from GPU memory), stops the controller and ends
 * the process with status 1, naming what stalled. For the life of the
 * object. */
struct GpuctlWatch {
    const gpumem_nvme_gpuctl *ctl;
    const gpumem_nvme_gpuctl_desc *desc;
    gpumem_watchdog *wd = nullptr;
    static uint64_t progress(void *p) {
        gpumem_nvme_sw_stats s;
        return gpumem_nvme_gpuctl_get_stats_cuda(((GpuctlWatch *)p)->ctl, &s) == GPUMEM_OK ? s.commands : 0;
    }
    static void stop(void *p) { gpumem_nvme_gpuctl_stop(((GpuctlWatch *)p)->desc); }
    static size_t report(void *p, char *buf, size_t n) {
#if !defined(__CUDA_ARCH__) /* host code; the report exists in the host pass */
        return gpumem_nvme_gpuctl_report_cuda(((GpuctlWatch *)p)->ctl, buf, n, 0);
#else
        return (void)p, (void)buf, n;
#endif
    }
    GpuctlWatch(const gpumem_nvme_gpuctl *c, const gpumem_nvme_gpuctl_desc *d, const char *what, uint32_t stall_ms)
        : ctl(c), desc(d) {
        gpumem_watchdog_config w;
        memset(&w, 0, sizeof w);
        w.what = what;
        w.stall_ms = stall_ms;
        w.progress = progress;
        w.stop = stop;
        w.report = report;
        w.ctx = this;
        w.exit_code = 1;
        if (gpumem_watchdog_start(&w, &wd) != GPUMEM_OK) exit(1);
    }
    ~GpuctlWatch() { gpumem_watchdog_finish(wd); }
};

/* A watchdog on a host-thread controller serving GPU clients. */
struct SwctlWatch {
    gpumem_watchdog *wd = nullptr;
    SwctlWatch(gpumem_swctl *c, const char *what, uint32_t stall_ms) {
        gpumem_watchdog_config w = gpumem_swctl_watchdog_config(c, what, stall_ms);
        w.exit_code = 1;
        if (gpumem_watchdog_start(&w, &wd) != GPUMEM_OK) exit(1);
    }
    ~SwctlWatch() { gpumem_watchdog_finish(wd); }
};
#endif

static inline int no_gpu(const char *prog) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("%s: no CUDA device; nothing run\n", prog);
        return 1;
    }
    return 0;
}
#endif
