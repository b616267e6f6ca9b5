/* Criterion tests of gpumem_policy.h and the simulator's engine
 * (bench/policy_sim.h): each policy's victims on small traces worked out by
 * hand (the working is in the comments), OPT against an exhaustive search,
 * pinned slots never chosen, GMT's predictor and placement, the prefetchers,
 * the cache under every slot policy, and the cache's trace hook. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_CACHE_CHECK 1
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_cache.h"
#include "bench/policy_sim.h"
#include "cache_workload.h"

TestSuite(policy, .timeout = 120);



/* Lines A..G of the hand-worked traces. */
enum { A, B, C, D, E, F, G };

/* Run `trace` through `d` and return the evicted lines in *victims. */
static uint32_t run_victims(const gpumem_policy_desc *d, const uint32_t *trace, uint32_t n, uint64_t *victims) {
    psim s;
    uint32_t i, got;
    cr_assert_eq(psim_init(&s, d, 64, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, 64), 0);
    s.log = victims;
    s.log_cap = 32;
    for (i = 0; i < n; i++) psim_access(&s, trace[i]);
    got = s.log_n;
    psim_free(&s);
    return got;
}

static void expect_victims(uint32_t kind, uint32_t slots, const uint32_t *trace, uint32_t n, const uint64_t *want,
                           uint32_t n_want) {
    gpumem_policy_desc d = gpumem_policy_desc_default(kind, slots);
    uint64_t got[32];
    uint32_t g = run_victims(&d, trace, n, got), i;
    cr_assert_eq(g, n_want, "%s: %u evictions, expected %u", gpumem_policy_name(kind), g, n_want);
    for (i = 0; i < g; i++)
        cr_assert_eq(got[i], want[i], "%s: eviction %u was line %llu, expected %llu", gpumem_policy_name(kind), i,
                     (unsigned long long)got[i], (unsigned long long)want[i]);
}

/* A B C D B E F with 3 slots. */
static const uint32_t abcdbef[] = {A, B, C, D, B, E, F};

/* One policy's victims on A B C D B E F with 3 slots, worked out by hand. */
typedef struct by_hand {
    uint32_t kind;
    uint64_t want[4];
    uint32_t n_want;
} by_hand;

