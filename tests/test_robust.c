/* Criterion tests of issue 13: nothing hangs and nothing is lost silently.
 * Command-ID exhaustion (the reported configuration and a sweep around it,
 * under a watchdog), injected errors with the default status, overflow-checked
 * ranges, NULL and out-of-range arguments to every public function (one
 * table), timed forms, stopping a controller with waiters, destroying with
 * waiters or outstanding commands, and destroying a cache with dirty lines.
 * (Statistics read while running: tests/race_stats.c under ThreadSanitizer.) */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "gpumem_nvmectl.h"
#include "bare_pair.h"
#include "mix_workload.h"

TestSuite(robust, .timeout = 300);

static mix_cfg mix_base(uint32_t threads, uint32_t depth, uint32_t n_cids, uint32_t ios) {
    mix_cfg c;
    memset(&c, 0, sizeof c);
    c.threads = threads;
    c.depth = depth;
    c.n_cids = n_cids;
    c.ios = ios;
    c.region = 8;
    c.watchdog_s = 60; /* a bound on a hang, not a time limit on the work */
    return c;
}

static void mix_expect_clean(const mix_cfg *c) {
    mix_result r;
    const char *problem;
    mix_run(c, &r);
    problem = mix_problem(&r);
    cr_assert(problem == NULL, "%u threads, depth %u, %u IDs: %s", c->threads, c->depth, c->n_cids, problem);
    cr_assert_gt(r.issued, 0);
}

/* A controller of 64 blocks with one pair, `latency_ns` a command, all
 * commands failing if `fail_all` (status left at its default, 0), started
 * unless the caller still fills the namespace first. */
static gpumem_swctl *pair_ctl(uint64_t latency_ns, int fail_all, uint32_t depth, uint32_t n_cids, int start,
                              gpumem_nvme_qp **qp) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    cfg.n_blocks = 64;
    cfg.latency_ns = latency_ns;
    cfg.error_ppm = fail_all ? 1000000 : 0;
    cr_assert_eq(cfg.error_status, 0);
    cr_assert_eq(gpumem_swctl_create(&cfg, &ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp_ex(ctl, depth, n_cids, 0, qp), GPUMEM_OK);
    if (start) cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    return ctl;
}

/* ---- 1. command-ID exhaustion ------------------------------------------------ */

/* The reported configuration: 16 threads, depth 4, 8 command IDs, each thread
 * keeping one asynchronous command outstanding while it issues blocking ones.
 * 0.3.0 hangs here (every ID held by a request whose owner waits for an ID). */
Test(robust, id_exhaustion_reported_config) {
    mix_cfg c = mix_base(16, 4, 8, 300);
    mix_expect_clean(&c);
}

/* Around it: fewer and more threads, shallower and deeper queues, fewer and
 * more IDs than the depth, in order and reordered. */
Test(robust, id_exhaustion_sweep) {
    static const uint32_t threads[] = {4, 16, 32}, depths[] = {2, 4, 8}, cids[] = {2, 8, 32};
    uint32_t a, b, k;
    for (a = 0; a < 3; a++)
        for (b = 0; b < 3; b++)
            for (k = 0; k < 3; k++) {
                mix_cfg c = mix_base(threads[a], depths[b], cids[k], 40);
                c.reorder = (a + b + k) % 2 ? 4 : 0;
                mix_expect_clean(&c);
            }
}

Test(robust, async_budget_leaves_ids_for_blocking_calls) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = pair_ctl(0, 0, 4, 8, 1, &qp);
    gpumem_nvme_req req[8];
    gpumem_nvme_cmd cmd;
    static unsigned char buf[8][LBA] __attribute__((aligned(4096)));
    uint32_t n = 0, i;
    cr_assert_eq(qp->cid_limit, 3, "depth 4: at most 3 commands in flight");
    cr_assert_lt(qp->async_limit, qp->cid_limit, "some IDs are kept for blocking calls");
    /* one thread takes every asynchronous ID it can and never polls them */
    for (i = 0; i < 8; i++) {
        cr_assert_eq(gpumem_nvme_cmd_read(&cmd, &qp->ns, i, 1, (uintptr_t)buf[i], 0), GPUMEM_OK);
        if (gpumem_nvme_qp_submit(qp, &cmd, &req[n]) == GPUMEM_OK) n++;
    }
    cr_assert_eq(n, qp->async_limit, "submit refuses (EAGAIN) beyond the asynchronous budget");
    /* a blocking call still gets an ID, whoever holds the others */
    cr_assert_eq(gpumem_nvme_qp_read(qp, 9, 1, (uintptr_t)buf[7], 0, NULL), GPUMEM_OK);
    for (i = 0; i < n; i++) cr_assert_eq(gpumem_nvme_qp_wait(qp, &req[i]), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* ---- 3. injected errors ---------------------------------------------------------- */

/* error_ppm > 0 with error_status left at 0 (the default): every injected
 * command must fail with a real status, and nothing it would have written
 * may be reported written. 0.3.0 reports success for writes it dropped. */
Test(robust, injected_error_with_default_status_is_an_error) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = pair_ctl(0, 1, 8, 8, 0, &qp); /* every command fails, status left at 0 */
    gpumem_nvme_cpl cpl;
    gpumem_swctl_stats s;
    static unsigned char buf[LBA] __attribute__((aligned(4096)));
    unsigned char *ram;
    uint32_t i;
    ram = (unsigned char *)gpumem_swctl_ram(ctl);
    for (i = 0; i < 16; i++) fill_block(ram + i * LBA, i, 0);
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    for (i = 0; i < 16; i++) {
        fill_block(buf, i, 1);
        cr_assert_eq(gpumem_nvme_qp_write(qp, i, 1, (uintptr_t)buf, 0, &cpl), GPUMEM_EIO, "write %u", i);
        cr_assert_neq(gpumem_nvme_cpl_status(&cpl) & 0x7FF, 0, "a status that says failure");
    }
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    for (i = 0; i < 16; i++) cr_assert(block_ok(ram + i * LBA, i, 0), "block %u unchanged, as reported", i);
    cr_assert_eq(gpumem_swctl_get_stats(ctl, &s), GPUMEM_OK);
    cr_assert_eq(s.errors_injected, 16);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* A mix with injected errors at the default status: every EIO counted, every
 * success carried out (content), the store holds the last successful write. */
Test(robust, injected_errors_in_a_mix) {
    mix_cfg c = mix_base(16, 8, 16, 200);
    c.error_ppm = 100000;
    mix_expect_clean(&c);
}

/* ---- 4. overflow-checked ranges --------------------------------------------------- */

Test(robust, ranges_do_not_wrap) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c = NULL;
    gpumem_nvme_cmd cmd;
    uint64_t p1, p2;
    cfg.n_blocks = 1024;
    cr_assert_eq(gpumem_swctl_create(&cfg, &ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 8, &qp), GPUMEM_OK);
    /* the reported case: first_lba = 2^64 - 8 on a 1024-block namespace */
    d.n_lines = 4;
    d.line_bytes = 4096;
    d.n_slots = 2;
    d.backing = gpumem_cache_backing_nvme(&qp, 1, 1, &qp->ns, UINT64_MAX - 7, GPUMEM_CACHE_STRIPE);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_ERANGE, "refused at create");
    cr_assert_null(c);
    d.backing.first_lba = 1024 - 31; /* 4 lines of 8 blocks need 32 */
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_ERANGE);
    d.backing.first_lba = 1024 - 32;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK, "the last blocks exactly");
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_OK);
    d.n_lines = UINT64_MAX / 2; /* lines * blocks per line would wrap */
    d.backing.first_lba = 0;
    cr_assert_neq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    /* per request */
    cr_assert_eq(gpumem_nvme_cmd_read(&cmd, &qp->ns, UINT64_MAX, 2, 0x1000, 0), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_nvme_cmd_read(&cmd, &qp->ns, 1023, 2, 0x1000, 0), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_nvme_prp_setup(0x1000, UINT64_MAX, NULL, 0, 0, &p1, &p2), GPUMEM_E2BIG,
                 "a length whose page count wraps");
    cr_assert_eq(gpumem_nvme_prp_setup(0x1000, UINT64_MAX - 4096, NULL, 0, 0, &p1, &p2), GPUMEM_E2BIG);
    {   /* a namespace whose byte size wraps */
        gpumem_nvme_qp q2;
        gpumem_nvme_qp_desc qd = bare_pair_desc(8, 1, 8);
        qd.ns.lba_shift = 12;
        qd.ns.n_blocks = UINT64_MAX >> 11;
        cr_assert_eq(gpumem_nvme_qp_init(&q2, &qd), GPUMEM_ERANGE);
        qd.ns.n_blocks = UINT64_MAX >> 12;
        cr_assert_eq(gpumem_nvme_qp_init(&q2, &qd), GPUMEM_OK);
    }
    {
        gpumem_swctl_gpu_desc g = gpumem_swctl_gpu_desc_default();
        uint32_t control[2];
        static uint64_t mem[64] __attribute__((aligned(64)));
        g.ram = mem, g.control = control, g.lba_bytes = 4096, g.n_blocks = UINT64_MAX / 2048;
        cr_assert_eq(gpumem_swctl_gpu_init(mem, sizeof mem, &g), GPUMEM_ERANGE);
    }
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* ---- 5. NULL and out-of-range arguments: every public function ------------------ */

