/* Criterion tests of issue 30: a request is a handle the pair checks. A
 * stale copy, a request of another pair, a request submitted twice while in
 * flight, one never submitted and one whose submit was refused each get a
 * status and a log line, and leave the pair whole: afterwards it serves
 * every command ID it has (async_limit requests at once, then blocking
 * reads of every block, checked by content), its budget is back at 0, and
 * the controller is destroyed. And a cache whose pairs serve namespaces of
 * different block sizes is refused at creation, with the pair and both
 * sizes in words; where init cannot read the pairs, it refuses the other
 * pairs' I/O with a status and a counted violation, never reading wrong
 * bytes. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include "log_capture.h"

#include <criterion/criterion.h>
#include <string.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"

TestSuite(handle, .timeout = 120);

#define BLOCKS 64u

/* A started controller of BLOCKS 512-byte blocks, block b holding the byte
 * (b * 7 + 1), with `pairs` pairs of depth 16 and 16 IDs. */
static gpumem_swctl *ctl_with(uint32_t pairs, gpumem_nvme_qp **qp) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    static unsigned char ram[BLOCKS * 512];
    uint32_t b, i;
    for (b = 0; b < BLOCKS; b++) memset(ram + (size_t)b * 512, (int)(b * 7 + 1), 512);
    cfg.n_blocks = BLOCKS;
    cfg.ram = ram;
    cr_assert_eq(gpumem_swctl_create(&cfg, &ctl), GPUMEM_OK);
    for (i = 0; i < pairs; i++) cr_assert_eq(gpumem_swctl_add_qp_ex(ctl, 16, 16, 0, &qp[i]), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    return ctl;
}

/* The pair is whole: async_limit requests out at once (every ID the
 * asynchronous budget allows), each read checked by content, then a
 * blocking read of every block; the budget is back at 0 and the pair
 * idle. */
static void expect_whole(gpumem_nvme_qp *qp) {
    static unsigned char bufs[16][512];
    gpumem_nvme_req reqs[16];
    uint32_t i, n = qp->async_limit;
    cr_assert_leq(n, 16u);
    memset(reqs, 0, sizeof reqs);
    for (i = 0; i < n; i++)
        cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, i, 1, bufs[i], &reqs[i]), GPUMEM_OK,
                     "request %u of %u: the pair must still have every ID", i, n);
    for (i = 0; i < n; i++) {
        cr_assert_eq(gpumem_nvme_qp_wait(qp, &reqs[i]), GPUMEM_OK);
        cr_assert_eq(bufs[i][0], (unsigned char)(i * 7 + 1));
        cr_assert_eq(bufs[i][511], (unsigned char)(i * 7 + 1));
    }
    for (i = 0; i < BLOCKS; i++) {
        cr_assert_eq(gpumem_nvme_qp_read_buf(qp, i, 1, bufs[0], NULL), GPUMEM_OK);
        cr_assert_eq(bufs[0][100], (unsigned char)(i * 7 + 1));
    }
    cr_assert_eq(GPUMEM__GATE_UNITS(qp->inflight.v), 0u, "the budget must be back at 0, not %u",
                 GPUMEM__GATE_UNITS(qp->inflight.v));
    cr_assert_eq(gpumem_nvme_qp_check_idle(qp), GPUMEM_OK);
}

/* Finding 1: waiting on (and polling) a copy of a request that finished. */
Test(handle, stale_copy_is_refused) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = ctl_with(1, &qp);
    static unsigned char buf[512];
    gpumem_nvme_req req, copy;
    memset(&req, 0, sizeof req);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 3, 1, buf, &req), GPUMEM_OK);
    copy = req;
    cr_assert_eq(gpumem_nvme_qp_wait(qp, &req), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_OK, "the request itself keeps its result");
    EXPECT_LOG("not in flight", cr_assert_eq(gpumem_nvme_qp_wait(qp, &copy), GPUMEM_ESTATE));
    EXPECT_LOG("not in flight", cr_assert_eq(gpumem_nvme_qp_poll(qp, &copy), GPUMEM_ESTATE));
    EXPECT_LOG("not in flight", cr_assert_eq(gpumem_nvme_req_busy(qp, &copy), -(int)GPUMEM_ESTATE));
    expect_whole(qp);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* Finding 1: a request passed to a pair it does not belong to. Pair B's
 * ID word for the same CID is left done by a blocking read first, which
 * is what made 0.3's poll take B's result and give back a unit of B's
 * budget it never took. */
