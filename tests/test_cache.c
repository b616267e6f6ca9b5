/* Criterion tests of gpumem_cache.h: many more threads than cores over a
 * cache much smaller than the data, every read checked by content, every
 * write found in the backing afterwards, invariants checked on every hit
 * (GPUMEM_CACHE_CHECK) and on the quiescent structure. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_CACHE_CHECK 1
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "cache_workload.h"

/* A hang fails its test instead of stalling the run. */
TestSuite(cache, .timeout = 300);
TestSuite(cache_miss, .timeout = 60);
TestSuite(cache_full, .timeout = 60);
TestSuite(cache_ref, .timeout = 60);
TestSuite(cache_errors, .timeout = 60);

/* ---- the workloads: random reads and writes by 16-64 threads on 2 cores ---- */

CACHE_WORKLOAD_PARAMETERS(cache, 24, cache_workloads)

ParameterizedTest(cache_workload *w, cache, workload) {
    cache_result r;
    CACHE_WORKLOAD_EXPECT_PASSES(w, &r);
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
    cache_cfg c = cache_cfg_base(4096, 64, 8, 1, 0);
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
    cache_cfg c = cache_cfg_base(4096, 64, 4, 1, 0);
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

/* A sequential policy whose victims come in order of the held lines first
 * (LRU: the oldest three are held) still finds the one free slot in a
 * single sweep. fuzz_cache_hints found it: the pins of refused candidates
 * were all cleared as soon as half the slots were pinned, so the sweep
 * went round the held lines and answered EAGAIN with a slot free. */
Test(cache_full, a_sequential_policy_finds_the_free_slot_in_one_sweep) {
    static const uint32_t kinds[] = {GPUMEM_POLICY_LRU, GPUMEM_POLICY_HINTED, GPUMEM_POLICY_LFU};
    uint32_t i, j;
    for (j = 0; j < 3; j++) {
        cache_cfg c = cache_cfg_base(512, 16, 4, 1, 0);
        cache_setup s;
        void *d[5];
        c.policy = kinds[j];
        c.full_sweeps = 1;
        cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
        for (i = 0; i < 4; i++) cr_assert_eq(gpumem_cache_acquire(s.cache, i, 1, 0, &d[i]), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_release(s.cache, 3, 1), GPUMEM_OK); /* the newest: the last victim */
        for (i = 0; i < 3; i++) {
            cr_assert_eq(gpumem_cache_acquire(s.cache, 8 + i, 1, 0, &d[4]), GPUMEM_OK,
                         "kind %u: line %u with a slot free", kinds[j], 8 + i);
            cr_assert_eq(gpumem_cache_release(s.cache, 8 + i, 1), GPUMEM_OK);
        }
        for (i = 0; i < 3; i++) cr_assert_eq(gpumem_cache_release(s.cache, i, 1), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
        cache_setup_free(&s);
    }
}

/* A dirty line still held is left for later (EAGAIN), then written once free. */
Test(cache_full, flush_leaves_held_lines_dirty_then_writes_them) {
    cache_cfg c = cache_cfg_base(4096, 8, 4, 1, 0);
    cache_setup s;
    void *d = NULL;
    uint64_t written = 99;
    c.n_ctrls = 1;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 3, 1, 1, &d), GPUMEM_OK);
    ((uint64_t *)d)[0] = 0x5EED;
    cr_assert_eq(gpumem_cache_flush(s.cache, &written), GPUMEM_EAGAIN);
    cr_assert_eq(written, 0);
    cr_assert_eq(*backing_word(&s, 0, 3 * 512), initial_word(3 * 512), "nothing written while held");
    cr_assert(s.cache->lines[3].state & GPUMEM_CACHE_DIRTY, "still dirty");
    cr_assert_eq(gpumem_cache_release(s.cache, 3, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_flush(s.cache, &written), GPUMEM_OK);
    cr_assert_eq(written, 1);
    cr_assert_eq(*backing_word(&s, 0, 3 * 512), 0x5EED);
    cr_assert_eq(s.cache->lines[3].state, GPUMEM_CACHE_VALID, "clean after the flush");
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    cache_setup_free(&s);
}

/* ---- the array reference keeps its line ---------------------------------------- */

Test(cache_ref, sequential_scan_acquires_once_per_line) {
    cache_cfg c = cache_cfg_base(4096, 40, 4, 1, 0);
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
    cr_assert_eq(gpumem_cache_ref_get(&r, 0, NULL), GPUMEM_ENULL);
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

/* A span is element i and the ones after it in the same line, at most n,
 * and no further than the array's end. The array here starts 3 words into
 * line 0 and ends 5 words before the data does, so the first and last spans
 * are short; each element is checked by content, and a span written in
 * place reaches the backing on a flush. */
Test(cache_ref, span_covers_each_line_once_and_stops_at_its_end) {
    cache_cfg c = cache_cfg_base(4096, 12, 4, 1, 0);
    cache_setup s;
    gpumem_cache_stats st;
    gpumem_cache_array a;
    gpumem_cache_ref r;
    const uint64_t per_line = 4096 / 8, first = 3, wants[3] = {1, 7, 100000};
    uint64_t i, j, k, w, calls, written = 0;
    void *p = NULL;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    a = gpumem_cache_array_make(s.cache, 8, first * 8, s.n_words - first - 5);
    cr_assert(a.valid);
    for (w = 0; w < 3; w++) {
        r = gpumem_cache_ref_make(&a);
        for (i = 0, calls = 0; i < a.n; i += k, calls++) {
            uint64_t in_line = per_line - (first + i) % per_line, want = wants[w];
            want = want < in_line ? want : in_line;
            want = want < a.n - i ? want : a.n - i;
            cr_assert_eq(gpumem_cache_ref_span(&r, i, wants[w], 0, &p, &k), GPUMEM_OK);
            cr_assert_eq(k, want, "span at %lu asking %lu: %lu elements, want %lu", (unsigned long)i,
                         (unsigned long)wants[w], (unsigned long)k, (unsigned long)want);
            for (j = 0; j < k; j++)
                cr_assert_eq(((const uint64_t *)p)[j], initial_word(first + i + j), "element %lu",
                             (unsigned long)(i + j));
        }
        if (wants[w] > per_line) cr_assert_eq(calls, c.n_lines, "one span a line: %lu calls", (unsigned long)calls);
        cr_assert_eq(gpumem_cache_ref_drop(&r), GPUMEM_OK);
    }
    /* statuses, with *count 0 on each failure */
    r = gpumem_cache_ref_make(&a);
    k = 9;
    cr_assert_eq(gpumem_cache_ref_span(&r, 0, 0, 0, &p, &k), GPUMEM_EINVAL);
    cr_assert_eq(k, 0);
    k = 9;
    cr_assert_eq(gpumem_cache_ref_span(&r, a.n, 1, 0, &p, &k), GPUMEM_ERANGE);
    cr_assert_eq(k, 0);
    k = 9;
    cr_assert_eq(gpumem_cache_ref_span(&r, 0, 1, 0, NULL, &k), GPUMEM_ENULL);
    cr_assert_eq(k, 0);
    cr_assert_eq(gpumem_cache_ref_span(&r, 0, 1, 0, &p, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_ref_span(NULL, 0, 1, 0, &p, &k), GPUMEM_ENULL);
    /* written in place: the whole of line 1, then flushed */
    cr_assert_eq(gpumem_cache_ref_span(&r, per_line - first, 100000, 1, &p, &k), GPUMEM_OK);
    cr_assert_eq(k, per_line);
    for (j = 0; j < k; j++) ((uint64_t *)p)[j] = ~initial_word(per_line + j);
    cr_assert_eq(gpumem_cache_ref_drop(&r), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_flush(s.cache, &written), GPUMEM_OK);
    cr_assert_eq(written, 1);
    for (j = 0; j < per_line; j++) cr_assert_eq(*backing_word(&s, 0, per_line + j), ~initial_word(per_line + j));
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert_eq(st.hits + st.misses, 3 * c.n_lines + 1, "one acquire a line a scan, one for the write: %lu",
                 (unsigned long)(st.hits + st.misses));
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    cache_setup_free(&s);
}

/* ---- statistics: sharded, summed exactly ----------------------------------------- */

typedef struct stat_arg {
    gpumem_cache *c;
    uint64_t n_lines, rounds, words_per_line, bad;
} stat_arg;

static void *stat_main(void *p) {
    stat_arg *a = (stat_arg *)p;
    for (uint64_t r = 0; r < a->rounds; r++)
        for (uint64_t l = 0; l < a->n_lines; l++) {
            void *d = NULL;
            if (gpumem_cache_acquire(a->c, l, 1, 0, &d) != GPUMEM_OK) {
                a->bad++;
                continue;
            }
            if (((const uint64_t *)d)[a->words_per_line - 1] != initial_word((l + 1) * a->words_per_line - 1)) a->bad++;
            gpumem_cache_release(a->c, l, 1);
        }
    return NULL;
}

/* Eight threads read every line of 300 (more lines than shards, all cached
 * after their first fill) four times: the counters, spread over the shards,
 * sum to exactly the accesses made, one fill and one read per line. */
Test(cache, stats_summed_across_every_shard_exactly) {
    enum { THREADS = 8, LINES = 300, ROUNDS = 4 };
    cache_cfg c = cache_cfg_base(512, LINES, LINES, THREADS, 1);
    cache_setup s;
    gpumem_cache_stats st;
    stat_arg a[THREADS];
    pthread_t t[THREADS];
    uint32_t i, shards_used = 0;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    for (i = 0; i < THREADS; i++) {
        a[i] = (stat_arg){s.cache, LINES, ROUNDS, 512 / 8, 0};
        pthread_create(&t[i], NULL, stat_main, &a[i]);
    }
    for (i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(a[i].bad, 0, "thread %u: %lu failed or wrong reads", i, (unsigned long)a[i].bad);
    }
    cr_assert_eq(gpumem_cache_get_stats(s.cache, &st), GPUMEM_OK);
    cr_assert_eq(st.hits + st.misses, (uint64_t)THREADS * LINES * ROUNDS, "%lu hits + %lu misses",
                 (unsigned long)st.hits, (unsigned long)st.misses);
    cr_assert_eq(st.fills, LINES);
    cr_assert_eq(st.reads, LINES);
    cr_assert_eq(st.bytes_read, (uint64_t)LINES * 512);
    cr_assert_eq(st.evictions + st.full + st.io_errors + st.violations, 0);
    for (i = 0; i < GPUMEM_CACHE_STAT_SHARDS; i++) shards_used += s.cache->stats[i].v[GPUMEM__ST_HITS] != 0;
    cr_assert_gt(shards_used, 1, "the counts went to one shard");
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
    d.policy = GPUMEM_POLICY_KINDS;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "unknown policy");
    d.policy = GPUMEM_POLICY_LRU; /* a sequential kind, and no seq_policy given */
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL, "a sequential kind as a slot policy");
    d.policy = GPUMEM_CACHE_CLOCK;
    d.backing.mem = NULL;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_create(NULL, &c), GPUMEM_ENULL);
    d.backing.mem = mem;
    d.n_lines = 1ull << 61; /* 2^61 lines of metadata do not fit any size_t */
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_ERANGE, "sizes that wrap are refused");
    d.n_lines = 2;
    d.backing.mem = NULL;
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
    gpumem_nvme_ns ns = gpumem_swctl_ns(ctl);
    d.backing = gpumem_cache_backing_nvme(&qp, 1, 1, &ns, 0, GPUMEM_CACHE_STRIPE);
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
    cache_cfg c = cache_cfg_base(4096, 8, 4, 1, 0);
    cache_setup s;
    void *d = NULL;
    uint32_t before;
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 8, 1, 0, &d), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 0, 0, 0, &d), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_cache_acquire(s.cache, 0, GPUMEM_CACHE_MAX_GROUP + 1, 0, &d), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_cache_acquire(NULL, 0, 1, 0, &d), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_release(s.cache, 1, 1), GPUMEM_ESTATE, "release without acquire");
    cr_assert_eq(gpumem_cache_mark_dirty(s.cache, 1), GPUMEM_ESTATE, "not held, not cached");
    cr_assert_eq(gpumem_cache_mark_dirty(s.cache, 8), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_cache_mark_dirty(NULL, 0), GPUMEM_ENULL);
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
    cache_cfg c = cache_cfg_base(4096, 16, 2, 1, 0);
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