/* Every pointer parameter of every public function, NULL in turn, and the
 * range checks next to them. Status functions must return a status; the few
 * that return a value return a neutral one (0, NULL, an empty struct).
 * Not here: the gpumem_atomic_* functions (they are the memory access
 * itself), the CUDA-only helpers, and the real-controller functions that
 * need hardware past their argument checks (their NULL checks are here). */
Test(robust, null_and_out_of_range_table) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_nvme_cmd cmd;
    gpumem_nvme_cpl cpl;
    gpumem_nvme_req req;
    gpumem_nvme_ns ns = {1, 9, 64, 8, 0};
    gpumem_nvme_qp_desc qd, bd = bare_pair_desc(8, 64, 8);
    gpumem_target_queue swq;
    gpumem_target_stats sw;
    gpumem_target_prp_walk walk;
    gpumem_nvme_iomap im = gpumem_nvme_iomap_contiguous(0x1000);
    gpumem_swctl_gpu_desc gd = gpumem_swctl_gpu_desc_default();
    gpumem_cache_desc cd = gpumem_cache_desc_default();
    gpumem_cache *cache;
    gpumem_cache_stats cs;
    gpumem_cache_array arr;
    gpumem_cache_ref ref = gpumem_cache_ref_make(NULL);
    gpumem_swctl_stats ss;
    gpumem_nvmectl_dma dma;
    gpumem_nvme_qp *qp2;
    gpumem_nvmectl *nctl;
    static unsigned char mem[8 * 4096] __attribute__((aligned(4096)));
    static unsigned char swmem[70000] __attribute__((aligned(16)));
    uint64_t u64, p1, p2, list[8];
    void *vp;
    size_t k;
    memset(&qd, 0, sizeof qd);
    memset(&req, 0, sizeof req);
    memset(&dma, 0, sizeof dma);
    ctl = pair_ctl(0, 0, 8, 8, 1, &qp);
    cd.n_lines = 4, cd.n_slots = 2, cd.backing = gpumem_cache_backing_memory(mem);
    cr_assert_eq(gpumem_cache_create(&cd, &cache), GPUMEM_OK);
    arr = gpumem_cache_array_make(cache, 8, 0, 16);
    gpumem_nvme_cmd_read(&cmd, &ns, 0, 1, 0x1000, 0);
    {
        const struct {
            const char *what;
            long got, want;
        } t[] = {
            /* gpumem.h */
            {"backoff_pause(NULL)", gpumem_backoff_pause(NULL), 0},
            /* wire format and builders */
            {"cpl_cid(NULL)", gpumem_nvme_cpl_cid(NULL), 0},
            {"cpl_phase(NULL)", gpumem_nvme_cpl_phase(NULL), 0},
            {"cpl_status(NULL)", gpumem_nvme_cpl_status(NULL), 0},
            {"cpl_sq_head(NULL)", gpumem_nvme_cpl_sq_head(NULL), 0},
            {"cpl_sq_id(NULL)", gpumem_nvme_cpl_sq_id(NULL), 0},
            {"cmd_rw(NULL cmd)", gpumem_nvme_cmd_rw(NULL, 2, &ns, 0, 1, 0x1000, 0), GPUMEM_ENULL},
            {"cmd_rw(NULL ns)", gpumem_nvme_cmd_rw(&cmd, 2, NULL, 0, 1, 0x1000, 0), GPUMEM_ENULL},
            {"cmd_read(NULL cmd)", gpumem_nvme_cmd_read(NULL, &ns, 0, 1, 0x1000, 0), GPUMEM_ENULL},
            {"cmd_read(NULL ns)", gpumem_nvme_cmd_read(&cmd, NULL, 0, 1, 0x1000, 0), GPUMEM_ENULL},
            {"cmd_read(past the end)", gpumem_nvme_cmd_read(&cmd, &ns, 64, 1, 0x1000, 0), GPUMEM_ERANGE},
            {"cmd_write(NULL cmd)", gpumem_nvme_cmd_write(NULL, &ns, 0, 1, 0x1000, 0), GPUMEM_ENULL},
            {"cmd_write(NULL ns)", gpumem_nvme_cmd_write(&cmd, NULL, 0, 1, 0x1000, 0), GPUMEM_ENULL},
            {"cmd_flush(NULL cmd)", gpumem_nvme_cmd_flush(NULL, &ns), GPUMEM_ENULL},
            {"cmd_flush(NULL ns)", gpumem_nvme_cmd_flush(&cmd, NULL), GPUMEM_ENULL},
            {"iomap_at(NULL)", (long)gpumem_nvme_iomap_at(NULL, 8), 0},
            {"iomap_sub(NULL).iova", (long)gpumem_nvme_iomap_sub(NULL, 8).iova, 0},
            {"prp_build(NULL data)", gpumem_nvme_prp_build(NULL, 512, list, &im, 8, &p1, &p2), GPUMEM_ENULL},
            {"prp_build(NULL prp1)", gpumem_nvme_prp_build(&im, 512, list, &im, 8, NULL, &p2), GPUMEM_ENULL},
            {"prp_build(NULL prp2)", gpumem_nvme_prp_build(&im, 512, list, &im, 8, &p1, NULL), GPUMEM_ENULL},
            {"prp_build(NULL list, 3 pages)", gpumem_nvme_prp_build(&im, 3 * 4096, NULL, &im, 8, &p1, &p2),
             GPUMEM_ENULL},
            {"prp_build(NULL list map)", gpumem_nvme_prp_build(&im, 3 * 4096, list, NULL, 8, &p1, &p2), GPUMEM_ENULL},
            {"prp_setup(NULL prp1)", gpumem_nvme_prp_setup(0x1000, 512, NULL, 0, 0, NULL, &p2), GPUMEM_ENULL},
            {"prp_identity(NULL buf)", gpumem_nvme_prp_identity(NULL, 512, NULL, 0, &p1, &p2), GPUMEM_ENULL},
            {"prp_identity(NULL prp2)", gpumem_nvme_prp_identity(mem, 512, NULL, 0, &p1, NULL), GPUMEM_ENULL},
            /* queue pair */
            {"qp_init(NULL qp)", gpumem_nvme_qp_init(NULL, &qd), GPUMEM_ENULL},
            {"qp_init(NULL desc)", gpumem_nvme_qp_init(qp, NULL), GPUMEM_ENULL},
            {"qp_init(desc without memory)", gpumem_nvme_qp_init(qp, &qd), GPUMEM_ENULL},
            {"qp_submit(NULL qp)", gpumem_nvme_qp_submit(NULL, &cmd, &req), GPUMEM_ENULL},
            {"qp_submit(NULL cmd)", gpumem_nvme_qp_submit(qp, NULL, &req), GPUMEM_ENULL},
            {"qp_submit(NULL req)", gpumem_nvme_qp_submit(qp, &cmd, NULL), GPUMEM_ENULL},
            {"qp_poll(NULL qp)", gpumem_nvme_qp_poll(NULL, &req), GPUMEM_ENULL},
            {"qp_poll(NULL req)", gpumem_nvme_qp_poll(qp, NULL), GPUMEM_ENULL},
            {"qp_poll(never submitted)", gpumem_nvme_qp_poll(qp, &req), GPUMEM_ESTATE},
            {"qp_wait(NULL qp)", gpumem_nvme_qp_wait(NULL, &req), GPUMEM_ENULL},
            {"qp_wait(NULL req)", gpumem_nvme_qp_wait(qp, NULL), GPUMEM_ENULL},
            {"qp_wait(never submitted)", gpumem_nvme_qp_wait(qp, &req), GPUMEM_ESTATE},
            {"qp_wait_timed(NULL qp)", gpumem_nvme_qp_wait_timed(NULL, &req, 1), GPUMEM_ENULL},
            {"qp_wait_timed(NULL req)", gpumem_nvme_qp_wait_timed(qp, NULL, 1), GPUMEM_ENULL},
            {"qp_exec(NULL qp)", gpumem_nvme_qp_exec(NULL, &cmd, &cpl), GPUMEM_ENULL},
            {"qp_exec(NULL cmd)", gpumem_nvme_qp_exec(qp, NULL, &cpl), GPUMEM_ENULL},
            {"qp_exec_timed(NULL qp)", gpumem_nvme_qp_exec_timed(NULL, &cmd, &cpl, 1), GPUMEM_ENULL},
            {"qp_exec_timed(NULL cmd)", gpumem_nvme_qp_exec_timed(qp, NULL, &cpl, 1), GPUMEM_ENULL},
            {"qp_rw(NULL qp)", gpumem_nvme_qp_rw(NULL, 2, 0, 1, 0x1000, 0, &cpl), GPUMEM_ENULL},
            {"qp_rw(past the end)", gpumem_nvme_qp_rw(qp, 2, 64, 1, 0x1000, 0, &cpl), GPUMEM_ERANGE},
            {"qp_rw_timed(NULL qp)", gpumem_nvme_qp_rw_timed(NULL, 2, 0, 1, 0x1000, 0, &cpl, 1), GPUMEM_ENULL},
            {"qp_read(NULL qp)", gpumem_nvme_qp_read(NULL, 0, 1, 0x1000, 0, &cpl), GPUMEM_ENULL},
            {"qp_read(no buffer)", gpumem_nvme_qp_read(qp, 0, 1, 0, 0, &cpl), GPUMEM_ENULL},
            {"qp_write(NULL qp)", gpumem_nvme_qp_write(NULL, 0, 1, 0x1000, 0, &cpl), GPUMEM_ENULL},
            {"qp_flush(NULL qp)", gpumem_nvme_qp_flush(NULL, &cpl), GPUMEM_ENULL},
            {"qp_set_stopped(NULL)", gpumem_nvme_qp_set_stopped(NULL, 1), GPUMEM_ENULL},
            {"qp_check_idle(NULL)", gpumem_nvme_qp_check_idle(NULL), GPUMEM_ENULL},
            {"qp_pick(NULL pairs)", (long)(uintptr_t)gpumem_nvme_qp_pick(NULL, 4, 1), 0},
            {"qp_pick(0 pairs)", (long)(uintptr_t)gpumem_nvme_qp_pick(qp, 0, 1), 0},
            /* controller core */
            {"sw_stats_add(NULL out)", gpumem_target_stats_add(NULL, &sw), GPUMEM_ENULL},
            {"sw_stats_add(NULL in)", gpumem_target_stats_add(&sw, NULL), GPUMEM_ENULL},
            {"swq_init(NULL q)", gpumem_target_queue_init(NULL, &bd, swmem, sizeof swmem), GPUMEM_ENULL},
            {"swq_init(NULL desc)", gpumem_target_queue_init(&swq, NULL, swmem, sizeof swmem), GPUMEM_ENULL},
            {"swq_init(desc without rings)", gpumem_target_queue_init(&swq, &qd, swmem, sizeof swmem), GPUMEM_ENULL},
            {"swq_init(NULL mem)", gpumem_target_queue_init(&swq, &bd, NULL, sizeof swmem), GPUMEM_ENULL},
            {"swq_init(too small)", gpumem_target_queue_init(&swq, &bd, swmem, 16), GPUMEM_ENOMEM},
            {"qp_signals_set_stopped(NULL)", gpumem_nvme_qp_signals_set_stopped(NULL, 1), GPUMEM_ENULL},
            {"sw_take_cq_doorbell(NULL q)", gpumem_target_take_cq_doorbell(NULL, &sw), 0},
            {"sw_take_cq_doorbell(NULL st)", gpumem_target_take_cq_doorbell(&swq, NULL), 0},
            {"sw_take_sq_doorbell(NULL q)", gpumem_target_take_sq_doorbell(NULL, &sw), 0},
            {"sw_take_sq_doorbell(NULL st)", gpumem_target_take_sq_doorbell(&swq, NULL), 0},
            {"sw_fetch(NULL q)", gpumem_target_fetch(NULL, &sw, &cmd), 0},
            {"sw_fetch(NULL st)", gpumem_target_fetch(&swq, NULL, &cmd), 0},
            {"sw_fetch(NULL cmd)", gpumem_target_fetch(&swq, &sw, NULL), 0},
            {"sw_check(NULL st)", gpumem_target_check(NULL, &ns, &cmd, &p1, &p2), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_check(NULL ns)", gpumem_target_check(&sw, NULL, &cmd, &p1, &p2), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_check(NULL cmd)", gpumem_target_check(&sw, &ns, NULL, &p1, &p2), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_check(NULL off)", gpumem_target_check(&sw, &ns, &cmd, NULL, &p2), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_check(NULL len)", gpumem_target_check(&sw, &ns, &cmd, &p1, NULL), GPUMEM_NVME_STATUS(0, 6)},
            {"prp_walk_start(NULL walk)", gpumem_target_prp_walk_start(NULL, &cmd, 512), -1},
            {"prp_walk_start(NULL cmd)", gpumem_target_prp_walk_start(&walk, NULL, 512), -1},
            {"prp_walk_next(NULL walk)", gpumem_target_prp_walk_next(NULL, &p1, &p2), -1},
            {"prp_walk_next(NULL addr)", gpumem_target_prp_walk_next(&walk, NULL, &p2), -1},
            {"prp_walk_next(NULL seg)", gpumem_target_prp_walk_next(&walk, &p1, NULL), -1},
            {"sw_execute_ram(NULL st)", gpumem_target_execute_ram(NULL, &ns, mem, &cmd), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_execute_ram(NULL ns)", gpumem_target_execute_ram(&sw, NULL, mem, &cmd), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_execute_ram(NULL ram)", gpumem_target_execute_ram(&sw, &ns, NULL, &cmd), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_execute_ram(NULL cmd)", gpumem_target_execute_ram(&sw, &ns, mem, NULL), GPUMEM_NVME_STATUS(0, 6)},
            {"sw_serve_ram(NULL q)", gpumem_target_serve_ram(NULL, &sw, &ns, mem, 0), 0},
            {"sw_serve_ram(NULL st)", gpumem_target_serve_ram(&swq, NULL, &ns, mem, 0), 0},
            {"sw_serve_ram(NULL ns)", gpumem_target_serve_ram(&swq, &sw, NULL, mem, 0), 0},
            {"sw_serve_ram(NULL ram)", gpumem_target_serve_ram(&swq, &sw, &ns, NULL, 0), 0},
            /* GPU-resident controller (host-callable parts) */
            {"gpuctl_bytes(NULL)", (long)gpumem_swctl_gpu_bytes(NULL), 0},
            {"gpuctl_pair(NULL)", (long)(uintptr_t)gpumem_swctl_gpu_pair(NULL, 0), 0},
            {"gpuctl_init(NULL mem)", gpumem_swctl_gpu_init(NULL, 4096, &gd), GPUMEM_ENULL},
            {"gpuctl_init(NULL desc)", gpumem_swctl_gpu_init(mem, sizeof mem, NULL), GPUMEM_ENULL},
            {"gpuctl_init(desc without ram)", gpumem_swctl_gpu_init(mem, sizeof mem, &gd), GPUMEM_ENULL},
            {"gpuctl_get_stats(NULL c)", gpumem_swctl_gpu_get_stats(NULL, &sw), GPUMEM_ENULL},
            {"gpuctl_get_stats(NULL out)", gpumem_swctl_gpu_get_stats((gpumem_swctl_gpu *)mem, NULL), GPUMEM_ENULL},
            {"gpuctl_stop(NULL)", gpumem_swctl_gpu_stop(NULL), GPUMEM_ENULL},
            {"gpuctl_stop(no control words)", gpumem_swctl_gpu_stop(&gd), GPUMEM_ENULL},
            /* host software controller */
            {"swctl_create(NULL cfg)", gpumem_swctl_create(NULL, (gpumem_swctl **)&vp), GPUMEM_ENULL},
            {"swctl_create(NULL out)", gpumem_swctl_create(&cfg, NULL), GPUMEM_ENULL},
            {"swctl_add_qp_ex(NULL ctl)", gpumem_swctl_add_qp_ex(NULL, 8, 8, 0, &qp2), GPUMEM_ENULL},
            {"swctl_add_qp_ex(NULL out)", gpumem_swctl_add_qp_ex(ctl, 8, 8, 0, NULL), GPUMEM_ENULL},
            {"swctl_add_qp(NULL ctl)", gpumem_swctl_add_qp(NULL, 8, &qp2), GPUMEM_ENULL},
            {"swctl_add_qp(NULL out)", gpumem_swctl_add_qp(ctl, 8, NULL), GPUMEM_ENULL},
            {"swctl_add_qp(running)", gpumem_swctl_add_qp(ctl, 8, &qp2), GPUMEM_ESTATE},
            {"swctl_start(NULL)", gpumem_swctl_start(NULL), GPUMEM_ENULL},
            {"swctl_stop(NULL)", gpumem_swctl_stop(NULL), GPUMEM_ENULL},
            {"swctl_set_polled(NULL ctl)", gpumem_swctl_set_polled(NULL, qp, 1), GPUMEM_ENULL},
            {"swctl_set_polled(NULL qp)", gpumem_swctl_set_polled(ctl, NULL, 1), GPUMEM_ENULL},
            {"swctl_cpu_ns(NULL)", (long)gpumem_swctl_cpu_ns(NULL), 0},
            {"swctl_get_stats(NULL ctl)", gpumem_swctl_get_stats(NULL, &ss), GPUMEM_ENULL},
            {"swctl_get_stats(NULL out)", gpumem_swctl_get_stats(ctl, NULL), GPUMEM_ENULL},
            {"swctl_ram(NULL)", (long)(uintptr_t)gpumem_swctl_ram(NULL), 0},
            {"swctl_ns(NULL).n_blocks", (long)gpumem_swctl_ns(NULL).n_blocks, 0},
            {"swctl_destroy(NULL)", gpumem_swctl_destroy(NULL), GPUMEM_ENULL},
            /* real controller: argument checks only */
            {"nvmectl_open(NULL cfg)", gpumem_nvmectl_open(NULL, &nctl), GPUMEM_ENULL},
            {"nvmectl_get_info(NULL)", (long)(uintptr_t)gpumem_nvmectl_get_info(NULL), 0},
            {"nvmectl_add_qp(NULL)", gpumem_nvmectl_add_qp(NULL, 8, &qp2), GPUMEM_ENULL},
            {"nvmectl_admin(NULL)", gpumem_nvmectl_admin(NULL, &cmd, &cpl), GPUMEM_ENULL},
            {"nvmectl_wait(NULL)", gpumem_nvmectl_wait(NULL, qp, &req, 1), GPUMEM_ENULL},
            {"nvmectl_check(NULL)", gpumem_nvmectl_check(NULL), GPUMEM_ENULL},
            {"nvmectl_close(NULL)", gpumem_nvmectl_close(NULL), GPUMEM_ENULL},
            {"nvmectl_dma_alloc(NULL out)", gpumem_nvmectl_dma_alloc(NULL, 4096, 0, NULL), GPUMEM_ENULL},
            {"nvmectl_prp(NULL dma)", gpumem_nvmectl_prp(NULL, 0, 512, NULL, 0, &p1, &p2), GPUMEM_ENULL},
            {"nvmectl_prp(range wraps)", gpumem_nvmectl_prp(&dma, 8, UINT64_MAX - 4, NULL, 0, &p1, &p2), GPUMEM_ERANGE},
            /* cache */
            {"cache_acquire(NULL c)", gpumem_cache_acquire(NULL, 0, 1, 0, &vp), GPUMEM_ENULL},
            {"cache_acquire(NULL data)", gpumem_cache_acquire(cache, 0, 1, 0, NULL), GPUMEM_ENULL},
            {"cache_acquire(line past end)", gpumem_cache_acquire(cache, 4, 1, 0, &vp), GPUMEM_ERANGE},
            {"cache_acquire(count 0)", gpumem_cache_acquire(cache, 0, 0, 0, &vp), GPUMEM_EINVAL},
            {"cache_release(NULL)", gpumem_cache_release(NULL, 0, 1), GPUMEM_ENULL},
            {"cache_release(line past end)", gpumem_cache_release(cache, 4, 1), GPUMEM_ERANGE},
            {"cache_release(not held)", gpumem_cache_release(cache, 0, 1), GPUMEM_ESTATE},
            {"cache_mark_dirty(NULL)", gpumem_cache_mark_dirty(NULL, 0), GPUMEM_ENULL},
            {"cache_mark_dirty(line past end)", gpumem_cache_mark_dirty(cache, 4), GPUMEM_ERANGE},
            {"cache_acquire_coalesced(NULL c)", gpumem_cache_acquire_coalesced(NULL, 0, 0, &vp), GPUMEM_ENULL},
            {"cache_acquire_coalesced(NULL data)", gpumem_cache_acquire_coalesced(cache, 0, 0, NULL), GPUMEM_ENULL},
            {"cache_release_coalesced(NULL)", gpumem_cache_release_coalesced(NULL, 0), GPUMEM_ENULL},
            {"cache_writeback(NULL)", gpumem_cache_writeback(NULL, 0, 1, &u64), GPUMEM_ENULL},
            {"cache_writeback(end past slots)", gpumem_cache_writeback(cache, 0, 3, &u64), GPUMEM_ERANGE},
            {"cache_flush(NULL)", gpumem_cache_flush(NULL, &u64), GPUMEM_ENULL},
            {"cache_invalidate(NULL)", gpumem_cache_invalidate(NULL, 0, 1, &u64), GPUMEM_ENULL},
            {"cache_invalidate(first > end)", gpumem_cache_invalidate(cache, 2, 1, &u64), GPUMEM_ERANGE},
            {"cache_init(NULL c)", gpumem_cache_init(NULL, &cd), GPUMEM_ENULL},
            {"cache_init(NULL desc)", gpumem_cache_init(cache, NULL), GPUMEM_ENULL},
            {"cache_init(desc without memory)", gpumem_cache_init(cache, &cd), GPUMEM_ENULL},
            {"cache_get_stats(NULL c)", gpumem_cache_get_stats(NULL, &cs), GPUMEM_ENULL},
            {"cache_get_stats(NULL out)", gpumem_cache_get_stats(cache, NULL), GPUMEM_ENULL},
            {"cache_check_quiescent(NULL)", (long)gpumem_cache_check_quiescent(NULL), 1},
            {"cache_find_in_use(NULL): line 0, so a caller refuses", (long)gpumem_cache_find_in_use(NULL, 0, 1), 0},
            {"cache_array_make(NULL).valid", (long)gpumem_cache_array_make(NULL, 8, 0, 1).valid, 0},
            {"cache_array_make(past the end).valid", (long)gpumem_cache_array_make(cache, 8, 0, 1u << 20).valid, 0},
            {"cache_ref_drop(NULL)", gpumem_cache_ref_drop(NULL), GPUMEM_ENULL},
            {"cache_ref_at(NULL ref)", gpumem_cache_ref_at(NULL, 0, 0, &vp), GPUMEM_ENULL},
            {"cache_ref_at(ref of NULL array)", gpumem_cache_ref_at(&ref, 0, 0, &vp), GPUMEM_ENULL},
            {"cache_ref_span(NULL ref)", gpumem_cache_ref_span(NULL, 0, 1, 0, &vp, &u64), GPUMEM_ENULL},
            {"cache_ref_span(ref of NULL array)", gpumem_cache_ref_span(&ref, 0, 1, 0, &vp, &u64), GPUMEM_ENULL},
            {"cache_ref_get(NULL out)", gpumem_cache_ref_get(&ref, 0, NULL), GPUMEM_ENULL},
            {"cache_ref_put(NULL in)", gpumem_cache_ref_put(&ref, 0, NULL), GPUMEM_ENULL},
            {"cache_create(NULL desc)", gpumem_cache_create(NULL, (gpumem_cache **)&vp), GPUMEM_ENULL},
            {"cache_create(NULL out)", gpumem_cache_create(&cd, NULL), GPUMEM_ENULL},
            {"cache_destroy(NULL)", gpumem_cache_destroy(NULL), GPUMEM_ENULL},
        };
        for (k = 0; k < sizeof t / sizeof t[0]; k++)
            cr_expect_eq(t[k].got, t[k].want, "%s: got %ld, want %ld", t[k].what, t[k].got, t[k].want);
    }
    {   /* the array view's reference, out of range */
        gpumem_cache_ref r = gpumem_cache_ref_make(&arr);
        cr_expect_eq(gpumem_cache_ref_get(&r, 16, &u64), GPUMEM_ERANGE);
        cr_expect_eq(gpumem_cache_ref_drop(&r), GPUMEM_OK);
    }
    cr_assert_eq(gpumem_cache_destroy(cache), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* ---- 7. time bounds and shutdown ----------------------------------------------- */

/* A controller that takes 60 s per command: nothing completes during a test. */
static gpumem_swctl *slow_ctl(uint32_t depth, uint32_t n_cids, gpumem_nvme_qp **qp) {
    return pair_ctl(60ull * 1000 * 1000 * 1000, 0, depth, n_cids, 1, qp);
}

Test(robust, timed_forms_return_etimedout) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = slow_ctl(8, 8, &qp);
    static unsigned char buf[2][LBA] __attribute__((aligned(4096)));
    gpumem_nvme_cmd cmd;
    gpumem_nvme_req req;
    cr_assert_eq(gpumem_nvme_qp_rw_timed(qp, GPUMEM_NVME_OP_READ, 0, 1, (uintptr_t)buf[0], 0, NULL, 20000000),
                 GPUMEM_ETIMEDOUT);
    cr_assert_eq(gpumem_nvme_cmd_read(&cmd, &qp->ns, 1, 1, (uintptr_t)buf[1], 0), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_submit(qp, &cmd, &req), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_wait_timed(qp, &req, 20000000), GPUMEM_ETIMEDOUT);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_EAGAIN, "still submitted: wait again later");
    /* the abandoned blocking command does not hold destroy up; the request does */
    cr_assert_eq(gpumem_nvme_qp_check_idle(qp), GPUMEM_EBUSY);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_EBUSY, "a request still holds a command ID");
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_ENODEV, "stopped without an answer");
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_ENODEV, "and it stays so");
    cr_assert_eq(gpumem_nvme_qp_check_idle(qp), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* A timed-out command that does complete later frees its ID: a pair with two
 * IDs keeps working after many time-outs. */
Test(robust, abandoned_commands_free_their_ids) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = pair_ctl(2 * 1000 * 1000, 0, 4, 2, 1, &qp); /* 2 ms a command */
    static unsigned char buf[LBA] __attribute__((aligned(4096)));
    uint32_t i, timed_out = 0;
    for (i = 0; i < 20; i++) {
        gpumem_status st = gpumem_nvme_qp_rw_timed(qp, GPUMEM_NVME_OP_READ, i, 1, (uintptr_t)buf, 0, NULL, 1000);
        cr_assert(st == GPUMEM_OK || st == GPUMEM_ETIMEDOUT, "%s", gpumem_status_str(st));
        timed_out += st == GPUMEM_ETIMEDOUT;
    }
    cr_assert_gt(timed_out, 0);
    for (i = 0; i < 20; i++) /* without a limit: every one gets an ID again */
        cr_assert_eq(gpumem_nvme_qp_read(qp, i, 1, (uintptr_t)buf, 0, NULL), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

typedef struct waiter_arg {
    gpumem_nvme_qp *qp;
    int async;
    gpumem_status st; /* what the call returned */
    int done;         /* atomic */
    unsigned char buf[LBA] __attribute__((aligned(LBA))); /* within one page: PRP1 alone */
} waiter_arg;

static void *waiter_main(void *p) {
    waiter_arg *a = (waiter_arg *)p;
    if (a->async) {
        gpumem_nvme_cmd cmd;
        gpumem_nvme_req req;
        gpumem_nvme_cmd_read(&cmd, &a->qp->ns, 0, 1, (uintptr_t)a->buf, 0);
        a->st = gpumem_nvme_qp_submit(a->qp, &cmd, &req);
        if (a->st == GPUMEM_OK) a->st = gpumem_nvme_qp_wait(a->qp, &req);
    } else {
        a->st = gpumem_nvme_qp_read(a->qp, 0, 1, (uintptr_t)a->buf, 0, NULL);
    }
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Bounded join: 1 if the thread ended within `s` seconds. */
static int join_within(pthread_t t, waiter_arg *a, double s) {
    double until = mix_now_s() + s;
    while (!__atomic_load_n(&a->done, __ATOMIC_ACQUIRE) && mix_now_s() < until) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!__atomic_load_n(&a->done, __ATOMIC_ACQUIRE)) return 0;
    pthread_join(t, NULL);
    return 1;
}

/* Threads waiting for a completion, for a command ID, and in wait() on an
 * asynchronous request: stopping the controller ends every wait with
 * GPUMEM_ENODEV. 0.3.0 leaves them blocked (the watchdog fails the test). */
Test(robust, stop_wakes_every_waiter) {
    enum { N = 10 };
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = slow_ctl(4, 16, &qp); /* 3 commands in flight at most */
    static waiter_arg a[N];
    pthread_t t[N];
    uint32_t i;
    for (i = 0; i < N; i++) {
        a[i].qp = qp;
        a[i].async = i < 2;
        pthread_create(&t[i], NULL, waiter_main, &a[i]);
    }
    /* Until every thread is waiting: three hold IDs, the rest wait for one
     * (or got EAGAIN from the asynchronous budget). */
    while (GPUMEM__GATE_UNITS(__atomic_load_n(&qp->inflight.v, __ATOMIC_ACQUIRE)) < qp->cid_limit ||
           __atomic_load_n(&qp->waiters.v, __ATOMIC_ACQUIRE) < 5)
        sched_yield();
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_EBUSY, "threads wait in a pair");
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    for (i = 0; i < N; i++) {
        cr_assert(join_within(t[i], &a[i], 30), "thread %u still blocked after stop", i);
        cr_assert(a[i].st == GPUMEM_ENODEV || (a[i].async && a[i].st == GPUMEM_EAGAIN), "thread %u: %s", i,
                  gpumem_status_str(a[i].st));
    }
    {
        gpumem_nvme_cmd cmd;
        cr_assert_eq(gpumem_nvme_cmd_read(&cmd, &qp->ns, 0, 1, (uintptr_t)a[0].buf, 0), GPUMEM_OK);
        cr_assert_eq(gpumem_nvme_qp_exec(qp, &cmd, NULL), GPUMEM_ENODEV, "new calls too");
    }
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* Destroying a controller while a thread waits on its pair is refused, and
 * changes nothing: the controller goes on serving. */
Test(robust, destroy_with_a_waiter_is_ebusy) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = pair_ctl(200 * 1000 * 1000, 0, 8, 8, 0, &qp); /* 200 ms: long enough to be seen waiting */
    static waiter_arg a;
    pthread_t t;
    fill_block((unsigned char *)gpumem_swctl_ram(ctl), 0, 5);
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    a.qp = qp;
    pthread_create(&t, NULL, waiter_main, &a);
    while (GPUMEM__GATE_UNITS(__atomic_load_n(&qp->inflight.v, __ATOMIC_ACQUIRE)) == 0) sched_yield();
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_EBUSY);
    cr_assert(join_within(t, &a, 60), "the read never completed");
    cr_assert_eq(a.st, GPUMEM_OK, "served after the refused destroy");
    cr_assert(block_ok(a.buf, 0, 5));
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* ---- 8. destroying a cache never loses writes ----------------------------------- */

Test(robust, cache_destroy_writes_dirty_lines_back) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    static uint64_t backing[8 * 512];
    void *p;
    uint32_t i;
    d.n_lines = 8, d.n_slots = 4, d.backing = gpumem_cache_backing_memory(backing);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    for (i = 0; i < 4; i++) {
        cr_assert_eq(gpumem_cache_acquire(c, i, 1, 1, &p), GPUMEM_OK);
        ((uint64_t *)p)[7] = 0xD1E7000000ull + i;
        if (i) cr_assert_eq(gpumem_cache_release(c, i, 1), GPUMEM_OK);
    }
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_EBUSY, "line 0 is still held");
    cr_assert_eq(backing[7], 0, "nothing written by a refused destroy");
    cr_assert_eq(gpumem_cache_release(c, 0, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_OK);
    for (i = 0; i < 4; i++) cr_assert_eq(backing[i * 512 + 7], 0xD1E7000000ull + i, "line %u written back", i);
}