ParameterizedTestParameters(policy, abcdbef_by_hand) {
    static by_hand cases[] = {
        /* FIFO: the hand goes 0, 1, 2 whatever is hit: A, B, C. */
        {GPUMEM_POLICY_FIFO, {A, B, C}, 3},
        /* CLOCK: fills set every bit. D: the hand clears A, B, C and takes A
         * (slot 0). B's hit sets its bit again. E: slot 1 (B) loses its bit,
         * slot 2 (C) is taken. F: slot 0 (D, bit set at fill) is cleared,
         * slot 1 (B) taken. */
        {GPUMEM_POLICY_CLOCK, {A, C, B}, 3},
        /* LRU: D evicts A; order B C D; B's hit: C D B; E evicts C; D B E; F
         * evicts D. */
        {GPUMEM_POLICY_LRU, {A, C, D}, 3},
        /* SRRIP: fills at RRPV 2, hits to 0. D: A, B, C age to 3, A (slot 0)
         * is taken. B hit: 0. E: B ages to 1, C (3) is taken. F: D 2->3,
         * B 1->2, E 2->3, then D (3) is taken. */
        {GPUMEM_POLICY_SRRIP, {A, C, D}, 3},
        /* BRRIP: fill 0 (A) goes in at 2 (one fill in 32), B and C at 3.
         * D: A ages to 3, B (3) taken. B misses: C (3) taken. E: A (3)
         * taken. F: D (3) taken. */
        {GPUMEM_POLICY_BRRIP, {B, C, A, D}, 4},
    };
    return cr_make_param_array(by_hand, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(by_hand *c, policy, abcdbef_by_hand) {
    expect_victims(c->kind, 3, abcdbef, 7, c->want, c->n_want);
}

Test(policy, lfu_by_hand) {
    /* A B C in bin 0; A, A: bin 2; B: bin 1. D takes the head of bin 0 (C),
     * E the head of bin 0 (D). LRU would take C then A. */
    static const uint32_t t[] = {A, B, C, A, A, B, D, E};
    static const uint64_t want[] = {C, D}, want_lru[] = {C, A};
    expect_victims(GPUMEM_POLICY_LFU, 3, t, 8, want, 2);
    expect_victims(GPUMEM_POLICY_LRU, 3, t, 8, want_lru, 2);
}

Test(policy, cp_by_hand) {
    /* 4 slots, protected share 2 (50%), at most 3 (90% of 4). A loop over 6
     * lines twice. 0 and 1 are protected as they arrive; 2 is the boundary.
     * 4: evicts 2 (unused: protection grows to 3, 3 becomes protected). 5:
     * evicts 4 (unused; already at the maximum). Lap 2: 0, 1 hit; 2 evicts
     * 5; 3 hits; 4 evicts 2; 5 evicts 4. */
    static const uint32_t t[] = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
    static const uint64_t want[] = {2, 4, 5, 2, 4};
    expect_victims(GPUMEM_POLICY_CP, 4, t, 12, want, 5);
}

Test(policy, tournament_by_hand) {
    /* Members in turn: LRU, LFU, CP, LRU. 3 slots, CP protects 1. D: LRU's
     * head A. E: LFU's bin 0 is B C D, head B. CP saw A (protected) and B go,
     * so C became protected and D is its boundary. F: CP takes D. G: LRU's
     * order is C E F, takes C. */
    static const uint32_t t[] = {A, B, C, D, E, F, G};
    static const uint64_t want[] = {A, B, D, C};
    expect_victims(GPUMEM_POLICY_TOURNAMENT, 3, t, 7, want, 4);
}

Test(policy, tournament_retires_the_policy_to_blame) {
    /* A loop over 6 lines in 4 slots: LRU always evicts the line needed
     * next, so it collects most of the blame and is retired. */
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_TOURNAMENT, 4);
    psim s, lru;
    gpumem_policy_desc dl = gpumem_policy_desc_default(GPUMEM_POLICY_LRU, 4);
    uint32_t i;
    d.tm_blame = 8;
    cr_assert_eq(psim_init(&s, &d, 8, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, 8), 0);
    cr_assert_eq(psim_init(&lru, &dl, 8, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, 8), 0);
    for (i = 0; i < 600; i++) {
        psim_access(&s, i % 6);
        psim_access(&lru, i % 6);
    }
    cr_assert_eq(s.pol.tm.active & 1u, 0u, "LRU still active (mask %u)", s.pol.tm.active);
    cr_assert_neq(s.pol.tm.active, 0u, "every member retired");
    cr_assert_lt(s.misses, lru.misses * 3 / 4, "tournament %llu misses, LRU %llu", (unsigned long long)s.misses,
                 (unsigned long long)lru.misses);
    psim_free(&s);
    psim_free(&lru);
}

/* HPE with 2-line page sets and 2-fault intervals, 4 slots.
 * 0 1 2 3: set 0 = {0,1} and set 1 = {2,3}; memory is full after 3, every
 * counter is 2 = the set size: regular, MRU-C. The hit on 0 moves set 0 to
 * the MRU end; everything is in the new partition. 4: MRU-C scans from the
 * MRU end: set 0 has counter 3, set 1 has 2 (= set size): set 1, drained in
 * address order: 2, then 3 for 5. LRU would take 1 then 2. */
static const uint32_t hpe_trace[] = {0, 1, 2, 3, 0, 4, 5};

/* HPE over `slots` with 2-line page sets and `interval`-fault intervals. */
static gpumem_policy_desc hpe_desc(uint32_t slots, uint32_t interval) {
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HPE, slots);
    d.hpe_set_shift = 1;
    d.hpe_interval = interval;
    return d;
}

/* A simulator over d that has seen the first n lines of trace. */
static void hpe_after(psim *s, const gpumem_policy_desc *d, const uint32_t *trace, uint32_t n) {
    uint32_t i;
    cr_assert_eq(psim_init(s, d, 64, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, 64), 0);
    for (i = 0; i < n; i++) psim_access(s, trace[i]);
}

Test(policy, hpe_mru_c_by_hand) {
    gpumem_policy_desc d = hpe_desc(4, 2);
    uint64_t got[32];
    static const uint64_t want_lru[] = {1, 2};
    uint32_t g;
    psim s;
    g = run_victims(&d, hpe_trace, 7, got);
    cr_assert_eq(g, 2);
    cr_assert_eq(got[0], 2);
    cr_assert_eq(got[1], 3);
    expect_victims(GPUMEM_POLICY_LRU, 4, hpe_trace, 7, want_lru, 2);
    hpe_after(&s, &d, hpe_trace, 4);
    cr_assert_eq(s.pol.hpe.cls, GPUMEM_HPE_REGULAR);
    cr_assert_eq(s.pol.hpe.strategy, GPUMEM_HPE_MRUC);
    psim_free(&s);
}

Test(policy, hpe_classifies_irregular) {
    /* 0 0 1 2 3: set 0 counts 3 touches (irregular), set 1 counts 2: ratio1 =
     * 1 > 0.3: irregular#2, which starts with LRU. */
    static const uint32_t t[] = {0, 0, 1, 2, 3};
    gpumem_policy_desc d = hpe_desc(4, 2);
    psim s;
    hpe_after(&s, &d, t, 5);
    cr_assert_eq(s.pol.hpe.cls, GPUMEM_HPE_IRREGULAR2);
    cr_assert_eq(s.pol.hpe.strategy, GPUMEM_HPE_LRU);
    psim_free(&s);
}