/* Slots in front of NVMe must start on a page (a 4 KiB line at page offset
 * 512, as CUDA's allocators hand out small blocks, would span two pages):
 * refused with GPUMEM_EALIGN, and accepted once aligned. The pairs are only
 * pointers to init: a namespace must come with them. */
Test(cache_errors, nvme_slots_must_be_page_aligned) {
    gpumem_nvme_qp *pairs[1] = {(gpumem_nvme_qp *)(uintptr_t)0x1000}; /* never dereferenced at init */
    gpumem_nvme_ns ns = {1, 9, 1024, 64, 0};
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache c;
    unsigned char *slots = aligned_alloc(4096, 9 * 4096);
    void *meta;
    cr_assert(slots);
    d.n_lines = 64;
    d.n_slots = 8;
    d.backing = gpumem_cache_backing_nvme(pairs, 1, 1, &ns, 0, GPUMEM_CACHE_STRIPE);
    d.meta_bytes = gpumem_cache_meta_bytes(&d);
    meta = malloc(d.meta_bytes);
    d.meta = meta;
    d.data = slots + 512;
    cr_assert_eq(gpumem_cache_init(&c, &d), GPUMEM_EALIGN, "slots at page offset 512");
    d.data = slots;
    cr_assert_eq(gpumem_cache_init(&c, &d), GPUMEM_OK);
    cr_assert_eq(c.backing.pairs[0], pairs[0], "the pairs array was copied");
    cr_assert_neq((void *)c.backing.pairs, (void *)pairs, "into the cache's own metadata");
    d.backing = gpumem_cache_backing_nvme(pairs, 1, 1, NULL, 0, GPUMEM_CACHE_STRIPE);
    cr_assert_eq(gpumem_cache_init(&c, &d), GPUMEM_EINVAL, "no namespace given");
    free(meta);
    free(slots);
}

