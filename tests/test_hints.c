/* Criterion tests of next-use hints (issue 43): the hinted sequential
 * policy (gpumem_policy.h, GPUMEM_POLICY_HINTED) against an exact Belady
 * when its hints are the true next uses, against its fallback when there
 * are none or they are random or adversarial, the statuses of bad hints,
 * and the trace's hint records. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "bench/policy_sim.h"
#include "gpumem_cache.h"

TestSuite(hints, .timeout = 120);

/* A trace of n accesses over `lines` lines: uniform, or (zipfish) a hot
 * eighth taking half of them. */
static void make_trace(uint32_t *t, uint32_t n, uint32_t lines, int zipfish, uint64_t seed) {
    uint32_t i;
    for (i = 0; i < n; i++) {
        uint64_t r = psim_splitmix(&seed);
        t[i] = zipfish && (r & 1) ? (uint32_t)((r >> 1) % (lines / 8 + 1)) : (uint32_t)((r >> 1) % lines);
    }
}

enum { HINTS_NONE, HINTS_TRUE, HINTS_RANDOM, HINTS_INVERTED };

/* Misses of `kind` (HINTED: with hints of `how`, fallback `fallback`) at cap
 * slots. The epoch is the access index; after each access the hint names
 * the line's next use (HINTS_TRUE; none left: demoted), a random epoch
 * ahead (RANDOM), or the true one mirrored (INVERTED: soon ones far, far
 * ones soon). */
static uint64_t run_hinted(uint32_t kind, uint32_t fallback, const uint32_t *t, uint32_t n, uint32_t lines, uint32_t cap,
                           int how, gpumem_policy *out) {
    gpumem_policy_desc d = gpumem_policy_desc_default(kind, cap);
    uint64_t *next = (uint64_t *)malloc((size_t)n * 8), seed = 99, misses;
    psim s;
    uint32_t i;
    d.hint_fallback = fallback;
    cr_assert_not_null(next);
    cr_assert_eq(psim_next_use(t, n, lines, next), 0);
    cr_assert_eq(psim_init(&s, &d, lines, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, lines), 0);
    for (i = 0; i < n; i++) {
        psim_hint_event(&s, PSIM_EPOCH, 0, i);
        psim_access(&s, t[i]);
        if (how == HINTS_TRUE && next[i] == PSIM_NEVER) psim_hint_event(&s, PSIM_DEMOTE, t[i], 0);
        else if (how == HINTS_TRUE) psim_hint_event(&s, PSIM_HINT, t[i], next[i]);
        else if (how == HINTS_RANDOM) psim_hint_event(&s, PSIM_HINT, t[i], i + 1 + psim_splitmix(&seed) % (4 * lines));
        else if (how == HINTS_INVERTED) {
            uint64_t dist = next[i] == PSIM_NEVER ? 4 * lines : next[i] - i;
            psim_hint_event(&s, PSIM_HINT, t[i], i + 1 + (dist >= 4 * lines ? 0 : 4 * lines - dist));
        }
    }
    cr_assert_eq(s.hints_refused, 0, "%llu hints refused", (unsigned long long)s.hints_refused);
    misses = s.misses;
    if (out) *out = s.pol; /* counters only: the memory is freed */
    psim_free(&s);
    free(next);
    return misses;
}

static uint64_t opt_of(const uint32_t *t, uint32_t n, uint32_t lines, uint32_t cap) {
    int64_t m = psim_opt_misses(t, n, lines, cap);
    cr_assert_geq(m, 0, "no memory for OPT");
    return (uint64_t)m;
}

Test(hints, true_next_uses_are_belady) {
    static uint32_t t[20000];
    uint32_t fallbacks[] = {GPUMEM_POLICY_BRRIP, GPUMEM_POLICY_LRU, GPUMEM_POLICY_CLOCK, GPUMEM_POLICY_HPE}, f, round;
    for (round = 0; round < 8; round++) {
        uint32_t lines = 50 + 37 * round, cap = lines / (2 + round % 3);
        make_trace(t, 20000, lines, round & 1, 1000 + round);
        for (f = 0; f < 4; f++) {
            gpumem_policy p;
            uint64_t h = run_hinted(GPUMEM_POLICY_HINTED, fallbacks[f], t, 20000, lines, cap, HINTS_TRUE, &p);
            uint64_t o = opt_of(t, 20000, lines, cap);
            cr_assert_eq(h, o, "round %u, fallback %s: hinted %llu misses, OPT %llu", round,
                         gpumem_policy_name(fallbacks[f]), (unsigned long long)h, (unsigned long long)o);
            cr_assert_eq(p.hint.wrong, 0, "true hints judged wrong %llu times", (unsigned long long)p.hint.wrong);
        }
    }
}