Test(policy, hpe_switches_on_wrong_evictions) {
    /* Irregular#2 on a loop larger than memory: LRU's evictions come back at
     * once (wrong evictions), and after `trigger` of them in an interval HPE
     * switches to MRU-C. */
    gpumem_policy_desc d = hpe_desc(16, 8);
    psim s;
    uint32_t i;
    d.hpe_trigger = 4;
    hpe_after(&s, &d, NULL, 0);
    uint32_t switched = 0;
    for (i = 0; i < 9; i++) psim_access(&s, 2 * (i / 3)); /* sets 0-2 touched 3 times: irregular */
    for (i = 0; i < 400; i++) {
        psim_access(&s, 10 + i % 20);
        if (s.pol.hpe.full) cr_assert_eq(s.pol.hpe.cls, GPUMEM_HPE_IRREGULAR2);
        switched |= s.pol.hpe.strategy == GPUMEM_HPE_MRUC;
    }
    cr_assert(switched, "never switched to MRU-C");
    psim_free(&s);
}

/* ---- OPT ------------------------------------------------------------------- */

/* Fewest misses over every choice of victim (demand paging). */
static uint32_t brute(const uint32_t *t, uint32_t n, uint32_t i, uint32_t cap, uint32_t *res, uint32_t used) {
    uint32_t j, best = UINT32_MAX;
    if (i == n) return 0;
    for (j = 0; j < used; j++)
        if (res[j] == t[i]) return brute(t, n, i + 1, cap, res, used);
    if (used < cap) {
        res[used] = t[i];
        return 1 + brute(t, n, i + 1, cap, res, used + 1);
    }
    for (j = 0; j < used; j++) {
        uint32_t old = res[j], m;
        res[j] = t[i];
        m = brute(t, n, i + 1, cap, res, used);
        res[j] = old;
        if (m < best) best = m;
    }
    return 1 + best;
}

static uint64_t opt_misses(const uint32_t *t, uint64_t n, uint32_t n_ids, uint32_t cap) {
    int64_t m = psim_opt_misses(t, n, n_ids, cap);
    cr_assert_geq(m, 0, "no memory for OPT");
    return (uint64_t)m;
}

Test(policy, opt_equals_exhaustive_search) {
    uint64_t seed = 7;
    uint32_t round;
    for (round = 0; round < 300; round++) {
        uint32_t t[11], n = 6 + (uint32_t)(psim_splitmix(&seed) % 6), lines = 3 + (uint32_t)(psim_splitmix(&seed) % 3);
        uint32_t cap = 1 + (uint32_t)(psim_splitmix(&seed) % 3), res[8], i;
        for (i = 0; i < n; i++) t[i] = (uint32_t)(psim_splitmix(&seed) % lines);
        cr_assert_eq(opt_misses(t, n, lines, cap), brute(t, n, 0, cap, res, 0), "round %u (n %u, lines %u, cap %u)",
                     round, n, lines, cap);
    }
}

Test(policy, opt_by_hand) {
    /* 2 slots, A B C A B: C evicts B (used after A), so A hits, B misses. */
    static const uint32_t t[] = {A, B, C, A, B};
    cr_assert_eq(opt_misses(t, 5, 3, 2), 4);
}

/* ---- pinned slots ---------------------------------------------------------- */

Test(policy, pinned_never_chosen) {
    uint32_t kind;
    for (kind = GPUMEM_POLICY_FIRST; kind < GPUMEM_POLICY_KINDS; kind++) {
        gpumem_policy_desc d = gpumem_policy_desc_default(kind, 8);
        psim s;
        uint8_t pinned[8];
        uint64_t seed = kind + 1;
        uint32_t i, k;
        d.hpe_set_shift = 1;
        cr_assert_eq(psim_init(&s, &d, 64, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, 64), 0);
        for (i = 0; i < 8; i++) psim_access(&s, i);
        for (i = 0; i < 2000; i++) {
            uint32_t line = (uint32_t)(psim_splitmix(&seed) % 40);
            if (s.slot_of[line] != PSIM_NONE) {
                psim_access(&s, line);
                continue;
            }
            for (k = 0; k < 8; k++) pinned[k] = (uint8_t)(psim_splitmix(&seed) % 3 == 0);
            pinned[psim_splitmix(&seed) % 8] = 0;
            k = gpumem_policy_victim(&s.pol, pinned);
            cr_assert_neq(k, GPUMEM_POLICY_NONE, "%s: no victim with a free slot", gpumem_policy_name(kind));
            cr_assert_eq(pinned[k], 0, "%s chose pinned slot %u", gpumem_policy_name(kind), k);
            gpumem_policy_on_evict(&s.pol, k, s.line_of[k]);
            s.slot_of[s.line_of[k]] = PSIM_NONE;
            s.slot_of[line] = k;
            s.line_of[k] = line;
            gpumem_policy_on_fill(&s.pol, k, line);
        }
        memset(pinned, 1, sizeof pinned);
        cr_assert_eq(gpumem_policy_victim(&s.pol, pinned), GPUMEM_POLICY_NONE, "%s: chose with all pinned",
                     gpumem_policy_name(kind));
        psim_free(&s);
    }
}