/* Zero means default (issue 41): a description zeroed but for the fields
 * without a default (n_lines, n_slots, the backing) makes a cache with the
 * default line size, policy and sweeps, and gpumem_cache_desc_resolved says
 * so before anything is made. 0.4 took a zeroed policy as CLOCK and refused
 * line_bytes 0 (EINVAL). Checked by content through the cache. */
Test(cache, zero_means_default) {
    static unsigned char mem[64 * 4096];
    gpumem_cache_desc d, r;
    gpumem_cache *c;
    void *p;
    uint32_t i;
    memset(&d, 0, sizeof d);
    d.n_lines = 64;
    d.n_slots = 8;
    d.backing = gpumem_cache_backing_memory(mem);
    r = gpumem_cache_desc_resolved(&d);
    cr_assert_eq(r.line_bytes, 4096);
    cr_assert_eq(r.policy, GPUMEM_POLICY_BRRIP, "resolved policy %s", gpumem_policy_name(r.policy));
    cr_assert_eq(r.full_sweeps, GPUMEM_CACHE_DEFAULT_SWEEPS);
    cr_assert_eq(r.n_lines, 64, "a field without a default stays as given");
    cr_assert_eq(gpumem_cache_desc_default().line_bytes, r.line_bytes);
    cr_assert_eq(gpumem_cache_desc_default().policy, r.policy);
    for (i = 0; i < sizeof mem; i++) mem[i] = (unsigned char)(i * 7 + 1);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK, "a zeroed description with lines, slots, backing");
    cr_assert_eq(c->line_bytes, 4096);
    cr_assert_eq(c->policy, GPUMEM_POLICY_BRRIP);
    cr_assert_eq(c->full_sweeps, GPUMEM_CACHE_DEFAULT_SWEEPS);
    for (i = 0; i < 64; i++) { /* every line through 8 slots: the default policy evicts */
        cr_assert_eq(gpumem_cache_acquire(c, i, 1, 1, &p), GPUMEM_OK);
        cr_assert_eq(((unsigned char *)p)[5], (unsigned char)((i * 4096 + 5) * 7 + 1), "line %u by content", i);
        ((unsigned char *)p)[5] ^= 0xFF;
        gpumem_cache_release(c, i, 1);
    }
    cr_assert_eq(gpumem_cache_flush(c, NULL), GPUMEM_OK);
    for (i = 0; i < 64; i++)
        cr_assert_eq(mem[i * 4096 + 5], (unsigned char)(((i * 4096 + 5) * 7 + 1) ^ 0xFF), "line %u written back", i);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_OK);
}