/* Through NVMe: with the controller stopped the write-back cannot happen, so
 * destroy refuses and keeps the lines; started again, it writes them. */
Test(robust, cache_destroy_refuses_when_it_cannot_write_back) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = pair_ctl(0, 0, 8, 8, 1, &qp);
    gpumem_swctl_stats s;
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    void *p;
    d.n_lines = 4, d.n_slots = 2, d.backing = gpumem_cache_backing_nvme(&qp, 1, 1, &qp->ns, 0, GPUMEM_CACHE_STRIPE);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_acquire(c, 2, 1, 1, &p), GPUMEM_OK);
    ((uint64_t *)p)[0] = 0x5EED;
    cr_assert_eq(gpumem_cache_release(c, 2, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_EIO, "cannot write back: refused, line kept");
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    cr_assert_eq(((uint64_t *)gpumem_swctl_ram(ctl))[2 * 8 * 512 / 8], 0x5EED, "line 2 reached the namespace");
    cr_assert_eq(gpumem_swctl_get_stats(ctl, &s), GPUMEM_OK);
    cr_assert_eq(s.flushes, 1, "made durable with a Flush");
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* gpumem_cache_find_in_use, which gpumem_cache_destroy and the CUDA examples'
 * destroy ask before freeing: a held line, then a dirty one, then none. */
Test(robust, cache_find_in_use_names_held_then_dirty_lines) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = pair_ctl(0, 0, 8, 8, 1, &qp);
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    void *p;
    d.n_lines = 4, d.n_slots = 2, d.backing = gpumem_cache_backing_nvme(&qp, 1, 1, &qp->ns, 0, GPUMEM_CACHE_STRIPE);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_find_in_use(c, 0, 1), 4, "a fresh cache: nothing in use");
    cr_assert_eq(gpumem_cache_acquire(c, 2, 1, 1, &p), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_find_in_use(c, 0, 0), 2, "held");
    cr_assert_eq(gpumem_cache_find_in_use(c, 3, 0), 4, "from past it");
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_EBUSY, "held: refused");
    ((uint64_t *)p)[0] = 0xD1A7;
    cr_assert_eq(gpumem_cache_release(c, 2, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_find_in_use(c, 0, 0), 4, "released");
    cr_assert_eq(gpumem_cache_find_in_use(c, 0, 1), 2, "but dirty");
    cr_assert_eq(gpumem_cache_flush(c, NULL), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_find_in_use(c, 0, 1), 4, "written back");
    cr_assert_eq(gpumem_cache_find_in_use(NULL, 0, 1), 0);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_OK);
    cr_assert_eq(((uint64_t *)gpumem_swctl_ram(ctl))[2 * 8 * 512 / 8], 0xD1A7, "line 2 reached the namespace");
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}

