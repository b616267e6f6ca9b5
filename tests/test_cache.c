/* Criterion tests of gpumem_cache.h: many more threads than cores over a
 * cache much smaller than the data, every read checked by content, every
 * write found in the backing afterwards, invariants checked on every hit
 * (GPUMEM_CACHE_CHECK) and on the quiescent structure. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_CACHE_CHECK 1
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_cache.h"
#include "cache_workload.h"

static uint32_t scaled(uint32_t n) { return (uint32_t)(n * cache_test_scale()); }

/* The checks every workload run must pass. */
static void check_run(const cache_cfg *cfg, const cache_result *r) {
    uint64_t expect_acquires = cfg->use_ref ? 0 : (uint64_t)cfg->threads * cfg->ops;
    cr_assert_eq(r->ops, (uint64_t)cfg->threads * cfg->ops);
    cr_assert_eq(r->bad_data, 0, "%lu of %lu words read wrong", (unsigned long)r->bad_data,
                 (unsigned long)r->words_checked);
    cr_assert_gt(r->words_checked, 0);
    cr_assert_eq(r->eio + r->other_status, 0, "eio %lu other %lu", (unsigned long)r->eio,
                 (unsigned long)r->other_status);
    if (expect_acquires) cr_assert_eq(r->acquires, expect_acquires);
    cr_assert_eq(r->stats.violations, 0, "invariant violations: %lu", (unsigned long)r->stats.violations);
    cr_assert_eq(r->quiescent_problems, 0, "structure problems after the run: %lu",
                 (unsigned long)r->quiescent_problems);
    cr_assert_eq(r->flush_status, GPUMEM_OK);
    cr_assert_eq(r->backing_mismatches, 0, "%lu words differ in the backing after flush",
                 (unsigned long)r->backing_mismatches);
    /* Every lane of every acquire is a hit or a miss; every fill is one read. */
    if (!cfg->use_ref) cr_assert_eq(r->stats.hits + r->stats.misses, r->acquires);
    cr_assert_eq(r->stats.reads, r->stats.fills);
    cr_assert_eq(r->stats.bytes_read, r->stats.fills * cfg->line_bytes);
    cr_assert_leq(r->stats.fills - r->stats.evictions, cfg->n_slots, "more lines resident than slots");
    cr_assert_eq(r->stats.io_errors, 0);
    if (cfg->n_ctrls) {
        cr_assert_eq(r->ctl_violations, 0, "controller saw %lu protocol violations",
                     (unsigned long)r->ctl_violations);
        cr_assert_eq(r->ctl_reads, r->stats.reads, "controller reads %lu, cache issued %lu",
                     (unsigned long)r->ctl_reads, (unsigned long)r->stats.reads);
        cr_assert_eq(r->ctl_writes, r->stats.writes);
    }
    if (cfg->write_permille) cr_assert_gt(r->stats.writebacks, 0);
}

static cache_cfg base_cfg(uint32_t line_bytes, uint64_t n_lines, uint32_t n_slots) {
    cache_cfg c;
    memset(&c, 0, sizeof c);
    c.line_bytes = line_bytes;
    c.n_lines = n_lines;
    c.n_slots = n_slots;
    c.threads = 32;
    c.ops = scaled(300);
    c.depth = 64;
    c.pairs_per_ctrl = 4;
    c.layout = GPUMEM_CACHE_STRIPE;
    return c;
}

static void run_and_check(const cache_cfg *cfg) {
    cache_result r;
    cr_assert_eq(cache_run(cfg, &r), GPUMEM_OK);
    check_run(cfg, &r);
    cr_assert_gt(r.stats.evictions + (cfg->n_slots >= cfg->n_lines), 0, "the cache never had to evict");
}

/* ---- random reads, cache much smaller than the data ----------------------- */

Test(cache_reads, memory_512B_lines_hold_check) {
    cache_cfg c = base_cfg(512, 4096, 64);
    c.hold_check = 1;
    run_and_check(&c);
}

Test(cache_reads, memory_4KiB_lines_round_robin) {
    cache_cfg c = base_cfg(4096, 512, 32);
    c.policy = GPUMEM_CACHE_ROUND_ROBIN;
    c.hold_check = 1;
    run_and_check(&c);
}