/* ---- GMT ---------------------------------------------------------------------- */

Test(policy, gmt_least_squares) {
    gpumem_policy_ols o;
    double m, b;
    memset(&o, 0, sizeof o);
    cr_assert_eq(gpumem_policy_ols_solve(&o, &m, &b), 0, "no samples, no model");
    gpumem_policy_ols_add(&o, 1, 3);
    gpumem_policy_ols_add(&o, 1, 3);
    cr_assert_eq(gpumem_policy_ols_solve(&o, &m, &b), 1, "equal x: through the origin");
    cr_assert_float_eq(m, 3.0, 1e-9);
    cr_assert_float_eq(b, 0.0, 1e-9);
    memset(&o, 0, sizeof o);
    gpumem_policy_ols_add(&o, 1, 3);
    gpumem_policy_ols_add(&o, 2, 5);
    gpumem_policy_ols_add(&o, 3, 7);
    cr_assert_eq(gpumem_policy_ols_solve(&o, &m, &b), 1);
    cr_assert_float_eq(m, 2.0, 1e-9);
    cr_assert_float_eq(b, 1.0, 1e-9);
}

Test(policy, gmt_predictor_and_placement) {
    gpumem_policy_gmt_desc d = gpumem_policy_gmt_desc_default(16, 10, 20);
    gpumem_policy_gmt g;
    static unsigned char mem[16 * 9];
    d.override_pct = 100; /* off here; tested below */
    cr_assert_eq(gpumem_policy_gmt_init(&g, &d, mem), GPUMEM_OK);
    /* No model yet: tier order. */
    cr_assert_eq(gpumem_policy_gmt_place(&g, 5, 100, 4), GPUMEM_PLACE_HOST);
    gpumem_policy_gmt_set_model(&g, 1.0, 0.0);
    /* Back 5 accesses after its eviction: RRD 5 < 10: it should have stayed. */
    gpumem_policy_gmt_on_fetch(&g, 5, 105);
    cr_assert_eq(g.hist[5], 1);
    cr_assert_eq(gpumem_policy_gmt_place(&g, 5, 200, 4), GPUMEM_PLACE_KEEP, "short reuse: keep");
    cr_assert_eq(gpumem_policy_gmt_place(&g, 5, 200, 0), GPUMEM_PLACE_HOST, "no skips left: host");
    /* Back 50 later: RRD 50 >= 10 + 20: Tier-3; W[1][3] counts it. */
    gpumem_policy_gmt_on_fetch(&g, 5, 250);
    cr_assert_eq(g.hist[5], 3);
    cr_assert_eq(g.w[1][3], 1);
    cr_assert_eq(gpumem_policy_gmt_place(&g, 5, 300, 4), GPUMEM_PLACE_BYPASS);
    /* Back 20 later: Tier-2 (10 <= 20 < 30); then W[3][2] = 1 says Tier-2. */
    gpumem_policy_gmt_on_fetch(&g, 5, 320);
    cr_assert_eq(g.hist[5], 2);
    cr_assert_eq(g.w[3][2], 1);
    g.hist[5] = 3;
    cr_assert_eq(gpumem_policy_gmt_predict(&g, 5), 2);
}

Test(policy, gmt_override_fills_the_host_tier) {
    /* Every line predicted Tier-3: past 80% of recent evictions, they go to
     * Tier-2 instead. */
    gpumem_policy_gmt_desc d = gpumem_policy_gmt_desc_default(16, 1, 1);
    gpumem_policy_gmt g;
    static unsigned char mem[16 * 9];
    uint32_t i, host = 0;
    cr_assert_eq(gpumem_policy_gmt_init(&g, &d, mem), GPUMEM_OK);
    gpumem_policy_gmt_set_model(&g, 1.0, 0.0);
    for (i = 0; i < 16; i++) g.hist[i] = 3;
    for (i = 0; i < 16; i++) host += gpumem_policy_gmt_place(&g, i, 10 + i, 0) == GPUMEM_PLACE_HOST_IF_FREE;
    cr_assert_eq(host, 16, "%u of 16 placed on the host's free slots", host);
    d.override_pct = 100;
    cr_assert_eq(gpumem_policy_gmt_init(&g, &d, mem), GPUMEM_OK);
    gpumem_policy_gmt_set_model(&g, 1.0, 0.0);
    for (i = 0; i < 16; i++) g.hist[i] = 3;
    for (i = 0; i < 16; i++) cr_assert_eq(gpumem_policy_gmt_place(&g, i, 10 + i, 0), GPUMEM_PLACE_BYPASS);
}