/* ---- queue reset under load (issue 19) ------------------------------------------ */

#define RST_THREADS 4u
#define RST_BLOCKS 8u /* per thread */
#define RST_OPS 400u
#ifndef RST_RESETS
#define RST_RESETS 3u
#endif

typedef struct rst_shared {
    gpumem_nvme_qp *qp;
    uint32_t pause;  /* the test asks the threads to leave the pair */
    uint32_t parked; /* threads out of the pair: parked, or through */
} rst_shared;

typedef struct rst_thread {
    rst_shared *sh;
    uint32_t t;
    uint32_t ok, aborted, other;
    gpumem_status other_st;
    uint32_t last_ok[RST_BLOCKS];        /* generation of the last write reported done */
    unsigned char aborted_gen[RST_BLOCKS][RST_OPS + 1]; /* writes that ended aborted */
    unsigned char buf[LBA] __attribute__((aligned(64)));
} rst_thread;

/* A request ended aborted: leave the pair while the test resets it (the
 * test raises `pause` once reset_begin has returned, lowers it after
 * reset_end). */
static void rst_park(rst_thread *a) {
    while (!__atomic_load_n(&a->sh->pause, __ATOMIC_ACQUIRE)) gpumem__host_sleep_ns(100000);
    __atomic_fetch_add(&a->sh->parked, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&a->sh->pause, __ATOMIC_ACQUIRE)) gpumem__host_sleep_ns(100000);
    __atomic_fetch_sub(&a->sh->parked, 1, __ATOMIC_ACQ_REL);
}