Test(cache_reads, memory_64KiB_lines) {
    cache_cfg c = base_cfg(65536, 64, 8);
    c.threads = 16;
    c.ops = scaled(100);
    run_and_check(&c);
}

Test(cache_reads, nvme_4KiB_lines_hold_check) {
    cache_cfg c = base_cfg(4096, 1024, 32);
    c.n_ctrls = 1;
    c.hold_check = 1;
    run_and_check(&c);
}

Test(cache_reads, nvme_512B_lines_through_array_ref) {
    cache_cfg c = base_cfg(512, 2048, 32);
    c.n_ctrls = 1;
    c.use_ref = 1;
    run_and_check(&c);
}

Test(cache_reads, nvme_64KiB_lines_prp_lists) {
    cache_cfg c = base_cfg(65536, 48, 6);
    c.n_ctrls = 1;
    c.threads = 16;
    c.ops = scaled(60);
    run_and_check(&c);
}

/* ---- writers, flush, byte-for-byte comparison ----------------------------- */

Test(cache_writes, memory_4KiB_disjoint_writers) {
    cache_cfg c = base_cfg(4096, 256, 16);
    c.write_permille = 400;
    c.hold_check = 1;
    run_and_check(&c);
}

Test(cache_writes, nvme_512B_disjoint_writers) {
    cache_cfg c = base_cfg(512, 2048, 48);
    c.n_ctrls = 1;
    c.write_permille = 300;
    run_and_check(&c);
}

Test(cache_writes, nvme_4KiB_writers_through_array_ref) {
    cache_cfg c = base_cfg(4096, 512, 24);
    c.n_ctrls = 1;
    c.use_ref = 1;
    c.write_permille = 500;
    run_and_check(&c);
}

Test(cache_writes, nvme_64KiB_writers_round_robin) {
    cache_cfg c = base_cfg(65536, 32, 5);
    c.n_ctrls = 1;
    c.threads = 16;
    c.ops = scaled(60);
    c.write_permille = 500;
    c.policy = GPUMEM_CACHE_ROUND_ROBIN;
    run_and_check(&c);
}

Test(cache_writes, two_controllers_striped) {
    cache_cfg c = base_cfg(4096, 512, 24);
    c.n_ctrls = 2;
    c.pairs_per_ctrl = 2;
    c.write_permille = 300;
    run_and_check(&c);
}

Test(cache_writes, two_controllers_replicated) {
    cache_cfg c = base_cfg(4096, 256, 24);
    c.n_ctrls = 2;
    c.pairs_per_ctrl = 2;
    c.layout = GPUMEM_CACHE_REPLICATE;
    c.write_permille = 300;
    cache_result r;
    cr_assert_eq(cache_run(&c, &r), GPUMEM_OK);
    check_run(&c, &r); /* compares both controllers with the reference */
    cr_assert_eq(r.stats.writes, 2 * r.stats.writebacks, "each write-back goes to both controllers");
}

/* ---- cache larger than the data --------------------------------------------- */

Test(cache_sizes, larger_than_data_reads_each_line_once) {
    cache_cfg c = base_cfg(4096, 100, 256);
    c.n_ctrls = 1;
    c.ops = scaled(400);
    cache_result r;
    cr_assert_eq(cache_run(&c, &r), GPUMEM_OK);
    check_run(&c, &r);
    cr_assert_eq(r.stats.evictions, 0);
    cr_assert_leq(r.stats.fills, c.n_lines, "a line was read twice although nothing was evicted");
    cr_assert_eq(r.stats.fills, c.n_lines, "12800 random accesses over 100 lines touch all of them");
}

/* ---- one read for a burst of misses ------------------------------------------- */

typedef struct burst_arg {
    gpumem_cache *c;
    pthread_barrier_t *bar;
    uint64_t line;
    uint64_t bad, failed;
} burst_arg;

static void *burst_main(void *p) {
    burst_arg *a = (burst_arg *)p;
    void *d = NULL;
    uint64_t i;
    pthread_barrier_wait(a->bar);
    if (gpumem_cache_acquire(a->c, a->line, 1, 0, &d) != GPUMEM_OK) {
        a->failed++;
        return NULL;
    }
    for (i = 0; i < 4096 / 8; i++)
        if (((uint64_t *)d)[i] != initial_word(a->line * 512 + i)) a->bad++;
    if (gpumem_cache_release(a->c, a->line, 1) != GPUMEM_OK) a->failed++;
    return NULL;
}

