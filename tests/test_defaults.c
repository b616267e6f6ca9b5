/* The defaults rule (docs/headers.md, "Descriptions and configurations"):
 * in every _config, as in every _desc, a zero field takes its default, and
 * gpumem_X_config_resolved shows the values the library will use. Each test
 * starts from a zeroed struct, as a C user who writes `= {0}` does, and
 * checks that the service works with it and that the resolved values are
 * the documented ones; and that a resolved config resolves to itself. */
#define _GNU_SOURCE
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem_swctl.h"
#include "gpumem_uring.h"
#include "gpumem_nvmectl.h"
#include "gpumem_doctor.h"
#include "block_content.h"
#include "uring_open.h"

/* A resolved config resolves to itself, and _default() is the resolved zero
 * config: `r` resolved from zero, `again` scratch, X the module. */
#define EXPECT_RESOLVED_IS_FIXED(X, r, again)                                                        \
    do {                                                                                               \
        again = gpumem_##X##_config_resolved(&r);                                                      \
        cr_assert_eq(memcmp(&again, &r, sizeof r), 0, #X ": resolving twice changes nothing");         \
        again = gpumem_##X##_config_default();                                                         \
        cr_assert_eq(memcmp(&again, &r, sizeof r), 0, #X ": _default() is the resolved zero config"); \
    } while (0)

Test(defaults, zeroed_swctl_config_is_a_ram_namespace) {
    gpumem_swctl_config zero, r, again;
    gpumem_swctl *ctl = NULL;
    gpumem_nvme_qp *qp;
    gpumem_nvme_ns ns;
    unsigned char out[512], in[512];
    memset(&zero, 0, sizeof zero);
    r = gpumem_swctl_config_resolved(&zero);
    cr_assert_eq(r.lba_bytes, 512);
    cr_assert_eq(r.n_blocks, 65536);
    cr_assert_eq(r.fd, -1, "fd 0 is no file: the controller allocates RAM");
    cr_assert_eq(r.max_blocks, 256);
    cr_assert_eq(r.max_pending, 4096);
    cr_assert_neq(r.seed, 0);
    cr_assert_eq(r.idle_spin_ns, GPUMEM_SWCTL_DEFAULT_SPIN_NS);
    cr_assert_eq(r.park_ns, GPUMEM_SWCTL_DEFAULT_PARK_NS);
    EXPECT_RESOLVED_IS_FIXED(swctl, r, again);
    /* A named value where 0 would mean something: park at once. */
    zero.idle_spin_ns = GPUMEM_SWCTL_NO_SPIN;
    cr_assert_eq(gpumem_swctl_config_resolved(&zero).idle_spin_ns, GPUMEM_SWCTL_NO_SPIN);
    zero.idle_spin_ns = 0;

    cr_assert_eq(gpumem_swctl_create(&zero, &ctl), GPUMEM_OK);
    ns = gpumem_swctl_ns(ctl);
    cr_assert_eq(ns.n_blocks, 65536);
    cr_assert_eq(ns.lba_shift, 9);
    cr_assert_eq(ns.max_blocks, 256);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &qp), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    fill_block(out, 77, 1);
    cr_assert_eq(gpumem_nvme_qp_write_buf(qp, 77, 1, out, NULL), GPUMEM_OK);
    memset(in, 0, sizeof in);
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 77, 1, in, NULL), GPUMEM_OK);
    cr_assert_eq(memcmp(in, out, sizeof in), 0, "a block written through a zeroed config reads back");
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

Test(defaults, zeroed_uringctl_config_serves_a_file) {
    char path[] = "/tmp/gpumem-defaults-XXXXXX";
    gpumem_uringctl_config zero, r, again;
    gpumem_uringctl *ctl;
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, 1 << 20), 0);
    close(fd);
    memset(&zero, 0, sizeof zero);
    r = gpumem_uringctl_config_resolved(&zero);
    cr_assert_eq(r.n_threads, 1);
    cr_assert_eq(r.ring_entries, 256);
    cr_assert_eq(r.max_blocks, 256);
    cr_assert_eq(r.lba_bytes, 512);
    cr_assert_eq(r.idle_spin_ns, GPUMEM_TARGET_DEFAULT_SPIN_NS);
    cr_assert_eq(r.park_ns, GPUMEM_TARGET_DEFAULT_PARK_NS);
    cr_assert_eq(r.cmd_timeout_ms, 0, "0 stays: the pairs' own default (30 s)");
    EXPECT_RESOLVED_IS_FIXED(uringctl, r, again);

    ctl = uring_open_or_skip(zero, path); /* a zeroed config and a path */
    cr_assert_eq(gpumem_uringctl_ns(ctl).n_blocks, (1u << 20) / 512);
    cr_assert_eq(gpumem_uringctl_ns(ctl).lba_shift, 9);
    cr_assert_eq(gpumem_uringctl_destroy(ctl), GPUMEM_OK);
    unlink(path);
}

Test(defaults, zeroed_nvmectl_config_resolves) {
    gpumem_nvmectl_config zero, r, again;
    gpumem_nvmectl *ctl = (gpumem_nvmectl *)1;
    char why[320];
    memset(&zero, 0, sizeof zero);
    r = gpumem_nvmectl_config_resolved(&zero);
    cr_assert_eq(r.nsid, 1);
    cr_assert_eq(r.max_pairs, 16);
    cr_assert_eq(r.admin_depth, 32);
    cr_assert_eq(r.timeout_ms, 10000);
    cr_assert_eq(r.small_pages, 0, "huge pages where there are any");
    EXPECT_RESOLVED_IS_FIXED(nvmectl, r, again);
    /* A zeroed config gets past the range checks: what stops it here is
     * the missing device, not a field left 0. */
    zero.pci_addr = "0000:ff:1f.7";
    zero.error = why;
    zero.error_bytes = sizeof why;
    cr_assert_eq(gpumem_nvmectl_open(&zero, &ctl), GPUMEM_ENODEV, "reason: %s", why);
    cr_assert_null(ctl);
}

Test(defaults, zeroed_doctor_config_is_this_machine_and_this_user) {
    gpumem_doctor_config zero, r, again;
    gpumem_doctor_report rep;
    memset(&zero, 0, sizeof zero);
    r = gpumem_doctor_config_resolved(&zero);
    cr_assert_str_eq(r.root, "/");
    cr_assert_eq(r.pairs, 16);
    cr_assert_eq(r.depth, 1024);
    cr_assert_eq(r.io_bytes, 128u << 10);
    cr_assert_eq(r.uid, (uint32_t)geteuid());
    cr_assert_eq(r.gid, (uint32_t)getegid());
    EXPECT_RESOLVED_IS_FIXED(doctor, r, again);
    /* Root (id 0) is a value 0 cannot name: a constant that stays itself. */
    zero.uid = gpumem_doctor_id(0);
    cr_assert_eq(zero.uid, GPUMEM_DOCTOR_ROOT_ID);
    cr_assert_eq(gpumem_doctor_id(1000), 1000);
    r = gpumem_doctor_config_resolved(&zero);
    cr_assert_eq(r.uid, GPUMEM_DOCTOR_ROOT_ID);
    again = gpumem_doctor_config_resolved(&r);
    cr_assert_eq(again.uid, GPUMEM_DOCTOR_ROOT_ID, "resolving twice keeps root");
    /* A zeroed config runs a check (the host path reads only /proc and /sys). */
    memset(&zero, 0, sizeof zero);
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_uring(&zero, &rep), GPUMEM_OK);
    cr_assert_gt(rep.n, 0, "the uring path said something");
    gpumem_doctor_report_free(&rep);
}
