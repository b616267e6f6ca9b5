/* Criterion tests of gpumem_tier.h: the cache's concurrent workload
 * (tests/cache_workload.h: 32 threads on 2 cores, every read checked by
 * content, every write kept in a reference model) run through all three
 * tiers against the software controller, with both tiers checked quiescent
 * between rounds (no line in a GPU slot and a host slot at once), and the
 * storage compared with the reference model after the flush - with a host
 * tier far smaller than the data (full, displacing) and with lines that
 * bypass it. Then the read path step by step, destroy never dropping a
 * dirty line, and bad arguments. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_CACHE_CHECK 1
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_tier.h"
#include "gpumem_swctl.h"
#include "cache_workload.h"

TestSuite(tier, .timeout = 300);
TestSuite(tier_path, .timeout = 60);
TestSuite(tier_args, .timeout = 60);

/* ---- the workloads through three tiers (cache_workload.h's tier_workloads) -------- */

CACHE_WORKLOAD_PARAMETERS(tier, 16, tier_workloads)

ParameterizedTest(cache_workload *w, tier, workload) {
    cache_result r;
    CACHE_WORKLOAD_EXPECT_PASSES(w, &r);
    if (w->cfg.tier_slots >= w->cfg.n_lines)
        cr_assert_eq(r.tier.host_evictions, 0, "%s: displaced with room for everything", w->name);
    if (w->cfg.tier_placement == GPUMEM_TIER_GMT_REUSE) {
        const gpumem_tier_stats *t = &r.tier;
        cr_assert(t->model_ready && t->model_updates > 0, "%s: no model", w->name);
        cr_assert_eq(t->predicted[1] + t->predicted[2] + t->predicted[3],
                     t->placed[1] + t->placed[2] + t->placed[3] + t->placed[4], "%s: predictions vs placements",
                     w->name);
        /* Samples grow with the operations, which GPUMEM_TEST_SCALE scales. */
        if (w->cfg.tier_model == TIER_MODEL_TRAINED)
            cr_assert_gt(t->samples, (uint64_t)(1000 * cache_test_scale()), "%s: %llu samples", w->name,
                         (unsigned long long)t->samples);
        if (w->cfg.tier_model == TIER_MODEL_STORAGE)
            cr_assert(t->predicted[3] > 0 && t->bypasses > 0, "%s: %llu predicted storage, %llu bypasses", w->name,
                      (unsigned long long)t->predicted[3], (unsigned long long)t->bypasses);
        if (w->cfg.tier_model == TIER_MODEL_KEEP)
            cr_assert(t->keeps > 0 && t->keeps == t->placed[GPUMEM_PLACE_KEEP], "%s: %llu keeps", w->name,
                      (unsigned long long)t->keeps);
    }
}

/* ---- the read path, one step at a time --------------------------------------------- */

/* A cache of 2 slots (round robin: the victims are known) over 8 lines of
 * memory, a host tier of 2 slots, tier order. */
typedef struct path_rig {
    unsigned char mem[8 * 512];
    gpumem_cache *c;
    gpumem_tier *t;
} path_rig;

static void path_rig_make(path_rig *r, uint32_t placement) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_tier_desc td;
    uint32_t i;
    for (i = 0; i < sizeof r->mem; i++) r->mem[i] = (unsigned char)(i / 512 + 1); /* line l holds l+1 */
    d.n_lines = 8;
    d.line_bytes = 512;
    d.n_slots = 2;
    d.policy = GPUMEM_CACHE_ROUND_ROBIN;
    d.backing = gpumem_cache_backing_memory(r->mem);
    cr_assert_eq(gpumem_cache_create(&d, &r->c), GPUMEM_OK);
    td = gpumem_tier_desc_default(r->c, 2);
    td.placement = placement;
    cr_assert_eq(gpumem_tier_create(&td, &r->t), GPUMEM_OK);
}

/* Acquire `line`, check its first byte, optionally write `value` into it. */
static void touch(path_rig *r, uint64_t line, unsigned char want, int write, unsigned char value) {
    void *p = NULL;
    cr_assert_eq(gpumem_cache_acquire(r->c, line, 1, write, &p), GPUMEM_OK);
    cr_assert_eq(((unsigned char *)p)[0], want, "line %llu holds %u, expected %u", (unsigned long long)line,
                 ((unsigned char *)p)[0], want);
    cr_assert_eq(((unsigned char *)p)[511], want);
    if (write) memset(p, value, 512);
    cr_assert_eq(gpumem_cache_release(r->c, line, 1), GPUMEM_OK);
}