Test(hints, no_hints_is_the_fallback) {
    static uint32_t t[20000];
    uint32_t kind;
    make_trace(t, 20000, 400, 1, 5);
    for (kind = GPUMEM_POLICY_FIRST; kind < GPUMEM_POLICY_HINTED; kind++) {
        uint64_t h = run_hinted(GPUMEM_POLICY_HINTED, kind, t, 20000, 400, 150, HINTS_NONE, NULL);
        uint64_t f = run_hinted(kind, 0, t, 20000, 400, 150, HINTS_NONE, NULL);
        cr_assert_eq(h, f, "fallback %s: %llu misses hinted, %llu alone", gpumem_policy_name(kind),
                     (unsigned long long)h, (unsigned long long)f);
    }
}

/* Wrong hints are seen to be wrong: the policy trusts them less and its
 * misses stay within 1.25x of the fallback's. */
Test(hints, bad_hints_cost_at_most_a_quarter_more) {
    static uint32_t t[60000];
    uint32_t round, how;
    for (round = 0; round < 4; round++) {
        uint32_t lines = 400 + 300 * round, cap = lines / 2;
        make_trace(t, 60000, lines, round & 1, 77 + round);
        for (how = HINTS_RANDOM; how <= HINTS_INVERTED; how++) {
            gpumem_policy p;
            uint64_t h = run_hinted(GPUMEM_POLICY_HINTED, GPUMEM_POLICY_BRRIP, t, 60000, lines, cap, (int)how, &p);
            uint64_t f = run_hinted(GPUMEM_POLICY_BRRIP, 0, t, 60000, lines, cap, HINTS_NONE, NULL);
            cr_assert_leq((double)h, 1.25 * (double)f, "round %u, %s hints: %llu misses, the fallback %llu", round,
                          how == HINTS_RANDOM ? "random" : "inverted", (unsigned long long)h, (unsigned long long)f);
            cr_assert_gt(p.hint.wrong, p.hint.right, "wrong hints not seen: %llu right, %llu wrong",
                         (unsigned long long)p.hint.right, (unsigned long long)p.hint.wrong);
        }
    }
}

Test(hints, bad_input_gets_a_status) {
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 4), l = gpumem_policy_desc_default(
                                                                                    GPUMEM_POLICY_LRU, 4);
    void *mem = malloc(gpumem_policy_bytes(&d)), *lmem = malloc(gpumem_policy_bytes(&l));
    gpumem_policy p, q;
    cr_assert_eq(gpumem_policy_init(&p, &d, mem), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_init(&q, &l, lmem), GPUMEM_OK);
    gpumem_policy_on_fill(&p, 0, 10);
    cr_assert_eq(gpumem_policy_hint(&p, 0, 10, 5), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, GPUMEM_POLICY_NONE, 11, 5), GPUMEM_OK); /* not resident: pending */
    cr_assert_eq(gpumem_policy_hint(&p, 0, 11, 5), GPUMEM_EINVAL, "slot 0 does not hold line 11");
    cr_assert_eq(gpumem_policy_hint(&p, 4, 10, 5), GPUMEM_EINVAL, "slot past the end");
    cr_assert_eq(gpumem_policy_demote(&p, 7, 10), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_policy_epoch(&p, 3), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_epoch(&p, 2), GPUMEM_EINVAL, "epochs never go back");
    cr_assert_eq(gpumem_policy_epoch(&p, GPUMEM_POLICY_UNHINTED), GPUMEM_EOVERFLOW);
    cr_assert_eq(gpumem_policy_hint(&p, 0, 10, 2), GPUMEM_ERANGE, "a hint for a past epoch");
    cr_assert_eq(gpumem_policy_hint(&p, 0, 10, GPUMEM_POLICY_UNHINTED), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_policy_hint(&q, 0, 10, 5), GPUMEM_ESTATE, "a hint to a policy without hints");
    cr_assert_eq(gpumem_policy_demote(&q, 0, 10), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_policy_epoch(&q, 5), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_policy_hint(NULL, 0, 10, 5), GPUMEM_ENULL);
    d.hint_fallback = GPUMEM_POLICY_HINTED;
    cr_assert_eq(gpumem_policy_init(&p, &d, mem), GPUMEM_EINVAL, "hinted cannot fall back on itself");
    free(mem);
    free(lmem);
}

Test(hints, demoted_go_first_then_unhinted_then_farthest) {
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 4);
    void *mem;
    gpumem_policy p;
    uint32_t k;
    d.hint_fallback = GPUMEM_POLICY_LRU; /* before sizing: the memory holds the fallback's state */
    mem = malloc(gpumem_policy_bytes(&d));
    cr_assert_eq(gpumem_policy_init(&p, &d, mem), GPUMEM_OK);
    for (k = 0; k < 4; k++) gpumem_policy_on_fill(&p, k, 100 + k); /* LRU order 0 1 2 3 */
    cr_assert_eq(gpumem_policy_hint(&p, 0, 100, 50), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, 1, 101, 90), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, 3, 103, 70), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_demote(&p, 3, 103), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 3, "the demoted line first");
    gpumem_policy_on_evict(&p, 3, 103);
    gpumem_policy_on_fill(&p, 3, 104);
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 2, "then the unhinted, by LRU");
    cr_assert_eq(gpumem_policy_hint(&p, 2, 102, 60), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, 3, 104, 80), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 1, "then the farthest next use (90)");
    {
        uint8_t pinned[4] = {0, 1, 0, 0};
        cr_assert_eq(gpumem_policy_victim(&p, pinned), 3, "pinned: the farthest of the others (80)");
    }
    free(mem);
}