Test(cache_miss, burst_on_one_line_is_one_read) {
    enum { T = 64 };
    cache_cfg c = base_cfg(4096, 64, 8);
    cache_setup s;
    pthread_t th[T];
    burst_arg a[T];
    pthread_barrier_t bar;
    gpumem_swctl_stats cs;
    gpumem_cache_stats st;
    uint32_t t;
    c.n_ctrls = 1;
    c.latency_ns = 20 * 1000 * 1000; /* 20 ms: every thread arrives while the read is out */
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    pthread_barrier_init(&bar, NULL, T);
    for (t = 0; t < T; t++) {
        a[t] = (burst_arg){s.cache, &bar, 7, 0, 0};
        pthread_create(&th[t], NULL, burst_main, &a[t]);
    }
    for (t = 0; t < T; t++) pthread_join(th[t], NULL);
    for (t = 0; t < T; t++) {
        cr_assert_eq(a[t].failed, 0);
        cr_assert_eq(a[t].bad, 0);
    }
    gpumem_swctl_stop(s.ctls[0]);
    gpumem_swctl_get_stats(s.ctls[0], &cs);
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert_eq(cs.reads, 1, "%lu reads at the controller for one line", (unsigned long)cs.reads);
    cr_assert_eq(st.fills, 1);
    cr_assert_eq(st.hits + st.misses, T);
    cr_assert_gt(st.misses, 1, "the threads did not overlap with the read (misses %lu)", (unsigned long)st.misses);
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    pthread_barrier_destroy(&bar);
    cache_setup_free(&s);
}

/* ---- a full cache: the documented rule ---------------------------------------- */

