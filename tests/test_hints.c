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
