/* bench/policy_sim.h - the trace simulator's engine (host only), shared by
 * bench/policy_sim.c and tests/test_policy.c.
 *
 * A simulation is one policy at one capacity over a stream of dense line ids
 * (0 .. n_ids-1; the program maps a trace's line numbers to them). Memory is
 * per distinct line and per slot, never per access: a 10^8-access trace is
 * streamed. Belady's OPT needs each access's next use: psim_next_use fills it
 * for an in-memory trace; the program computes it in a backward pass over a
 * file instead (the same psim_opt_access either way).
 *
 * Two tiers (GMT): tier 1 is the policy's cache; tier 2 a host tier of
 * t2_slots lines, exclusive with tier 1, FIFO when full. Placement of a tier-1
 * victim: PSIM_TIER_ORDER (always tier 2), PSIM_RANDOM (tier 2 or drop, 1/2),
 * PSIM_REUSE (GMT-Reuse: gpumem_policy_gmt predicts keep / host / bypass; a
 * full tier 2 means bypass). Reads are counted per tier.
 */
#ifndef GPUMEM_BENCH_POLICY_SIM_H
#define GPUMEM_BENCH_POLICY_SIM_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_policy.h"

#define PSIM_NONE GPUMEM_POLICY_NONE
#define PSIM_NEVER UINT64_MAX

enum { PSIM_ONE_TIER = 0, PSIM_TIER_ORDER = 1, PSIM_RANDOM = 2, PSIM_REUSE = 3 };
/* HINTS: a "soon" record reads its line ahead (gpumem_cache_prefetch's rule: never
 * in place of a line hinted for that epoch or sooner), not on a miss. */
enum { PSIM_NO_PREFETCH = 0, PSIM_READAHEAD = 1, PSIM_FDP = 2, PSIM_HINTS = 3 };
#define PSIM_FDP_SHIFT 5u /* FDP's regions: 32 lines (2 MiB of 64 KiB pages, as in UVM) */

/* GMT's tier latencies per page (notes/gmt.md): host ~50 us, SSD ~130 us. */
#define PSIM_HOST_US 50.0
#define PSIM_SSD_US 130.0
/* GMT-Reuse: how many predicted-short lines CLOCK may pass over before it
 * must evict (the paper gives no bound; one would livelock). */
#define PSIM_MAX_SKIPS 16u

typedef struct psim {
    gpumem_policy pol;
    void *pol_mem;
    uint32_t n_slots, used;
    uint32_t *slot_of;     /* per line: its tier-1 slot or NONE */
    uint64_t *line_of;     /* per slot */
    uint8_t *prefetched;   /* per slot: filled by a prefetch and not used yet */
    uint64_t accesses, hits, misses;
    /* two tiers */
    uint32_t placement, t2_slots, t2_used;
    uint32_t *t2_of;       /* per line: tier-2 slot or NONE */
    uint64_t *t2_line;     /* per tier-2 slot */
    uint32_t *t2_prev, *t2_next;
    gpumem__plist t2_fifo, t2_free;
    uint64_t t2_hits, ssd_reads, rng;
    gpumem_policy_gmt gmt;
    void *gmt_mem;
    /* prefetch */
    uint32_t prefetch;
    gpumem_policy_readahead ra;
    gpumem_policy_fdp fdp;
    void *fdp_mem;
    uint64_t prefetch_reads, prefetch_used;
    uint64_t prefetch_declined; /* HINTS: soon records whose victim was hinted for that epoch or sooner */
    const uint64_t *raw_of; /* per line: its number in the trace (prefetch works on those) */
    const void *raw_map;    /* psim_map, to find the dense id of a raw line */
    const void *fdp_regions; /* NULL: FDP's regions are line >> PSIM_FDP_SHIFT; else a psim_map of those to
                                dense region numbers (the program: memory per region touched, not per line) */
    uint64_t hints_refused; /* hint records the policy refused (HINTED, HINTED_RRIP) */
    uint64_t *log;          /* NULL, or the evicted lines in order (tests) */
    uint32_t log_n, log_cap;
} psim;