Test(cache_full, every_slot_in_use_answers_eagain_then_recovers) {
    cache_cfg c = base_cfg(4096, 64, 4);
    cache_setup s;
    gpumem_cache_stats st;
    void *d[5];
    uint32_t i;
    c.full_sweeps = 3;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    for (i = 0; i < 4; i++) cr_assert_eq(gpumem_cache_acquire(s.cache, i, 1, 0, &d[i]), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 10, 1, 0, &d[4]), GPUMEM_EAGAIN);
    cr_assert_eq(s.cache->lines[10].state, 0u, "the refused acquire left no reference and no BUSY behind");
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert_eq(st.full, 1);
    cr_assert_eq(st.evictions, 0, "a line in use was evicted");
    for (i = 0; i < 4; i++) cr_assert_eq(((uint64_t *)d[i])[0], initial_word(i * 512), "held data intact");
    cr_assert_eq(gpumem_cache_release(s.cache, 2, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 10, 1, 0, &d[4]), GPUMEM_OK);
    cr_assert_eq(((uint64_t *)d[4])[0], initial_word(10 * 512));
    cr_assert_eq(d[4], d[2], "line 10 took the only slot that was free: line 2's");
    for (i = 0; i < 2; i++) cr_assert_eq(gpumem_cache_release(s.cache, i, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_release(s.cache, 3, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_release(s.cache, 10, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    cache_setup_free(&s);
}

Test(cache_full, two_slots_sixty_four_threads_all_finish) {
    cache_cfg c = base_cfg(512, 512, 2);
    c.threads = 64;
    c.ops = scaled(100);
    c.full_sweeps = 2;
    c.use_ref = 1;
    c.write_permille = 200;
    cache_result r;
    cr_assert_eq(cache_run(&c, &r), GPUMEM_OK);
    check_run(&c, &r);
}

/* ---- the array reference keeps its line ---------------------------------------- */

Test(cache_ref, sequential_scan_acquires_once_per_line) {
    cache_cfg c = base_cfg(4096, 40, 4);
    cache_setup s;
    gpumem_cache_stats st;
    gpumem_cache_array a;
    gpumem_cache_ref r;
    uint64_t w, v;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    a = gpumem_cache_array_make(s.cache, 8, 0, s.n_words);
    cr_assert(a.valid);
    r = gpumem_cache_ref_make(&a);
    for (w = 0; w < s.n_words; w++) {
        cr_assert_eq(gpumem_cache_ref_get(&r, w, &v), GPUMEM_OK);
        cr_assert_eq(v, initial_word(w));
    }
    cr_assert_eq(gpumem_cache_ref_get(&r, s.n_words, &v), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_cache_ref_drop(&r), GPUMEM_OK);
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert_eq(st.hits + st.misses, c.n_lines, "%lu acquires for %lu lines",
                 (unsigned long)(st.hits + st.misses), (unsigned long)c.n_lines);
    cr_assert_eq(st.fills, c.n_lines);
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    /* element shapes that straddle lines are refused */
    cr_assert(!gpumem_cache_array_make(s.cache, 24, 0, 10).valid);
    cr_assert(!gpumem_cache_array_make(s.cache, 8, 4, 10).valid);
    cr_assert(!gpumem_cache_array_make(s.cache, 8, 0, s.n_words + 1).valid);
    cache_setup_free(&s);
}

/* ---- errors: bad input, overflow, failing backing --------------------------------- */

Test(cache_errors, bad_descriptions) {
    unsigned char mem[8192];
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c = NULL;
    d.backing = gpumem_cache_backing_memory(mem);
    d.n_lines = 2;
    d.n_slots = 1;
    d.line_bytes = 1000;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "not a power of two");
    d.line_bytes = 256;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "below 512");
    d.line_bytes = 4u << 20;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "above 2 MiB");
    d.line_bytes = 4096;
    d.n_slots = 0;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "no slots");
    d.n_slots = 1;
    d.policy = 9;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "unknown policy");
    d.policy = GPUMEM_CACHE_CLOCK;
    d.backing.mem = NULL;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_create(NULL, &c), GPUMEM_ENULL);
    cr_assert_null(c);
    {   /* init with too little metadata */
        gpumem_cache cc;
        static uint64_t meta[4];
        d.backing.mem = mem;
        d.meta = meta;
        d.meta_bytes = sizeof meta - 8;
        d.data = mem;
        d.n_lines = 2; /* 2 lines * 8 + 1 slot * 16 = 32 bytes needed */
        cr_assert_eq(gpumem_cache_init(&cc, &d), GPUMEM_ENOMEM);
        d.meta_bytes = sizeof meta;
        cr_assert_eq(gpumem_cache_init(&cc, &d), GPUMEM_OK);
    }
}

Test(cache_errors, nvme_shapes_checked_against_the_namespace) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl = NULL;
    gpumem_nvme_qp *qp;
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c = NULL;
    cfg.lba_bytes = 4096;
    cfg.n_blocks = 64;
    cfg.max_blocks = 4;
    cr_assert_eq(gpumem_swctl_create(&cfg, &ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &qp), GPUMEM_OK);
    d.backing = gpumem_cache_backing_nvme(&qp, 1, 1, 0, GPUMEM_CACHE_STRIPE);
    d.n_slots = 4;
    d.n_lines = 16;
    d.line_bytes = 512;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "line smaller than a 4 KiB block");
    d.line_bytes = 32768;
    d.n_lines = 2;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "8 blocks per line, MDTS is 4");
    d.line_bytes = 16384;
    d.n_lines = 17;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_ERANGE, "68 blocks do not fit 64");
    d.n_lines = 16;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    gpumem_cache_destroy(c);
    gpumem_swctl_destroy(ctl);
}