Test(tier_path, three_tiers_exclusive_dirty_stays_dirty) {
    path_rig r;
    gpumem_tier_stats ts;
    gpumem_cache_stats cs;
    uint64_t written = 0;
    path_rig_make(&r, GPUMEM_TIER_ORDER);
    touch(&r, 0, 1, 1, 0xA0); /* line 0 dirty in the GPU */
    touch(&r, 1, 2, 0, 0);
    touch(&r, 2, 3, 0, 0);    /* evicts 0 (dirty) to host */
    cr_assert_eq(r.mem[0], 1, "a dirty line moved to host memory was written to storage");
    cr_assert_eq(r.t->home[0], GPUMEM_TIER_IN | GPUMEM_TIER_DIRTY | (r.t->home[0] & GPUMEM_TIER_SLOT_MASK));
    cr_assert_eq(gpumem_tier_check_quiescent(r.t), 0);
    touch(&r, 3, 4, 0, 0);    /* evicts 1 (clean) to host: host full */
    touch(&r, 0, 0xA0, 0, 0); /* host hit, claimed first: 2 goes down, displacing 1 (0 is claimed) */
    cr_assert(r.c->lines[0].state & GPUMEM_CACHE_DIRTY, "came up clean");
    cr_assert_eq(r.t->home[0], 0, "still in host memory after the move up");
    cr_assert_eq(gpumem_tier_check_quiescent(r.t), 0);
    gpumem_tier_get_stats(r.t, &ts);
    gpumem_cache_get_stats(r.c, &cs);
    cr_assert_eq(ts.host_hits, 1);
    cr_assert_eq(ts.host_misses, 4);
    cr_assert_eq(cs.reads, 4, "storage reads %llu", (unsigned long long)cs.reads);
    cr_assert_eq(ts.moves, 3);
    cr_assert_eq(ts.dirty_moves, 1);
    cr_assert_eq(ts.host_evictions, 1);
    cr_assert_eq(ts.writebacks, 0, "a clean displaced line was written");
    touch(&r, 1, 2, 0, 0); /* 1 was displaced: from storage */
    touch(&r, 5, 6, 1, 0xB5);
    touch(&r, 6, 7, 0, 0);
    touch(&r, 7, 8, 0, 0); /* 5 (dirty) goes down; the host tier displaces what it must */
    cr_assert_eq(gpumem_tier_check_quiescent(r.t), 0);
    cr_assert_eq(gpumem_cache_flush(r.c, &written), GPUMEM_OK);
    cr_assert_eq(r.mem[0], 0xA0, "line 0 not written by the flush");
    cr_assert_eq(r.mem[5 * 512], 0xB5, "line 5 not written by the flush");
    cr_assert_eq(r.mem[5 * 512 + 511], 0xB5);
    cr_assert_eq(gpumem_cache_destroy(r.c), GPUMEM_EBUSY, "a cache with a tier attached was destroyed");
    cr_assert_eq(gpumem_tier_destroy(r.t), GPUMEM_OK);
    cr_assert_null(r.c->tier);
    touch(&r, 0, 0xA0, 0, 0); /* the cache alone, storage up to date */
    cr_assert_eq(gpumem_cache_destroy(r.c), GPUMEM_OK);
}

Test(tier_path, never_host_is_two_tiers) {
    path_rig r;
    gpumem_tier_stats ts;
    gpumem_cache_stats cs;
    uint64_t l;
    path_rig_make(&r, GPUMEM_TIER_NEVER_HOST);
    for (l = 0; l < 8; l++) touch(&r, l, (unsigned char)(l + 1), 1, (unsigned char)(0x40 + l));
    for (l = 0; l < 8; l++) touch(&r, l, (unsigned char)(0x40 + l), 0, 0);
    gpumem_tier_get_stats(r.t, &ts);
    gpumem_cache_get_stats(r.c, &cs);
    cr_assert_eq(ts.moves + ts.host_hits + ts.host_resident, 0);
    cr_assert_eq(ts.bypasses, cs.evictions);
    cr_assert_eq(cs.reads, 16, "every access after the first two lines misses: %llu", (unsigned long long)cs.reads);
    cr_assert_eq(gpumem_tier_destroy(r.t), GPUMEM_OK);
    for (l = 0; l < 8; l++) cr_assert_eq(r.mem[l * 512], 0x40 + l);
    cr_assert_eq(gpumem_cache_destroy(r.c), GPUMEM_OK);
}