Test(hints, trace_records_round_trip) {
    uint64_t buf[8];
    gpumem_policy_trace t;
    memset(&t, 0, sizeof t);
    t.buf = buf;
    t.cap = 5;
    gpumem_policy_trace_record(&t, 5, 0);
    gpumem_policy_trace_hint(&t, GPUMEM_POLICY_TRACE_HINT, 9, 3);
    gpumem_policy_trace_hint(&t, GPUMEM_POLICY_TRACE_DEMOTE, 5, 0);
    gpumem_policy_trace_hint(&t, GPUMEM_POLICY_TRACE_EPOCH, 0, 4); /* cut at the capacity: a NOP */
    cr_assert_eq(t.hints, 3);
    cr_assert_eq(gpumem_policy_trace_count(&t), 5);
    cr_assert_eq(buf[0], 5);
    cr_assert_eq(buf[1], GPUMEM_POLICY_TRACE_CONTROL | (1ull << GPUMEM_POLICY_TRACE_OP_SHIFT) | 9);
    cr_assert_eq(buf[2], 3);
    cr_assert_eq(buf[3], GPUMEM_POLICY_TRACE_CONTROL | (2ull << GPUMEM_POLICY_TRACE_OP_SHIFT) | 5);
    cr_assert_eq(buf[4], GPUMEM_POLICY_TRACE_CONTROL, "the cut record is a NOP");
}

/* ---- the slot kind, GPUMEM_POLICY_HINTED_RRIP, through the real cache ---- */

enum { SLOT_CAP = 256, SLOT_LINES = 4096, SLOT_N = 200000, SLOT_EPOCH = 128 };
enum { TRACE_PAIRS, TRACE_LOOP, TRACE_ZIPFISH, TRACE_KINDS };

/* PAIRS: every other access to a hot set of SLOT_CAP / 4 lines, the others
 * a stream of fresh lines, each used twice SLOT_CAP / 2 stream steps apart
 * (then never); LOOP: a loop over 1.5x the slots; ZIPFISH: make_trace's. */
static void make_slot_trace(uint32_t *t, int kind) {
    uint64_t seed = 7;
    uint32_t i, hot = SLOT_CAP / 4, fresh = SLOT_LINES - hot;
    if (kind == TRACE_ZIPFISH) make_trace(t, SLOT_N, SLOT_LINES, 1, seed);
    for (i = 0; kind != TRACE_ZIPFISH && i < SLOT_N; i++) {
        uint32_t j = i / 2, r = (uint32_t)psim_splitmix(&seed);
        if (kind == TRACE_LOOP) t[i] = i % (SLOT_CAP * 3 / 2);
        else if (i % 2 || j < SLOT_CAP / 2) t[i] = r % hot;
        else t[i] = hot + (j % 2 == 0 ? j / 2 : (j - SLOT_CAP / 2) / 2) % fresh;
    }
}

/* Misses of a cache of SLOT_CAP slots of `kind` over memory, one thread,
 * the epoch advanced every SLOT_EPOCH accesses; after each access the line
 * gets a hint of `how` (as run_hinted's, on this clock). */
static uint64_t slot_misses(uint32_t kind, const uint32_t *t, int how, gpumem_policy_slot_hints *out) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    gpumem_cache_stats st;
    unsigned char *mem = (unsigned char *)calloc(SLOT_LINES, GPUMEM_CACHE_MIN_LINE);
    uint64_t *next = (uint64_t *)malloc((size_t)SLOT_N * 8), seed = 99;
    uint32_t i;
    cr_assert(mem && next);
    cr_assert_eq(psim_next_use(t, SLOT_N, SLOT_LINES, next), 0);
    d.n_lines = SLOT_LINES;
    d.line_bytes = GPUMEM_CACHE_MIN_LINE;
    d.n_slots = SLOT_CAP;
    d.policy = kind;
    d.backing = gpumem_cache_backing_memory(mem);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    for (i = 0; i < SLOT_N; i++) {
        uint64_t now = i / SLOT_EPOCH, ahead;
        gpumem_status st;
        void *p;
        if (kind == GPUMEM_POLICY_HINTED_RRIP) cr_assert_eq(gpumem_cache_epoch(c, now), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_acquire(c, t[i], 1, 0, &p), GPUMEM_OK);
        cr_assert_eq(gpumem_cache_release(c, t[i], 1), GPUMEM_OK);
        if (how == HINTS_NONE) continue;
        if (how == HINTS_TRUE && next[i] == PSIM_NEVER) {
            cr_assert_eq(gpumem_cache_demote(c, t[i]), GPUMEM_OK);
            continue;
        }
        ahead = next[i] == PSIM_NEVER ? 8 : next[i] / SLOT_EPOCH - now;
        if (how == HINTS_TRUE) st = gpumem_cache_hint(c, t[i], now + ahead);
        else if (how == HINTS_RANDOM) st = gpumem_cache_hint(c, t[i], now + psim_splitmix(&seed) % 8);
        else st = gpumem_cache_hint(c, t[i], now + (ahead >= 8 ? 0 : 8 - ahead));
        cr_assert_eq(st, GPUMEM_OK);
    }
    gpumem_cache_get_stats(c, &st);
    if (out) *out = c->slot_hints;
    gpumem_cache_destroy(c);
    free(mem);
    free(next);
    return st.misses;
}