Test(policy, gmt_reuse_beats_tier_order_on_a_loop) {
    /* A loop of 30 lines, 10 in tier 1, 8 in tier 2: FIFO tier order cycles
     * everything through the host tier and it never hits; GMT-Reuse learns
     * the loop's lines are long-reuse (RRD 19 >= 10 + 8), and the under-use
     * override puts them only into free host slots: part of the loop stays
     * there and hits every lap. */
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_CLOCK, 10);
    psim to, re;
    psim_rd rd;
    uint32_t i;
    double m, b;
    cr_assert_eq(psim_init(&to, &d, 30, PSIM_TIER_ORDER, 8, PSIM_NO_PREFETCH, 30), 0);
    cr_assert_eq(psim_init(&re, &d, 30, PSIM_REUSE, 8, PSIM_NO_PREFETCH, 30), 0);
    cr_assert_eq(psim_rd_init(&rd, 30, 300), 0);
    for (i = 0; i < 60; i++) psim_rd_access(&rd, i % 20); /* loops of 20, 25 and 30: RD = VTD - 1 */
    for (i = 0; i < 75; i++) psim_rd_access(&rd, i % 25);
    for (i = 0; i < 90; i++) psim_rd_access(&rd, i % 30);
    cr_assert_eq(gpumem_policy_ols_solve(&rd.rd.ols, &m, &b), 1);
    cr_assert_float_eq(m, 1.0, 1e-6, "loop: RD = VTD - 1");
    cr_assert_float_eq(b, -1.0, 1e-6);
    gpumem_policy_gmt_set_model(&re.gmt, m, b);
    for (i = 0; i < 3000; i++) {
        psim_access(&to, i % 30);
        psim_access(&re, i % 30);
    }
    cr_assert_eq(to.t2_hits, 0);
    cr_assert_lt(re.ssd_reads, to.ssd_reads, "reuse %llu SSD reads, tier order %llu",
                 (unsigned long long)re.ssd_reads, (unsigned long long)to.ssd_reads);
    psim_free(&to);
    psim_free(&re);
    psim_rd_free(&rd);
}

/* ---- prefetch ------------------------------------------------------------------- */

Test(policy, readahead_window_grows) {
    gpumem_policy_readahead r;
    uint64_t first;
    uint32_t count;
    gpumem_policy_readahead_init(&r, 4, 16);
    gpumem_policy_readahead_on_miss(&r, 100, &first, &count);
    cr_assert_eq(count, 0, "one miss is no stream");
    gpumem_policy_readahead_on_miss(&r, 101, &first, &count);
    cr_assert_eq(first, 102);
    cr_assert_eq(count, 8);
    gpumem_policy_readahead_on_miss(&r, 110, &first, &count); /* just past what was read ahead */
    cr_assert_eq(first, 111);
    cr_assert_eq(count, 16);
    gpumem_policy_readahead_on_miss(&r, 127, &first, &count);
    cr_assert_eq(count, 16, "capped at the maximum");
    gpumem_policy_readahead_on_miss(&r, 5000, &first, &count);
    cr_assert_eq(count, 0, "a jump starts a new stream");
}

