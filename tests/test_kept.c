/* Nothing a caller passes by pointer is kept unless the API says so. Built
 * with AddressSanitizer and run with detect_stack_use_after_return=1 by
 * `make test`: every init function here is handed descriptions and arrays
 * that live in the frame of a function that has returned by the time the
 * object is used, so a kept pointer is reported as stack-use-after-return
 * and the test process dies. (Version 0.3.0 kept the cache's pairs array:
 * the first miss after the frame returned read it.) */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "block_content.h"
#include "bare_pair.h"

enum { N_PAIRS = 4, N_LINES = 256, N_SLOTS = 8 };

/* The cache is created from a pairs array and a description that are locals
 * of this frame; only the cache pointer outlives it. */
static gpumem_cache *cache_from_a_frame_that_returns(gpumem_swctl *ctl, gpumem_nvme_qp *const *made) {
    gpumem_nvme_qp *pairs[N_PAIRS];
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_nvme_ns ns = gpumem_swctl_ns(ctl);
    gpumem_cache *c = NULL;
    memcpy(pairs, made, sizeof pairs);
    d.n_lines = N_LINES;
    d.line_bytes = LBA;
    d.n_slots = N_SLOTS;
    d.backing = gpumem_cache_backing_nvme(pairs, 1, N_PAIRS, &ns, 0, GPUMEM_CACHE_STRIPE);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    return c;
}

/* The same for a queue pair initialised by hand: the description is a local. */
static gpumem_nvme_qp_desc pair_from_a_frame_that_returns(gpumem_nvme_qp *qp) {
    gpumem_nvme_qp_desc d = bare_pair_desc(8, 64, 8);
    cr_assert_eq(gpumem_nvme_qp_init(qp, &d), GPUMEM_OK);
    return d; /* only for the test to look at the rings afterwards */
}

Test(kept, cache_copies_the_pairs_array) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl = NULL;
    gpumem_nvme_qp *made[N_PAIRS];
    gpumem_cache *c;
    unsigned char *ram;
    gpumem_swctl_stats s;
    uint32_t line, round, i;
    cfg.lba_bytes = LBA;
    cfg.n_blocks = N_LINES;
    cr_assert_eq(gpumem_swctl_create(&cfg, &ctl), GPUMEM_OK);
    for (i = 0; i < N_PAIRS; i++) cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &made[i]), GPUMEM_OK);
    ram = gpumem_swctl_ram(ctl);
    for (line = 0; line < N_LINES; line++) fill_block(ram + (size_t)line * LBA, line, 3);
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    c = cache_from_a_frame_that_returns(ctl, made);
    /* Other calls reuse the stack where that frame was. */
    {
        volatile unsigned char scribble[4096];
        for (i = 0; i < sizeof scribble; i++) scribble[i] = (unsigned char)i;
    }
    for (round = 0; round < 2; round++) /* 2 * 256 misses through a cache of 8 slots */
        for (line = 0; line < N_LINES; line++) {
            void *p = NULL;
            cr_assert_eq(gpumem_cache_acquire(c, line, 1, 0, &p), GPUMEM_OK, "line %u", line);
            cr_assert(block_ok((const unsigned char *)p, line, 3), "line %u read by content", line);
            cr_assert_eq(gpumem_cache_release(c, line, 1), GPUMEM_OK);
        }
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    gpumem_swctl_get_stats(ctl, &s);
    cr_assert_eq(s.reads, 2 * N_LINES, "every miss reached the controller");
    cr_assert_eq(s.violations, 0);
    gpumem_cache_destroy(c);
    gpumem_swctl_destroy(ctl);
}

Test(kept, queue_pair_keeps_only_its_memory) {
    gpumem_nvme_qp qp;
    gpumem_nvme_req req;
    gpumem_nvme_cmd cmd;
    gpumem_nvme_qp_desc d = pair_from_a_frame_that_returns(&qp);
    /* Submit one command: reads the pair's fields, none of the description. */
    cr_assert_eq(gpumem_nvme_cmd_flush(&cmd, &qp.ns), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_submit(&qp, &cmd, &req), GPUMEM_OK);
    cr_assert_eq(*d.sq_doorbell, 1, "the command reached the SQ doorbell");
    cr_assert_eq(d.sq[0].cdw0 & 0xFFu, GPUMEM_NVME_OP_FLUSH);
}