Test(hints, slot_kind_right_hints_beat_brrip) {
    static uint32_t t[SLOT_N];
    gpumem_policy_slot_hints h;
    uint64_t b, r;
    make_slot_trace(t, TRACE_PAIRS);
    b = slot_misses(GPUMEM_POLICY_BRRIP, t, HINTS_NONE, NULL);
    cr_assert_eq(slot_misses(GPUMEM_POLICY_HINTED_RRIP, t, HINTS_NONE, NULL), b, "no hints: BRRIP exactly");
    r = slot_misses(GPUMEM_POLICY_HINTED_RRIP, t, HINTS_TRUE, &h);
    cr_log_info("pairs: BRRIP %llu misses, true hints %llu (%u applied, %u right, %u wrong)", (unsigned long long)b,
                (unsigned long long)r, h.applied, h.right, h.wrong);
    cr_assert_lt(r, b, "true hints: %llu misses, BRRIP %llu", (unsigned long long)r, (unsigned long long)b);
    cr_assert_geq(h.trust, GPUMEM_POLICY_TRUST_USE, "true hints distrusted (%u)", h.trust);
}

Test(hints, slot_kind_bad_hints_cost_at_most_a_quarter_more) {
    static uint32_t t[SLOT_N];
    int trace, how;
    for (trace = 0; trace < TRACE_KINDS; trace++) {
        uint64_t b;
        make_slot_trace(t, trace);
        b = slot_misses(GPUMEM_POLICY_BRRIP, t, HINTS_NONE, NULL);
        for (how = HINTS_TRUE; how <= HINTS_INVERTED; how++) {
            gpumem_policy_slot_hints h;
            uint64_t m = slot_misses(GPUMEM_POLICY_HINTED_RRIP, t, how, &h);
            cr_log_info("trace %d, hints %d: %llu misses, BRRIP %llu (%u right, %u wrong)", trace, how,
                        (unsigned long long)m, (unsigned long long)b, h.right, h.wrong);
            cr_assert_leq((double)m, 1.25 * (double)b, "trace %d, hints %d: %llu misses, BRRIP %llu", trace, how,
                          (unsigned long long)m, (unsigned long long)b);
            /* (on the loop every next use is as far as every other: inverted hints are the true ones) */
            if (how == HINTS_INVERTED && trace != TRACE_LOOP)
                cr_assert_gt(h.wrong, h.right, "trace %d: inverted hints not seen to be wrong", trace);
        }
    }
}

Test(hints, slot_kind_bad_input_gets_a_status) {
    static uint64_t mem[8 * GPUMEM_CACHE_MIN_LINE / 8];
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c, *plain;
    void *p;
    d.n_lines = 8;
    d.line_bytes = GPUMEM_CACHE_MIN_LINE;
    d.n_slots = 2;
    d.backing = gpumem_cache_backing_memory(mem);
    cr_assert_eq(gpumem_cache_create(&d, &plain), GPUMEM_OK);
    d.policy = GPUMEM_POLICY_HINTED_RRIP;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_hint(plain, 1, 3), GPUMEM_ESTATE, "BRRIP takes no hints");
    cr_assert_eq(gpumem_cache_epoch(plain, 3), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_cache_hint(c, 8, 3), GPUMEM_ERANGE, "a line past the end");
    cr_assert_eq(gpumem_cache_demote(c, 8), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_cache_hint(NULL, 1, 3), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_hint(c, 1, 3), GPUMEM_OK, "not resident: kept for its fill");
    cr_assert_eq(gpumem_cache_acquire(c, 1, 1, 0, &p), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_release(c, 1, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_epoch(c, 5), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_epoch(c, 4), GPUMEM_OK, "a thread behind the clock changes nothing");
    cr_assert_eq(c->slot_hints.epoch, 5);
    cr_assert_eq(gpumem_cache_hint(c, 1, 4), GPUMEM_ERANGE, "a hint for a past epoch");
    cr_assert_eq(gpumem_cache_hint(c, 1, UINT64_MAX), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_cache_epoch(c, UINT64_MAX), GPUMEM_EOVERFLOW);
    cr_assert_eq(gpumem_cache_hint(c, 1, 5), GPUMEM_OK);
    cr_assert_eq(c->slots[c->lines[1].slot].ref & 3u, 0, "a near hint keeps the line");
    cr_assert_eq(gpumem_cache_demote(c, 1), GPUMEM_OK);
    cr_assert_eq(c->slots[c->lines[1].slot].ref & 3u, 3, "a demote evicts it first");
    cr_assert_eq(gpumem_cache_hint(c, 2, 6), GPUMEM_OK, "line 2 not resident: pending");
    cr_assert_eq(gpumem_cache_acquire(c, 2, 1, 0, &p), GPUMEM_OK); /* BRRIP's second fill: RRPV 3 */
    cr_assert_eq(gpumem_cache_release(c, 2, 1), GPUMEM_OK);
    cr_assert_eq(c->slots[c->lines[2].slot].ref & 3u, 0, "the pending near hint applied at the fill");
    gpumem_cache_destroy(c);
    gpumem_cache_destroy(plain);
}