/* Shuffle a[0..n) with a fixed LCG (reproducible scrambles). */
static void ra_scramble(uint64_t *a, uint32_t n, uint64_t *seed) {
    uint32_t i;
    for (i = n; i > 1; i--) {
        uint32_t j;
        uint64_t t;
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        j = (uint32_t)((*seed >> 33) % i);
        t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* A sequential reader whose misses come 32 to a batch, scrambled: the
 * lines it still misses are the next 32 past what was read ahead. Returns
 * the window (lines proposed) of each batch in windows[0..batches). */
static void ra_sequential_run(gpumem_policy_ra_batch *r, uint32_t batches, uint32_t *windows) {
    uint64_t next = 0, seed = 7, batch[32];
    gpumem_policy_ra_span sp[4];
    uint32_t b, i, n;
    for (b = 0; b < batches; b++) {
        for (i = 0; i < 32; i++) batch[i] = next + i;
        ra_scramble(batch, 32, &seed);
        n = gpumem_policy_ra_batch_on_misses(r, batch, 32, sp, 4);
        for (i = 1; i < 32; i++) cr_assert_lt(batch[i - 1], batch[i], "the batch is sorted in place");
        cr_assert_eq(n, 1, "batch %u: one stream, got %u spans", b, n);
        cr_assert_eq(sp[0].first, next + 32, "batch %u: read ahead from just past the misses", b);
        cr_assert_eq(sp[0].stride, 1);
        windows[b] = sp[0].count;
        next = sp[0].first + sp[0].count;
    }
}

Test(policy, ra_batch_scrambled_sequential_detected) {
    gpumem_policy_ra_batch r;
    uint32_t w[12];
    gpumem_policy_ra_batch_init(&r, 1ull << 30, 4096, GPUMEM_POLICY_RA_GPU_CAP);
    ra_sequential_run(&r, 12, w);
    /* Window 64 (twice the first run), then doubling: the misses of each
     * batch sit just below the window, which reaches window lines past them. */
    cr_assert_eq(w[0], 64);
    cr_assert_eq(w[1], 128);
    cr_assert_eq(w[2], 256);
    cr_assert_eq(w[6], 4096, "16 MiB of 4 KiB lines");
    cr_assert_eq(w[11], 4096, "capped");
}

Test(policy, ra_batch_window_caps) {
    gpumem_policy_ra_batch g, h, g64;
    uint32_t wg[10], wh[10], w64[10], i;
    gpumem_policy_ra_batch_init(&g, 1ull << 30, 4096, GPUMEM_POLICY_RA_GPU_CAP);
    gpumem_policy_ra_batch_init(&h, 1ull << 30, 4096, GPUMEM_POLICY_RA_HOST_CAP);
    gpumem_policy_ra_batch_init(&g64, 1ull << 30, 65536, GPUMEM_POLICY_RA_GPU_CAP);
    ra_sequential_run(&g, 10, wg);
    ra_sequential_run(&h, 10, wh);
    ra_sequential_run(&g64, 10, w64);
    for (i = 0; i < 10; i++) {
        cr_assert_leq((uint64_t)wg[i] * 4096, 16u << 20);
        cr_assert_leq((uint64_t)wh[i] * 4096, 256u << 10);
        cr_assert_leq((uint64_t)w64[i] * 65536, 16u << 20);
    }
    cr_assert_eq(wg[9], 4096);
    cr_assert_eq(wh[9], 64, "the host stream stops at 256 KiB");
    cr_assert_eq(w64[9], 256, "16 MiB of 64 KiB lines");
    /* Nothing past the end of the data. */
    {
        gpumem_policy_ra_batch e;
        gpumem_policy_ra_span sp[2];
        uint64_t b[8] = {95, 92, 90, 94, 91, 93, 96, 97};
        gpumem_policy_ra_batch_init(&e, 100, 4096, GPUMEM_POLICY_RA_GPU_CAP);
        cr_assert_eq(gpumem_policy_ra_batch_on_misses(&e, b, 8, sp, 2), 1);
        cr_assert_eq(sp[0].first, 98);
        cr_assert_eq(sp[0].count, 2, "lines 98 and 99, the last two");
    }
}

Test(policy, ra_batch_strides_and_streams) {
    gpumem_policy_ra_batch r;
    gpumem_policy_ra_span sp[16];
    uint64_t b[64], seed = 3;
    uint32_t i, n, blk;
    gpumem_policy_ra_batch_init(&r, 1ull << 30, 4096, GPUMEM_POLICY_RA_GPU_CAP);
    /* One stream with stride 8 and one dense, far apart, in one batch. */
    for (i = 0; i < 16; i++) b[i] = 1000 + 8 * i;
    for (i = 0; i < 16; i++) b[16 + i] = 500000 + i;
    ra_scramble(b, 32, &seed);
    n = gpumem_policy_ra_batch_on_misses(&r, b, 32, sp, 16);
    cr_assert_eq(n, 2);
    cr_assert_eq(sp[0].first, 1000 + 8 * 16);
    cr_assert_eq(sp[0].stride, 8);
    cr_assert_eq(sp[0].count, 32);
    cr_assert_eq(sp[1].first, 500016);
    cr_assert_eq(sp[1].stride, 1);
    /* The strided stream again, with holes (lines that hit): it continues. */
    for (i = 0; i < 8; i++) b[i] = 1000 + 8 * (48 + 2 * i);
    ra_scramble(b, 8, &seed);
    n = gpumem_policy_ra_batch_on_misses(&r, b, 8, sp, 16);
    cr_assert_eq(n, 1);
    cr_assert_eq(sp[0].stride, 8);
    cr_assert_eq(sp[0].first, 1000 + 8 * 63, "past both the misses and what was read ahead");
    cr_assert_eq(sp[0].count, 64, "window doubled: 64 strides past the newest miss, line %u", 1000 + 8 * 62);
    /* Eight thread blocks, each reading its own 4096 lines, 8 misses each,
     * all in one scrambled batch: eight streams. */
    gpumem_policy_ra_batch_init(&r, 1ull << 30, 4096, GPUMEM_POLICY_RA_GPU_CAP);
    for (blk = 0; blk < 8; blk++)
        for (i = 0; i < 8; i++) b[blk * 8 + i] = blk * 4096ull + i;
    ra_scramble(b, 64, &seed);
    n = gpumem_policy_ra_batch_on_misses(&r, b, 64, sp, 16);
    cr_assert_eq(n, 8);
    for (blk = 0; blk < 8; blk++) {
        cr_assert_eq(sp[blk].first, blk * 4096ull + 8);
        cr_assert_eq(sp[blk].count, 16);
    }
}

Test(policy, ra_batch_random_misses_not_prefetched) {
    gpumem_policy_ra_batch r;
    gpumem_policy_ra_span sp[16];
    uint64_t b[64], seed = 11;
    uint32_t i, k, n = 0;
    gpumem_policy_ra_batch_init(&r, 1ull << 24, 4096, GPUMEM_POLICY_RA_GPU_CAP);
    for (k = 0; k < 200; k++) {
        for (i = 0; i < 64; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            b[i] = (seed >> 20) % (1ull << 24);
        }
        n += gpumem_policy_ra_batch_on_misses(&r, b, 64, sp, 16);
    }
    cr_assert_eq(n, 0, "12800 random misses: %u spans read ahead", n);
    /* Two misses a stride apart are chance, not a stream. */
    b[0] = 77;
    b[1] = 70;
    cr_assert_eq(gpumem_policy_ra_batch_on_misses(&r, b, 2, sp, 16), 0);
}

Test(policy, fdp_switches_mode_on_feedback) {
    gpumem_policy_fdp f;
    static unsigned char mem[64];
    uint64_t first;
    uint32_t count, i;
    gpumem_policy_fdp_init(&f, 64 * 32, 5, mem);
    gpumem_policy_fdp_on_miss(&f, 37, &first, &count);
    cr_assert_eq(first, 32);
    cr_assert_eq(count, 32, "aggressive: the whole region on its first miss");
    gpumem_policy_fdp_on_miss(&f, 40, &first, &count);
    cr_assert_eq(count, 32, "aggressive: again on any miss (the caller skips what it holds)");
    for (i = 0; i < 256; i++) gpumem_policy_fdp_feedback(&f, i % 2); /* 50% used < 80% */
    cr_assert_eq(f.ap, 0);
    for (i = 0; i < 16; i++) {
        gpumem_policy_fdp_on_miss(&f, 64 + i, &first, &count);
        cr_assert_eq(count, 0, "threshold mode: %u of 32 missed", i + 1);
    }
    gpumem_policy_fdp_on_miss(&f, 64 + 16, &first, &count);
    cr_assert_eq(count, 32, "17 of 32 > 51%%: the rest of the region");
    gpumem_policy_fdp_on_miss(&f, 64 + 17, &first, &count);
    cr_assert_eq(count, 0, "counting starts again after a read");
    for (i = 0; i < 256; i++) gpumem_policy_fdp_feedback(&f, i % 10 != 0); /* 90% used */
    cr_assert_eq(f.ap, 1);
}

/* ---- the cache under every slot policy --------------------------------------- */

/* Slot policies directly, the others as sequential policies behind the
 * cache's lock: 16 threads on a cache of 24 slots, writes, every read
 * checked by content, the structure checked after. */
Test(policy, cache_under_every_policy) {
    uint32_t kind;
    for (kind = GPUMEM_POLICY_FIRST; kind < GPUMEM_POLICY_KINDS; kind++) {
        cache_cfg cfg = cache_cfg_base(4096, 512, 24, 16, 150);
        cache_workload unused[24];
        (void)(kind == 0 && cache_workloads(unused) == 0); /* the shared list, not run here */
        cache_result r;
        char why[256];
        const char *problem;
        cfg.policy = kind;
        cfg.write_permille = 300;
        cfg.hold_check = 1;
        cr_assert_eq(cache_run(&cfg, &r), GPUMEM_OK, "%s: setup failed", gpumem_policy_name(kind));
        problem = cache_check(&cfg, &r, why, sizeof why);
        cr_assert_null(problem, "%s: %s", gpumem_policy_name(kind), problem);
    }
}

Test(policy, cache_refuses_a_policy_it_cannot_use) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_policy_desc pd = gpumem_policy_desc_default(GPUMEM_POLICY_LRU, 3);
    gpumem_policy p;
    gpumem_cache *c;
    static uint64_t data[4 * 512], mem[64];
    d.n_lines = 4;
    d.n_slots = 2;
    d.backing = gpumem_cache_backing_memory(data);
    d.policy = GPUMEM_POLICY_LRU; /* not a slot policy */
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL);
    d.policy = GPUMEM_POLICY_CLOCK;
    cr_assert_leq(gpumem_policy_bytes(&pd), sizeof mem);
    cr_assert_eq(gpumem_policy_init(&p, &pd, mem), GPUMEM_OK);
    d.seq_policy = &p; /* made for 3 slots, the cache has 2 */
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_EINVAL);
}