/* ---- hinted prefetch (gpumem_cache_prefetch, issue 43) ------------------------ */

TestSuite(prefetch, .timeout = 60);

/* Whether `line` is cached now (no reference taken). */
static int cached(gpumem_cache *c, uint64_t line) { return gpumem__cache_resident_slot(c, line) < c->n_slots; }

/* The prefetch tests' cache: n_slots slots of 512 B over n_lines lines
 * under `policy`, in memory (ctrls 0) or behind one controller. */
static void prefetch_cache(cache_setup *s, uint64_t n_lines, uint32_t n_slots, uint32_t policy, uint32_t ctrls) {
    cache_cfg c = cache_cfg_base(512, n_lines, n_slots, 1, 0);
    c.policy = policy;
    c.n_ctrls = ctrls;
    cr_assert_eq(cache_setup_make(s, &c), GPUMEM_OK);
}

/* Acquire `line` once, check every word by content, release. */
static void use_line(cache_setup *s, uint64_t line) {
    void *d = NULL;
    uint64_t w, n = s->cfg.line_bytes / 8;
    cr_assert_eq(gpumem_cache_acquire(s->cache, line, 1, 0, &d), GPUMEM_OK, "acquire %lu", (unsigned long)line);
    for (w = 0; w < n; w++)
        cr_assert_eq(((uint64_t *)d)[w], s->expect[line * n + w], "line %lu word %lu", (unsigned long)line,
                     (unsigned long)w);
    cr_assert_eq(gpumem_cache_release(s->cache, line, 1), GPUMEM_OK);
}

