/* The build with statistics compiled out (GPUMEM_NO_STATS): the cache and the
 * queue pairs work as ever, by content and by count, and their counters say
 * plainly that they were not kept. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_NO_STATS
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_cache.h"
#include "nvme_workload.h"
#include "cache_workload.h"

/* Every line of a cache over memory read by content; get_stats refuses. */
Test(nostats, cache_reads_by_content_and_reports_no_counts) {
    cache_cfg c = cache_cfg_base(512, 256, 64, 1, 1);
    cache_setup s;
    gpumem_cache_stats st;
    uint64_t l, w;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    for (l = 0; l < 256; l++) {
        void *d = NULL;
        cr_assert_eq(gpumem_cache_acquire(s.cache, l, 1, 0, &d), GPUMEM_OK);
        for (w = 0; w < 512 / 8; w++) cr_assert_eq(((const uint64_t *)d)[w], initial_word(l * 64 + w));
        cr_assert_eq(gpumem_cache_release(s.cache, l, 1), GPUMEM_OK);
    }
    memset(&st, 0xAB, sizeof st);
    cr_assert_eq(gpumem_cache_get_stats(s.cache, &st), GPUMEM_ESTATE);
    cr_assert_eq(st.hits + st.misses + st.fills + st.reads + st.evictions, 0, "counters left as they were");
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    cache_setup_free(&s);
}

/* The cache's first shared workload (32 threads on 2 cores, reads by
 * content, a flush, the backing compared afterwards) with the counters gone:
 * every check of cache_check but its statistics ones. */
Test(nostats, cache_workload_without_counters, .timeout = 300) {
    cache_workload w[24];
    cache_result r;
    cr_assert_gt(cache_workloads(w), 0);
    (void)cache_check; /* its statistics checks do not apply here */
    cr_assert_eq(cache_run(&w[0].cfg, &r), GPUMEM_OK, "%s: setup failed", w[0].name);
    cr_assert_eq(r.ops, (uint64_t)w[0].cfg.threads * w[0].cfg.ops);
    cr_assert_gt(r.words_checked, 0);
    cr_assert_eq(r.bad_data, 0, "%lu words read wrong", (unsigned long)r.bad_data);
    cr_assert_eq(r.eio + r.other_status + r.quiescent_problems + r.backing_mismatches, 0);
    cr_assert_eq(r.flush_status, GPUMEM_OK);
    cr_assert_eq(r.stats.hits + r.stats.misses + r.stats.fills, 0, "counts kept with GPUMEM_NO_STATS");
}

/* The queue workload (64 threads, blocking and asynchronous I/O, every read
 * by content, every command counted by the controller) on the GPU
 * controller's loop, two host threads serving four pairs. */
Test(nostats, queue_workload_without_pair_counters, .timeout = 600) {
    run_cfg rc = base_run(64);
    run_result r;
    const char *problem;
    rc.pairs = 4;
    rc.n_cids = 64;
    rc.gpuctl_servers = 2;
    run_workload(&rc, &r);
    problem = run_problem(&r);
    cr_assert_null(problem, "%s", problem ? problem : "");
}

/* Blocking writes and reads through the GPU controller's loop (on a host
 * thread), by content; the pair's doorbell counters stay 0, the
 * controller's own counts are kept. */
Test(nostats, pair_works_and_keeps_no_doorbell_counts) {
    run_cfg rc = base_run(64);
    gpuctl_rig g;
    gpumem_target_stats s;
    gpumem_nvme_qp *qp;
    unsigned char *buf = aligned_alloc(4096, 4096);
    uint32_t i;
    rc.gpuctl_servers = 1;
    cr_assert(buf);
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 64), GPUMEM_OK);
    qp = gpumem_swctl_gpu_pair(g.mem, 0);
    gpuctl_rig_start(&g);
    for (i = 0; i < 64; i++) {
        fill_block(buf, i, 1);
        cr_assert_eq(gpumem_nvme_qp_write_buf(qp, i, 1, buf, NULL), GPUMEM_OK);
    }
    for (i = 0; i < 64; i++) {
        cr_assert_eq(gpumem_nvme_qp_read_buf(qp, i, 1, buf, NULL), GPUMEM_OK);
        cr_assert(block_ok(buf, i, 1), "block %u", i);
    }
    gpuctl_rig_stop(&g, &s);
    cr_assert_eq(s.commands, 128);
    cr_assert_eq(s.violations, 0);
    cr_assert_eq(qp->sq_doorbell_writes.v + qp->cq_doorbell_writes.v, 0);
    gpuctl_rig_free(&g);
    free(buf);
}
