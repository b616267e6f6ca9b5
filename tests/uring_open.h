/* Open a forwarder on a test's file, or skip the test where io_uring is
 * off (a kernel without it, or a sandbox that forbids it): the one place
 * the tests decide what counts as "not available here". */
#ifndef TESTS_URING_OPEN_H
#define TESTS_URING_OPEN_H
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "gpumem_uring.h"

static inline gpumem_uringctl *uring_open_or_skip(gpumem_uringctl_config cfg, const char *path) {
    gpumem_uringctl *ctl = NULL;
    char why[256] = "";
    gpumem_status st;
    cfg.path = path;
    cfg.error = why;
    cfg.error_bytes = sizeof why;
    st = gpumem_uringctl_open(&cfg, &ctl);
    if (st == GPUMEM_ESYS && strstr(why, "io_uring")) {
        unlink(path);
        cr_skip_test("io_uring is not available here: %s", why);
    }
    cr_assert_eq(st, GPUMEM_OK, "open %s: %s", path, why);
    return ctl;
}
#endif
