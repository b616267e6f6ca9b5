// Helpers shared by the CUDA tests and benchmarks.
//   CHECK(cudaCall)      exit with the file, line, call and CUDA's message on error
//   EXPECT(cond, ...)    count a failed check of the current test, with a message
//   test_begin/test_end  one PASS/FAIL line per test
//   wait_stream          wait for a stream with a deadline, so that a hang
//                        (a controller that never got an SM) is a failure
//   no_gpu()             true (with a message) where no CUDA device exists
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

static inline int no_gpu(const char *prog) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("%s: no CUDA device; nothing run\n", prog);
        return 1;
    }
    return 0;
}
#endif