/* ---- raw line number -> dense id ------------------------------------------------ */

typedef struct psim_map {
    uint64_t *keys;
    uint32_t *vals;
    uint64_t cap, n;
} psim_map;

static inline uint64_t psim_hash(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static inline uint32_t psim_map_find(const psim_map *m, uint64_t key) {
    uint64_t i = psim_hash(key) & (m->cap - 1);
    while (m->vals[i] != PSIM_NONE) {
        if (m->keys[i] == key) return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return PSIM_NONE;
}

static inline int psim_map_grow(psim_map *m) {
    psim_map g;
    uint64_t i;
    g.cap = m->cap ? m->cap * 2 : 1024;
    g.n = 0;
    g.keys = (uint64_t *)malloc(g.cap * 8);
    g.vals = (uint32_t *)malloc(g.cap * 4);
    if (!g.keys || !g.vals) {
        free(g.keys);
        free(g.vals);
        return -1;
    }
    memset(g.vals, 0xff, g.cap * 4);
    for (i = 0; i < m->cap; i++)
        if (m->vals[i] != PSIM_NONE) {
            uint64_t j = psim_hash(m->keys[i]) & (g.cap - 1);
            while (g.vals[j] != PSIM_NONE) j = (j + 1) & (g.cap - 1);
            g.keys[j] = m->keys[i];
            g.vals[j] = m->vals[i];
        }
    g.n = m->n;
    free(m->keys);
    free(m->vals);
    *m = g;
    return 0;
}

/* The dense id of `key`, new ids in order of first appearance. */
static inline uint32_t psim_map_id(psim_map *m, uint64_t key) {
    uint64_t i;
    if ((m->n + 1) * 2 > m->cap && psim_map_grow(m) != 0) return PSIM_NONE;
    i = psim_hash(key) & (m->cap - 1);
    while (m->vals[i] != PSIM_NONE) {
        if (m->keys[i] == key) return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->vals[i] = (uint32_t)m->n;
    return (uint32_t)m->n++;
}

static inline void psim_map_free(psim_map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- one simulation ---------------------------------------------------------------- */

static inline void psim_free(psim *s) {
    free(s->pol_mem);
    free(s->slot_of);
    free(s->line_of);
    free(s->prefetched);
    free(s->t2_of);
    free(s->t2_line);
    free(s->t2_prev);
    free(s->t2_next);
    free(s->gmt_mem);
    free(s->fdp_mem);
    memset(s, 0, sizeof *s);
}

/* `kind` at n_slots over n_ids lines; placement and t2_slots for two tiers. */
/* (raw_lines: one more than the largest line number FDP will see: the
 * trace's, or the dense regions' when fdp_regions is set; FDP only.) */
static inline int psim_init(psim *s, const gpumem_policy_desc *d, uint32_t n_ids, uint32_t placement,
                            uint32_t t2_slots, uint32_t prefetch, uint64_t raw_lines) {
    uint32_t i;
    memset(s, 0, sizeof *s);
    s->n_slots = d->n_slots;
    s->placement = placement;
    s->prefetch = prefetch;
    s->rng = 0x853c49e6748fea9bull;
    s->pol_mem = malloc(gpumem_policy_bytes(d) + 8);
    s->slot_of = (uint32_t *)malloc((size_t)n_ids * 4 + 4);
    s->line_of = (uint64_t *)calloc(d->n_slots, 8);
    s->prefetched = (uint8_t *)calloc(d->n_slots, 1);
    if (!s->pol_mem || !s->slot_of || !s->line_of || !s->prefetched ||
        gpumem_policy_init(&s->pol, d, s->pol_mem) != GPUMEM_OK)
        goto fail;
    memset(s->slot_of, 0xff, (size_t)n_ids * 4);
    if (placement != PSIM_ONE_TIER) {
        gpumem_policy_gmt_desc gd = gpumem_policy_gmt_desc_default(n_ids, d->n_slots, t2_slots);
        s->t2_slots = t2_slots;
        s->t2_of = (uint32_t *)malloc((size_t)n_ids * 4 + 4);
        s->t2_line = (uint64_t *)calloc(t2_slots + 1, 8);
        s->t2_prev = (uint32_t *)calloc(t2_slots + 1, 4);
        s->t2_next = (uint32_t *)calloc(t2_slots + 1, 4);
        s->gmt_mem = malloc(gpumem_policy_gmt_bytes(&gd) + 8);
        if (!s->t2_of || !s->t2_line || !s->t2_prev || !s->t2_next || !s->gmt_mem ||
            gpumem_policy_gmt_init(&s->gmt, &gd, s->gmt_mem) != GPUMEM_OK)
            goto fail;
        memset(s->t2_of, 0xff, (size_t)n_ids * 4);
        gpumem__plist_clear(&s->t2_fifo);
        gpumem__plist_clear(&s->t2_free);
        for (i = 0; i < t2_slots; i++) gpumem__plist_append(&s->t2_free, s->t2_prev, s->t2_next, i);
    }
    gpumem_policy_readahead_init(&s->ra, 4, 64);
    if (prefetch == PSIM_FDP) {
        s->fdp_mem = malloc(gpumem_policy_fdp_bytes(raw_lines, PSIM_FDP_SHIFT) + 8);
        if (!s->fdp_mem) goto fail;
        gpumem_policy_fdp_init(&s->fdp, raw_lines, PSIM_FDP_SHIFT, s->fdp_mem);
    }
    return 0;
fail:
    psim_free(s);
    return -1;
}

/* Tier 2: take `line` in (FIFO; when full, the oldest goes, if `evict`). */
static inline void psim_t2_put(psim *s, uint64_t line, int evict) {
    uint32_t k = s->t2_free.head;
    if (k == PSIM_NONE) {
        if (!evict || (k = s->t2_fifo.head) == PSIM_NONE) return; /* bypass */
        gpumem__plist_remove(&s->t2_fifo, s->t2_prev, s->t2_next, k);
        s->t2_of[s->t2_line[k]] = PSIM_NONE;
    } else {
        gpumem__plist_remove(&s->t2_free, s->t2_prev, s->t2_next, k);
    }
    s->t2_line[k] = line;
    s->t2_of[line] = k;
    gpumem__plist_append(&s->t2_fifo, s->t2_prev, s->t2_next, k);
}

/* splitmix64: the simulator's and its tests' random numbers. */
static inline uint64_t psim_splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The policies see the trace's own line numbers (HPE groups neighbours into
 * page sets); the simulator indexes its arrays by dense id. */
static inline uint64_t psim_raw(const psim *s, uint64_t line) { return s->raw_of ? s->raw_of[line] : line; }

/* Slot k's line leaves tier 1 (to tier 2 as the placement says). */
static inline uint32_t psim_evict_slot(psim *s, uint32_t k) {
    uint64_t old = s->line_of[k];
    if (s->placement == PSIM_TIER_ORDER) psim_t2_put(s, old, 1);
    if (s->placement == PSIM_RANDOM && (psim_splitmix(&s->rng) & 1)) psim_t2_put(s, old, 1);
    if (s->prefetched[k]) {
        if (s->prefetch == PSIM_FDP) gpumem_policy_fdp_feedback(&s->fdp, 0);
        s->prefetched[k] = 0;
    }
    gpumem_policy_on_evict(&s->pol, k, psim_raw(s, old));
    s->slot_of[old] = PSIM_NONE;
    if (s->log && s->log_n < s->log_cap) s->log[s->log_n++] = old;
    return k;
}

/* Free a tier-1 slot (the cache is full): the policy's victim, placed. */
static inline uint32_t psim_evict(psim *s) {
    uint32_t k, skips = PSIM_MAX_SKIPS;
    uint64_t old;
    for (;;) {
        k = gpumem_policy_victim(&s->pol, NULL);
        old = s->line_of[k];
        if (s->placement != PSIM_REUSE) break;
        {
            uint32_t where = gpumem_policy_gmt_place(&s->gmt, old, s->accesses, skips);
            if (where != GPUMEM_PLACE_KEEP) {
                if (where == GPUMEM_PLACE_HOST || where == GPUMEM_PLACE_HOST_IF_FREE)
                    psim_t2_put(s, old, where == GPUMEM_PLACE_HOST);
                break;
            }
        }
        skips--;
        gpumem_policy_on_access(&s->pol, k, psim_raw(s, old)); /* kept: as if used again */
    }
    return psim_evict_slot(s, k);
}

/* `line` into slot k (free or just emptied). */
static inline uint32_t psim_fill_slot(psim *s, uint32_t k, uint32_t line) {
    s->slot_of[line] = k;
    s->line_of[k] = line;
    gpumem_policy_on_fill(&s->pol, k, psim_raw(s, line));
    return k;
}

static inline uint32_t psim_place(psim *s, uint32_t line) {
    return psim_fill_slot(s, s->used < s->n_slots ? s->used++ : psim_evict(s), line);
}

/* Whether the simulation's policy takes hints (HINTED, HINTED_RRIP). */
static inline int psim_hinted(const psim *s) {
    return s->pol.d.kind == GPUMEM_POLICY_HINTED || s->pol.d.kind == GPUMEM_POLICY_HINTED_RRIP;
}

/* The hinted next use of slot k's line (either hinted kind), UINT64_MAX
 * when none stands: what a prefetch must not evict for a later use. */
static inline uint64_t psim_slot_next_use(const psim *s, uint32_t k) {
    if (s->pol.d.kind == GPUMEM_POLICY_HINTED_RRIP)
        return gpumem_policy_slot_next_use(s->pol.slot.hints, s->pol.slot.words[k]);
    return gpumem_policy_next_use(&s->pol, k);
}

/* HINTS: `line` is needed at epoch `when`: read ahead unless held, into a
 * free slot or in place of the policy's victim, unless the victim's line is
 * hinted for `when` or sooner (then declined, nothing evicted). The victim
 * is asked as for a miss, so a policy with a hand (CLOCK, RRIP) has moved
 * it; the live cache's one sweep changes nothing it passes over. */
static inline void psim_prefetch_soon(psim *s, uint32_t line, uint64_t when) {
    uint32_t k;
    if (s->slot_of[line] != PSIM_NONE) return;
    if (s->used < s->n_slots) {
        k = s->used++;
    } else {
        k = gpumem_policy_victim(&s->pol, NULL);
        if (psim_slot_next_use(s, k) <= when) {
            s->prefetch_declined++;
            return;
        }
        psim_evict_slot(s, k);
    }
    s->prefetch_reads++;
    s->prefetched[psim_fill_slot(s, k, line)] = 1;
}

static inline void psim_prefetch(psim *s, uint32_t line) {
    uint64_t first = 0, x;
    uint32_t count = 0;
    uint64_t raw = psim_raw(s, line);
    if (s->prefetch == PSIM_READAHEAD) gpumem_policy_readahead_on_miss(&s->ra, raw, &first, &count);
    else if (!s->fdp_regions) gpumem_policy_fdp_on_miss(&s->fdp, raw, &first, &count);
    else { /* FDP on the dense region number, its answer back in the trace's line numbers */
        uint64_t region = raw >> PSIM_FDP_SHIFT;
        uint64_t dense = psim_map_find((const psim_map *)s->fdp_regions, region);
        gpumem_policy_fdp_on_miss(&s->fdp, (dense << PSIM_FDP_SHIFT) | (raw & ((1u << PSIM_FDP_SHIFT) - 1)), &first,
                                  &count);
        first = region << PSIM_FDP_SHIFT;
    }
    for (x = first; x < first + count; x++) {
        uint32_t id = s->raw_map ? psim_map_find((const psim_map *)s->raw_map, x) : PSIM_NONE;
        if (x == raw) continue;
        if (id != PSIM_NONE && s->slot_of[id] != PSIM_NONE) continue;     /* held: no read */
        if (id != PSIM_NONE && s->t2_of && s->t2_of[id] != PSIM_NONE) continue; /* tier 2 serves it anyway */
        s->prefetch_reads++;
        if (id == PSIM_NONE) continue; /* a line the trace never touches only costs its read */
        s->prefetched[psim_place(s, id)] = 1;
    }
}

/* One access to dense line `line`; returns 1 on a hit. */
static inline int psim_access(psim *s, uint32_t line) {
    uint32_t k = s->slot_of[line];
    s->accesses++;
    if (k != PSIM_NONE) {
        s->hits++;
        gpumem_policy_on_access(&s->pol, k, psim_raw(s, line));
        if (s->prefetched[k]) {
            s->prefetched[k] = 0;
            s->prefetch_used++;
            if (s->prefetch == PSIM_FDP) gpumem_policy_fdp_feedback(&s->fdp, 1);
        }
        return 1;
    }
    s->misses++;
    if (s->placement != PSIM_ONE_TIER) {
        uint32_t t = s->t2_of[line];
        if (t != PSIM_NONE) { /* exclusive tiers: it moves up */
            s->t2_hits++;
            gpumem__plist_remove(&s->t2_fifo, s->t2_prev, s->t2_next, t);
            gpumem__plist_append(&s->t2_free, s->t2_prev, s->t2_next, t);
            s->t2_of[line] = PSIM_NONE;
        } else {
            s->ssd_reads++;
        }
        gpumem_policy_gmt_on_fetch(&s->gmt, line, s->accesses);
    }
    psim_place(s, line);
    if (s->prefetch == PSIM_READAHEAD || s->prefetch == PSIM_FDP) psim_prefetch(s, line);
    return 0;
}

/* ---- hints: replayed into HINTED and HINTED_RRIP simulations, ignored by the others - */

enum { PSIM_HINT = 1, PSIM_DEMOTE = 2, PSIM_EPOCH = 3, PSIM_SOON = 4, PSIM_WEIGHT = 5 };

/* One hint record (gpumem_policy.h's trace format) for dense line `line`;
 * what the policy refuses (a hint for a past epoch, epochs going back) is
 * counted in hints_refused, as the cache would return its status. */
static inline void psim_hint_event(psim *s, uint32_t op, uint32_t line, uint64_t value) {
    gpumem_status st = GPUMEM_OK;
    if (psim_hinted(s)) {
        if (op == PSIM_EPOCH) st = gpumem_policy_epoch(&s->pol, value);
        else if (op == PSIM_SOON && s->pol.d.kind == GPUMEM_POLICY_HINTED_RRIP && value >= s->pol.slot.hints->epoch &&
                 (s->slot_of[line] != PSIM_NONE ? psim_slot_next_use(s, s->slot_of[line])
                                                : gpumem_policy_slot_pending_next_use(s->pol.slot.hints,
                                                                                      psim_raw(s, line))) <= value)
            st = GPUMEM_OK; /* as the cache: a prefetch's hint never replaces one for a sooner use */
        else if (op == PSIM_HINT || op == PSIM_SOON)
            st = gpumem_policy_hint(&s->pol, s->slot_of[line], psim_raw(s, line), value);
        else if (op == PSIM_DEMOTE) st = gpumem_policy_demote(&s->pol, s->slot_of[line], psim_raw(s, line));
        else if (op == PSIM_WEIGHT) st = gpumem_policy_weight(&s->pol, s->slot_of[line], psim_raw(s, line), value);
        if (st != GPUMEM_OK) s->hints_refused++;
    }
    /* as gpumem_cache_prefetch: read ahead unless the hint was for a past epoch */
    if (op == PSIM_SOON && s->prefetch == PSIM_HINTS && st != GPUMEM_ERANGE) psim_prefetch_soon(s, line, value);
}

static inline double psim_time_us(const psim *s) {
    return (double)s->t2_hits * PSIM_HOST_US + (double)s->ssd_reads * PSIM_SSD_US;
}

/* ---- GMT training: exact reuse distances of the first accesses ------------------- */

/* gpumem_policy_rd (gpumem_policy.h) in memory of its own: the exact
 * reuse distances on the CPU, as in the paper and in gpumem_tier.h. */
typedef struct psim_rd {
    gpumem_policy_rd rd;
    void *mem;
} psim_rd;

static inline int psim_rd_init(psim_rd *r, uint32_t n_ids, uint64_t window) {
    r->mem = malloc(gpumem_policy_rd_bytes(n_ids, window));
    if (!r->mem) return -1;
    gpumem_policy_rd_init(&r->rd, n_ids, window, r->mem);
    return 0;
}

static inline void psim_rd_free(psim_rd *r) { free(r->mem); }

/* One access; returns 1 when a sample was added (while inside the window). */
static inline int psim_rd_access(psim_rd *r, uint32_t line) { return gpumem_policy_rd_access(&r->rd, line); }

/* ---- Belady's OPT ------------------------------------------------------------------ */

/* Resident lines in a max-heap on their next use (gpumem_policy.h's indexed
 * heap: a hit moves one entry), so each access is O(log capacity). */
typedef struct psim_opt {
    uint32_t cap;
    gpumem__pheap heap; /* items are lines */
    uint64_t misses;
} psim_opt;

static inline int psim_opt_init(psim_opt *o, uint32_t cap, uint32_t n_ids) {
    memset(o, 0, sizeof *o);
    o->cap = cap;
    o->heap.key = (uint64_t *)malloc((size_t)cap * 8 + 8);
    o->heap.item = (uint32_t *)malloc((size_t)cap * 4 + 4);
    o->heap.pos = (uint32_t *)malloc((size_t)n_ids * 4 + 4);
    if (!o->heap.key || !o->heap.item || !o->heap.pos) return -1;
    memset(o->heap.pos, 0xff, (size_t)n_ids * 4);
    return 0;
}

static inline void psim_opt_free(psim_opt *o) {
    free(o->heap.key);
    free(o->heap.item);
    free(o->heap.pos);
}

/* An access to `line` whose next use is at `next` (PSIM_NEVER: none). A miss
 * on a full cache evicts the resident line used furthest in the future. */
static inline void psim_opt_access(psim_opt *o, uint32_t line, uint64_t next) {
    if (o->heap.pos[line] == PSIM_NONE) {
        o->misses++;
        if (o->heap.n == o->cap) gpumem__pheap_remove(&o->heap, o->heap.item[0]);
    }
    gpumem__pheap_set(&o->heap, line, next);
}

static inline int psim_next_use(const uint32_t *ids, uint64_t n, uint32_t n_ids, uint64_t *next);

/* OPT's misses on an in-memory trace at cap slots; -1 without memory. */
static inline int64_t psim_opt_misses(const uint32_t *ids, uint64_t n, uint32_t n_ids, uint32_t cap) {
    uint64_t *next = (uint64_t *)malloc((size_t)n * 8 + 8), i;
    int64_t m = -1;
    psim_opt o;
    memset(&o, 0, sizeof o);
    if (next && psim_next_use(ids, n, n_ids, next) == 0 && psim_opt_init(&o, cap, n_ids) == 0) {
        for (i = 0; i < n; i++) psim_opt_access(&o, ids[i], next[i]);
        m = (int64_t)o.misses;
    }
    psim_opt_free(&o);
    free(next);
    return m;
}

/* next[i] = index of the next access to ids[i]'s line, PSIM_NEVER if none. */
static inline int psim_next_use(const uint32_t *ids, uint64_t n, uint32_t n_ids, uint64_t *next) {
    uint64_t *seen = (uint64_t *)malloc((size_t)n_ids * 8 + 8), i;
    if (!seen) return -1;
    for (i = 0; i < n_ids; i++) seen[i] = PSIM_NEVER;
    for (i = n; i-- > 0;) {
        next[i] = seen[ids[i]];
        seen[ids[i]] = i;
    }
    free(seen);
    return 0;
}

#endif