Test(handle, foreign_request_is_refused) {
    gpumem_nvme_qp *qp[2];
    gpumem_swctl *ctl = ctl_with(2, qp);
    static unsigned char buf[512];
    gpumem_nvme_req req;
    memset(&req, 0, sizeof req);
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp[1], 0, 1, buf, NULL), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp[0], GPUMEM_NVME_OP_READ, 5, 1, buf, &req), GPUMEM_OK);
    EXPECT_LOG("another pair", cr_assert_eq(gpumem_nvme_qp_poll(qp[1], &req), GPUMEM_EINVAL));
    EXPECT_LOG("another pair", cr_assert_eq(gpumem_nvme_qp_wait(qp[1], &req), GPUMEM_EINVAL));
    EXPECT_LOG("another pair", cr_assert_eq(gpumem_nvme_req_busy(qp[1], &req), -(int)GPUMEM_EINVAL));
    cr_assert_eq(gpumem_nvme_qp_wait(qp[0], &req), GPUMEM_OK, "its own pair still completes it");
    cr_assert_eq(buf[0], 5 * 7 + 1);
    EXPECT_LOG("another pair", cr_assert_eq(gpumem_nvme_qp_poll(qp[1], &req), GPUMEM_EINVAL));
    expect_whole(qp[0]);
    expect_whole(qp[1]);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* Finding 2: a request submitted again while it is in flight. */
Test(handle, double_submit_is_refused) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = ctl_with(1, &qp);
    static unsigned char buf[512], other[512];
    gpumem_nvme_req req;
    memset(&req, 0, sizeof req);
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK); /* so that it is surely still in flight */
    gpumem_nvme_qp_signals_set_stopped(qp->signals, 0);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 9, 1, buf, &req), GPUMEM_OK);
    EXPECT_LOG("in flight on this pair",
               cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 10, 1, other, &req), GPUMEM_ESTATE));
    cr_assert_eq(GPUMEM__GATE_UNITS(qp->inflight.v), 1u, "the refused submit took nothing");
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_wait(qp, &req), GPUMEM_OK, "the first command still completes");
    cr_assert_eq(buf[0], 9 * 7 + 1);
    /* Collected: the request may be submitted again. */
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 10, 1, other, &req), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_wait(qp, &req), GPUMEM_OK);
    cr_assert_eq(other[0], 10 * 7 + 1);
    expect_whole(qp);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* Finding 3: a finished request reused in a submit that is refused
 * (GPUMEM_EAGAIN) reads as never submitted: no earlier result is handed
 * out for a command that was never sent. */
Test(handle, refused_submit_reads_never_submitted) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = ctl_with(1, &qp);
    static unsigned char bufs[17][512];
    gpumem_nvme_req reqs[16], reused;
    uint32_t i, n = qp->async_limit;
    memset(reqs, 0, sizeof reqs);
    memset(&reused, 0, sizeof reused);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 1, 1, bufs[16], &reused), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_wait(qp, &reused), GPUMEM_OK);
    for (i = 0; i < n; i++)
        cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, i, 1, bufs[i], &reqs[i]), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 2, 1, bufs[16], &reused), GPUMEM_EAGAIN);
    EXPECT_LOG("never submitted", cr_assert_eq(gpumem_nvme_qp_wait(qp, &reused), GPUMEM_ESTATE));
    EXPECT_LOG("never submitted", cr_assert_eq(gpumem_nvme_qp_poll(qp, &reused), GPUMEM_ESTATE));
    cr_assert_eq(gpumem_nvme_req_busy(qp, &reused), 0);
    for (i = 0; i < n; i++) cr_assert_eq(gpumem_nvme_qp_wait(qp, &reqs[i]), GPUMEM_OK);
    expect_whole(qp);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* Finding 3: leftover bytes that read "submitted, on this pair, deadline in
 * the future" and name a free ID: refused at once, never waited on. */
Test(handle, leftover_bytes_are_refused) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = ctl_with(1, &qp);
    gpumem_nvme_req junk, zero;
    memset(&junk, 0xA5, sizeof junk);
    junk.state = 1; /* submitted */
    junk.cid = 3;   /* an ID nobody holds */
    junk.deadline_ns = gpumem_clock_ns() + 3600ull * 1000000000ull;
    EXPECT_LOG("another pair", cr_assert_eq(gpumem_nvme_qp_wait(qp, &junk), GPUMEM_EINVAL));
    junk.pair = qp->tag; /* as if an earlier request of this very pair had left them */
    EXPECT_LOG("not in flight", cr_assert_eq(gpumem_nvme_qp_wait(qp, &junk), GPUMEM_ESTATE));
    memset(&zero, 0, sizeof zero);
    EXPECT_LOG("never submitted", cr_assert_eq(gpumem_nvme_qp_wait(qp, &zero), GPUMEM_ESTATE));
    EXPECT_LOG("never submitted", cr_assert_eq(gpumem_nvme_qp_poll(qp, &zero), GPUMEM_ESTATE));
    expect_whole(qp);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* The accounting: many copies of finished requests waited on, again and
 * again, never move the budget; a request's own pair keeps every ID. */