/* The simulator runs the slot kind's own code: the same trace and hints
 * through bench/policy_sim.h miss as often as through the cache. */
Test(hints, slot_kind_simulated_as_the_cache_runs_it) {
    static uint32_t t[SLOT_N];
    uint64_t *next = (uint64_t *)malloc((size_t)SLOT_N * 8), cache_misses;
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED_RRIP, SLOT_CAP);
    psim s;
    uint32_t i;
    cr_assert_not_null(next);
    make_slot_trace(t, TRACE_PAIRS);
    cr_assert_eq(psim_next_use(t, SLOT_N, SLOT_LINES, next), 0);
    cr_assert_eq(psim_init(&s, &d, SLOT_LINES, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, SLOT_LINES), 0);
    for (i = 0; i < SLOT_N; i++) {
        uint64_t now = i / SLOT_EPOCH;
        psim_hint_event(&s, PSIM_EPOCH, 0, now);
        psim_access(&s, t[i]);
        if (next[i] == PSIM_NEVER) psim_hint_event(&s, PSIM_DEMOTE, t[i], 0);
        else psim_hint_event(&s, PSIM_HINT, t[i], next[i] / SLOT_EPOCH);
    }
    cache_misses = slot_misses(GPUMEM_POLICY_HINTED_RRIP, t, HINTS_TRUE, NULL);
    cr_assert_eq(s.hints_refused, 0, "%llu hints refused", (unsigned long long)s.hints_refused);
    cr_assert_eq(s.misses, cache_misses, "simulated %llu misses, the cache %llu", (unsigned long long)s.misses,
                 (unsigned long long)cache_misses);
    psim_free(&s);
    free(next);
}

/* A hinted policy of 4 slots (hint_slack `slack`) with line 7 in slot 0,
 * unhinted; free the memory it returns. */
static void *line_7_in_slot_0(gpumem_policy *p, uint32_t slack) {
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 4);
    void *mem;
    d.hint_slack = slack;
    mem = malloc(gpumem_policy_bytes(&d));
    cr_assert_eq(gpumem_policy_init(p, &d, mem), GPUMEM_OK);
    gpumem_policy_on_fill(p, 0, 7);
    return mem;
}

/* The hinted next use of a slot, as a prefetch asks it: the second hint
 * once the first passed unmet (before any sweep expired it), none once both
 * passed or for a demoted line. */
Test(hints, next_use_skips_a_passed_hint) {
    gpumem_policy p;
    void *mem = line_7_in_slot_0(&p, 0);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), GPUMEM_POLICY_UNHINTED);
    cr_assert_eq(gpumem_policy_hint(&p, 0, 7, 5), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, 0, 7, 8), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), 5);
    cr_assert_eq(gpumem_policy_epoch(&p, 7), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), 8, "5 passed unused: 8 stands");
    cr_assert_eq(gpumem_policy_epoch(&p, 9), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), GPUMEM_POLICY_UNHINTED, "both passed");
    cr_assert_eq(gpumem_policy_hint(&p, 0, 7, 12), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_demote(&p, 0, 7), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), GPUMEM_POLICY_UNHINTED, "demoted");
    free(mem);
}

/* A line used in epochs close together (within the slack) is told of its
 * next use before each use, as graph.c does: the third hint, given while
 * the first was met and the second stood, names the use after the second's
 * and must survive it (it was dropped, and the line became the first to go
 * before that use: graph BFS's hinted misses were 1.5x OPT, 1.16x after). */
Test(hints, hint_after_the_second_survives_its_use) {
    gpumem_policy p;
    void *mem = line_7_in_slot_0(&p, 2);
    cr_assert_eq(gpumem_policy_hint(&p, 0, 7, 5), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_epoch(&p, 5), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, 0, 7, 6), GPUMEM_OK); /* before the use at 5: the next is at 6 */
    gpumem_policy_on_access(&p, 0, 7);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), 6);
    cr_assert_eq(gpumem_policy_epoch(&p, 6), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, 0, 7, 9), GPUMEM_OK); /* before the use at 6: the next is at 9 */
    gpumem_policy_on_access(&p, 0, 7);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), 9, "the use at 9 was forgotten: %llu",
                 (unsigned long long)gpumem_policy_next_use(&p, 0));
    cr_assert_eq(gpumem_policy_epoch(&p, 9), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_next_use(&p, 0), 9);
    gpumem_policy_on_access(&p, 0, 7);
    cr_assert_eq(p.hint.wrong, 0, "%llu judged wrong", (unsigned long long)p.hint.wrong);
    cr_assert_eq(p.hint.right, 3, "%llu judged right", (unsigned long long)p.hint.right);
    free(mem);
}