/* A sequential LRU in the cache evicts exactly what LRU says: 3 slots,
 * A B C, hit A, D evicts B (A is newer), E evicts C. */
Test(policy, cache_with_lru_evicts_lru) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_policy_desc pd = gpumem_policy_desc_default(GPUMEM_POLICY_LRU, 3);
    gpumem_policy p;
    gpumem_cache *c;
    gpumem_cache_stats st;
    static uint64_t data[8 * 512], mem[64];
    static const uint64_t seq[] = {A, B, C, A, D, E, A, D};
    void *ptr;
    uint32_t i;
    d.n_lines = 8;
    d.n_slots = 3;
    d.backing = gpumem_cache_backing_memory(data);
    cr_assert_eq(gpumem_policy_init(&p, &pd, mem), GPUMEM_OK);
    d.seq_policy = &p;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    for (i = 0; i < 8; i++) {
        cr_assert_eq(gpumem_cache_acquire(c, seq[i], 1, 0, &ptr), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_release(c, seq[i], 1), GPUMEM_OK);
    }
    gpumem_cache_get_stats(c, &st);
    /* Misses: A B C D E; A and D (the last two) hit: LRU kept them. */
    cr_assert_eq(st.fills, 5, "fills %llu", (unsigned long long)st.fills);
    cr_assert_eq(st.hits, 3, "hits %llu", (unsigned long long)st.hits);
    cr_assert_eq(st.evictions, 2);
    gpumem_cache_destroy(c);
}