/* A line read ahead is cached, counted as a prefetch and a fill, not a
 * miss, and its use is a hit with the right bytes: for a policy without
 * hints, the slot kind with them and the sequential one, from memory and
 * through a pair. */
Test(prefetch, reads_ahead_and_the_use_is_a_hit) {
    static const uint32_t kinds[] = {GPUMEM_POLICY_BRRIP, GPUMEM_POLICY_HINTED_RRIP, GPUMEM_POLICY_HINTED};
    uint32_t i, ctrls;
    for (ctrls = 0; ctrls < 2; ctrls++)
        for (i = 0; i < 3; i++) {
            cache_setup s;
            gpumem_cache_stats st;
            prefetch_cache(&s, 16, 4, kinds[i], ctrls);
            cr_assert_eq(gpumem_cache_prefetch(s.cache, 5, 0), GPUMEM_OK, "kind %u", kinds[i]);
            cr_assert(cached(s.cache, 5));
            gpumem_cache_get_stats(s.cache, &st);
            cr_assert(st.prefetches == 1 && st.fills == 1 && st.reads == 1 && st.bytes_read == 512,
                      "prefetches %lu fills %lu reads %lu", (unsigned long)st.prefetches, (unsigned long)st.fills,
                      (unsigned long)st.reads);
            cr_assert_eq(st.hits + st.misses, 0, "a prefetch is no access");
            use_line(&s, 5);
            cr_assert_eq(gpumem_cache_prefetch(s.cache, 5, 0), GPUMEM_OK, "cached already: nothing to do");
            gpumem_cache_get_stats(s.cache, &st);
            cr_assert(st.hits == 1 && st.misses == 0 && st.prefetches == 1 && st.fills == 1,
                      "hits %lu misses %lu prefetches %lu", (unsigned long)st.hits, (unsigned long)st.misses,
                      (unsigned long)st.prefetches);
            cr_assert_eq(s.cache->lines[5].state, GPUMEM_CACHE_VALID, "no reference left behind");
            cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
            cache_setup_free(&s);
        }
}

/* Two slots: line 0 hinted for epoch 1, line 1 for epoch 9. A prefetch
 * for epoch 5 takes line 1's slot, never line 0's; the next one for epoch
 * 5 gives way (EAGAIN, nothing evicted: line 0 is needed sooner, line 2 in
 * the same epoch); one for epoch 1 takes the slot of the line prefetched
 * for 5, never line 0's (the same epoch is not given up either). Both
 * hinted kinds. (A hint adds a use: the sequential kind keeps a line's two
 * soonest, so a later hint does not make a line hinted sooner evictable.) */
