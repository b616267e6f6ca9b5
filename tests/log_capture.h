/* The library's log hook (GPUMEM_LOG) for the tests: a test that provokes an
 * error message on purpose captures it with EXPECT_LOG and checks its words,
 * so a passing `make test` prints no error-like lines. Messages nobody
 * expected still go to stderr, as without this file. Include it before any
 * gpumem header. */
#ifndef GPUMEM_TEST_LOG_CAPTURE_H
#define GPUMEM_TEST_LOG_CAPTURE_H
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char test_log[4096];
static size_t test_log_len;
static int test_log_capturing;
static pthread_mutex_t test_log_lock = PTHREAD_MUTEX_INITIALIZER;

static void test_log_add(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&test_log_lock);
    if (test_log_capturing) {
        int n = vsnprintf(test_log + test_log_len, sizeof test_log - test_log_len, fmt, ap);
        if (n > 0) test_log_len += (size_t)n < sizeof test_log - test_log_len ? (size_t)n : sizeof test_log - test_log_len - 1;
        if (test_log_len + 1 < sizeof test_log) test_log[test_log_len++] = '\n';
        test_log[test_log_len] = 0;
    } else {
        fputs("gpumem: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    pthread_mutex_unlock(&test_log_lock);
    va_end(ap);
}
#define GPUMEM_LOG(...) test_log_add(__VA_ARGS__)

/* Runs `call` with the log captured; the log must then contain `words`. */
#define EXPECT_LOG(words, call)                                                                          \
    do {                                                                                                 \
        test_log_len = 0;                                                                                \
        test_log[0] = 0;                                                                                 \
        test_log_capturing = 1;                                                                          \
        call;                                                                                            \
        test_log_capturing = 0;                                                                          \
        cr_assert(strstr(test_log, (words)) != NULL, "expected a log message with \"%s\"; got \"%s\"", \
                  (words), test_log);                                                                    \
    } while (0)
#endif