static void rst_count(rst_thread *a, gpumem_status st) {
    if (st == GPUMEM_OK) a->ok++;
    else if (st == GPUMEM_EABORTED) a->aborted++;
    else {
        a->other++;
        a->other_st = st;
    }
}

static void *rst_main(void *arg) {
    rst_thread *a = (rst_thread *)arg;
    uint32_t i;
    for (i = 0; i < RST_OPS; i++) {
        const uint32_t k = i % RST_BLOCKS, gen = i + 1;
        const uint64_t lba = a->t * RST_BLOCKS + k;
        gpumem_status st;
        fill_block(a->buf, lba, gen);
        st = gpumem_nvme_qp_write_buf(a->sh->qp, lba, 1, a->buf, NULL);
        rst_count(a, st);
        if (st == GPUMEM_OK) a->last_ok[k] = gen;
        else if (st == GPUMEM_EABORTED) a->aborted_gen[k][gen] = 1;
        if (st == GPUMEM_EABORTED) rst_park(a);
        if (st != GPUMEM_OK) continue;
        memset(a->buf, 0, LBA);
        st = gpumem_nvme_qp_read_buf(a->sh->qp, lba, 1, a->buf, NULL);
        rst_count(a, st);
        if (st == GPUMEM_EABORTED) rst_park(a);
        if (st == GPUMEM_OK && !block_ok(a->buf, lba, gen)) {
            a->other++;
            a->other_st = GPUMEM_EIO; /* wrong data */
        }
    }
    __atomic_fetch_add(&a->sh->parked, 1, __ATOMIC_ACQ_REL); /* out of the pair for good */
    return NULL;
}