Test(prefetch, never_evicts_a_line_hinted_for_sooner_use) {
    static const uint32_t kinds[] = {GPUMEM_POLICY_HINTED_RRIP, GPUMEM_POLICY_HINTED};
    uint32_t i;
    for (i = 0; i < 2; i++) {
        cache_setup s;
        gpumem_cache_stats st;
        prefetch_cache(&s, 8, 2, kinds[i], 0);
        cr_assert_eq(gpumem_cache_epoch(s.cache, 0), GPUMEM_OK);
        use_line(&s, 0);
        use_line(&s, 1);
        cr_assert_eq(gpumem_cache_hint(s.cache, 0, 1), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_hint(s.cache, 1, 9), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_prefetch(s.cache, 2, 5), GPUMEM_OK, "kind %u: line 1 is needed later", kinds[i]);
        cr_assert(cached(s.cache, 0) && !cached(s.cache, 1) && cached(s.cache, 2), "kind %u", kinds[i]);
        cr_assert_eq(gpumem_cache_prefetch(s.cache, 3, 5), GPUMEM_EAGAIN, "kind %u: both needed as soon", kinds[i]);
        cr_assert(cached(s.cache, 0) && cached(s.cache, 2) && !cached(s.cache, 3), "kind %u", kinds[i]);
        gpumem_cache_get_stats(s.cache, &st);
        cr_assert(st.evictions == 1 && st.prefetch_declined == 1 && st.full == 0, "evictions %lu declined %lu",
                  (unsigned long)st.evictions, (unsigned long)st.prefetch_declined);
        cr_assert_eq(gpumem_cache_prefetch(s.cache, 4, 1), GPUMEM_OK);
        cr_assert(cached(s.cache, 0) && !cached(s.cache, 2) && cached(s.cache, 4), "kind %u", kinds[i]);
        use_line(&s, 0);
        use_line(&s, 4);
        gpumem_cache_get_stats(s.cache, &st);
        cr_assert(st.prefetches == 2 && st.evictions == 2 && st.hits == 2, "prefetches %lu evictions %lu hits %lu",
                  (unsigned long)st.prefetches, (unsigned long)st.evictions, (unsigned long)st.hits);
        cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
        cache_setup_free(&s);
    }
}

/* The budget test's prefetch in flight, on a thread of its own. */
static gpumem_status out_status;
static void *prefetch_line_20(void *cache) {
    out_status = gpumem_cache_prefetch((gpumem_cache *)cache, 20, 0);
    return NULL;
}

/* Below demand misses: with every slot held a prefetch gives way at once
 * (it neither waits nor counts as a full cache), and only prefetch_budget
 * of them are out at once (8 slots: the default budget is 1) while a
 * demand miss beside them goes ahead. */
Test(prefetch, gives_way_to_demand_within_its_budget) {
    cache_cfg c = cache_cfg_base(512, 64, 8, 1, 0);
    cache_setup s;
    gpumem_cache_stats st;
    gpumem_cache_desc d = gpumem_cache_desc_default();
    pthread_t th;
    void *p = NULL;
    uint64_t i, t0;
    d.n_slots = 64;
    cr_assert_eq(gpumem_cache_desc_resolved(&d).prefetch_budget, 8, "n_slots / 8");
    d.n_slots = 4;
    cr_assert_eq(gpumem_cache_desc_resolved(&d).prefetch_budget, 1, "at least 1");
    c.n_ctrls = 1;
    c.latency_ns = 20 * 1000 * 1000; /* 20 ms a command: the prefetch below is still out */
    cr_assert_eq(cache_setup_make(&s, &c), GPUMEM_OK);
    cr_assert_eq(s.cache->prefetch_budget, 1);
    for (i = 0; i < 8; i++) cr_assert_eq(gpumem_cache_acquire(s.cache, i, 1, 0, &p), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 9, 0), GPUMEM_EAGAIN, "every slot held");
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert(st.full == 0 && st.prefetch_declined == 1, "full %lu declined %lu", (unsigned long)st.full,
              (unsigned long)st.prefetch_declined);
    for (i = 0; i < 8; i++) cr_assert_eq(gpumem_cache_release(s.cache, i, 1), GPUMEM_OK);
    out_status = GPUMEM_EINVAL;
    pthread_create(&th, NULL, prefetch_line_20, s.cache);
    t0 = gpumem_clock_ns();
    while (!(__atomic_load_n(&s.cache->lines[20].state, __ATOMIC_ACQUIRE) & GPUMEM_CACHE_BUSY) &&
           gpumem_clock_ns() - t0 < 10ull * 1000 * 1000 * 1000)
        sched_yield();
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 21, 0), GPUMEM_EAGAIN, "the budget's one prefetch is out");
    use_line(&s, 30); /* a demand miss meanwhile */
    pthread_join(th, NULL);
    cr_assert_eq(out_status, GPUMEM_OK);
    use_line(&s, 20);
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert(st.prefetches == 1 && st.prefetch_declined == 2 && st.hits == 1 && st.misses == 9,
              "prefetches %lu declined %lu hits %lu misses %lu", (unsigned long)st.prefetches,
              (unsigned long)st.prefetch_declined, (unsigned long)st.hits, (unsigned long)st.misses);
    cr_assert_eq(s.cache->prefetching.v, 0, "the budget given back");
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    cache_setup_free(&s);
}