/* Detach (and so destroy) refuses while a thread holds a line, freeing
 * nothing, and goes on once it is released. */
Test(tier_path, detach_refuses_while_a_line_is_held) {
    path_rig r;
    void *p = NULL;
    path_rig_make(&r, GPUMEM_TIER_ORDER);
    cr_assert_eq(gpumem_cache_acquire(r.c, 6, 1, 0, &p), GPUMEM_OK);
    cr_assert_eq(gpumem_tier_detach(r.t), GPUMEM_EBUSY, "detached while line 6 was held");
    cr_assert_eq(gpumem_tier_destroy(r.t), GPUMEM_EBUSY, "destroyed while line 6 was held");
    cr_assert_eq(r.c->tier, r.t, "the tier left the cache although refused");
    cr_assert_eq(gpumem_cache_release(r.c, 6, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_tier_destroy(r.t), GPUMEM_OK);
    cr_assert_null(r.c->tier);
    cr_assert_eq(gpumem_cache_destroy(r.c), GPUMEM_OK);
}

/* GMT-Reuse's figures: samples recorded by the accesses, the fit, and the
 * predictions of a loop twice the GPU tier (reuse distance: the loop). */
Test(tier_path, gmt_reuse_learns_a_loop) {
    path_rig r;
    gpumem_tier_stats ts;
    uint64_t fitted = 0, i;
    path_rig_make(&r, GPUMEM_TIER_GMT_REUSE);
    for (i = 0; i < 40; i++) touch(&r, i % 4, (unsigned char)(i % 4 + 1), 0, 0);
    cr_assert_eq(gpumem_tier_train(r.t, &fitted), GPUMEM_OK);
    cr_assert_eq(fitted, 36, "a loop of 4 over 40 accesses: 36 reuses, fitted %llu", (unsigned long long)fitted);
    gpumem_tier_get_stats(r.t, &ts);
    cr_assert(ts.model_ready && ts.model_updates == 1);
    cr_assert_eq(ts.accesses, 40);
    /* RD = 3 for VTD = 4 in a pure loop: through the origin, m = 0.75 */
    cr_assert(ts.m > 0.74 && ts.m < 0.76 && ts.b == 0, "m %f b %f", ts.m, ts.b);
    for (i = 0; i < 40; i++) touch(&r, i % 4, (unsigned char)(i % 4 + 1), 0, 0);
    gpumem_tier_get_stats(r.t, &ts);
    /* Tier order before the model: 40 predictions of the host tier. After
     * it, a line evicted by the FIFO cache of 2 comes back 2 accesses later:
     * RRD 0.75 * 2 = 1.5 < 2 GPU lines, so predicted for the GPU, kept up to
     * the skip bound, then placed in host memory anyway (the only way). */
    cr_assert_eq(ts.predicted[2], 40, "before the model: %llu", (unsigned long long)ts.predicted[2]);
    cr_assert(ts.predicted[1] > 0 && ts.keeps > 0 && ts.predicted[3] == 0, "GPU %llu keeps %llu storage %llu",
              (unsigned long long)ts.predicted[1], (unsigned long long)ts.keeps, (unsigned long long)ts.predicted[3]);
    cr_assert_gt(ts.host_hits, 0);
    cr_assert_eq(gpumem_tier_check_quiescent(r.t), 0);
    cr_assert_eq(gpumem_tier_destroy(r.t), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_destroy(r.c), GPUMEM_OK);
}

/* Destroy never drops a dirty host line: with the controller stopped the
 * write-back fails, and the tier stays attached with its line; once the
 * controller runs again destroy writes it. */
Test(tier_path, destroy_keeps_dirty_lines_until_written) {
    cache_cfg cfg = cache_cfg_base(4096, 64, 2, 1, 0);
    cache_setup s;
    void *p = NULL;
    uint64_t l;
    cfg.n_ctrls = 1;
    cfg.tier_slots = 8;
    cfg.tier_placement = GPUMEM_TIER_ORDER;
    cfg.tier_policy = GPUMEM_POLICY_FIFO;
    cr_assert_eq(cache_setup_make(&s, &cfg), GPUMEM_OK);
    for (l = 0; l < 6; l++) {
        cr_assert_eq(gpumem_cache_acquire(s.cache, l, 1, 1, &p), GPUMEM_OK);
        ((uint64_t *)p)[0] = s.expect[l * 512] = written_word(l * 512, 1);
        cr_assert_eq(gpumem_cache_release(s.cache, l, 1), GPUMEM_OK);
    }
    cr_assert_eq(gpumem_tier_check_quiescent(s.tier), 0);
    cr_assert_eq(gpumem_swctl_stop(s.ctls[0]), GPUMEM_OK);
    cr_assert_neq(gpumem_tier_destroy(s.tier), GPUMEM_OK, "destroyed with dirty lines and no storage");
    cr_assert_eq(s.cache->tier, s.tier, "detached while its dirty lines were not written");
    cr_assert_eq(gpumem_tier_check_quiescent(s.tier), 0);
    cr_assert_eq(gpumem_swctl_start(s.ctls[0]), GPUMEM_OK);
    cr_assert_eq(gpumem_tier_destroy(s.tier), GPUMEM_OK);
    s.tier = NULL;
    for (l = 0; l < 6; l++)
        cr_assert_eq(*backing_word(&s, 0, l * 512), s.expect[l * 512], "line %llu lost", (unsigned long long)l);
    cache_setup_free(&s);
}

/* ---- bad arguments --------------------------------------------------------------------- */

Test(tier_args, statuses_not_crashes) {
    path_rig r;
    gpumem_tier_desc d;
    gpumem_tier t2, *out = NULL;
    gpumem_tier_stats ts;
    uint64_t meta[64];
    unsigned char data[1024];
    path_rig_make(&r, GPUMEM_TIER_ORDER);
    cr_assert_eq(gpumem_tier_create(NULL, &out), GPUMEM_ENULL);
    d = gpumem_tier_desc_default(r.c, 4);
    cr_assert_eq(gpumem_tier_create(&d, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_EBUSY, "a second tier on one cache");
    d.cache = NULL;
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_meta_bytes(NULL), 0);
    d = gpumem_tier_desc_default(r.c, 0);
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_EINVAL, "zero host slots");
    d = gpumem_tier_desc_default(r.c, 4);
    d.placement = 9;
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_EINVAL, "unknown placement");
    d = gpumem_tier_desc_default(r.c, 4);
    d.policy = GPUMEM_POLICY_SRRIP;
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_EINVAL, "host replacement other than FIFO/CLOCK");
    d = gpumem_tier_desc_default(r.c, GPUMEM_TIER_MAX_SLOTS + 1u);
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_ERANGE, "more host slots than a host word can name");
    d = gpumem_tier_desc_default(r.c, 4);
    d.train_accesses = UINT64_MAX / 4; /* its sample buffer's size would wrap */
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_ERANGE);
    d = gpumem_tier_desc_default(r.c, 4);
    d.gmt.n_lines = 3; /* the predictor sized for other data */
    cr_assert_eq(gpumem_tier_create(&d, &out), GPUMEM_EINVAL);
    cr_assert_null(out);
    /* init: memory checks (the cache has a tier: detach it first) */
    cr_assert_eq(gpumem_tier_destroy(r.t), GPUMEM_OK);
    d = gpumem_tier_desc_default(r.c, 2);
    d.placement = GPUMEM_TIER_ORDER;
    cr_assert_eq(gpumem_tier_init(NULL, &d), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_init(&t2, &d), GPUMEM_ENULL, "no memory given");
    d.meta = meta;
    d.data = data;
    d.meta_bytes = 8;
    cr_assert_eq(gpumem_tier_init(&t2, &d), GPUMEM_ENOMEM, "metadata too small");
    d.meta_bytes = sizeof meta;
    d.meta = (unsigned char *)meta + 4;
    cr_assert_eq(gpumem_tier_init(&t2, &d), GPUMEM_EINVAL, "misaligned metadata");
    d.meta = meta;
    cr_assert_leq(gpumem_tier_meta_bytes(&d), sizeof meta);
    cr_assert_eq(gpumem_tier_init(&t2, &d), GPUMEM_OK);
    cr_assert_eq(r.c->tier, &t2);
    cr_assert_eq(gpumem_tier_destroy(&t2), GPUMEM_EINVAL, "destroy of caller memory");
    cr_assert_eq(gpumem_tier_detach(&t2), GPUMEM_OK);
    cr_assert_eq(gpumem_tier_detach(&t2), GPUMEM_ESTATE, "detached twice");
    /* the other calls */
    cr_assert_eq(gpumem_tier_detach(NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_destroy(NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_train(NULL, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_set_model(NULL, 1, 0), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_get_stats(NULL, &ts), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_get_stats(&t2, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_tier_train(&t2, NULL), GPUMEM_EINVAL, "training tier order");
    cr_assert_eq(gpumem_tier_set_model(&t2, 1, 0), GPUMEM_EINVAL);
    cr_assert_neq(gpumem_tier_check_quiescent(NULL), 0);
    cr_assert_eq(gpumem_cache_destroy(r.c), GPUMEM_OK);
}

/* Zero means default (issue 41): a tier description zeroed but for its
 * cache and its slot count resolves to FIFO host replacement, the default
 * training and the predictor sized from the two tiers, and makes a working
 * tier; GPUMEM_TIER_NO_TRAINING records nothing. 0.4 took a zeroed policy
 * as CLOCK and a zeroed predictor (window 0) as EINVAL. */
Test(tier_args, zero_means_default) {
    static unsigned char mem[64 * 512];
    gpumem_cache_desc cd;
    gpumem_cache *c;
    gpumem_tier_desc d, r;
    gpumem_tier *t;
    gpumem_tier_stats s;
    void *p;
    uint32_t i, round;
    memset(&cd, 0, sizeof cd);
    cd.n_lines = 64;
    cd.n_slots = 4;
    cd.line_bytes = 512;
    cd.backing = gpumem_cache_backing_memory(mem);
    cr_assert_eq(gpumem_cache_create(&cd, &c), GPUMEM_OK);
    memset(&d, 0, sizeof d);
    d.cache = c;
    d.n_slots = 16;
    r = gpumem_tier_desc_resolved(&d);
    cr_assert_eq(r.policy, GPUMEM_POLICY_FIFO, "resolved %s", gpumem_policy_name(r.policy));
    cr_assert_eq(r.placement, GPUMEM_TIER_GMT_REUSE);
    cr_assert_eq(r.train_accesses, GPUMEM_TIER_DEFAULT_TRAIN);
    cr_assert_eq(r.gmt.n_lines, 64);
    cr_assert_eq(r.gmt.tier1_lines, 4);
    cr_assert_eq(r.gmt.tier2_lines, 16);
    cr_assert_eq(r.gmt.window, 1024);
    cr_assert_eq(r.gmt.override_pct, 80);
    d.train_accesses = GPUMEM_TIER_NO_TRAINING;
    cr_assert_eq(gpumem_tier_create(&d, &t), GPUMEM_OK, "a zeroed description with cache and slots");
    cr_assert_eq(t->policy, GPUMEM_POLICY_FIFO);
    cr_assert_eq(t->sample_cap, 0, "GPUMEM_TIER_NO_TRAINING records nothing");
    for (i = 0; i < 64; i++) mem[i * 512] = (unsigned char)i;
    for (round = 0; round < 2; round++) /* the second round finds lines in host memory */
        for (i = 0; i < 20; i++) {
            cr_assert_eq(gpumem_cache_acquire(c, i, 1, 0, &p), GPUMEM_OK);
            cr_assert_eq(*(unsigned char *)p, (unsigned char)i, "line %u by content", i);
            gpumem_cache_release(c, i, 1);
        }
    cr_assert_eq(gpumem_tier_get_stats(t, &s), GPUMEM_OK);
    cr_assert_eq(s.violations, 0);
    cr_assert_eq(gpumem_tier_destroy(t), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_OK);
}