Test(handle, budget_never_wraps) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = ctl_with(1, &qp);
    static unsigned char buf[512];
    gpumem_nvme_req req, copies[8];
    uint32_t k, round;
    memset(&req, 0, sizeof req);
    for (round = 0; round < 8; round++) {
        cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, round, 1, buf, &req), GPUMEM_OK);
        copies[round] = req;
        cr_assert_eq(gpumem_nvme_qp_wait(qp, &req), GPUMEM_OK);
        cr_assert_eq(buf[0], (unsigned char)(round * 7 + 1));
    }
    for (k = 0; k < 8; k++)
        EXPECT_LOG("not in flight", cr_assert_eq(gpumem_nvme_qp_wait(qp, &copies[k]), GPUMEM_ESTATE));
    cr_assert_eq(GPUMEM__GATE_UNITS(qp->inflight.v), 0u);
    expect_whole(qp);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* Finding 5: two controllers with different block sizes behind one cache,
 * given the 4 KiB namespace. gpumem_cache_create reads the pairs and
 * refuses; so it does a third controller of 4 KiB blocks too small for the
 * lines it would serve. gpumem_cache_init, in this plain build, cannot tell
 * whether the pairs are in GPU memory and leaves them to each I/O: lines
 * are striped, even lines on the 512-byte controller (refused, counted),
 * odd lines on the 4 KiB one (read right). */
Test(handle, mixed_block_sizes_are_refused) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *small, *big, *tiny;
    gpumem_nvme_qp *pairs[2], *short_pairs[2];
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c = NULL;
    gpumem_cache_stats st;
    gpumem_nvme_ns ns;
    static unsigned char ram_small[512 * 512], ram_big[64 * 4096], ram_tiny[4 * 4096];
    static _Alignas(4096) unsigned char slots[4 * 4096];
    static _Alignas(8) unsigned char meta[4096];
    static _Alignas(64) gpumem_cache cache;
    uint64_t line, s;
    uint32_t refused = 0;
    memset(ram_small, 0xEE, sizeof ram_small);
    for (s = 0; s < 64; s++) memset(ram_big + s * 4096, (int)((2 * s + 1) * 3 & 0xFF), 4096);
    cfg.ram = ram_small;
    cfg.n_blocks = 512;
    cr_assert_eq(gpumem_swctl_create(&cfg, &small), GPUMEM_OK);
    cfg.ram = ram_big;
    cfg.lba_bytes = 4096;
    cfg.n_blocks = 64;
    cr_assert_eq(gpumem_swctl_create(&cfg, &big), GPUMEM_OK);
    cfg.ram = ram_tiny;
    cfg.n_blocks = 4;
    cr_assert_eq(gpumem_swctl_create(&cfg, &tiny), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(small, 16, &pairs[0]), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(big, 16, &pairs[1]), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(tiny, 16, &short_pairs[1]), GPUMEM_OK);
    short_pairs[0] = pairs[1];
    cr_assert_eq(gpumem_swctl_start(small), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_start(big), GPUMEM_OK);
    ns = gpumem_swctl_ns(big);
    d.backing = gpumem_cache_backing_nvme(pairs, 2, 1, &ns, 0, GPUMEM_CACHE_STRIPE);
    d.n_slots = 4;
    d.n_lines = 16;
    d.line_bytes = 4096;
    EXPECT_LOG("pair 0 (controller 0) serves 512-byte blocks, the backing's namespace 4096-byte",
               cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL));
    d.backing = gpumem_cache_backing_nvme(short_pairs, 2, 1, &ns, 0, GPUMEM_CACHE_STRIPE);
    EXPECT_LOG("pair 1 (controller 1) serves 4 blocks, the cache reaches block 7",
               cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_ERANGE));
    cr_assert_null(c, "nothing made");
    /* Where init cannot read the pairs: each I/O checks. */
    d.backing = gpumem_cache_backing_nvme(pairs, 2, 1, &ns, 0, GPUMEM_CACHE_STRIPE);
    cr_assert_leq(gpumem_cache_meta_bytes(&d), sizeof meta);
    d.meta = meta, d.meta_bytes = sizeof meta, d.data = slots;
    cr_assert_eq(gpumem_cache_init(&cache, &d), GPUMEM_OK);
    c = &cache;
    for (line = 0; line < 16; line++) {
        void *data = NULL;
        gpumem_status got = gpumem_cache_acquire(c, line, 1, 0, &data);
        if (line % 2 == 0) {
            cr_assert_neq(got, GPUMEM_OK, "line %llu lies on the 512-byte controller", (unsigned long long)line);
            refused++;
            continue;
        }
        cr_assert_eq(got, GPUMEM_OK);
        cr_assert_eq(((unsigned char *)data)[0], (unsigned char)(line * 3));
        cr_assert_eq(((unsigned char *)data)[4095], (unsigned char)(line * 3));
        cr_assert_eq(gpumem_cache_release(c, line, 1), GPUMEM_OK);
    }
    cr_assert_eq(gpumem_cache_get_stats(c, &st), GPUMEM_OK);
    cr_assert_geq(st.violations, refused, "each refused I/O is a counted violation");
    cr_assert_eq(refused, 8u);
    cr_assert_eq(GPUMEM__GATE_UNITS(pairs[0]->inflight.v), 0u);
    cr_assert_eq(gpumem_nvme_qp_check_idle(pairs[0]), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(small), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(big), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(tiny), GPUMEM_OK);
}