/* Bad input gets a status and caches nothing; a failed read ends in EIO
 * with the line uncached and no reference or BUSY left on it. */
Test(prefetch, bad_input_and_failed_reads_get_a_status) {
    cache_setup s;
    gpumem_cache_stats st;
    gpumem_cache_array a;
    prefetch_cache(&s, 16, 4, GPUMEM_POLICY_HINTED_RRIP, 1);
    cr_assert_eq(gpumem_cache_prefetch(NULL, 1, 0), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 16, 0), GPUMEM_ERANGE, "a line past the end");
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 1, UINT64_MAX), GPUMEM_EOVERFLOW);
    cr_assert_eq(gpumem_cache_epoch(s.cache, 5), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 1, 4), GPUMEM_ERANGE, "an epoch already past");
    a = gpumem_cache_array_make(s.cache, 8, 0, 16 * 64);
    cr_assert_eq(gpumem_cache_array_prefetch(&a, 16 * 64 - 1, 2, 5), GPUMEM_ERANGE, "elements past the end");
    cr_assert_eq(gpumem_cache_array_prefetch(&a, 0, 0, 5), GPUMEM_OK, "nothing asked");
    cr_assert_eq(gpumem_cache_array_prefetch(NULL, 0, 1, 5), GPUMEM_ENULL);
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert_eq(st.fills + st.prefetches + st.prefetch_declined, 0, "nothing read");
    cr_assert_eq(gpumem_cache_array_prefetch(&a, 64 + 1, 2 * 64, 6), GPUMEM_OK, "elements of lines 1..3");
    cr_assert(cached(s.cache, 1) && cached(s.cache, 2) && cached(s.cache, 3) && !cached(s.cache, 4));
    gpumem_swctl_stop(s.ctls[0]);
    s.ctls[0]->cfg.error_ppm = 1000000; /* every command fails from now on */
    gpumem_swctl_start(s.ctls[0]);
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 9, 6), GPUMEM_EIO);
    cr_assert_eq(s.cache->lines[9].state, 0u, "no reference, no BUSY left on the line");
    gpumem_cache_get_stats(s.cache, &st);
    cr_assert(st.prefetches == 3 && st.io_errors == 1 && st.misses == 0 && st.full == 0,
              "prefetches %lu io_errors %lu", (unsigned long)st.prefetches, (unsigned long)st.io_errors);
    cr_assert_eq(s.cache->prefetching.v, 0);
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    cache_setup_free(&s);
}

/* A prefetch that gives way changes nothing it passed over: the slot
 * kind's words, its trust and verdicts; the sequential kind's pins, trust
 * and verdicts (its count of victims chosen by hint counts the one victim
 * it named and the prefetch refused; a sweep of refusals counted 8). */