/* The simulator's --prefetch hints: a "soon" record reads its line ahead
 * into a free slot or in place of the policy's victim, and is declined when
 * that victim is hinted for the same epoch or sooner (gpumem_cache_prefetch's
 * rule); the read is not a miss, and its use is counted. Two slots, the
 * sequential hinted policy, slack 0. */
Test(hints, soon_records_read_ahead_never_for_a_line_needed_sooner) {
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 2);
    psim s;
    cr_assert_eq(psim_init(&s, &d, 8, PSIM_ONE_TIER, 0, PSIM_HINTS, 8), 0);
    psim_hint_event(&s, PSIM_EPOCH, 0, 0);
    psim_hint_event(&s, PSIM_SOON, 1, 2); /* a free slot: read ahead */
    cr_expect_neq(s.slot_of[1], PSIM_NONE);
    cr_expect_eq(s.prefetch_reads, 1);
    cr_expect_eq(psim_access(&s, 0), 0); /* the demand miss fills the other slot */
    psim_hint_event(&s, PSIM_HINT, 0, 6);
    /* line 2 needed at 4: the victim is line 0 (next use 6, farther than 1's 2) */
    psim_hint_event(&s, PSIM_SOON, 2, 4);
    cr_expect_eq(s.slot_of[0], PSIM_NONE, "the line needed at 6 gave way to the one needed at 4");
    cr_expect_neq(s.slot_of[2], PSIM_NONE);
    cr_expect_eq(s.prefetch_reads, 2);
    /* line 3 needed at 5: both lines held are needed sooner (2 and 4): declined */
    psim_hint_event(&s, PSIM_SOON, 3, 5);
    cr_expect_eq(s.slot_of[3], PSIM_NONE);
    cr_expect_eq(s.prefetch_declined, 1);
    cr_expect_eq(s.prefetch_reads, 2);
    psim_hint_event(&s, PSIM_EPOCH, 0, 2);
    cr_expect_eq(psim_access(&s, 1), 1, "read ahead: a hit");
    psim_hint_event(&s, PSIM_EPOCH, 0, 4);
    cr_expect_eq(psim_access(&s, 2), 1);
    cr_expect_eq(s.misses, 1);
    cr_expect_eq(s.prefetch_used, 2);
    /* a soon record for an epoch behind the clock is refused, and not read ahead (as the cache's ERANGE) */
    psim_hint_event(&s, PSIM_SOON, 5, 1);
    cr_expect_eq(s.slot_of[5], PSIM_NONE);
    cr_expect_eq(s.prefetch_reads, 2);
    psim_free(&s);
    /* the slot kind: both lines hinted for epoch 1, a soon record for 5 is declined */
    d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED_RRIP, 2);
    cr_assert_eq(psim_init(&s, &d, 8, PSIM_ONE_TIER, 0, PSIM_HINTS, 8), 0);
    psim_hint_event(&s, PSIM_EPOCH, 0, 0);
    cr_expect_eq(psim_access(&s, 0), 0);
    cr_expect_eq(psim_access(&s, 1), 0);
    psim_hint_event(&s, PSIM_HINT, 0, 1);
    psim_hint_event(&s, PSIM_HINT, 1, 1);
    psim_hint_event(&s, PSIM_SOON, 2, 5);
    cr_expect_eq(s.slot_of[2], PSIM_NONE, "hinted-rrip evicted a line needed at 1 for one needed at 5");
    cr_expect_eq(s.prefetch_declined, 1);
    /* and a soon record never replaces a sooner hint: line 0 stays needed at 1 */
    psim_hint_event(&s, PSIM_SOON, 0, 5);
    cr_expect_eq(gpumem_policy_slot_next_use(s.pol.slot.hints, s.pol.slot.words[s.slot_of[0]]), 1);
    /* without --prefetch hints a soon record is a hint only */
    psim_free(&s);
    d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 2);
    cr_assert_eq(psim_init(&s, &d, 8, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, 8), 0);
    psim_hint_event(&s, PSIM_SOON, 1, 2);
    cr_expect_eq(s.slot_of[1], PSIM_NONE);
    cr_expect_eq(s.prefetch_reads, 0);
    psim_free(&s);
}

/* ---- weights: what the application expects beyond its next-use hints ---- */

/* The order: demoted, unhinted and unweighted by the fallback, the lightest
 * weighted, the farthest hinted; a pinned lightest gives way to the next;
 * a weight given while the line is away comes with it at its fill. */