Test(policy, cache_records_its_trace) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    static uint64_t data[8 * 512];
    uint64_t buf[4], got[5];
    gpumem_policy_trace t = {buf, 4, 0, 0};
    static const uint64_t lines[] = {3, 5, 3, 7, 1};
    void *p;
    uint32_t i;
    FILE *f;
    char path[] = "build/test_policy_trace.bin";
    d.n_lines = 8;
    d.n_slots = 2;
    d.backing = gpumem_cache_backing_memory(data);
    d.trace = &t;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    for (i = 0; i < 5; i++) {
        cr_assert_eq(gpumem_cache_acquire(c, lines[i], 1, i == 1, &p), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_release(c, lines[i], 1), GPUMEM_OK);
    }
    cr_assert_eq(t.n, 5);
    cr_assert_eq(gpumem_policy_trace_count(&t), 4, "the fifth does not fit");
    cr_assert_eq(buf[0], 3);
    cr_assert_eq(buf[1], 5 | GPUMEM_POLICY_TRACE_WRITE);
    cr_assert_eq(buf[3], 7);
    cr_assert_eq(gpumem_policy_trace_write(&t, path), GPUMEM_OK);
    f = fopen(path, "rb");
    cr_assert_not_null(f);
    cr_assert_eq(fread(got, 8, 5, f), 5);
    fclose(f);
    cr_assert_eq(memcmp(got, GPUMEM_POLICY_TRACE_MAGIC, 8), 0);
    cr_assert_eq(memcmp(got + 1, buf, 32), 0);
    gpumem_cache_destroy(c);
}

/* Zero means default (issue 41): a zeroed description but for n_slots is
 * the default kind (BRRIP) with every parameter at its default, and
 * gpumem_policy_init takes it; gpumem_policy_desc_default gives the same. */
Test(policy, zero_means_default) {
    gpumem_policy_desc d, r, want = gpumem_policy_desc_default(GPUMEM_POLICY_BRRIP, 8);
    gpumem_policy p;
    static uint64_t mem[4096];
    memset(&d, 0, sizeof d);
    d.n_slots = 8;
    r = gpumem_policy_desc_resolved(&d);
    cr_assert_eq(r.kind, GPUMEM_POLICY_BRRIP);
    cr_assert(!memcmp(&r, &want, sizeof r), "resolved zero description differs from desc_default(BRRIP)");
    cr_assert_leq(gpumem_policy_bytes(&d), sizeof mem);
    cr_assert_eq(gpumem_policy_init(&p, &d, mem), GPUMEM_OK);
    cr_assert_eq(p.d.kind, GPUMEM_POLICY_BRRIP);
    cr_assert_str_eq(gpumem_policy_name(GPUMEM_POLICY_DEFAULT), "default");
}