Test(prefetch, a_declined_prefetch_leaves_the_policy_as_it_was) {
    static const uint32_t kinds[] = {GPUMEM_POLICY_HINTED_RRIP, GPUMEM_POLICY_HINTED};
    uint32_t i, k;
    for (i = 0; i < 2; i++) {
        cache_setup s;
        uint32_t words[4];
        gpumem_policy_slot_hints sh;
        gpumem__phint ph;
        uint32_t n_pin;
        prefetch_cache(&s, 16, 4, kinds[i], 0);
        cr_assert_eq(gpumem_cache_epoch(s.cache, 0), GPUMEM_OK);
        for (k = 0; k < 4; k++) {
            use_line(&s, k);
            cr_assert_eq(gpumem_cache_hint(s.cache, k, 1), GPUMEM_OK);
        }
        for (k = 0; k < 4; k++) words[k] = s.cache->slots[k].ref;
        sh = s.cache->slot_hints;
        ph = s.seq.hint;
        n_pin = s.seq.n_pin;
        cr_assert_eq(gpumem_cache_prefetch(s.cache, 9, 3), GPUMEM_EAGAIN, "kind %u: every line needed sooner", kinds[i]);
        for (k = 0; k < 4; k++) {
            cr_assert(cached(s.cache, k), "kind %u: line %u kept", kinds[i], k);
            if (kinds[i] == GPUMEM_POLICY_HINTED_RRIP)
                cr_assert_eq(s.cache->slots[k].ref, words[k], "slot %u's word: %#x, was %#x", k, s.cache->slots[k].ref,
                             words[k]);
        }
        cr_assert(s.cache->slot_hints.trust == sh.trust && s.cache->slot_hints.right == sh.right &&
                      s.cache->slot_hints.wrong == sh.wrong,
                  "slot kind: trust %u (was %u), wrong %u (was %u)", s.cache->slot_hints.trust, sh.trust,
                  s.cache->slot_hints.wrong, sh.wrong);
        cr_assert(s.seq.n_pin == n_pin && s.seq.hint.trust == ph.trust && s.seq.hint.wrong == ph.wrong &&
                      s.seq.hint.right == ph.right && s.seq.hint.hinted_victims <= ph.hinted_victims + 1 &&
                      s.seq.hint.fallback_victims == ph.fallback_victims,
                  "sequential: pins %u (were %u), trust %u (was %u), victims %lu+%lu (were %lu+%lu)", s.seq.n_pin,
                  n_pin, s.seq.hint.trust, ph.trust, (unsigned long)s.seq.hint.hinted_victims,
                  (unsigned long)s.seq.hint.fallback_victims, (unsigned long)ph.hinted_victims,
                  (unsigned long)ph.fallback_victims);
        cache_setup_free(&s);
    }
}

/* A line read ahead is not a use: the sequential hinted policy judges its
 * hint when the line is used at its epoch (right), not at the prefetch
 * (which, an epoch early, would be wrong); the slot kind keeps a sooner
 * hint standing against a prefetch's later one, and tells a demote from a
 * far hint whose epoch has come. */
Test(prefetch, a_line_read_ahead_is_not_a_use) {
    cache_setup s;
    uint32_t k;
    prefetch_cache(&s, 16, 4, GPUMEM_POLICY_HINTED, 0);
    cr_assert_eq(gpumem_cache_epoch(s.cache, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 5, 1), GPUMEM_OK);
    cr_assert(s.seq.hint.right == 0 && s.seq.hint.wrong == 0, "judged at the prefetch: %lu right, %lu wrong",
              (unsigned long)s.seq.hint.right, (unsigned long)s.seq.hint.wrong);
    cr_assert_eq(gpumem_cache_epoch(s.cache, 1), GPUMEM_OK);
    use_line(&s, 5);
    cr_assert(s.seq.hint.right == 1 && s.seq.hint.wrong == 0, "at its use: %lu right, %lu wrong",
              (unsigned long)s.seq.hint.right, (unsigned long)s.seq.hint.wrong);
    cache_setup_free(&s);

    prefetch_cache(&s, 16, 4, GPUMEM_POLICY_HINTED_RRIP, 0);
    use_line(&s, 5);
    cr_assert_eq(gpumem_cache_hint(s.cache, 5, 3), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 5, 9), GPUMEM_OK);
    k = s.cache->lines[5].slot;
    cr_assert_eq(gpumem__slot_next_use(s.cache, k), 3, "the sooner hint stands");
    cr_assert_eq(gpumem_cache_hint(s.cache, 6, 2), GPUMEM_OK, "line 6 not cached: pending");
    cr_assert_eq(gpumem_cache_prefetch(s.cache, 6, 8), GPUMEM_OK);
    cr_assert_eq(gpumem__slot_next_use(s.cache, s.cache->lines[6].slot), 2, "the pending sooner hint applied");
    cr_assert_eq(gpumem_cache_epoch(s.cache, 3), GPUMEM_OK);
    cr_assert_eq(gpumem__slot_next_use(s.cache, k), 3, "a far hint whose epoch has come is not a demote");
    cr_assert_eq(gpumem_cache_demote(s.cache, 5), GPUMEM_OK);
    cr_assert_eq(gpumem__slot_next_use(s.cache, k), GPUMEM_POLICY_UNHINTED, "demoted");
    cache_setup_free(&s);
}