Test(hints, weights_order_the_unhinted_lightest_first) {
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 5);
    void *mem;
    gpumem_policy p;
    uint32_t k;
    uint8_t pinned[5] = {0, 0, 0, 0, 0};
    d.hint_fallback = GPUMEM_POLICY_LRU;
    mem = malloc(gpumem_policy_bytes(&d));
    cr_assert_eq(gpumem_policy_init(&p, &d, mem), GPUMEM_OK);
    for (k = 0; k < 5; k++) gpumem_policy_on_fill(&p, k, 100 + k); /* LRU order 0 1 2 3 4 */
    cr_assert_eq(gpumem_policy_weight(&p, 0, 100, 30), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_weight(&p, 1, 101, 10), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_weight(&p, 2, 102, 20), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_hint(&p, 3, 103, 9), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_weight(&p, 3, 103, 1), GPUMEM_OK); /* hinted: its weight waits */
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 4, "the unweighted, unhinted line first (by LRU)");
    gpumem_policy_on_evict(&p, 4, 104);
    gpumem_policy_on_fill(&p, 4, 105);
    cr_assert_eq(gpumem_policy_demote(&p, 2, 102), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_weight(&p, 4, 105, 40), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 2, "a demoted line before any");
    gpumem_policy_on_evict(&p, 2, 102);
    gpumem_policy_on_fill(&p, 2, 106);
    cr_assert_eq(gpumem_policy_weight(&p, 2, 106, 50), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 1, "then the lightest (10), not LRU's first (0)");
    pinned[1] = 1;
    cr_assert_eq(gpumem_policy_victim(&p, pinned), 0, "the lightest pinned: the next (30)");
    gpumem_policy_on_evict(&p, 1, 101);
    cr_assert_eq(gpumem_policy_weight(&p, GPUMEM_POLICY_NONE, 101, 60), GPUMEM_OK); /* away: kept for its fill */
    gpumem_policy_on_fill(&p, 1, 101);
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 0, "line 101 came back weighing 60: 100 (30) is the lightest");
    cr_assert_eq(gpumem_policy_weight(&p, 0, 100, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_weight(&p, 1, 101, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_weight(&p, 2, 106, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_weight(&p, 4, 105, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_victim(&p, NULL), 0, "weight 0 is no weight: LRU's again");
    for (k = 0; k < 5; k++) pinned[k] = k != 3;
    cr_assert_eq(gpumem_policy_victim(&p, pinned), 3, "the hinted line last");
    free(mem);
}

/* A trace of n accesses over `lines` lines drawn independently with
 * Zipf(1) probabilities, the ranks shuffled over the line numbers; p[]
 * gets each line's probability times 2^20. */
static void make_popular_trace(uint32_t *t, uint32_t n, uint32_t lines, uint64_t seed, uint64_t *p) {
    double *cdf = (double *)malloc(lines * sizeof *cdf), sum = 0;
    uint32_t *perm = (uint32_t *)malloc(lines * 4), i;
    cr_assert(cdf && perm);
    for (i = 0; i < lines; i++) perm[i] = i;
    for (i = lines - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(psim_splitmix(&seed) % (i + 1)), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (i = 0; i < lines; i++) sum += cdf[i] = 1.0 / (i + 1.0);
    for (i = 0; i < lines; i++) p[perm[i]] = 1 + (uint64_t)(cdf[i] / sum * 1048576.0);
    for (i = 1; i < lines; i++) cdf[i] += cdf[i - 1];
    for (i = 0; i < n; i++) {
        double u = (double)(psim_splitmix(&seed) >> 11) / 9007199254740992.0 * sum;
        uint32_t lo = 0, hi = lines - 1;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        t[i] = perm[lo];
    }
    free(cdf);
    free(perm);
}

enum { WEIGHTS_TRUE, WEIGHTS_RANDOM, WEIGHTS_INVERTED };

/* Misses of HINTED (fallback BRRIP) with each line weighed after each of its
 * accesses: its probability (TRUE), a random weight, or the probability
 * mirrored (INVERTED: the hottest lightest). No next-use hints. */
static uint64_t run_weighted(const uint32_t *t, uint32_t n, uint32_t lines, uint32_t cap, const uint64_t *prob,
                             int how, gpumem_policy *out) {
    gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, cap);
    uint64_t seed = 4242, top = 0, misses;
    psim s;
    uint32_t i;
    d.hint_fallback = GPUMEM_POLICY_BRRIP;
    for (i = 0; i < lines; i++) top = prob[i] > top ? prob[i] : top;
    cr_assert_eq(psim_init(&s, &d, lines, PSIM_ONE_TIER, 0, PSIM_NO_PREFETCH, lines), 0);
    for (i = 0; i < n; i++) {
        uint64_t w = how == WEIGHTS_TRUE ? prob[t[i]] : how == WEIGHTS_RANDOM ? 1 + psim_splitmix(&seed) % top
                                                                                : top + 1 - prob[t[i]];
        psim_access(&s, t[i]);
        psim_hint_event(&s, PSIM_WEIGHT, t[i], w);
    }
    cr_assert_eq(s.hints_refused, 0);
    misses = s.misses;
    if (out) *out = s.pol; /* counters only: the memory is freed */
    psim_free(&s);
    return misses;
}

/* Weights that are the lines' true popularity beat the fallback; random or
 * inverted ones are seen to evict lines that come back sooner than the
 * fallback's, lose the choice, and cost at most 1.25x the fallback. */
Test(hints, weights_beat_the_fallback_and_bad_ones_cost_at_most_a_quarter_more) {
    enum { N = 200000 };
    static uint32_t t[N];
    static uint64_t prob[8000];
    uint32_t round;
    for (round = 0; round < 3; round++) {
        uint32_t lines = 2000 + 3000 * round, cap = lines / (4 + 2 * round);
        uint64_t f = 0, m;
        int how;
        gpumem_policy p;
        make_popular_trace(t, N, lines, 31 + round, prob);
        f = run_hinted(GPUMEM_POLICY_BRRIP, 0, t, N, lines, cap, HINTS_NONE, NULL);
        for (how = WEIGHTS_TRUE; how <= WEIGHTS_INVERTED; how++) {
            m = run_weighted(t, N, lines, cap, prob, how, &p);
            cr_log_info("round %u, weights %d: %llu misses, BRRIP %llu; back early %llu of %llu by weight, %llu of %llu "
                        "by the fallback", round, how, (unsigned long long)m, (unsigned long long)f,
                        (unsigned long long)p.hint.weight_back, (unsigned long long)p.hint.weight_out,
                        (unsigned long long)p.hint.fallback_back, (unsigned long long)p.hint.fallback_out);
            if (how == WEIGHTS_TRUE) {
                cr_assert_lt((double)m, 0.9 * (double)f, "round %u, true weights: %llu misses, BRRIP %llu", round,
                             (unsigned long long)m, (unsigned long long)f);
                cr_assert(gpumem__weights_trusted(&p.hint), "round %u: true weights not trusted", round);
            } else {
                cr_assert_leq((double)m, 1.25 * (double)f, "round %u, %s weights: %llu misses, BRRIP %llu", round,
                              how == WEIGHTS_RANDOM ? "random" : "inverted", (unsigned long long)m,
                              (unsigned long long)f);
            }
            if (how == WEIGHTS_INVERTED)
                cr_assert(!gpumem__weights_trusted(&p.hint), "round %u: inverted weights still trusted", round);
        }
    }
}

Test(hints, weights_bad_input_gets_a_status) {
    static uint64_t mem[8 * GPUMEM_CACHE_MIN_LINE / 8];
    gpumem_policy_desc pd = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 2), ld = gpumem_policy_desc_default(
                                                                                     GPUMEM_POLICY_LRU, 2);
    void *pmem = malloc(gpumem_policy_bytes(&pd)), *lmem = malloc(gpumem_policy_bytes(&ld));
    gpumem_policy p, q;
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    void *data;
    cr_assert_eq(gpumem_policy_init(&p, &pd, pmem), GPUMEM_OK);
    cr_assert_eq(gpumem_policy_init(&q, &ld, lmem), GPUMEM_OK);
    gpumem_policy_on_fill(&q, 0, 3);
    cr_assert_eq(gpumem_policy_weight(&q, 0, 3, 5), GPUMEM_ESTATE, "LRU takes no weights");
    cr_assert_eq(gpumem_policy_weight(NULL, 0, 3, 5), GPUMEM_ENULL);
    d.n_lines = 8;
    d.line_bytes = GPUMEM_CACHE_MIN_LINE;
    d.n_slots = 2;
    d.backing = gpumem_cache_backing_memory(mem);
    d.policy = GPUMEM_POLICY_HINTED_RRIP;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_weight(c, 1, 5), GPUMEM_ESTATE, "the slot kind takes no weights");
    gpumem_cache_destroy(c);
    d.policy = GPUMEM_POLICY_DEFAULT;
    d.seq_policy = &p;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_weight(c, 8, 5), GPUMEM_ERANGE, "a line past the end");
    cr_assert_eq(gpumem_cache_weight(c, 1, 1ull << 63), GPUMEM_EOVERFLOW, "no trace could hold it");
    cr_assert_eq(gpumem_cache_weight(NULL, 1, 5), GPUMEM_ENULL);
    cr_assert_eq(gpumem_cache_weight(c, 1, 5), GPUMEM_OK, "not resident: kept for its fill");
    cr_assert_eq(gpumem_cache_acquire(c, 1, 1, 0, &data), GPUMEM_OK);
    cr_assert_eq(gpumem_cache_release(c, 1, 1), GPUMEM_OK);
    cr_assert_eq(p.hint.weight[c->lines[1].slot], 5, "the weight came with the fill");
    cr_assert_eq(gpumem_cache_weight(c, 1, 7), GPUMEM_OK);
    cr_assert_eq(p.hint.weight[c->lines[1].slot], 7);
    gpumem_cache_destroy(c);
    free(pmem);
    free(lmem);
}