/* Threads write and read back their blocks through one pair while it is
 * reset three times: every request ends with a status (done or aborted),
 * and every write reported done is on the disk (or a later one whose
 * request was aborted: its data may have moved before the queues went). */
Test(robust, reset_under_load_swctl) {
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl = pair_ctl(200000, 0, 16, 16, 1, &qp);
    static rst_thread a[RST_THREADS];
    pthread_t th[RST_THREADS];
    rst_shared sh = {qp, 0, 0};
    uint32_t t, k, resets, aborted = 0;
    gpumem_nvme_qp_stats s;
    const unsigned char *ram = (const unsigned char *)gpumem_swctl_ram(ctl);
    memset(a, 0, sizeof a);
    for (t = 0; t < RST_THREADS; t++) {
        a[t].sh = &sh;
        a[t].t = t;
        cr_assert_eq(pthread_create(&th[t], NULL, rst_main, &a[t]), 0);
    }
    for (resets = 0; resets < RST_RESETS; resets++) {
        gpumem__host_sleep_ns(30000000);
        /* Under load: requests in flight end aborted, and so does every new
         * call, which sends each thread to park. */
        cr_assert_eq(gpumem_swctl_reset_begin(ctl, qp), GPUMEM_OK);
        __atomic_store_n(&sh.pause, 1, __ATOMIC_RELEASE);
        /* Every thread leaves the pair: parked, or through with its run. */
        while (__atomic_load_n(&sh.parked, __ATOMIC_ACQUIRE) < RST_THREADS) gpumem__host_sleep_ns(100000);
        cr_assert_eq(gpumem_swctl_reset_end(ctl, qp), GPUMEM_OK);
        __atomic_store_n(&sh.pause, 0, __ATOMIC_RELEASE);
    }
    for (t = 0; t < RST_THREADS; t++) pthread_join(th[t], NULL);
    for (t = 0; t < RST_THREADS; t++) {
        cr_assert_eq(a[t].other, 0, "thread %u: a request ended with %s", t, gpumem_status_str(a[t].other_st));
        aborted += a[t].aborted;
        for (k = 0; k < RST_BLOCKS; k++) {
            const uint64_t lba = t * RST_BLOCKS + k;
            const unsigned char *b = ram + lba * LBA;
            uint32_t gen;
            memcpy(&gen, b + 8, 4);
            cr_assert(block_ok(b, lba, gen), "block %llu holds torn data", (unsigned long long)lba);
            cr_assert(gen == a[t].last_ok[k] || (gen > a[t].last_ok[k] && gen <= RST_OPS && a[t].aborted_gen[k][gen]),
                      "block %llu holds generation %u; the last write reported done was %u",
                      (unsigned long long)lba, gen, a[t].last_ok[k]);
        }
    }
    cr_assert_eq(gpumem_nvme_qp_get_stats(qp, &s), GPUMEM_OK);
    /* The pair counts requests it ended; calls refused at the door during a
     * reset end aborted too, uncounted. */
    cr_assert_gt(s.aborted, 0, "the resets met requests in flight");
    cr_assert_leq(s.aborted, aborted, "the pair counted %u aborted, the threads saw %u", s.aborted, aborted);
    cr_assert_eq(s.dropped, 0, "dropped: stray %u stale %u duplicate %u early %u SQ head %u", s.stray, s.stale, s.duplicate, s.early, s.bad_sq_head);
    gpumem_swctl_stop(ctl);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
}