Test(cache_errors, bad_calls_and_refcount_overflow) {
    cache_cfg c = base_cfg(4096, 8, 4);
    cache_setup s;
    void *d = NULL;
    uint32_t before;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 8, 1, 0, &d), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 0, 0, 0, &d), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 0, GPUMEM_CACHE_MAX_GROUP + 1, 0, &d), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_cache_acquire(NULL, 0, 1, 0, &d), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_release(s.cache, 1, 1), GPUMEM_ESTATE, "release without acquire");
    cr_assert_eq(s.cache->lines[1].state, 0u, "the bad release left the state word alone");
    /* As if 2^28 references were held: the next acquire is refused, and the
     * state word is exactly what it was. */
    cr_assert_eq(gpumem_cache_acquire(s.cache, 3, 1, 0, &d), GPUMEM_OK);
    s.cache->lines[3].state += GPUMEM_CACHE_COUNT_LIMIT - 1;
    before = s.cache->lines[3].state;
    cr_assert_eq(gpumem_cache_acquire(s.cache, 3, GPUMEM_CACHE_MAX_GROUP, 0, &d), GPUMEM_EOVERFLOW);
    cr_assert_eq(s.cache->lines[3].state, before);
    cr_assert(s.cache->lines[3].state & GPUMEM_CACHE_VALID);
    cr_assert_eq(s.cache->lines[3].state & GPUMEM_CACHE_DIRTY, 0u, "no carry into DIRTY");
    s.cache->lines[3].state -= GPUMEM_CACHE_COUNT_LIMIT - 1;
    cr_assert_eq(gpumem_cache_release(s.cache, 3, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    cache_setup_free(&s);
}

/* A failing controller: a failed fill leaves the line uncached and the slot
 * free; a failed write-back keeps the dirty line (nothing is lost), and it
 * reaches the backing once the controller works again. */
Test(cache_errors, failing_backing_loses_nothing) {
    cache_cfg c = base_cfg(4096, 16, 2);
    cache_setup s;
    gpumem_cache_stats st;
    void *d = NULL;
    uint64_t written = 0;
    uint32_t i;
    c.n_ctrls = 1;
    c.pairs_per_ctrl = 1;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    /* dirty lines 0 and 1 fill both slots */
    for (i = 0; i < 2; i++) {
        cr_assert_eq(gpumem_cache_acquire(s.cache, i, 1, 1, &d), GPUMEM_OK);
        ((uint64_t *)d)[0] = 0xABCD0000u + i;
        cr_assert_eq(gpumem_cache_release(s.cache, i, 1), GPUMEM_OK);
    }
    gpumem_swctl_stop(s.ctls[0]);
    s.ctls[0]->cfg.error_ppm = 1000000; /* every command fails from now on */
    s.ctls[0]->cfg.error_status = GPUMEM_NVME_STATUS(0, 0x06); /* Internal Error */
    gpumem_swctl_start(s.ctls[0]);
    {
        gpumem_status got = gpumem_cache_acquire(s.cache, 5, 1, 0, &d);
        cr_assert_eq(got, GPUMEM_EIO, "the victim's write-back failed: %s", gpumem_status_str(got));
    }
    cr_assert_eq(s.cache->lines[5].state, 0u);
    cr_assert_eq(gpumem_cache_flush(s.cache, &written), GPUMEM_EIO);
    for (i = 0; i < 2; i++)
        cr_assert_eq(s.cache->lines[i].state, GPUMEM_CACHE_VALID | GPUMEM_CACHE_DIRTY, "line %u kept, dirty", i);
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    /* the controller works again: the kept lines reach the backing */
    gpumem_swctl_stop(s.ctls[0]);
    s.ctls[0]->cfg.error_ppm = 0;
    gpumem_swctl_start(s.ctls[0]);
    cr_assert_eq(gpumem_cache_flush(s.cache, &written), GPUMEM_OK);
    cr_assert_eq(written, 2);
    for (i = 0; i < 2; i++)
        cr_assert_eq(*backing_word(&s, 0, i * 512), 0xABCD0000u + i, "line %u reached the backing", i);
    cr_assert_eq(gpumem_cache_invalidate(s.cache, 0, c.n_slots, &written), GPUMEM_OK);
    cr_assert_eq(written, 2, "both clean lines dropped");
    gpumem_swctl_stop(s.ctls[0]);
    s.ctls[0]->cfg.error_ppm = 1000000;
    gpumem_swctl_start(s.ctls[0]);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 6, 1, 0, &d), GPUMEM_EIO, "the fill failed");
    cr_assert_eq(s.cache->lines[6].state, 0u, "no reference, no BUSY left on the line");
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0, "the slot went back empty");
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert_eq(st.io_errors, 4, "write-back, flush write-back (x2), fill: %lu", (unsigned long)st.io_errors);
    cr_assert_eq(st.violations, 0);
    cache_setup_free(&s);
}
