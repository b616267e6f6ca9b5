/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_policy.h - replacement, placement and prefetch policies for the
 * gpumem cache and the trace simulator (bench/policy_sim.c).
 *
 * USAGE
 *
 *   #include <stdlib.h>
 *   #include "gpumem_policy.h"
 *
 *   // given: uint32_t *words, uint32_t n, uint32_t k, uint64_t line, uint64_t old_line, uint64_t vt, uint64_t n_lines, uint64_t *batch, uint32_t n_batch
 *   // 1. Slot policies: concurrent, one 32-bit word per slot plus a hand.
 *   //    The cache uses these (gpumem_cache_desc.policy); host or device.
 *   uint32_t hand = 0, fills = 0;
 *   gpumem_policy_slot_fill(GPUMEM_POLICY_SRRIP, &words[k], &fills);   // line placed in slot k
 *   gpumem_policy_slot_hit(GPUMEM_POLICY_SRRIP, &words[k]);            // hit on slot k
 *   uint32_t cand = gpumem_policy_slot_next(&hand, n);
 *   if (gpumem_policy_slot_consider(GPUMEM_POLICY_SRRIP, &words[cand])) {
 *       // evict the line in slot cand
 *   }   // else cand got a second chance; gpumem_policy_slot_sweep_len(kind, n)
 *       // steps propose every slot at least once.
 *   // 1b. The hinted slot kind: BRRIP whose RRPV the application's next-use
 *   //     hints set (next use this epoch or the next: kept; demoted: first
 *   //     out; farther: BRRIP's), lock-free; the cache does this for you
 *   //     (desc.policy = GPUMEM_POLICY_HINTED_RRIP, gpumem_cache_hint).
 *   gpumem_policy_slot_hints sh;
 *   gpumem_policy_slot_hints_init(&sh);
 *   gpumem_policy_slot_epoch(&sh, 4);                     // the clock
 *   gpumem_policy_slot_hint(&sh, &words[k], 5, 0);        // slot k's line: next used at epoch 5
 *   gpumem_policy_slot_hint_later(&sh, old_line, 5, 0);   // a line not cached: kept for its fill
 *   gpumem_policy_slot_fill_hinted(GPUMEM_POLICY_HINTED_RRIP, &words[k], &fills, &sh, line);
 *   gpumem_policy_slot_consider_hinted(GPUMEM_POLICY_HINTED_RRIP, &words[cand], &sh); // judges hints
 *
 *   // 2. Sequential policies: one owner thread (or a caller's lock). Every
 *   //    kind, LRU/LFU/CP/HPE/tournament included; memory from the caller.
 *   gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_HPE, n);
 *   void *mem = malloc(gpumem_policy_bytes(&d));
 *   gpumem_policy p;
 *   if (gpumem_policy_init(&p, &d, mem) != GPUMEM_OK) return 1;
 *   gpumem_policy_on_access(&p, k, line);                  // on a hit
 *   uint32_t slot = gpumem_policy_victim(&p, NULL);        // on a miss (or one pinned byte per slot)
 *   gpumem_policy_on_evict(&p, slot, old_line);
 *   gpumem_policy_on_fill(&p, slot, line);
 *   free(mem);
 *   // or give it to the cache: gpumem_cache_desc.seq_policy = &p (the cache
 *   // serialises the calls with a lock; hits update it only when the lock is free)
 *
 *   // 2b. The hinted policy: the application's next uses (epochs of its own
 *   //     clock), Belady on them, a fallback kind for the unhinted lines.
 *   gpumem_policy_desc hd = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, n);
 *   hd.hint_fallback = GPUMEM_POLICY_BRRIP;               // (the default) for the unhinted
 *   void *hmem = malloc(gpumem_policy_bytes(&hd));        // after setting the fallback
 *   gpumem_policy h;
 *   if (gpumem_policy_init(&h, &hd, hmem) != GPUMEM_OK) return 1;
 *   gpumem_policy_epoch(&h, 3);                           // the clock is at epoch 3
 *   gpumem_policy_hint(&h, k, line, 5);                   // slot k's line: next used at epoch 5
 *   gpumem_policy_hint(&h, GPUMEM_POLICY_NONE, old_line, 4); // a line not cached: kept for its fill
 *   gpumem_policy_demote(&h, k, line);                    // done with it: the first to go
 *   gpumem_policy_weight(&h, k, line, 40);                // beyond its hints: worth 40 (the lightest go first)
 *   free(hmem);
 *
 *   // 3. GMT placement of an evicted line (keep / host tier / bypass):
 *   gpumem_policy_gmt_desc gd = gpumem_policy_gmt_desc_default(1u << 20, n, 4 * n);  // lines, tier sizes
 *   void *per_line = malloc(gpumem_policy_gmt_bytes(&gd));
 *   gpumem_policy_gmt g;
 *   if (gpumem_policy_gmt_init(&g, &gd, per_line) != GPUMEM_OK) return 1;
 *   gpumem_policy_gmt_on_fetch(&g, line, vt);              // every Tier-1 miss
 *   uint32_t where = gpumem_policy_gmt_place(&g, line, vt, 16);   // GPUMEM_PLACE_*
 *   free(per_line);
 *
 *   // 4. Prefetchers: gpumem_policy_readahead_on_miss / gpumem_policy_fdp_on_miss
 *   //    say which lines to read ahead of a miss; for GPU misses, a batch at a time:
 *   gpumem_policy_ra_batch ra;
 *   gpumem_policy_ra_batch_init(&ra, n_lines, 4096, GPUMEM_POLICY_RA_GPU_CAP);  // or _HOST_CAP
 *   gpumem_policy_ra_span spans[8];
 *   uint32_t n_spans = gpumem_policy_ra_batch_on_misses(&ra, batch, n_batch, spans, 8);  // sorts batch
 *
 *   // 5. Traces: gpumem_policy_trace_record() appends one access (device-safe),
 *   //    gpumem_policy_trace_hint() a hint record (the cache's hint calls make them),
 *   //    gpumem_policy_trace_write() saves them in the simulator's binary format.
 *
 * DESIGN
 *
 * Every policy is a struct and every hook a static inline function that
 * switches on a kind field: device code pays no indirect call, and no hook
 * allocates or prints. Memory that grows with the cache (per-slot lists,
 * per-line history) is given by the caller, sized by a *_bytes() function.
 *
 * Two families, because a cache shared by thousands of threads cannot keep an
 * exact recency list without a lock on every hit:
 *   - slot policies (CLOCK, FIFO = BaM's round robin, SRRIP, BRRIP,
 *     HINTED_RRIP = BRRIP steered by next-use hints): one
 *     word per slot changed with relaxed atomics and a fetch-add hand, so any
 *     number of threads can hit, fill and sweep at once. A candidate is only a
 *     proposal: the cache still refuses lines that are referenced or busy.
 *   - sequential policies (all of the above plus LRU, binned LFU, cyclic
 *     protection, HPE, the ObservUVM tournament and HINTED): exact data
 *     structures owned by one thread - the simulator, or a caller serialising
 *     misses. HINTED runs any other kind as its fallback, in the same struct.
 *     Slot kinds run the very same slot hooks, so the simulator measures the
 *     code the cache runs.
 * A pinned slot (pinned[slot] != 0: a referenced line, or one the caller
 * must keep) is never returned by gpumem_policy_victim.
 *
 * Constants the papers leave open are parameters in gpumem_policy_desc (or
 * the GMT/prefetch descs); the defaults and why are next to each field.
 *
 * Trace formats (what gpumem_policy_trace_write and the simulator read):
 *   binary: 8 bytes "GPMTRC01", then one little-endian uint64 per access:
 *           the line number in bits 0..62, bit 63 set for a write. So line
 *           numbers are below 2^63 in both formats: line 2^63 + k would be
 *           line k written (gpumem_policy_trace_record takes the low 63
 *           bits). A file whose length is not 8 + 8n bytes is refused.
 *           With hint records (issue 43) the magic is "GPMTRC02": a word
 *           with bit 62 clear is an access (line in bits 0..61, bit 63 the
 *           write flag), one with bit 62 set a hint record of the kind in
 *           bits 56..61 (GPUMEM_POLICY_TRACE_*: 0 nothing, 1 hint, 2 demote,
 *           3 epoch, 4 soon, 5 weight) about the line in bits 0..55; hint,
 *           epoch and soon take a second word, the epoch (below 2^63),
 *           weight its weight (below 2^63). A record of
 *           another kind, or without its epoch word, is refused. So a
 *           trace with hints names accessed lines below 2^62, hinted ones
 *           below 2^56 (the cache's lines are).
 *   text:   one access per text line: a line number in decimal (leading
 *           zeros are decimal too, never octal) or 0x-hex, below 2^63,
 *           optionally followed by " w" for a write; '#' starts a comment;
 *           or a hint record: "h LINE EPOCH" (next used at EPOCH), "s LINE
 *           EPOCH" (soon), "d LINE" (done with), "e EPOCH" (the clock),
 *           "w LINE WEIGHT" (its weight), LINE below 2^56, EPOCH and WEIGHT
 *           below 2^63.
 *           Anything else (a sign, a number of 2^63 or more, other words,
 *           a line over 254 characters) is refused.
 * The simulator refuses a malformed or empty trace, and a capacity of 0
 * lines, with a message naming the file and line (or byte offset), and
 * exits 2 before any output.
 */
#ifndef GPUMEM_POLICY_H
#define GPUMEM_POLICY_H

#include "gpumem.h"

enum {
    GPUMEM_POLICY_DEFAULT = 0,    /* zero means default: the taker's own (the cache: BRRIP, the tier: FIFO) */
    GPUMEM_POLICY_CLOCK = 1,      /* second chance */
    GPUMEM_POLICY_FIFO = 2,       /* BaM's round-robin hand (skips lines in use) */
    GPUMEM_POLICY_SRRIP = 3,      /* static re-reference interval prediction (Jaleel et al.) */
    GPUMEM_POLICY_BRRIP = 4,      /* bimodal RRIP: most fills predicted distant; the cache's default */
    GPUMEM_POLICY_HINTED_RRIP = 5, /* BRRIP whose prediction a next-use hint sets (lock-free, host or device) */
    GPUMEM_POLICY_SLOT_KINDS = 6, /* kinds below this are slot policies (the cache takes them) */
    GPUMEM_POLICY_LRU = 6,
    GPUMEM_POLICY_LFU = 7,        /* ObservUVM: frequency bins, each an LRU list */
    GPUMEM_POLICY_CP = 8,         /* ObservUVM: cyclic protection */
    GPUMEM_POLICY_HPE = 9,        /* HPE: page-set chain, classification, MRU-C / LRU */
    GPUMEM_POLICY_TOURNAMENT = 10, /* ObservUVM: LRU + LFU + CP, the one to blame retired */
    GPUMEM_POLICY_HINTED = 11,    /* the application's next-use hints (Belady on them), a fallback for the rest */
    GPUMEM_POLICY_KINDS = 12
};
/* The first real kind: loops over every policy run FIRST .. KINDS - 1. */
#define GPUMEM_POLICY_FIRST GPUMEM_POLICY_CLOCK
/* What GPUMEM_POLICY_DEFAULT is where nothing more specific says (a cache,
 * a policy description). BRRIP: in bench/policy_sim it had fewer misses than
 * CLOCK in 18 of the 24 cases (12 workloads at 50% and 75% of the
 * footprint), as many in 4 and 0.1% more on uniform random; in the graph
 * example the cache read 9-14% fewer lines for BFS, CC within 2%
 * (bench/results/policy-*). */
#define GPUMEM_POLICY_DEFAULT_KIND GPUMEM_POLICY_BRRIP

#define GPUMEM_POLICY_NONE 0xFFFFFFFFu

/* Zero memory without <string.h> (this header includes only gpumem.h). */
GPUMEM_API void gpumem__pzero(void *p, size_t n) {
    unsigned char *b = (unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) b[i] = 0;
}

/* RRIP: 2-bit re-reference prediction values (the RRIP paper's M = 2). */
#ifndef GPUMEM_POLICY_RRPV_MAX
#define GPUMEM_POLICY_RRPV_MAX 3u
#endif
/* BRRIP inserts at "long" (max - 1) once per 2^5 = 32 fills, distant otherwise
 * (the RRIP paper's epsilon = 1/32); a fill counter, not a random number, so
 * runs are reproducible. */
#ifndef GPUMEM_POLICY_BRRIP_SHIFT
#define GPUMEM_POLICY_BRRIP_SHIFT 5u
#endif

GPUMEM_API const char *gpumem_policy_name(uint32_t kind) {
    switch (kind) {
    case GPUMEM_POLICY_DEFAULT: return "default";
    case GPUMEM_POLICY_CLOCK: return "clock";
    case GPUMEM_POLICY_FIFO: return "fifo";
    case GPUMEM_POLICY_SRRIP: return "srrip";
    case GPUMEM_POLICY_BRRIP: return "brrip";
    case GPUMEM_POLICY_HINTED_RRIP: return "hinted-rrip";
    case GPUMEM_POLICY_LRU: return "lru";
    case GPUMEM_POLICY_LFU: return "lfu";
    case GPUMEM_POLICY_CP: return "cp";
    case GPUMEM_POLICY_HPE: return "hpe";
    case GPUMEM_POLICY_TOURNAMENT: return "tournament";
    case GPUMEM_POLICY_HINTED: return "hinted";
    default: return "?";
    }
}

/* Trust in hints, both hinted kinds: right hints add one (up to MAX), wrong
 * ones take TRUST_WRONG; hints decide while trust is at TRUST_USE or more. */
#ifndef GPUMEM_POLICY_TRUST_MAX
#define GPUMEM_POLICY_TRUST_MAX 64u
#endif
#ifndef GPUMEM_POLICY_TRUST_USE
#define GPUMEM_POLICY_TRUST_USE 16u
#endif
#ifndef GPUMEM_POLICY_TRUST_WRONG
#define GPUMEM_POLICY_TRUST_WRONG 4u
#endif

/* ======================================================================== */
/* 1. Slot policies (concurrent)                                            */
/* ======================================================================== */

#define GPUMEM__PSCOPE GPUMEM_SCOPE_DEVICE

/* HINTED_RRIP (issue 43): BRRIP, plus next-use hints on resident lines,
 * on the application's clock (gpumem_policy_slot_epoch). A use hint only
 * ever protects a line more than BRRIP would; a demote is the one way down:
 * next use in the current or next epoch -> RRPV 0 (kept), farther -> as
 * BRRIP has it, demoted -> 3 (evicted first). Why not "far -> 3", or a
 * middle class "a few epochs -> 2": on a loop larger than the cache every
 * true next use is equally far, and either undoes BRRIP's thrash resistance
 * (measured, 1.5x-the-slots loop: 1.47x BRRIP's misses for both). So
 * "near" must mean what the cache can hold: the application picks an epoch
 * (a BFS level, a batch) whose lines fit.
 *
 * The slot's word keeps the RRPV in bits 0..1, what the last hint said in
 * two flag bits and the low 24 bits of its epoch in bits 8..31, so that the
 * hand judges it without a lock or a word more: a line hinted far that was
 * hit (RRPV below 3, the far flag still set) while the clock is still more
 * than one epoch before the hinted use was a wrong hint, else a right one;
 * one hinted near that the hand finds at 3 with the near flag still set (a
 * hit clears it) was not used in time: wrong. Judgments move one trust word
 * (below GPUMEM_POLICY_TRUST_USE hints only set the flags, so they are
 * still judged and trust can come back), which bounds what bad hints cost
 * (tests/test_hints.c: random hints within 1.25x BRRIP's misses). Hints
 * for lines not resident wait in a small direct-mapped table for their
 * fill (gpumem_policy_slot_hint_later; a collision keeps the newer). */
#define GPUMEM__SLOT_RRPV 3u       /* the word's RRPV bits */
#define GPUMEM__SLOT_HINT_FAR 4u   /* hinted far, or demoted (with NEAR too), not yet judged */
#define GPUMEM__SLOT_HINT_NEAR 8u  /* hinted near, not yet used */
#define GPUMEM__SLOT_EPOCH_SHIFT 8u /* bits 8..31: the hinted epoch, mod 2^24 */
#define GPUMEM__SLOT_EPOCH_MASK 0xFFFFFFu

#ifndef GPUMEM_POLICY_SLOT_PENDING
#define GPUMEM_POLICY_SLOT_PENDING 1024u /* pending hints kept (a power of two; 8 KiB) */
#endif
#define GPUMEM__PEND_LINE_BITS 39u

/* The hinted slot kind's shared state: the clock and the trust in hints.
 * All words are changed with relaxed atomics: they steer replacement only,
 * no data is published through them, so a stale value costs a choice. */
typedef struct gpumem_policy_slot_hints {
    uint64_t epoch;       /* the application's clock; only moves forward */
    uint32_t trust;       /* 0 .. GPUMEM_POLICY_TRUST_MAX */
    uint32_t right, wrong; /* hints judged so far */
    uint32_t applied;     /* hints that set an RRPV (trusted at the time) */
    uint32_t pad_;
    /* Hints for lines not resident, applied at their fill: direct-mapped on
     * the line, a newer hint replaces an older one (advice: what is lost is
     * a choice). Each word: line + 1 in bits 0..38 (0: empty), demote in bit
     * 39, the hinted epoch mod 2^24 in bits 40..63. */
    uint64_t pending[GPUMEM_POLICY_SLOT_PENDING];
} gpumem_policy_slot_hints;

GPUMEM_API void gpumem_policy_slot_hints_init(gpumem_policy_slot_hints *h) {
    if (!h) return;
    gpumem__pzero(h, sizeof *h);
    h->trust = GPUMEM_POLICY_TRUST_MAX / 2; /* trusted until proven wrong, as the sequential kind */
}

/* A hit on the slot whose word is w. The load first: most hits find the word
 * already at its hit value and write nothing, so hot slots are not bounced
 * between caches. HINTED_RRIP's hit keeps the far flag and its epoch (the
 * hand judges them later) and clears the near flag (that hint came true). */
GPUMEM_API void gpumem_policy_slot_hit(uint32_t kind, uint32_t *w) {
    if (!w) return;
    uint32_t v, want = kind == GPUMEM_POLICY_CLOCK ? 1u : 0u;
    if (kind == GPUMEM_POLICY_FIFO) return;
    v = gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    if (kind == GPUMEM_POLICY_HINTED_RRIP) want = v & ~(GPUMEM__SLOT_RRPV | GPUMEM__SLOT_HINT_NEAR);
    if (v != want) gpumem_atomic_store_u32(w, want, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
}

/* A line placed in the slot whose word is w. `fills` is a shared counter
 * (BRRIP's bimodal throttle). CLOCK gives new lines their reference bit, as
 * BaM does, so a line just filled survives one pass of the hand. A fill
 * clears the hint flags: they were about the line evicted. */
GPUMEM_API void gpumem_policy_slot_fill(uint32_t kind, uint32_t *w, uint32_t *fills) {
    if (!w || !fills) return;
    uint32_t v = 0;
    if (kind == GPUMEM_POLICY_CLOCK) v = 1;
    else if (kind == GPUMEM_POLICY_SRRIP) v = GPUMEM_POLICY_RRPV_MAX - 1;
    else if (kind == GPUMEM_POLICY_BRRIP || kind == GPUMEM_POLICY_HINTED_RRIP) {
        uint32_t n = gpumem_atomic_fetch_add_u32(fills, 1, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
        v = (n & ((1u << GPUMEM_POLICY_BRRIP_SHIFT) - 1)) == 0 ? GPUMEM_POLICY_RRPV_MAX - 1 : GPUMEM_POLICY_RRPV_MAX;
    }
    gpumem_atomic_store_u32(w, v, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
}

/* The next slot the hand points at. A fetch-add hand gives concurrent
 * evictors distinct slots. */
GPUMEM_API uint32_t gpumem_policy_slot_next(uint32_t *hand, uint32_t n) {
    if (!hand || n == 0) return 0;
    return gpumem_atomic_fetch_add_u32(hand, 1, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE) % n;
}

/* One hint judged: counted, and trust moved by one compare-and-swap. A CAS
 * lost to another judgment drops this one (never a loop on a hot word):
 * trust is a rate, a lost vote does not change which way it goes. */
GPUMEM_API void gpumem__slot_judge(gpumem_policy_slot_hints *h, int right) {
    uint32_t t = gpumem_atomic_load_u32(&h->trust, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE), to;
    gpumem_atomic_fetch_add_u32(right ? &h->right : &h->wrong, 1, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    if (right) to = t < GPUMEM_POLICY_TRUST_MAX ? t + 1 : t;
    else to = t > GPUMEM_POLICY_TRUST_WRONG ? t - GPUMEM_POLICY_TRUST_WRONG : 0;
    if (to != t) gpumem_atomic_cas_u32(&h->trust, &t, to, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
}

/* Whether the slot whose word is w, just reached by the hand, is a
 * candidate (1) or is passed over this time (0): CLOCK clears a set
 * reference bit (second chance), RRIP ages a slot not yet at the distant
 * value (the RRIP paper's "increment all", spread over the hand's steps).
 * HINTED_RRIP also judges the slot's hint (h: its kind's state; NULL: not
 * judged), see above. */
GPUMEM_API int gpumem_policy_slot_consider_hinted(uint32_t kind, uint32_t *w, gpumem_policy_slot_hints *h) {
    if (!w) return 0;
    uint32_t v, rrpv, keep = 0;
    if (kind == GPUMEM_POLICY_FIFO) return 1;
    v = gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    if (kind == GPUMEM_POLICY_CLOCK) {
        if (v == 0) return 1;
        gpumem_atomic_store_u32(w, 0, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
        return 0;
    }
    rrpv = v & GPUMEM__SLOT_RRPV;
    if (kind == GPUMEM_POLICY_HINTED_RRIP && h && (v & (GPUMEM__SLOT_HINT_FAR | GPUMEM__SLOT_HINT_NEAR))) {
        if (rrpv >= GPUMEM_POLICY_RRPV_MAX) { /* unused since the hint: right if far, wrong if near */
            gpumem__slot_judge(h, (v & GPUMEM__SLOT_HINT_FAR) != 0);
            return 1; /* the fill clears the word */
        }
        if (v & GPUMEM__SLOT_HINT_FAR) { /* hit since: wrong while the hinted epoch is over one away */
            uint32_t now = (uint32_t)gpumem_atomic_load_u64(&h->epoch, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
            uint32_t ahead = ((v >> GPUMEM__SLOT_EPOCH_SHIFT) - now) & GPUMEM__SLOT_EPOCH_MASK;
            gpumem__slot_judge(h, !(ahead > 1 && ahead < (GPUMEM__SLOT_EPOCH_MASK >> 1)));
        } else {
            keep = v & ~GPUMEM__SLOT_RRPV; /* near, not yet used: judged if it reaches 3 */
        }
    }
    if (rrpv >= GPUMEM_POLICY_RRPV_MAX) return 1;
    gpumem_atomic_store_u32(w, (rrpv + 1) | keep, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    return 0;
}

GPUMEM_API int gpumem_policy_slot_consider(uint32_t kind, uint32_t *w) {
    return gpumem_policy_slot_consider_hinted(kind, w, NULL);
}

/* Steps in which every slot is sure to have been proposed once (CLOCK may
 * pass a slot twice, RRIP up to RRPV_MAX + 1 times). */
GPUMEM_API uint32_t gpumem_policy_slot_sweep_len(uint32_t kind, uint32_t n) {
    if (kind == GPUMEM_POLICY_CLOCK) return 2 * n;
    if (kind == GPUMEM_POLICY_SRRIP || kind == GPUMEM_POLICY_BRRIP || kind == GPUMEM_POLICY_HINTED_RRIP)
        return (GPUMEM_POLICY_RRPV_MAX + 1) * n;
    return n;
}

/* The clock is at `epoch` now (HINTED_RRIP): a compare-and-swap maximum, so
 * a thread behind the others changes nothing. Lock-free: a failed CAS means
 * another thread moved the clock. EOVERFLOW for GPUMEM_POLICY_UNHINTED's
 * value (as the sequential kind). */
GPUMEM_API gpumem_status gpumem_policy_slot_epoch(gpumem_policy_slot_hints *h, uint64_t epoch) {
    uint64_t e;
    if (!h) return GPUMEM_ENULL;
    if (epoch == UINT64_MAX) return GPUMEM_EOVERFLOW;
    e = gpumem_atomic_load_u64(&h->epoch, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    while (epoch > e &&
           !gpumem_atomic_cas_u64(&h->epoch, &e, epoch, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE)) {
    }
    return GPUMEM_OK;
}

/* A hint on the resident line whose slot word is w (HINTED_RRIP): its next
 * use is at epoch `when`, or (demote) it is done with. Trusted, the RRPV is
 * set from the distance; distrusted, only the flag, so the hint is judged
 * all the same. ERANGE: `when` is behind the clock (or UINT64_MAX). The
 * caller found the slot without a lock: if its line has changed since, the
 * hint steers another line's eviction, never a read. */
GPUMEM_API gpumem_status gpumem_policy_slot_hint(gpumem_policy_slot_hints *h, uint32_t *w, uint64_t when, int demote) {
    uint64_t e;
    uint32_t v, rrpv, flag;
    if (!h || !w) return GPUMEM_ENULL;
    e = gpumem_atomic_load_u64(&h->epoch, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    if (!demote && (when < e || when == UINT64_MAX)) return GPUMEM_ERANGE;
    v = gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    rrpv = v & GPUMEM__SLOT_RRPV;
    /* A demote sets both flags: told apart from a far hint whose epoch has come */
    if (demote) when = e, rrpv = GPUMEM_POLICY_RRPV_MAX, flag = GPUMEM__SLOT_HINT_FAR | GPUMEM__SLOT_HINT_NEAR;
    else if (when - e > 1) flag = GPUMEM__SLOT_HINT_FAR;
    else rrpv = 0, flag = GPUMEM__SLOT_HINT_NEAR;
    if (gpumem_atomic_load_u32(&h->trust, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE) < GPUMEM_POLICY_TRUST_USE)
        rrpv = v & GPUMEM__SLOT_RRPV; /* distrusted: judged, not applied */
    else
        gpumem_atomic_fetch_add_u32(&h->applied, 1, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    /* A plain store: a hit or a fill racing with it may be lost or may win;
     * either is a replacement choice only. */
    gpumem_atomic_store_u32(w, rrpv | flag | (uint32_t)(when & GPUMEM__SLOT_EPOCH_MASK) << GPUMEM__SLOT_EPOCH_SHIFT,
                            GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    return GPUMEM_OK;
}

/* Where a line's pending hint lives (a Fibonacci hash of the line). */
GPUMEM_API uint64_t *gpumem__slot_pending_at(gpumem_policy_slot_hints *h, uint64_t line) {
    return &h->pending[((line * 0x9E3779B97F4A7C15ull) >> 32) & (GPUMEM_POLICY_SLOT_PENDING - 1)];
}

/* A hint for a line not resident (HINTED_RRIP): kept for its fill. ERANGE
 * as gpumem_policy_slot_hint; a line past 2^39 - 1 is not kept (dropped). */
GPUMEM_API gpumem_status gpumem_policy_slot_hint_later(gpumem_policy_slot_hints *h, uint64_t line, uint64_t when,
                                                       int demote) {
    uint64_t e;
    if (!h) return GPUMEM_ENULL;
    e = gpumem_atomic_load_u64(&h->epoch, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    if (!demote && (when < e || when == UINT64_MAX)) return GPUMEM_ERANGE;
    if (line + 1 >= 1ull << GPUMEM__PEND_LINE_BITS) return GPUMEM_OK;
    gpumem_atomic_store_u64(gpumem__slot_pending_at(h, line),
                            (line + 1) | (uint64_t)(demote != 0) << GPUMEM__PEND_LINE_BITS |
                                ((demote ? e : when) & GPUMEM__SLOT_EPOCH_MASK) << (GPUMEM__PEND_LINE_BITS + 1),
                            GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    return GPUMEM_OK;
}

/* A hint's epoch as a slot word or a pending entry keeps it (mod 2^24),
 * read against the clock: the epoch, or UINT64_MAX when it lies behind the
 * clock (up to half the range back: a stale word costs a choice, no more). */
GPUMEM_API uint64_t gpumem__slot_epoch_of(gpumem_policy_slot_hints *h, uint32_t stored) {
    const uint64_t now = gpumem_atomic_load_u64(&h->epoch, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    const uint32_t ahead = (stored - (uint32_t)now) & GPUMEM__SLOT_EPOCH_MASK;
    return ahead < (GPUMEM__SLOT_EPOCH_MASK >> 1) ? now + ahead : UINT64_MAX;
}

/* A line placed in the slot whose word is w: the kind's fill, then, for
 * HINTED_RRIP, the line's pending hint if one is kept (taken by a CAS, so
 * two fills of one line apply it once; one whose epoch has passed is
 * dropped). Off the hit path: a miss's fill. */
GPUMEM_API void gpumem_policy_slot_fill_hinted(uint32_t kind, uint32_t *w, uint32_t *fills,
                                               gpumem_policy_slot_hints *h, uint64_t line) {
    uint64_t *at, p, when;
    gpumem_policy_slot_fill(kind, w, fills);
    if (kind != GPUMEM_POLICY_HINTED_RRIP || !h || !w) return;
    at = gpumem__slot_pending_at(h, line);
    p = gpumem_atomic_load_u64(at, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    if ((p & ((1ull << GPUMEM__PEND_LINE_BITS) - 1)) != line + 1 ||
        !gpumem_atomic_cas_u64(at, &p, 0, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE))
        return;
    if (p >> GPUMEM__PEND_LINE_BITS & 1) {
        (void)gpumem_policy_slot_hint(h, w, 0, 1);
        return;
    }
    when = gpumem__slot_epoch_of(h, (uint32_t)(p >> (GPUMEM__PEND_LINE_BITS + 1)));
    if (when != UINT64_MAX) (void)gpumem_policy_slot_hint(h, w, when, 0);
}

/* The epoch of the pending hint kept for `line` (not resident,
 * HINTED_RRIP), or UINT64_MAX: none kept for it, a demote, or passed. */
GPUMEM_API uint64_t gpumem_policy_slot_pending_next_use(gpumem_policy_slot_hints *h, uint64_t line) {
    uint64_t p;
    if (!h || line + 1 >= 1ull << GPUMEM__PEND_LINE_BITS) return UINT64_MAX;
    p = gpumem_atomic_load_u64(gpumem__slot_pending_at(h, line), GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE);
    if ((p & ((1ull << GPUMEM__PEND_LINE_BITS) - 1)) != line + 1 || (p >> GPUMEM__PEND_LINE_BITS & 1))
        return UINT64_MAX;
    return gpumem__slot_epoch_of(h, (uint32_t)(p >> (GPUMEM__PEND_LINE_BITS + 1)));
}

/* The hinted next use of the line whose slot word is w (HINTED_RRIP), for
 * a prefetch that must not evict a line needed sooner than its own
 * (gpumem_cache_prefetch): the hinted epoch, or UINT64_MAX
 * (GPUMEM_POLICY_UNHINTED) for a line with no hint standing: none, one
 * already met (a hit clears the near flag), one whose epoch has passed, or
 * a demote (both flags). The word holds the
 * epoch mod 2^24, read against the clock: a stale word costs a choice. */
GPUMEM_API uint64_t gpumem_policy_slot_next_use(gpumem_policy_slot_hints *h, uint32_t w) {
    if (!h || !(w & (GPUMEM__SLOT_HINT_FAR | GPUMEM__SLOT_HINT_NEAR))) return UINT64_MAX;
    if ((w & GPUMEM__SLOT_HINT_FAR) && (w & GPUMEM__SLOT_HINT_NEAR)) return UINT64_MAX; /* demoted */
    return gpumem__slot_epoch_of(h, w >> GPUMEM__SLOT_EPOCH_SHIFT);
}

/* ======================================================================== */
/* 2. Sequential policies                                                   */
/* ======================================================================== */

/* Parameters. Defaults from the papers where they give one. Zero means
 * default for every field but n_slots (gpumem_policy_desc_resolved shows
 * what a description resolves to). */
typedef struct gpumem_policy_desc {
    uint32_t kind;
    uint32_t n_slots;
    /* HPE (the HPE paper, §7) */
    uint32_t hpe_set_shift;    /* lines per page set = 2^shift; paper: 16 pages (4) */
    uint32_t hpe_interval;     /* faults per interval; paper: 64 */
    uint32_t hpe_counter_max;  /* touch counter saturation; paper: 64 = 4 x set size */
    uint32_t hpe_ratio1_pct;   /* irregular/regular counters above this: irregular#2; paper: 0.3 */
    uint32_t hpe_ratio2;       /* large/small regular counters at or above this: irregular#1; paper: 2 */
    uint32_t hpe_fifo;         /* wrong-eviction FIFO depth; paper: 128 (two intervals) */
    uint32_t hpe_trigger;      /* wrong evictions per interval that trigger an adjustment; paper: 16 */
    uint32_t hpe_jump;         /* MRU-C search-point jump in sets; paper: 16 */
    uint32_t hpe_min_old;      /* old-partition sets at first-full for a regular app to adjust; paper: 64 */
    uint32_t hpe_scan;         /* ours: MRU-C looks at most this many sets (the paper's scan stops early
                                  on regular apps; a bound keeps a miss O(1) on the others) */
    /* ObservUVM (the ObservUVM paper, §5) */
    uint32_t lfu_bins;         /* frequency bins (not given; 16: frequencies above 15 rarely matter) */
    uint32_t cp_protect_pct;   /* initial protected share of the slots (not given: 50%) */
    uint32_t cp_min_pct, cp_max_pct; /* bounds of the protected share (ours: 10%..90%) */
    uint32_t tm_blame;         /* blame points before a retirement round (T, not given: 64) */
    uint32_t tm_share_pct;     /* retire above this % of the mean blame share; paper: 120 */
    /* HINTED (section 2b) */
    uint32_t hint_fallback;    /* the kind for unhinted lines, and for all while hints are distrusted;
                                  any kind but HINTED (default: GPUMEM_POLICY_DEFAULT_KIND) */
    uint32_t hint_slack;       /* epochs a use may come before or after its hint and still prove it right
                                  (0: exact; an application that advances its epoch per chunk of work
                                  gives the chunks in flight) */
    uint32_t hint_lines;       /* lines whose hints the pending table holds while they are not cached
                                  (default 2 x n_slots; the lines hinted at once, up to the data's, lose none:
                                  a collision keeps the sooner hint) */
} gpumem_policy_desc;

/* Zero means default: every field set to 0 is given the default next to
 * it (the kind too: GPUMEM_POLICY_DEFAULT_KIND), and this is what
 * gpumem_policy_init and gpumem_policy_bytes use. A way to see the values
 * a description resolves to (a NULL one resolves as all zero). */
GPUMEM_API gpumem_policy_desc gpumem_policy_desc_resolved(const gpumem_policy_desc *in) {
    gpumem_policy_desc d;
    gpumem__pzero(&d, sizeof d);
    if (in) d = *in;
    if (d.kind == GPUMEM_POLICY_DEFAULT) d.kind = GPUMEM_POLICY_DEFAULT_KIND;
    if (!d.hpe_set_shift) d.hpe_set_shift = 4;
    if (!d.hpe_interval) d.hpe_interval = 64;
    if (!d.hpe_counter_max) d.hpe_counter_max = 64;
    if (!d.hpe_ratio1_pct) d.hpe_ratio1_pct = 30;
    if (!d.hpe_ratio2) d.hpe_ratio2 = 2;
    if (!d.hpe_fifo) d.hpe_fifo = 128;
    if (!d.hpe_trigger) d.hpe_trigger = 16;
    if (!d.hpe_jump) d.hpe_jump = 16;
    if (!d.hpe_min_old) d.hpe_min_old = 64;
    if (!d.hpe_scan) d.hpe_scan = 256;
    if (!d.lfu_bins) d.lfu_bins = 16;
    if (!d.cp_protect_pct) d.cp_protect_pct = 50;
    if (!d.cp_min_pct) d.cp_min_pct = 10;
    if (!d.cp_max_pct) d.cp_max_pct = 90;
    if (!d.tm_blame) d.tm_blame = 64;
    if (!d.tm_share_pct) d.tm_share_pct = 120;
    if (d.hint_fallback == GPUMEM_POLICY_DEFAULT) d.hint_fallback = GPUMEM_POLICY_DEFAULT_KIND;
    if (!d.hint_lines) d.hint_lines = d.n_slots <= UINT32_MAX / 2 ? 2 * d.n_slots : d.n_slots;
    return d;
}

/* A description of `kind` for n_slots slots, every other field its default
 * (the same as gpumem_policy_desc_resolved of a zeroed one). */
GPUMEM_API gpumem_policy_desc gpumem_policy_desc_default(uint32_t kind, uint32_t n_slots) {
    gpumem_policy_desc d;
    gpumem__pzero(&d, sizeof d);
    d.kind = kind;
    d.n_slots = n_slots;
    return gpumem_policy_desc_resolved(&d);
}

/* ---- intrusive doubly linked lists over node indices ------------------------ */

typedef struct gpumem__plist {
    uint32_t head, tail; /* head: oldest */
} gpumem__plist;

GPUMEM_API void gpumem__plist_clear(gpumem__plist *l) { l->head = l->tail = GPUMEM_POLICY_NONE; }

GPUMEM_API void gpumem__plist_append(gpumem__plist *l, uint32_t *prev, uint32_t *next, uint32_t x) {
    prev[x] = l->tail;
    next[x] = GPUMEM_POLICY_NONE;
    if (l->tail != GPUMEM_POLICY_NONE) next[l->tail] = x;
    else l->head = x;
    l->tail = x;
}

GPUMEM_API void gpumem__plist_remove(gpumem__plist *l, uint32_t *prev, uint32_t *next, uint32_t x) {
    if (prev[x] != GPUMEM_POLICY_NONE) next[prev[x]] = next[x];
    else l->head = next[x];
    if (next[x] != GPUMEM_POLICY_NONE) prev[next[x]] = prev[x];
    else l->tail = prev[x];
    prev[x] = next[x] = GPUMEM_POLICY_NONE;
}

/* First node from `x` towards the tail (dir 0) or the head (dir 1) that is
 * not pinned. */
GPUMEM_API uint32_t gpumem__plist_first_free(const uint32_t *step, uint32_t x, const uint8_t *pinned) {
    while (x != GPUMEM_POLICY_NONE && pinned && pinned[x]) x = step[x];
    return x;
}

/* ---- per-kind state ------------------------------------------------------ */

typedef struct gpumem__pslot { /* CLOCK, FIFO, SRRIP, BRRIP, HINTED_RRIP */
    uint32_t *words;
    uint32_t hand, fills;
    gpumem_policy_slot_hints *hints; /* HINTED_RRIP's clock, trust and pending hints; else NULL */
} gpumem__pslot;

typedef struct gpumem__plru {
    uint32_t *prev, *next;
    gpumem__plist l;
} gpumem__plru;

typedef struct gpumem__plfu {
    uint32_t *prev, *next;
    uint8_t *freq;
    gpumem__plist *bins;
    uint32_t n_bins;
} gpumem__plfu;

/* Cyclic protection: slots in fill order; the oldest `protect` are kept for
 * good (they stay across a loop's laps), the others age through a FIFO window
 * and leave at its old end, the boundary S. Adapting the split (ObservUVM
 * §5.3, full-hit model): a hit on the line at the boundary means the window
 * is too small (grow it); a boundary line evicted never hit since its fill
 * means lines expire unused (shrink it). */
typedef struct gpumem__pcp {
    uint32_t *prev, *next;
    uint8_t *prot, *used;
    gpumem__plist l;
    uint32_t boundary; /* first unprotected node, or NONE */
    uint32_t n_prot, protect, lo, hi;
} gpumem__pcp;

/* HPE's page set. */
typedef struct gpumem__pset {
    uint64_t tag;
    uint32_t prev, next;
    uint32_t interval;  /* last interval it moved to the new partition */
    uint32_t counter;   /* saturating touches */
    uint32_t resident;  /* bit per line of the set in a slot */
    uint32_t n_res;
} gpumem__pset;

enum { GPUMEM_HPE_UNCLASSIFIED = 0, GPUMEM_HPE_REGULAR = 1, GPUMEM_HPE_IRREGULAR1 = 2, GPUMEM_HPE_IRREGULAR2 = 3 };
enum { GPUMEM_HPE_LRU = 0, GPUMEM_HPE_MRUC = 1 };

typedef struct gpumem__phpe {
    gpumem__pset *sets;    /* n_slots entries (a resident set has >= 1 line in a slot) */
    uint32_t *set_slots;   /* n_slots x 2^shift: slot of each line of a set */
    uint32_t *index;       /* open-addressing table of set indices, 2^index_bits */
    uint32_t *set_of_slot; /* set entry holding slot's line */
    uint64_t *fifo[2];     /* recently evicted lines, per strategy */
    gpumem__plist chain;   /* head: LRU end */
    uint32_t free_set, index_mask, n_sets;
    uint32_t p1, p2;       /* first set of the middle / new partitions (NONE: empty) */
    uint32_t cur, faults;  /* interval number, faults in it */
    uint32_t cls, strategy, adjust, jump;
    uint32_t wrong[2], fifo_at[2];
    uint32_t run, last_run[2]; /* intervals the current strategy has run; the last run of each */
    uint32_t victim;       /* set being drained, or NONE */
    uint32_t full;         /* memory has been full (classification done) */
    uint32_t fill_count;
} gpumem__phpe;

typedef struct gpumem__ptm {
    uint32_t active;   /* bit per member: LRU 1, LFU 2, CP 4 */
    uint32_t rr;       /* round-robin position */
    uint32_t blame[3], blame_sum;
    uint64_t *ghost_tag;    /* ghost map of evicted lines: the line ... */
    uint8_t *ghost_who;     /* ... and the member that chose it (0: none) */
} gpumem__ptm;

/* An indexed binary max-heap of items (slots, or lines) on a 64-bit key:
 * a changed key moves one entry, O(log n). HINTED's hinted slots, and
 * Belady's OPT in bench/policy_sim.h. Memory from the caller. */
typedef struct gpumem__pheap {
    uint64_t *key; /* per position */
    uint32_t *item; /* per position */
    uint32_t *pos; /* per item: its position, or GPUMEM_POLICY_NONE */
    uint32_t n;
} gpumem__pheap;

GPUMEM_API void gpumem__pheap_swap(gpumem__pheap *h, uint32_t a, uint32_t b) {
    uint64_t k = h->key[a];
    uint32_t x = h->item[a];
    h->key[a] = h->key[b];
    h->item[a] = h->item[b];
    h->key[b] = k;
    h->item[b] = x;
    h->pos[h->item[a]] = a;
    h->pos[h->item[b]] = b;
}

GPUMEM_API void gpumem__pheap_sift(gpumem__pheap *h, uint32_t i) {
    while (i > 0 && h->key[(i - 1) / 2] < h->key[i]) {
        gpumem__pheap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->key[l] > h->key[m]) m = l;
        if (r < h->n && h->key[r] > h->key[m]) m = r;
        if (m == i) return;
        gpumem__pheap_swap(h, i, m);
        i = m;
    }
}

/* Put `item` in the heap with `key`, or move it there. */
GPUMEM_API void gpumem__pheap_set(gpumem__pheap *h, uint32_t item, uint64_t key) {
    uint32_t i = h->pos[item];
    if (i == GPUMEM_POLICY_NONE) {
        i = h->n++;
        h->item[i] = item;
        h->pos[item] = i;
    }
    h->key[i] = key;
    gpumem__pheap_sift(h, i);
}

GPUMEM_API void gpumem__pheap_remove(gpumem__pheap *h, uint32_t item) {
    uint32_t i = h->pos[item], last;
    if (i == GPUMEM_POLICY_NONE) return;
    last = --h->n;
    if (i != last) {
        gpumem__pheap_swap(h, i, last);
        h->pos[item] = GPUMEM_POLICY_NONE;
        gpumem__pheap_sift(h, i);
    }
    h->pos[item] = GPUMEM_POLICY_NONE;
}

/* HINTED: the application's next uses (section 2b). Per slot its hinted next
 * use and the one after (a line shared by two hinted uses keeps both), a
 * max-heap of the hinted slots on their next use, a list of the demoted
 * ones, and a heap of the weighted ones with no hint standing (lightest on
 * top); hints and weights for lines not resident wait in a pending table. */
typedef struct gpumem__phint {
    uint64_t *w1, *w2;        /* per slot: hinted next use and the one after; GPUMEM_POLICY_UNHINTED: none */
    gpumem__pheap heap;       /* the hinted slots, not demoted, keyed on w1 */
    uint32_t *dprev, *dnext;  /* the demoted list */
    uint8_t *held;            /* per slot: hinted or demoted (kept from the fallback's choice) */
    uint64_t *weight;         /* per slot: the application's weight of its line (0: none) */
    gpumem__pheap wheap;      /* the weighted slots not held, keyed on UINT64_MAX - weight */
    uint8_t *wheld;           /* per slot: held or weighted (kept from the fallback while weights are trusted) */
    uint8_t *mask;            /* scratch: held or pinned by the caller */
    uint8_t *demoted;         /* per slot: on the demoted list */
    uint8_t *met;             /* per slot: w1 has seen its use (the line's next use is w1 again or w2) */
    uint64_t *ptag, *pw1, *pw2; /* pending hints of lines not resident: line + 1 (0: empty), w1, w2 */
    uint64_t *pweight, *pgone;  /* and weight; a weighted line evicted: 1 + the fill count then, bit 63 if by the
                                 * fallback (GPUMEM__GONE_FALLBACK); 0: not measured */
    uint8_t *pmet;
    gpumem__plist dlist;
    uint32_t pmask, n_held, n_wheld, since_sweep;
    uint8_t *arm;             /* per slot, as the last victim call that named it: GPUMEM__ARM_* */
    uint64_t epoch, fills, decisions;
    uint32_t trust;           /* 0 .. GPUMEM_POLICY_TRUST_MAX; hints decide while >= GPUMEM_POLICY_TRUST_USE */
    uint64_t right, wrong, hinted_victims, fallback_victims; /* what the hints proved, who chose */
    /* Weights against the fallback: weighted lines each evicted, and of them those back within a cache's worth of
     * fills (halved as they grow: a recent rate) */
    uint64_t weight_out, weight_back, fallback_out, fallback_back;
    uint64_t weight_victims;  /* victims the lightest */
} gpumem__phint;

typedef struct gpumem_policy {
    gpumem_policy_desc d;
    gpumem__pslot slot;
    gpumem__plru lru;
    gpumem__plfu lfu;
    gpumem__pcp cp;
    gpumem__phpe hpe;
    gpumem__ptm tm;
    gpumem__phint hint;
    uint64_t *line_of; /* line in each slot, as on_fill last said */
    uint8_t *pin;      /* a pinned-slot array for a caller without its own (the cache: slots it found in use) */
    uint32_t n_pin;    /* how many of pin[] are set */
    uint64_t evictions;
} gpumem_policy;

/* Tournament blame needs to know which member evicted a line when it comes
 * back. A small ghost table (hash of line -> member), GPUMEM_POLICY_GHOSTS
 * entries per slot, overwritten on collision: blame may be lost, never
 * misassigned to a line that was not evicted (the tag is checked). */
#ifndef GPUMEM_POLICY_GHOSTS
#define GPUMEM_POLICY_GHOSTS 2u
#endif

GPUMEM_API uint32_t gpumem__pow2_at_least(uint32_t x) {
    uint32_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

/* Bytes of caller memory for gpumem_policy_init. */
GPUMEM_API size_t gpumem__policy_layout(const gpumem_policy_desc *d, gpumem_policy *p, unsigned char *m) {
    size_t at = 0, n = d->n_slots;
    uint32_t k = d->kind == GPUMEM_POLICY_HINTED ? d->hint_fallback : d->kind, set_lines = 1u << d->hpe_set_shift;
    uint32_t idx = gpumem__pow2_at_least(2 * d->n_slots + 2);
#define GPUMEM__TAKE(field, type, count)                                                             \
    do {                                                                                          \
        at = GPUMEM_ALIGN_UP(at, 8);                                                              \
        if (p) field = (type *)(void *)(m + at);                                                  \
        at += sizeof(type) * (size_t)(count);                                                     \
    } while (0)
    if (k < GPUMEM_POLICY_SLOT_KINDS) GPUMEM__TAKE(p->slot.words, uint32_t, n);
    if (k == GPUMEM_POLICY_HINTED_RRIP) GPUMEM__TAKE(p->slot.hints, gpumem_policy_slot_hints, 1);
    if (k == GPUMEM_POLICY_LRU || k == GPUMEM_POLICY_TOURNAMENT) {
        GPUMEM__TAKE(p->lru.prev, uint32_t, n);
        GPUMEM__TAKE(p->lru.next, uint32_t, n);
    }
    if (k == GPUMEM_POLICY_LFU || k == GPUMEM_POLICY_TOURNAMENT) {
        GPUMEM__TAKE(p->lfu.prev, uint32_t, n);
        GPUMEM__TAKE(p->lfu.next, uint32_t, n);
        GPUMEM__TAKE(p->lfu.freq, uint8_t, n);
        GPUMEM__TAKE(p->lfu.bins, gpumem__plist, d->lfu_bins);
    }
    if (k == GPUMEM_POLICY_CP || k == GPUMEM_POLICY_TOURNAMENT) {
        GPUMEM__TAKE(p->cp.prev, uint32_t, n);
        GPUMEM__TAKE(p->cp.next, uint32_t, n);
        GPUMEM__TAKE(p->cp.prot, uint8_t, n);
        GPUMEM__TAKE(p->cp.used, uint8_t, n);
    }
    if (k == GPUMEM_POLICY_HPE) {
        GPUMEM__TAKE(p->hpe.sets, gpumem__pset, n);
        GPUMEM__TAKE(p->hpe.set_slots, uint32_t, n * set_lines);
        GPUMEM__TAKE(p->hpe.index, uint32_t, idx);
        GPUMEM__TAKE(p->hpe.set_of_slot, uint32_t, n);
        GPUMEM__TAKE(p->hpe.fifo[0], uint64_t, d->hpe_fifo);
        GPUMEM__TAKE(p->hpe.fifo[1], uint64_t, d->hpe_fifo);
    }
    if (k == GPUMEM_POLICY_TOURNAMENT) {
        GPUMEM__TAKE(p->tm.ghost_tag, uint64_t, n * GPUMEM_POLICY_GHOSTS);
        GPUMEM__TAKE(p->tm.ghost_who, uint8_t, n * GPUMEM_POLICY_GHOSTS);
    }
    if (d->kind == GPUMEM_POLICY_HINTED) { /* the fallback's state above, the hints' here */
        uint32_t pend = gpumem__pow2_at_least(d->hint_lines > (1u << 31) ? (1u << 31) : d->hint_lines);
        GPUMEM__TAKE(p->hint.w1, uint64_t, n);
        GPUMEM__TAKE(p->hint.w2, uint64_t, n);
#define GPUMEM__TAKE_HEAP(hp)                   \
    do {                                        \
        GPUMEM__TAKE((hp).key, uint64_t, n);    \
        GPUMEM__TAKE((hp).item, uint32_t, n);   \
        GPUMEM__TAKE((hp).pos, uint32_t, n);    \
    } while (0)
        GPUMEM__TAKE_HEAP(p->hint.heap);
        GPUMEM__TAKE(p->hint.dprev, uint32_t, n);
        GPUMEM__TAKE(p->hint.dnext, uint32_t, n);
        GPUMEM__TAKE(p->hint.held, uint8_t, n);
        GPUMEM__TAKE(p->hint.weight, uint64_t, n);
        GPUMEM__TAKE_HEAP(p->hint.wheap);
        GPUMEM__TAKE(p->hint.wheld, uint8_t, n);
        GPUMEM__TAKE(p->hint.arm, uint8_t, n);
        GPUMEM__TAKE(p->hint.mask, uint8_t, n);
        GPUMEM__TAKE(p->hint.demoted, uint8_t, n);
        GPUMEM__TAKE(p->hint.met, uint8_t, n);
        GPUMEM__TAKE(p->hint.ptag, uint64_t, pend);
        GPUMEM__TAKE(p->hint.pw1, uint64_t, pend);
        GPUMEM__TAKE(p->hint.pw2, uint64_t, pend);
        GPUMEM__TAKE(p->hint.pweight, uint64_t, pend);
        GPUMEM__TAKE(p->hint.pgone, uint64_t, pend);
        GPUMEM__TAKE(p->hint.pmet, uint8_t, pend);
        if (p) p->hint.pmask = pend - 1;
    }
    GPUMEM__TAKE(p->line_of, uint64_t, n); /* every kind: a caller may need the line a slot holds */
    GPUMEM__TAKE(p->pin, uint8_t, n);
#undef GPUMEM__TAKE_HEAP
#undef GPUMEM__TAKE
    if (p) p->hpe.index_mask = idx - 1;
    return at;
}

GPUMEM_API size_t gpumem_policy_bytes(const gpumem_policy_desc *in) {
    gpumem_policy_desc d;
    if (!in) return 0;
    d = gpumem_policy_desc_resolved(in);
    return gpumem__policy_layout(&d, (gpumem_policy *)0, (unsigned char *)0);
}

/* ---- LRU -------------------------------------------------------------------- */

GPUMEM_API void gpumem__lru_touch(gpumem__plru *s, uint32_t k) {
    gpumem__plist_remove(&s->l, s->prev, s->next, k);
    gpumem__plist_append(&s->l, s->prev, s->next, k);
}

GPUMEM_API uint32_t gpumem__lru_victim(gpumem__plru *s, const uint8_t *pinned) {
    return gpumem__plist_first_free(s->next, s->l.head, pinned);
}

/* ---- LFU (frequency bins, each in LRU order) -------------------------------- */

GPUMEM_API void gpumem__lfu_put(gpumem__plfu *s, uint32_t k, uint32_t f) {
    s->freq[k] = (uint8_t)f;
    gpumem__plist_append(&s->bins[f], s->prev, s->next, k);
}

GPUMEM_API void gpumem__lfu_remove(gpumem__plfu *s, uint32_t k) {
    gpumem__plist_remove(&s->bins[s->freq[k]], s->prev, s->next, k);
}

/* Promotion to the tail of the next bin: the line just used is the last of
 * its new bin to go. */
GPUMEM_API void gpumem__lfu_touch(gpumem__plfu *s, uint32_t k) {
    uint32_t f = s->freq[k];
    gpumem__lfu_remove(s, k);
    gpumem__lfu_put(s, k, f + 1 < s->n_bins ? f + 1 : f);
}

GPUMEM_API uint32_t gpumem__lfu_victim(gpumem__plfu *s, const uint8_t *pinned) {
    uint32_t b, k;
    for (b = 0; b < s->n_bins; b++)
        if ((k = gpumem__plist_first_free(s->next, s->bins[b].head, pinned)) != GPUMEM_POLICY_NONE) return k;
    return GPUMEM_POLICY_NONE;
}

/* ---- cyclic protection ------------------------------------------------------ */

GPUMEM_API void gpumem__cp_fix(gpumem__pcp *s) {
    /* Protect the oldest unprotected nodes until `protect` are. */
    while (s->n_prot < s->protect && s->boundary != GPUMEM_POLICY_NONE) {
        s->prot[s->boundary] = 1;
        s->n_prot++;
        s->boundary = s->next[s->boundary];
    }
    /* Give protection back from the newest protected end when it shrank. */
    while (s->n_prot > s->protect) {
        uint32_t x = s->boundary == GPUMEM_POLICY_NONE ? s->l.tail : s->prev[s->boundary];
        if (x == GPUMEM_POLICY_NONE) break;
        s->prot[x] = 0;
        s->n_prot--;
        s->boundary = x;
    }
}

GPUMEM_API void gpumem__cp_fill(gpumem__pcp *s, uint32_t k) {
    gpumem__plist_append(&s->l, s->prev, s->next, k);
    s->prot[k] = 0;
    s->used[k] = 0;
    if (s->boundary == GPUMEM_POLICY_NONE) s->boundary = k;
    gpumem__cp_fix(s);
}

GPUMEM_API void gpumem__cp_touch(gpumem__pcp *s, uint32_t k) {
    if (k == s->boundary && s->protect > s->lo) s->protect--; /* the window is too small */
    s->used[k] = 1;
}

GPUMEM_API void gpumem__cp_remove(gpumem__pcp *s, uint32_t k) {
    if (k == s->boundary) {
        if (!s->used[k] && s->protect < s->hi) s->protect++; /* expired unused: shrink the window */
        s->boundary = s->next[k];
    } else if (s->prot[k]) {
        s->n_prot--;
    }
    gpumem__plist_remove(&s->l, s->prev, s->next, k);
    s->prot[k] = 0;
    gpumem__cp_fix(s);
}

/* The boundary: the oldest line of the window; protected lines go only when
 * every unprotected one is pinned. */
GPUMEM_API uint32_t gpumem__cp_victim(gpumem__pcp *s, const uint8_t *pinned) {
    uint32_t k = gpumem__plist_first_free(s->next, s->boundary, pinned);
    if (k == GPUMEM_POLICY_NONE) k = gpumem__plist_first_free(s->next, s->l.head, pinned);
    return k;
}

/* ---- HPE -------------------------------------------------------------------- */

GPUMEM_API uint32_t gpumem__hpe_hash(uint64_t tag) {
    tag *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(tag >> 32);
}

/* Index slot of `tag` in the table, or of the empty slot where it would go. */
GPUMEM_API uint32_t gpumem__hpe_probe(const gpumem__phpe *h, const gpumem__pset *sets, uint64_t tag) {
    uint32_t i = gpumem__hpe_hash(tag) & h->index_mask;
    while (h->index[i] != GPUMEM_POLICY_NONE && sets[h->index[i]].tag != tag) i = (i + 1) & h->index_mask;
    return i;
}

/* Remove from linear probing by shifting later entries back (no tombstones). */
GPUMEM_API void gpumem__hpe_unindex(gpumem__phpe *h, uint64_t tag) {
    uint32_t i = gpumem__hpe_probe(h, h->sets, tag), j = i;
    h->index[i] = GPUMEM_POLICY_NONE;
    for (;;) {
        uint32_t home;
        j = (j + 1) & h->index_mask;
        if (h->index[j] == GPUMEM_POLICY_NONE) return;
        home = gpumem__hpe_hash(h->sets[h->index[j]].tag) & h->index_mask;
        /* Move j back to i unless its home lies cyclically in (i, j]. */
        if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
            h->index[i] = h->index[j];
            h->index[j] = GPUMEM_POLICY_NONE;
            i = j;
        }
    }
}

GPUMEM_API void gpumem__hpe_chain_remove(gpumem__phpe *h, uint32_t s) {
    gpumem__pset *e = &h->sets[s];
    if (h->p1 == s) h->p1 = e->next;
    if (h->p2 == s) h->p2 = e->next;
    if (e->prev != GPUMEM_POLICY_NONE) h->sets[e->prev].next = e->next;
    else h->chain.head = e->next;
    if (e->next != GPUMEM_POLICY_NONE) h->sets[e->next].prev = e->prev;
    else h->chain.tail = e->prev;
}

/* To the MRU end of the new partition (once per interval: the chain stays
 * sorted by interval, so the partitions are its three runs). */
GPUMEM_API void gpumem__hpe_to_new(gpumem__phpe *h, uint32_t s, int linked) {
    gpumem__pset *e = &h->sets[s];
    if (linked) {
        if (e->interval == h->cur) return;
        gpumem__hpe_chain_remove(h, s);
    }
    e->interval = h->cur;
    e->prev = h->chain.tail;
    e->next = GPUMEM_POLICY_NONE;
    if (h->chain.tail != GPUMEM_POLICY_NONE) h->sets[h->chain.tail].next = s;
    else h->chain.head = s;
    h->chain.tail = s;
    if (h->p2 == GPUMEM_POLICY_NONE) h->p2 = s;
    if (h->p1 == GPUMEM_POLICY_NONE) h->p1 = s;
}

GPUMEM_API void gpumem__hpe_count(gpumem__phpe *h, uint32_t s, uint32_t max) {
    if (h->sets[s].counter < max) h->sets[s].counter++;
}

GPUMEM_API void gpumem__hpe_touch(gpumem_policy *p, uint32_t k) {
    gpumem__phpe *h = &p->hpe;
    uint32_t s = h->set_of_slot[k];
    gpumem__hpe_count(h, s, p->d.hpe_counter_max);
    gpumem__hpe_to_new(h, s, 1);
}

/* One-time classification when memory first fills (Table III). */
GPUMEM_API void gpumem__hpe_classify(gpumem_policy *p) {
    gpumem__phpe *h = &p->hpe;
    uint32_t s, set = 1u << p->d.hpe_set_shift, regular = 0, irregular = 0, small = 0, large = 0, old = 0;
    for (s = h->chain.head; s != GPUMEM_POLICY_NONE; s = h->sets[s].next) {
        uint32_t c = h->sets[s].counter;
        if (c % set) irregular++;
        else {
            regular++;
            if (c <= 2 * set) small++;
            else large++;
        }
        old += h->sets[s].interval + 2 <= h->cur;
    }
    if ((uint64_t)irregular * 100 > (uint64_t)regular * p->d.hpe_ratio1_pct) h->cls = GPUMEM_HPE_IRREGULAR2;
    else if (large >= (uint64_t)small * p->d.hpe_ratio2 && large > 0) h->cls = GPUMEM_HPE_IRREGULAR1;
    else h->cls = GPUMEM_HPE_REGULAR;
    h->strategy = h->cls == GPUMEM_HPE_REGULAR ? GPUMEM_HPE_MRUC : GPUMEM_HPE_LRU;
    h->adjust = h->cls == GPUMEM_HPE_IRREGULAR2 || (h->cls == GPUMEM_HPE_REGULAR && old >= p->d.hpe_min_old);
    h->full = 1;
}

/* A wrong eviction: a fault on a line the current strategy evicted lately. */
GPUMEM_API void gpumem__hpe_on_fault(gpumem_policy *p, uint64_t line) {
    gpumem__phpe *h = &p->hpe;
    uint32_t i, st = h->strategy;
    for (i = 0; i < p->d.hpe_fifo; i++)
        if (h->fifo[st][i] == line) {
            h->fifo[st][i] = UINT64_MAX;
            if (++h->wrong[st] == p->d.hpe_trigger && h->full && h->adjust) {
                if (h->cls == GPUMEM_HPE_REGULAR) {
                    h->jump += p->d.hpe_jump;
                } else { /* irregular#2: keep the strategy that lasted longer */
                    uint32_t other = st ^ 1u;
                    h->last_run[st] = h->run;
                    if (h->last_run[other] == 0 || h->last_run[other] >= h->run) {
                        h->strategy = other;
                        h->run = 0;
                    }
                }
            }
            break;
        }
    if (++h->faults >= p->d.hpe_interval) { /* interval end: new -> middle -> old */
        h->faults = 0;
        h->cur++;
        h->run++;
        h->p1 = h->p2;
        h->p2 = GPUMEM_POLICY_NONE;
        h->wrong[0] = h->wrong[1] = 0;
    }
}

GPUMEM_API void gpumem__hpe_fill(gpumem_policy *p, uint32_t k, uint64_t line) {
    gpumem__phpe *h = &p->hpe;
    uint32_t shift = p->d.hpe_set_shift, off = (uint32_t)(line & ((1u << shift) - 1));
    uint64_t tag = line >> shift;
    uint32_t i = gpumem__hpe_probe(h, h->sets, tag), s = h->index[i];
    gpumem__hpe_on_fault(p, line);
    if (s == GPUMEM_POLICY_NONE) {
        s = h->free_set;
        h->free_set = h->sets[s].next;
        h->index[i] = s;
        h->sets[s].tag = tag;
        h->sets[s].counter = 0;
        h->sets[s].resident = 0;
        h->sets[s].n_res = 0;
        h->n_sets++;
        gpumem__hpe_to_new(h, s, 0);
    } else {
        gpumem__hpe_to_new(h, s, 1);
    }
    gpumem__hpe_count(h, s, p->d.hpe_counter_max);
    h->sets[s].resident |= 1u << off;
    h->sets[s].n_res++;
    h->set_slots[((size_t)s << shift) + off] = k;
    h->set_of_slot[k] = s;
    if (!h->full && ++h->fill_count >= p->d.n_slots) gpumem__hpe_classify(p);
}

GPUMEM_API void gpumem__hpe_evict(gpumem_policy *p, uint32_t k, uint64_t line) {
    gpumem__phpe *h = &p->hpe;
    uint32_t shift = p->d.hpe_set_shift, s = h->set_of_slot[k];
    gpumem__pset *e = &h->sets[s];
    e->resident &= ~(1u << (line & ((1u << shift) - 1)));
    h->fifo[h->strategy][h->fifo_at[h->strategy]++ % p->d.hpe_fifo] = line;
    if (--e->n_res == 0) { /* every line gone: the set leaves the chain */
        gpumem__hpe_chain_remove(h, s);
        gpumem__hpe_unindex(h, e->tag);
        if (h->victim == s) h->victim = GPUMEM_POLICY_NONE;
        e->next = h->free_set;
        h->free_set = s;
        h->n_sets--;
    }
}

/* A resident, unpinned line of set s in address order, or NONE. */
GPUMEM_API uint32_t gpumem__hpe_line_of(gpumem_policy *p, uint32_t s, const uint8_t *pinned) {
    uint32_t shift = p->d.hpe_set_shift, r = p->hpe.sets[s].resident, off;
    for (off = 0; r; off++, r >>= 1) {
        uint32_t k;
        if (!(r & 1)) continue;
        k = p->hpe.set_slots[((size_t)s << shift) + off];
        if (!pinned || !pinned[k]) return k;
    }
    return GPUMEM_POLICY_NONE;
}

/* The partition to evict from: old if not empty, then middle, then new.
 * Returns its first (LRU-end) set and, in *end, the set after its last. */
GPUMEM_API uint32_t gpumem__hpe_partition(const gpumem__phpe *h, uint32_t *end) {
    if (h->chain.head != h->p1) {
        *end = h->p1;
        return h->chain.head;
    }
    if (h->p1 != h->p2) {
        *end = h->p2;
        return h->p1;
    }
    *end = GPUMEM_POLICY_NONE;
    return h->p2;
}

GPUMEM_API uint32_t gpumem__hpe_pick(gpumem_policy *p, const uint8_t *pinned) {
    gpumem__phpe *h = &p->hpe;
    uint32_t end, first = gpumem__hpe_partition(h, &end), s, best = GPUMEM_POLICY_NONE, seen = 0, skip;
    uint32_t set = 1u << p->d.hpe_set_shift;
    if (h->strategy == GPUMEM_HPE_LRU || !h->full) {
        for (s = first; s != GPUMEM_POLICY_NONE; s = h->sets[s].next)
            if (gpumem__hpe_line_of(p, s, pinned) != GPUMEM_POLICY_NONE) return s;
        return GPUMEM_POLICY_NONE;
    }
    /* MRU-C: from the MRU end of the partition (past the search-point jump)
     * towards the LRU end, the first set touched exactly once per line, else
     * the least-touched set seen. */
    s = end == GPUMEM_POLICY_NONE ? h->chain.tail : h->sets[end].prev;
    for (skip = h->jump; skip && s != first && s != GPUMEM_POLICY_NONE; skip--) s = h->sets[s].prev;
    for (; s != GPUMEM_POLICY_NONE && seen < p->d.hpe_scan; seen++) {
        if (gpumem__hpe_line_of(p, s, pinned) != GPUMEM_POLICY_NONE) {
            if (h->sets[s].counter == set) return s;
            if (best == GPUMEM_POLICY_NONE || h->sets[s].counter < h->sets[best].counter) best = s;
        }
        if (s == first) break;
        s = h->sets[s].prev;
    }
    if (best != GPUMEM_POLICY_NONE) return best;
    for (s = h->chain.head; s != GPUMEM_POLICY_NONE; s = h->sets[s].next) /* everything there pinned */
        if (gpumem__hpe_line_of(p, s, pinned) != GPUMEM_POLICY_NONE) return s;
    return GPUMEM_POLICY_NONE;
}

/* A set chosen is drained one line at a time, in address order (§IV-A), for
 * as long as nobody touches it. */
GPUMEM_API uint32_t gpumem__hpe_victim(gpumem_policy *p, const uint8_t *pinned) {
    gpumem__phpe *h = &p->hpe;
    uint32_t k;
    if (h->victim != GPUMEM_POLICY_NONE && h->sets[h->victim].interval != h->cur &&
        (k = gpumem__hpe_line_of(p, h->victim, pinned)) != GPUMEM_POLICY_NONE)
        return k;
    h->victim = gpumem__hpe_pick(p, pinned);
    return h->victim == GPUMEM_POLICY_NONE ? GPUMEM_POLICY_NONE : gpumem__hpe_line_of(p, h->victim, pinned);
}

/* ---- tournament ------------------------------------------------------------- */

enum { GPUMEM__TM_LRU = 0, GPUMEM__TM_LFU = 1, GPUMEM__TM_CP = 2 };

/* Ghost map of evicted lines: slot-sized table of (line hash, member). */
GPUMEM_API uint8_t *gpumem__tm_ghost(gpumem_policy *p, uint64_t line, uint64_t **tag_out) {
    size_t n = (size_t)p->d.n_slots * GPUMEM_POLICY_GHOSTS;
    size_t i = (size_t)((line * 0x9E3779B97F4A7C15ull) >> 16) % n;
    *tag_out = p->tm.ghost_tag + i;
    return p->tm.ghost_who + i;
}

GPUMEM_API void gpumem__tm_fault(gpumem_policy *p, uint64_t line) {
    gpumem__ptm *t = &p->tm;
    uint64_t *tag;
    uint8_t *who = gpumem__tm_ghost(p, line, &tag);
    uint32_t m, n_active = 0;
    if (*who == 0 || *tag != line) return;
    t->blame[*who - 1]++;
    *who = 0;
    if (++t->blame_sum <= p->d.tm_blame) return;
    for (m = 0; m < 3; m++) n_active += (t->active >> m) & 1;
    /* Retire every member whose share of the blame is more than tm_share_pct
     * of the mean share; never the last one. */
    for (m = 0; m < 3 && n_active > 1; m++)
        if ((t->active >> m) & 1 &&
            (uint64_t)t->blame[m] * 100 * n_active > (uint64_t)t->blame_sum * p->d.tm_share_pct) {
            t->active &= ~(1u << m);
            n_active--;
        }
    t->blame[0] = t->blame[1] = t->blame[2] = 0;
    t->blame_sum = 0;
}

GPUMEM_API uint32_t gpumem__tm_victim(gpumem_policy *p, const uint8_t *pinned, uint32_t *member) {
    uint32_t i;
    for (i = 0; i < 3; i++) {
        uint32_t m = (p->tm.rr + i) % 3;
        if (!((p->tm.active >> m) & 1)) continue;
        p->tm.rr = m + 1;
        *member = m;
        if (m == GPUMEM__TM_LRU) return gpumem__lru_victim(&p->lru, pinned);
        if (m == GPUMEM__TM_LFU) return gpumem__lfu_victim(&p->lfu, pinned);
        return gpumem__cp_victim(&p->cp, pinned);
    }
    return GPUMEM_POLICY_NONE;
}

/* The hooks of one base kind (any but HINTED, which runs its fallback's). */
GPUMEM_API void gpumem__pbase_access(gpumem_policy *p, uint32_t kind, uint32_t k) {
    switch (kind) {
    case GPUMEM_POLICY_LRU: gpumem__lru_touch(&p->lru, k); break;
    case GPUMEM_POLICY_LFU: gpumem__lfu_touch(&p->lfu, k); break;
    case GPUMEM_POLICY_CP: gpumem__cp_touch(&p->cp, k); break;
    case GPUMEM_POLICY_HPE: gpumem__hpe_touch(p, k); break;
    case GPUMEM_POLICY_TOURNAMENT: /* every member sees every event */
        gpumem__lru_touch(&p->lru, k);
        gpumem__lfu_touch(&p->lfu, k);
        gpumem__cp_touch(&p->cp, k);
        break;
    default: gpumem_policy_slot_hit(kind, &p->slot.words[k]); break;
    }
}

GPUMEM_API void gpumem__pbase_fill(gpumem_policy *p, uint32_t kind, uint32_t k, uint64_t line) {
    switch (kind) {
    case GPUMEM_POLICY_LRU: gpumem__plist_append(&p->lru.l, p->lru.prev, p->lru.next, k); break;
    case GPUMEM_POLICY_LFU: gpumem__lfu_put(&p->lfu, k, 0); break;
    case GPUMEM_POLICY_CP: gpumem__cp_fill(&p->cp, k); break;
    case GPUMEM_POLICY_HPE: gpumem__hpe_fill(p, k, line); break;
    case GPUMEM_POLICY_TOURNAMENT:
        gpumem__tm_fault(p, line);
        gpumem__plist_append(&p->lru.l, p->lru.prev, p->lru.next, k);
        gpumem__lfu_put(&p->lfu, k, 0);
        gpumem__cp_fill(&p->cp, k);
        break;
    default: gpumem_policy_slot_fill_hinted(kind, &p->slot.words[k], &p->slot.fills, p->slot.hints, line); break;
    }
}

GPUMEM_API void gpumem__pbase_evict(gpumem_policy *p, uint32_t kind, uint32_t k, uint64_t line) {
    switch (kind) {
    case GPUMEM_POLICY_LRU: gpumem__plist_remove(&p->lru.l, p->lru.prev, p->lru.next, k); break;
    case GPUMEM_POLICY_LFU: gpumem__lfu_remove(&p->lfu, k); break;
    case GPUMEM_POLICY_CP: gpumem__cp_remove(&p->cp, k); break;
    case GPUMEM_POLICY_HPE: gpumem__hpe_evict(p, k, line); break;
    case GPUMEM_POLICY_TOURNAMENT:
        gpumem__plist_remove(&p->lru.l, p->lru.prev, p->lru.next, k);
        gpumem__lfu_remove(&p->lfu, k);
        gpumem__cp_remove(&p->cp, k);
        break;
    default: gpumem_atomic_store_u32(&p->slot.words[k], 0, GPUMEM_ORDER_RELAXED, GPUMEM__PSCOPE); break;
    }
}

GPUMEM_API uint32_t gpumem__pbase_victim(gpumem_policy *p, uint32_t kind, const uint8_t *pinned) {
    uint32_t k, i, n = p->d.n_slots;
    switch (kind) {
    case GPUMEM_POLICY_LRU: return gpumem__lru_victim(&p->lru, pinned);
    case GPUMEM_POLICY_LFU: return gpumem__lfu_victim(&p->lfu, pinned);
    case GPUMEM_POLICY_CP: return gpumem__cp_victim(&p->cp, pinned);
    case GPUMEM_POLICY_HPE: return gpumem__hpe_victim(p, pinned);
    case GPUMEM_POLICY_TOURNAMENT: {
        uint32_t m = 0;
        uint64_t *tag;
        uint8_t *who;
        k = gpumem__tm_victim(p, pinned, &m);
        if (k != GPUMEM_POLICY_NONE) {
            who = gpumem__tm_ghost(p, p->line_of[k], &tag);
            *who = (uint8_t)(m + 1);
            *tag = p->line_of[k];
        }
        return k;
    }
    default:
        for (i = 0; i < gpumem_policy_slot_sweep_len(kind, n) + n; i++) {
            k = gpumem_policy_slot_next(&p->slot.hand, n);
            if ((!pinned || !pinned[k]) && gpumem_policy_slot_consider_hinted(kind, &p->slot.words[k], p->slot.hints))
                return k;
        }
        return GPUMEM_POLICY_NONE;
    }
}

/* The kind whose state runs under the hooks: HINTED's fallback, or the kind. */
GPUMEM_API uint32_t gpumem__pbase(const gpumem_policy *p) {
    return p->d.kind == GPUMEM_POLICY_HINTED ? p->d.hint_fallback : p->d.kind;
}

/* ---- HINTED: the application's next uses ------------------------------------ */

/* A hint names a line's next use as an epoch of the application's own clock
 * (a BFS level, a PageRank sweep, a mini-batch; or finer: a position in the
 * next frontier). Belady on what the application knows: demoted lines go
 * first, then unhinted ones by the fallback, then the hinted line whose next
 * use is farthest. A hint is judged when its line is used: right if the use
 * comes at its epoch (give or take hint_slack), wrong if sooner (the line
 * might have been evicted for it) or later, or if its epoch passes unused.
 * A trust counter follows the verdicts, a wrong one costing
 * GPUMEM_POLICY_TRUST_WRONG right ones: below GPUMEM_POLICY_TRUST_USE the
 * fallback alone chooses (the hints are still judged, so trust comes back).
 * So hints under 80% right cost what the fallback costs, plus the misses
 * before the first wrong ones are seen.
 *
 * Weights (gpumem_policy_weight) say what the application expects beyond
 * its next-use hints: a line's weight is how much it expects to use it (a
 * sampled vertex's expected draws a batch, a degree; larger is kept
 * longer). Among lines with no hint standing the fallback takes the
 * unweighted ones first, then the lightest weighted one goes: so the
 * order is demoted, unhinted by the fallback, lightest, farthest hinted.
 * A line's weight is its own until the application gives another (it
 * waits in the pending table while the line is away). The ordering is
 * Belady's on expectations: a line hinted for a known use is needed sooner
 * than one whose next use lies beyond what the application knows, however
 * heavy. A single weight cannot be proven wrong (a light line may well come
 * back), so weights are judged against the fallback, on the weighted lines
 * each evicts: the share that came back within a cache's worth of fills.
 * One victim choice in 16 goes to the arm not in use, so both are
 * measured; weights choose while their share is at most 1.25x the
 * fallback's (+1 point), else the fallback takes weighted lines as
 * unweighted (gpumem__weights_trusted). */
#define GPUMEM_POLICY_UNHINTED UINT64_MAX
/* The hinted sequential policy is host code: in device code it runs as its
 * fallback and takes no hints (ESTATE). Compiled into the device's hooks,
 * even called rather than inlined, it put the cache's one-element read at 56
 * registers instead of 48 (sm_90, bench/registers/kernels.cu), hinted or
 * not. The device's own hinted policy is the slot kind HINTED_RRIP (section 1). */
#define GPUMEM__HINT_HOOKS (!GPUMEM_ON_DEVICE)

GPUMEM_API void gpumem__hint_judge(gpumem__phint *h, int right) {
    if (right) {
        h->right++;
        if (h->trust < GPUMEM_POLICY_TRUST_MAX) h->trust++;
    } else {
        h->wrong++;
        h->trust = h->trust > GPUMEM_POLICY_TRUST_WRONG ? h->trust - GPUMEM_POLICY_TRUST_WRONG : 0;
    }
}

#define GPUMEM__GONE_FALLBACK (1ull << 63) /* pgone: the fallback evicted the line, not its weight */
/* Who named a slot the victim, kept per slot until it is evicted: a caller
 * may unlock between the choice and the eviction (the cache does) */
enum { GPUMEM__ARM_NONE = 0, GPUMEM__ARM_WEIGHT = 1, GPUMEM__ARM_FALLBACK = 2 };

/* Whether weights choose: the weighted lines they evict come back early
 * (within a cache's worth of fills) at most 1.25x as often as those the
 * fallback evicts, plus one point (two rates near zero agree); trusted
 * until both arms have 32 evictions counted. */
GPUMEM_API int gpumem__weights_trusted(const gpumem__phint *h) {
    if (h->weight_out < 32 || h->fallback_out < 32) return 1;
    return 100 * h->weight_back * h->fallback_out <= (125 * h->fallback_back + h->fallback_out) * h->weight_out;
}

/* Add the hint `when` to a line's two soonest (w1 <= w2; `met` is w1's). A
 * hint for the epoch of a w1 already met promises one more use in it. One
 * past both, when w1 was met, is the use after w2's: w1 has served (a line
 * used in epochs close together got its third hint before w2's use, and
 * lost it, which made it the first to go before that use). */
GPUMEM_API void gpumem__hint_put(uint64_t *w1, uint64_t *w2, uint8_t *met, uint64_t when) {
    if (when == *w1) {
        *met = 0;
        return;
    }
    if (when == *w2) return;
    if (*met && *w2 != GPUMEM_POLICY_UNHINTED && when > *w2) {
        *w1 = *w2;
        *w2 = when;
        *met = 0;
    } else if (when < *w1) {
        *w2 = *w1;
        *w1 = when;
        *met = 0;
    } else if (when < *w2) {
        *w2 = when;
    }
}

/* Whether hint w is past: its epoch, and the slack, are behind the clock. */
GPUMEM_API int gpumem__hint_past(const gpumem_policy *p, uint64_t w) {
    return w != GPUMEM_POLICY_UNHINTED && w + p->d.hint_slack < p->hint.epoch;
}

/* Move a line's hints past the clock: a w1 whose epoch (and slack) went by
 * is judged (wrong if its use never came) and w2 takes its place. */
GPUMEM_API void gpumem__hint_expire(gpumem_policy *p, uint64_t *w1, uint64_t *w2, uint8_t *met) {
    while (gpumem__hint_past(p, *w1)) {
        if (!*met) gpumem__hint_judge(&p->hint, 0);
        *w1 = *w2;
        *w2 = GPUMEM_POLICY_UNHINTED;
        *met = 0;
    }
}

/* A use now of a line hinted (w1, w2, met). Within w1's window (its epoch
 * give or take hint_slack) it proves w1 right, once; before it, wrong (a
 * hint names the next use); w2 takes over once its own window is reached.
 * A hint stays until its window passes: an epoch may use a line many times. */
GPUMEM_API void gpumem__hint_use(gpumem_policy *p, uint64_t *w1, uint64_t *w2, uint8_t *met) {
    uint64_t e = p->hint.epoch, slack = p->d.hint_slack;
    gpumem__hint_expire(p, w1, w2, met);
    if (*met && *w2 != GPUMEM_POLICY_UNHINTED && e + slack >= *w2) { /* windows that overlap: w2's use */
        *w1 = *w2;
        *w2 = GPUMEM_POLICY_UNHINTED;
        *met = 0;
    }
    if (*w1 == GPUMEM_POLICY_UNHINTED) return;
    if (e + slack < *w1) {
        gpumem__hint_judge(&p->hint, 0);
        return;
    }
    if (!*met) gpumem__hint_judge(&p->hint, 1);
    *met = 1;
}

/* Slot k's place after its hints changed: in the heap or not, held or not. */
GPUMEM_API void gpumem__hint_rekey(gpumem_policy *p, uint32_t k) {
    gpumem__phint *h = &p->hint;
    /* Keyed on the next use not yet seen; a line whose hinted use was met
     * and that has no later hint keeps its epoch (it may be used again in
     * it) until the epoch passes; then it is the fallback's. */
    uint64_t next = h->met[k] && h->w2[k] != GPUMEM_POLICY_UNHINTED ? h->w2[k] : h->w1[k];
    uint8_t held = (uint8_t)(h->demoted[k] || h->w1[k] != GPUMEM_POLICY_UNHINTED), wheld = held;
    if (h->w1[k] != GPUMEM_POLICY_UNHINTED && !h->demoted[k]) gpumem__pheap_set(&h->heap, k, next);
    else gpumem__pheap_remove(&h->heap, k);
    if (!held && h->weight[k]) { /* the lightest on top of a max-heap */
        gpumem__pheap_set(&h->wheap, k, GPUMEM_POLICY_UNHINTED - h->weight[k]);
        wheld = 1;
    } else {
        gpumem__pheap_remove(&h->wheap, k);
    }
    if (held != h->held[k]) {
        h->n_held = held ? h->n_held + 1 : h->n_held - 1;
        h->held[k] = held;
    }
    if (wheld != h->wheld[k]) {
        h->n_wheld = wheld ? h->n_wheld + 1 : h->n_wheld - 1;
        h->wheld[k] = wheld;
    }
}

GPUMEM_API void gpumem__hint_undemote(gpumem_policy *p, uint32_t k) {
    gpumem__phint *h = &p->hint;
    if (!h->demoted[k]) return;
    gpumem__plist_remove(&h->dlist, h->dprev, h->dnext, k);
    h->demoted[k] = 0;
}

/* The pending hints' entry of `line`: one place per line, a later line
 * overwrites (hints are advice: one lost is a fallback decision). */
GPUMEM_API uint32_t gpumem__hint_pending(const gpumem__phint *h, uint64_t line) {
    return (uint32_t)((line * 0x9E3779B97F4A7C15ull) >> 24) & h->pmask;
}

/* Expired hints (epoch passed, line unused) are wrong: judged and dropped,
 * in a sweep at most once per n_slots / 8 hooks, so O(1) a hook. */
GPUMEM_API void gpumem__hint_sweep(gpumem_policy *p) {
    gpumem__phint *h = &p->hint;
    uint32_t k;
    if (h->since_sweep < p->d.n_slots / 8 + 1) return;
    h->since_sweep = 0;
    for (k = 0; k < p->d.n_slots; k++)
        if (gpumem__hint_past(p, h->w1[k])) {
            gpumem__hint_expire(p, &h->w1[k], &h->w2[k], &h->met[k]);
            gpumem__hint_rekey(p, k);
        }
}

GPUMEM_API void gpumem__hint_on_access(gpumem_policy *p, uint32_t k) {
    gpumem__phint *h = &p->hint;
    h->since_sweep++;
    if (h->demoted[k]) { /* "done with" it, and it is back */
        gpumem__hint_judge(h, 0);
        gpumem__hint_undemote(p, k);
    }
    gpumem__hint_use(p, &h->w1[k], &h->w2[k], &h->met[k]);
    gpumem__hint_rekey(p, k);
}

GPUMEM_API void gpumem__hint_on_fill(gpumem_policy *p, uint32_t k, uint64_t line, int use) {
    gpumem__phint *h = &p->hint;
    uint32_t i = gpumem__hint_pending(h, line);
    h->since_sweep++;
    h->w1[k] = h->w2[k] = GPUMEM_POLICY_UNHINTED;
    h->met[k] = 0;
    h->weight[k] = 0;
    if (h->ptag[i] == line + 1) { /* hinted or weighted while away */
        h->w1[k] = h->pw1[i];
        h->w2[k] = h->pw2[i];
        h->met[k] = h->pmet[i];
        h->weight[k] = h->pweight[i];
        if (h->pgone[i] && h->fills - ((h->pgone[i] & ~GPUMEM__GONE_FALLBACK) - 1) < p->d.n_slots) /* back early */
            ++*(h->pgone[i] & GPUMEM__GONE_FALLBACK ? &h->fallback_back : &h->weight_back);
        h->ptag[i] = 0;
    }
    h->fills++;
    if (use) gpumem__hint_use(p, &h->w1[k], &h->w2[k], &h->met[k]);
    else gpumem__hint_expire(p, &h->w1[k], &h->w2[k], &h->met[k]);
    gpumem__hint_rekey(p, k);
}

/* A line leaves with its hints: they wait in the pending table for its
 * return (an expired one is judged wrong now). */
GPUMEM_API void gpumem__hint_on_evict(gpumem_policy *p, uint32_t k, uint64_t line) {
    gpumem__phint *h = &p->hint;
    gpumem__hint_undemote(p, k);
    gpumem__hint_expire(p, &h->w1[k], &h->w2[k], &h->met[k]);
    if (h->w1[k] != GPUMEM_POLICY_UNHINTED || h->weight[k]) {
        uint32_t i = gpumem__hint_pending(h, line);
        h->ptag[i] = line + 1;
        h->pw1[i] = h->w1[k];
        h->pw2[i] = h->w2[k];
        h->pmet[i] = h->met[k];
        h->pweight[i] = h->weight[k];
        h->pgone[i] = 0;
        if (h->arm[k] != GPUMEM__ARM_NONE) { /* measured: which arm evicted it, and when */
            const int by_fallback = h->arm[k] == GPUMEM__ARM_FALLBACK;
            h->pgone[i] = (h->fills + 1) | (by_fallback ? GPUMEM__GONE_FALLBACK : 0);
            ++*(by_fallback ? &h->fallback_out : &h->weight_out);
            if (h->weight_out + h->fallback_out >= 4ull * p->d.n_slots + 1024) { /* a recent rate */
                h->weight_out /= 2, h->weight_back /= 2;
                h->fallback_out /= 2, h->fallback_back /= 2;
            }
        }
    }
    h->arm[k] = GPUMEM__ARM_NONE;
    h->w1[k] = h->w2[k] = GPUMEM_POLICY_UNHINTED;
    h->met[k] = 0;
    h->weight[k] = 0;
    gpumem__hint_rekey(p, k);
}

/* The hinted next use of slot k's line (HINTED; the caller serialises, as
 * for every call into a sequential policy): the epoch, or
 * GPUMEM_POLICY_UNHINTED when no hint stands (none, passed, or demoted:
 * the first to go). Any other kind: GPUMEM_POLICY_UNHINTED. */
GPUMEM_API uint64_t gpumem_policy_next_use(const gpumem_policy *p, uint32_t k) {
    const gpumem__phint *h;
    uint64_t next;
    if (!p || p->d.kind != GPUMEM_POLICY_HINTED || k >= p->d.n_slots) return GPUMEM_POLICY_UNHINTED;
    h = &p->hint;
    if (h->demoted[k]) return GPUMEM_POLICY_UNHINTED;
    /* as gpumem__hint_expire would leave it, without changing it: a w1
     * passed unmet (not yet swept) gives way to w2 */
    next = (h->met[k] || gpumem__hint_past(p, h->w1[k])) && h->w2[k] != GPUMEM_POLICY_UNHINTED ? h->w2[k] : h->w1[k];
    return gpumem__hint_past(p, next) ? GPUMEM_POLICY_UNHINTED : next;
}

/* The top of heap `hp` that is not pinned (a scan when the top is), or NONE. */
GPUMEM_API uint32_t gpumem__pheap_top_free(const gpumem__pheap *hp, const uint8_t *pinned) {
    uint32_t i, best = GPUMEM_POLICY_NONE;
    if (hp->n == 0) return GPUMEM_POLICY_NONE;
    if (!pinned || !pinned[hp->item[0]]) return hp->item[0];
    for (i = 0; i < hp->n; i++)
        if (!pinned[hp->item[i]] && (best == GPUMEM_POLICY_NONE || hp->key[i] > hp->key[best])) best = i;
    return best == GPUMEM_POLICY_NONE ? GPUMEM_POLICY_NONE : hp->item[best];
}

GPUMEM_API uint32_t gpumem__hint_victim(gpumem_policy *p, const uint8_t *pinned) {
    gpumem__phint *h = &p->hint;
    const int weighted = h->wheap.n > 0;
    /* one choice in 16 to the arm not in use, so that both stay measured */
    const int weights = weighted && gpumem__weights_trusted(h) != ((++h->decisions & 15) == 0);
    const uint8_t *mask = weights ? h->wheld : h->held;
    uint32_t k, i, n = p->d.n_slots;
    if (h->trust < GPUMEM_POLICY_TRUST_USE) {
        h->fallback_victims++;
        k = gpumem__pbase_victim(p, p->d.hint_fallback, pinned);
        if (k != GPUMEM_POLICY_NONE) h->arm[k] = GPUMEM__ARM_NONE;
        return k;
    }
    if ((k = gpumem__plist_first_free(h->dnext, h->dlist.head, pinned)) != GPUMEM_POLICY_NONE) {
        h->hinted_victims++;
        h->arm[k] = GPUMEM__ARM_NONE;
        return k;
    }
    if ((weights ? h->n_wheld : h->n_held) < n) { /* the fallback, among the rest (O(n) to merge a caller's pins) */
        if (pinned) {
            for (i = 0; i < n; i++) h->mask[i] = (uint8_t)(mask[i] | pinned[i]);
            mask = h->mask;
        }
        if ((k = gpumem__pbase_victim(p, p->d.hint_fallback, mask)) != GPUMEM_POLICY_NONE) {
            h->fallback_victims++;
            h->arm[k] = h->weight[k] ? GPUMEM__ARM_FALLBACK : GPUMEM__ARM_NONE; /* a weighted line: measured */
            return k;
        }
    }
    if (weights && (k = gpumem__pheap_top_free(&h->wheap, pinned)) != GPUMEM_POLICY_NONE) {
        h->weight_victims++;
        h->arm[k] = GPUMEM__ARM_WEIGHT;
        return k;
    }
    if ((k = gpumem__pheap_top_free(&h->heap, pinned)) != GPUMEM_POLICY_NONE) {
        h->hinted_victims++;
        h->arm[k] = GPUMEM__ARM_NONE;
    }
    return k;
}

/* ---- the hooks ---------------------------------------------------------------- */

/* Set up over caller memory of gpumem_policy_bytes(d) bytes (8-byte aligned).
 * EINVAL for an unknown kind or bad parameters. */
GPUMEM_API gpumem_status gpumem_policy_init(gpumem_policy *p, const gpumem_policy_desc *in, void *mem) {
    uint32_t i, n, base;
    gpumem_policy_desc resolved;
    const gpumem_policy_desc *d = &resolved; /* zero means default */
    if (!p || !in || (!mem && gpumem_policy_bytes(in))) return GPUMEM_ENULL;
    resolved = gpumem_policy_desc_resolved(in);
    n = d->n_slots;
    if (d->kind >= GPUMEM_POLICY_KINDS || n == 0 || n >= GPUMEM_POLICY_NONE / 2 || d->hpe_set_shift > 5 ||
        d->hpe_interval == 0 || d->hpe_fifo == 0 || d->lfu_bins == 0 || d->lfu_bins > 255 || d->cp_min_pct > d->cp_max_pct ||
        d->cp_max_pct > 100 || d->hint_fallback >= GPUMEM_POLICY_HINTED)
        return GPUMEM_EINVAL;
    gpumem__pzero(p, sizeof *p);
    p->d = *d;
    gpumem__policy_layout(d, p, (unsigned char *)mem);
    base = gpumem__pbase(p);
    if (d->kind == GPUMEM_POLICY_HINTED) {
        gpumem__phint *h = &p->hint;
        for (i = 0; i < n; i++) {
            h->w1[i] = h->w2[i] = GPUMEM_POLICY_UNHINTED;
            h->heap.pos[i] = h->wheap.pos[i] = GPUMEM_POLICY_NONE;
        }
        gpumem__pzero(h->held, n);
        gpumem__pzero(h->wheld, n);
        gpumem__pzero(h->arm, n);
        gpumem__pzero(h->weight, (size_t)n * 8);
        gpumem__pzero(h->demoted, n);
        gpumem__pzero(h->met, n);
        gpumem__pzero(h->ptag, ((size_t)h->pmask + 1) * 8);
        gpumem__plist_clear(&h->dlist);
        h->trust = GPUMEM_POLICY_TRUST_MAX / 2; /* trusted until proven wrong */
    }
    if (base < GPUMEM_POLICY_SLOT_KINDS)
        for (i = 0; i < n; i++) p->slot.words[i] = 0;
    gpumem_policy_slot_hints_init(p->slot.hints);
    for (i = 0; i < n; i++) p->line_of[i] = 0;
    gpumem__pzero(p->pin, n);
    gpumem__plist_clear(&p->lru.l);
    gpumem__plist_clear(&p->cp.l);
    p->lfu.n_bins = d->lfu_bins;
    if (p->lfu.bins)
        for (i = 0; i < d->lfu_bins; i++) gpumem__plist_clear(&p->lfu.bins[i]);
    p->cp.boundary = GPUMEM_POLICY_NONE;
    p->cp.protect = (uint32_t)((uint64_t)n * d->cp_protect_pct / 100);
    p->cp.lo = (uint32_t)((uint64_t)n * d->cp_min_pct / 100);
    p->cp.hi = (uint32_t)((uint64_t)n * d->cp_max_pct / 100);
    if (p->cp.protect < p->cp.lo) p->cp.protect = p->cp.lo;
    if (p->cp.protect > p->cp.hi) p->cp.protect = p->cp.hi;
    if (base == GPUMEM_POLICY_HPE) {
        gpumem__phpe *h = &p->hpe;
        gpumem__plist_clear(&h->chain);
        for (i = 0; i < n; i++) h->sets[i].next = i + 1 < n ? i + 1 : GPUMEM_POLICY_NONE;
        for (i = 0; i <= h->index_mask; i++) h->index[i] = GPUMEM_POLICY_NONE;
        for (i = 0; i < d->hpe_fifo; i++) h->fifo[0][i] = h->fifo[1][i] = UINT64_MAX;
        h->p1 = h->p2 = h->victim = GPUMEM_POLICY_NONE;
        h->cur = 2; /* intervals start at 2 so "interval + 2 <= cur" never wraps */
    }
    if (base == GPUMEM_POLICY_TOURNAMENT) {
        p->tm.active = 7;
        gpumem__pzero(p->tm.ghost_who, (size_t)n * GPUMEM_POLICY_GHOSTS);
    }
    return GPUMEM_OK;
}

/* A hit on the line in slot k. */
GPUMEM_API void gpumem_policy_on_access(gpumem_policy *p, uint32_t k, uint64_t line) {
    if (!p) return;
    (void)line;
    if (GPUMEM__HINT_HOOKS && p->d.kind == GPUMEM_POLICY_HINTED) gpumem__hint_on_access(p, k);
    gpumem__pbase_access(p, gpumem__pbase(p), k);
}

/* `line` was missed and is now in slot k (free, or just evicted). HINTED
 * counts the fill as a use of the line (its hints are judged on it). */
GPUMEM_API void gpumem__policy_fill_as(gpumem_policy *p, uint32_t k, uint64_t line, int use) {
    if (!p) return;
    if (p->line_of) p->line_of[k] = line;
    gpumem__pbase_fill(p, gpumem__pbase(p), k, line);
    if (GPUMEM__HINT_HOOKS && p->d.kind == GPUMEM_POLICY_HINTED) gpumem__hint_on_fill(p, k, line, use);
}

GPUMEM_API void gpumem_policy_on_fill(gpumem_policy *p, uint32_t k, uint64_t line) {
    gpumem__policy_fill_as(p, k, line, 1);
}

/* `line` was read ahead into slot k (gpumem_cache_prefetch): a fill that is
 * not a use, so HINTED judges none of its hints on it (a hint for a later
 * epoch would be proved wrong by its own prefetch). */
GPUMEM_API void gpumem_policy_on_fill_ahead(gpumem_policy *p, uint32_t k, uint64_t line) {
    gpumem__policy_fill_as(p, k, line, 0);
}

/* The line in slot k leaves it (chosen by gpumem_policy_victim or not). */
GPUMEM_API void gpumem_policy_on_evict(gpumem_policy *p, uint32_t k, uint64_t line) {
    if (!p) return;
    p->evictions++;
    gpumem__pbase_evict(p, gpumem__pbase(p), k, line);
    if (GPUMEM__HINT_HOOKS && p->d.kind == GPUMEM_POLICY_HINTED) gpumem__hint_on_evict(p, k, line);
}

/* The slot to evict next, never a pinned one (pinned may be NULL); NONE if
 * every occupied slot is pinned. Call only when every slot is occupied. */
GPUMEM_API uint32_t gpumem_policy_victim(gpumem_policy *p, const uint8_t *pinned) {
    if (!p) return GPUMEM_POLICY_NONE;
    if (GPUMEM__HINT_HOOKS && p->d.kind == GPUMEM_POLICY_HINTED) return gpumem__hint_victim(p, pinned);
    return gpumem__pbase_victim(p, p->d.kind, pinned);
}

/* The statuses a hint call shares: the policy, and slot k holding `line`. */
GPUMEM_API gpumem_status gpumem__hint_check(const gpumem_policy *p, uint32_t k, uint64_t line) {
    if (!p) return GPUMEM_ENULL;
    if (!GPUMEM__HINT_HOOKS) return GPUMEM_ESTATE; /* host code (GPUMEM__HINT_HOOKS) */
    if (p->d.kind != GPUMEM_POLICY_HINTED) return GPUMEM_ESTATE;
    if (k != GPUMEM_POLICY_NONE && (k >= p->d.n_slots || p->line_of[k] != line)) return GPUMEM_EINVAL;
    return GPUMEM_OK;
}

/* HINTED: the line in slot k (GPUMEM_POLICY_NONE: not resident; it waits
 * in the pending table) will next be used at epoch `when`. ESTATE on
 * another kind; EINVAL if slot k does not hold `line`; ERANGE for an epoch
 * already past or GPUMEM_POLICY_UNHINTED. */
/* HINTED_RRIP in a sequential struct (the simulator): the slot kind's own
 * calls, on the policy's words (k: the line's slot, or NONE: not cached). */
GPUMEM_API gpumem_status gpumem__slot_kind_hint(gpumem_policy *p, uint32_t k, uint64_t line, uint64_t when,
                                                int demote) {
    if (k == GPUMEM_POLICY_NONE) return gpumem_policy_slot_hint_later(p->slot.hints, line, when, demote);
    if (k >= p->d.n_slots || p->line_of[k] != line) return GPUMEM_EINVAL;
    return gpumem_policy_slot_hint(p->slot.hints, &p->slot.words[k], when, demote);
}

/* Pending entry i taken for `line`, empty: no hint, no weight. */
GPUMEM_API void gpumem__hint_pending_claim(gpumem__phint *h, uint32_t i, uint64_t line) {
    h->ptag[i] = line + 1;
    h->pw1[i] = h->pw2[i] = GPUMEM_POLICY_UNHINTED;
    h->pmet[i] = 0;
    h->pweight[i] = h->pgone[i] = 0;
}

GPUMEM_API gpumem_status gpumem_policy_hint(gpumem_policy *p, uint32_t k, uint64_t line, uint64_t when) {
    gpumem__phint *h;
    gpumem_status st;
    if (p && p->d.kind == GPUMEM_POLICY_HINTED_RRIP) return gpumem__slot_kind_hint(p, k, line, when, 0);
    st = gpumem__hint_check(p, k, line);
    if (st != GPUMEM_OK) return st;
    h = &p->hint;
    if (when == GPUMEM_POLICY_UNHINTED || when < h->epoch) return GPUMEM_ERANGE;
    if (k == GPUMEM_POLICY_NONE) {
        uint32_t i = gpumem__hint_pending(h, line);
        if (h->ptag[i] != line + 1) {
            if (h->ptag[i] && h->pw1[i] < when && !gpumem__hint_past(p, h->pw1[i]))
                return GPUMEM_OK; /* the table keeps the sooner of two lines' hints */
            gpumem__hint_pending_claim(h, i, line);
        }
        gpumem__hint_put(&h->pw1[i], &h->pw2[i], &h->pmet[i], when);
        return GPUMEM_OK;
    }
    gpumem__hint_undemote(p, k);
    gpumem__hint_put(&h->w1[k], &h->w2[k], &h->met[k], when);
    gpumem__hint_rekey(p, k);
    return GPUMEM_OK;
}

/* HINTED: the application is done with `line` (in slot k, or NONE): it goes
 * before any other, its hints dropped. Statuses as gpumem_policy_hint. */
GPUMEM_API gpumem_status gpumem_policy_demote(gpumem_policy *p, uint32_t k, uint64_t line) {
    gpumem__phint *h;
    gpumem_status st;
    if (p && p->d.kind == GPUMEM_POLICY_HINTED_RRIP) return gpumem__slot_kind_hint(p, k, line, 0, 1);
    st = gpumem__hint_check(p, k, line);
    if (st != GPUMEM_OK) return st;
    h = &p->hint;
    if (k == GPUMEM_POLICY_NONE) {
        uint32_t i = gpumem__hint_pending(h, line);
        if (h->ptag[i] == line + 1) h->ptag[i] = 0;
        return GPUMEM_OK;
    }
    h->w1[k] = h->w2[k] = GPUMEM_POLICY_UNHINTED;
    h->met[k] = 0;
    if (!h->demoted[k]) {
        h->demoted[k] = 1;
        gpumem__plist_append(&h->dlist, h->dprev, h->dnext, k);
    }
    gpumem__hint_rekey(p, k);
    return GPUMEM_OK;
}

/* HINTED: the line in slot k (or NONE) weighs `weight` (0: no weight):
 * how much the application expects to use it beyond its next-use hints;
 * among lines with no hint standing the lightest goes first, unweighted
 * ones before any. Statuses as gpumem_policy_hint (no epoch to refuse). */
GPUMEM_API gpumem_status gpumem_policy_weight(gpumem_policy *p, uint32_t k, uint64_t line, uint64_t weight) {
    gpumem__phint *h;
    gpumem_status st = gpumem__hint_check(p, k, line); /* HINTED only: the slot kind takes no weights (ESTATE) */
    if (st != GPUMEM_OK) return st;
    h = &p->hint;
    if (k == GPUMEM_POLICY_NONE) {
        uint32_t i = gpumem__hint_pending(h, line);
        if (h->ptag[i] != line + 1) {
            if (h->ptag[i] && h->pw1[i] != GPUMEM_POLICY_UNHINTED && !gpumem__hint_past(p, h->pw1[i]))
                return GPUMEM_OK; /* the table keeps another line's standing hint over a weight */
            gpumem__hint_pending_claim(h, i, line);
        }
        h->pweight[i] = weight;
        return GPUMEM_OK;
    }
    h->weight[k] = weight;
    gpumem__hint_rekey(p, k);
    return GPUMEM_OK;
}

/* HINTED: the application's clock is at `epoch` now. Epochs never go back
 * (EINVAL); GPUMEM_POLICY_UNHINTED is no epoch (EOVERFLOW); ESTATE on
 * another kind. */
GPUMEM_API gpumem_status gpumem_policy_epoch(gpumem_policy *p, uint64_t epoch) {
    if (!p) return GPUMEM_ENULL;
    if (p->d.kind == GPUMEM_POLICY_HINTED_RRIP) return gpumem_policy_slot_epoch(p->slot.hints, epoch);
    if (!GPUMEM__HINT_HOOKS) return GPUMEM_ESTATE; /* host code (GPUMEM__HINT_HOOKS) */
    if (p->d.kind != GPUMEM_POLICY_HINTED) return GPUMEM_ESTATE;
    if (epoch == GPUMEM_POLICY_UNHINTED) return GPUMEM_EOVERFLOW;
    if (epoch < p->hint.epoch) return GPUMEM_EINVAL;
    p->hint.epoch = epoch;
    gpumem__hint_sweep(p);
    return GPUMEM_OK;
}

/* ======================================================================== */
/* 3. GMT: reuse-distance prediction and placement (the GMT paper, §2.3)   */
/* ======================================================================== */

/* Ordinary least squares RD = m * VTD + b over (VTD, RD) samples. */
typedef struct gpumem_policy_ols {
    double n, sx, sy, sxy, sxx;
} gpumem_policy_ols;

GPUMEM_API void gpumem_policy_ols_add(gpumem_policy_ols *o, double x, double y) {
    if (!o) return;
    o->n += 1;
    o->sx += x;
    o->sy += y;
    o->sxy += x * y;
    o->sxx += x * x;
}

/* 0 without samples. When every x is equal (a pure loop: every VTD the
 * same) no line is determined; the fit goes through the origin instead
 * (m = sum xy / sum xx, b = 0), which still maps that VTD to its RD. */
GPUMEM_API int gpumem_policy_ols_solve(const gpumem_policy_ols *o, double *m, double *b) {
    double den;
    if (!o || !m || !b) return 0;
    den = o->n * o->sxx - o->sx * o->sx;
    if (o->n < 1 || o->sxx == 0) return 0;
    if (o->n < 2 || den <= 1e-9 * o->n * o->sxx) {
        *m = o->sxy / o->sxx;
        *b = 0;
        return 1;
    }
    *m = (o->n * o->sxy - o->sx * o->sy) / den;
    *b = (o->sy - *m * o->sx) / o->n;
    return 1;
}

/* Exact reuse distances of a stream of accesses, GMT's CPU side (§2.3.3):
 * a Fenwick tree over access times marks each line's latest access, so the
 * reuse distance of an access (distinct lines since the line's previous
 * access) is the number of marks after that previous access. Each access
 * with a previous one is a (VTD, RD) sample for the least-squares fit. The
 * first `window` accesses are taken; memory from the caller
 * (gpumem_policy_rd_bytes). One thread. */
typedef struct gpumem_policy_rd {
    uint32_t *tree;   /* window entries */
    uint64_t *last;   /* per line: time of its last access + 1 (0: none) */
    uint64_t n_lines, window, t, samples;
    gpumem_policy_ols ols;
} gpumem_policy_rd;

GPUMEM_API size_t gpumem_policy_rd_bytes(uint64_t n_lines, uint64_t window) {
    return (size_t)GPUMEM_ALIGN_UP(window * 4, 8) + (size_t)n_lines * 8;
}

GPUMEM_API void gpumem_policy_rd_init(gpumem_policy_rd *r, uint64_t n_lines, uint64_t window, void *mem) {
    if (!r || !mem) return;
    gpumem__pzero(r, sizeof *r);
    gpumem__pzero(mem, gpumem_policy_rd_bytes(n_lines, window));
    r->n_lines = n_lines;
    r->window = window;
    r->tree = (uint32_t *)mem;
    r->last = (uint64_t *)(void *)((unsigned char *)mem + GPUMEM_ALIGN_UP(window * 4, 8));
}

GPUMEM_API void gpumem__rd_add(gpumem_policy_rd *r, uint64_t i, int v) {
    for (i++; i <= r->window; i += i & (0 - i)) r->tree[i - 1] += (uint32_t)v;
}

GPUMEM_API uint64_t gpumem__rd_sum(const gpumem_policy_rd *r, uint64_t i) { /* marks in [0, i) */
    uint64_t s = 0;
    for (; i > 0; i -= i & (0 - i)) s += r->tree[i - 1];
    return s;
}

/* One access; returns 1 when a sample was added (0 past the window, on a
 * line's first access, or for a line out of range). */
GPUMEM_API int gpumem_policy_rd_access(gpumem_policy_rd *r, uint64_t line) {
    if (!r) return 0;
    uint64_t t = r->t, prev;
    int sampled = 0;
    if (t >= r->window || line >= r->n_lines) return 0;
    prev = r->last[line];
    if (prev) {
        uint64_t rd = gpumem__rd_sum(r, t) - gpumem__rd_sum(r, prev);
        gpumem_policy_ols_add(&r->ols, (double)(t - (prev - 1)), (double)rd);
        gpumem__rd_add(r, prev - 1, -1);
        r->samples++;
        sampled = 1;
    }
    gpumem__rd_add(r, t, 1);
    r->last[line] = t + 1;
    r->t++;
    return sampled;
}

/* Placements (1..3 are the tiers). HOST_IF_FREE is the under-use override:
 * host tier only if it has a free slot, else bypass - it fills idle host
 * memory and never displaces a line predicted to belong there. */
enum { GPUMEM_PLACE_KEEP = 1, GPUMEM_PLACE_HOST = 2, GPUMEM_PLACE_BYPASS = 3, GPUMEM_PLACE_HOST_IF_FREE = 4 };

typedef struct gpumem_policy_gmt_desc {
    uint64_t n_lines;
    uint64_t tier1_lines, tier2_lines; /* capacities, in lines */
    uint32_t tier2_alone;  /* Eq. 1 bound for Tier-2: tier1 + tier2 (0, the default; Fig. 7) or tier2 alone (1) */
    uint32_t override_pct; /* Tier-3 share of recent evictions above which Tier-3 goes to Tier-2 (0: the paper's 80) */
    uint32_t window;       /* recent evictions that share counts over (0: 1024, not given) */
} gpumem_policy_gmt_desc;

typedef struct gpumem_policy_gmt {
    gpumem_policy_gmt_desc d;
    uint64_t *evict_vt;  /* per line: VT at its last eviction + 1, 0 = none */
    uint8_t *hist;       /* per line: its last correct tier (1..3), 0 = none */
    uint32_t w[4][4];    /* transition weights W[prev][next], global (one table, short cold start) */
    double m, b;         /* RRD = m * RVTD + b */
    uint32_t ready;      /* a model has been set */
    uint32_t recent_t3;  /* Tier-3 predictions among the last `window` evictions (decayed count) */
    uint32_t recent_n;
} gpumem_policy_gmt;

/* Zero means default, as for gpumem_policy_desc_resolved (the capacities
 * have none). */
GPUMEM_API gpumem_policy_gmt_desc gpumem_policy_gmt_desc_resolved(const gpumem_policy_gmt_desc *in) {
    gpumem_policy_gmt_desc d;
    gpumem__pzero(&d, sizeof d);
    if (in) d = *in;
    if (!d.override_pct) d.override_pct = 80;
    if (!d.window) d.window = 1024;
    return d;
}

GPUMEM_API gpumem_policy_gmt_desc gpumem_policy_gmt_desc_default(uint64_t n_lines, uint64_t t1, uint64_t t2) {
    gpumem_policy_gmt_desc d;
    gpumem__pzero(&d, sizeof d);
    d.n_lines = n_lines;
    d.tier1_lines = t1;
    d.tier2_lines = t2;
    return gpumem_policy_gmt_desc_resolved(&d);
}

GPUMEM_API size_t gpumem_policy_gmt_bytes(const gpumem_policy_gmt_desc *d) { return d ? (size_t)d->n_lines * 9 : 0; }

GPUMEM_API gpumem_status gpumem_policy_gmt_init(gpumem_policy_gmt *g, const gpumem_policy_gmt_desc *in, void *mem) {
    gpumem_policy_gmt_desc resolved;
    const gpumem_policy_gmt_desc *d = &resolved; /* zero means default */
    if (!g || !in || !mem) return GPUMEM_ENULL;
    resolved = gpumem_policy_gmt_desc_resolved(in);
    if (d->override_pct > 100) return GPUMEM_EINVAL;
    gpumem__pzero(g, sizeof *g);
    g->d = *d;
    g->evict_vt = (uint64_t *)mem;
    g->hist = (uint8_t *)mem + (size_t)d->n_lines * 8;
    gpumem__pzero(mem, gpumem_policy_gmt_bytes(d));
    return GPUMEM_OK;
}

GPUMEM_API void gpumem_policy_gmt_set_model(gpumem_policy_gmt *g, double m, double b) {
    if (!g) return;
    g->m = m;
    g->b = b;
    g->ready = 1;
}

/* Eq. 1: the tier a remaining reuse distance (in lines) belongs to. */
GPUMEM_API uint32_t gpumem_policy_gmt_tier(const gpumem_policy_gmt *g, double rrd) {
    double t2;
    if (!g) return 3; /* no model: storage */
    t2 = (double)g->d.tier2_lines + (g->d.tier2_alone ? 0 : (double)g->d.tier1_lines);
    if (rrd < (double)g->d.tier1_lines) return 1;
    return rrd < t2 ? 2 : 3;
}

/* A Tier-1 miss of `line` at virtual time vt: if it was evicted before,
 * learn the tier it should have gone to (Fig. 5). */
GPUMEM_API void gpumem_policy_gmt_on_fetch(gpumem_policy_gmt *g, uint64_t line, uint64_t vt) {
    if (!g) return;
    uint32_t c, prev, i, j;
    if (g->evict_vt[line] == 0) return;
    if (g->ready) {
        double rvtd = (double)(vt - (g->evict_vt[line] - 1));
        c = gpumem_policy_gmt_tier(g, g->m * rvtd + g->b);
        prev = g->hist[line];
        if (prev && ++g->w[prev][c] >= 0xFFFFu) /* age: halve every weight */
            for (i = 1; i < 4; i++)
                for (j = 1; j < 4; j++) g->w[i][j] >>= 1;
        g->hist[line] = (uint8_t)c;
    }
    g->evict_vt[line] = 0;
}

/* Predicted tier for a line about to be evicted: argmax W[last][*]; no
 * history or no model: Tier-2 (tier order, the paper's fallback). */
GPUMEM_API uint32_t gpumem_policy_gmt_predict(const gpumem_policy_gmt *g, uint64_t line) {
    uint32_t h, best = 2, y;
    if (!g) return 2;
    h = g->hist[line];
    if (!g->ready || !h) return 2;
    if (g->w[h][1] + g->w[h][2] + g->w[h][3] == 0) return h; /* one observation: repeat it */
    for (y = 1; y < 4; y++)
        if (g->w[h][y] > g->w[h][best]) best = y;
    return best;
}

/* Where the Tier-1 eviction candidate `line` goes: KEEP (predicted short
 * reuse and the caller may still skip: it looks for another candidate), HOST
 * (the host tier, displacing its oldest line when full: the paper's §2.2
 * FIFO) or BYPASS. With more than override_pct of recent evictions predicted
 * Tier-3, Tier-3 becomes HOST_IF_FREE so the host tier is not left idle
 * (§2.2) - but only its free slots: the paper's "discard when full" (§2.1.3),
 * which keeps a loop's first lines there instead of cycling them. Anything
 * but KEEP records the eviction time for learning. */
GPUMEM_API uint32_t gpumem_policy_gmt_place(gpumem_policy_gmt *g, uint64_t line, uint64_t vt, uint32_t skips_left) {
    if (!g) return GPUMEM_PLACE_BYPASS;
    uint32_t t = gpumem_policy_gmt_predict(g, line);
    if (t == 1 && skips_left) return GPUMEM_PLACE_KEEP;
    if (t == 1) t = 2;
    if (g->recent_n >= g->d.window) { /* a decayed window: drop the average of one entry */
        g->recent_t3 -= g->recent_t3 / g->d.window;
        g->recent_n--;
    }
    g->recent_n++;
    g->recent_t3 += t == 3;
    g->evict_vt[line] = vt + 1;
    if (t == 3 && (uint64_t)g->recent_t3 * 100 > (uint64_t)g->recent_n * g->d.override_pct)
        return GPUMEM_PLACE_HOST_IF_FREE;
    return t == 2 ? GPUMEM_PLACE_HOST : GPUMEM_PLACE_BYPASS;
}

/* ======================================================================== */
/* 4. Prefetch                                                              */
/* ======================================================================== */

/* Readahead one miss at a time: several streams (GPU misses arrive
 * scrambled, so one cursor is not enough; gpumem_policy_ra_batch below
 * takes them a sorted batch at a time); a miss at or just past a
 * stream's expected next line doubles its window up to max, anything else
 * starts a stream at the minimum window (the Linux ondemand rule with GAIA's
 * larger cap). */
#define GPUMEM_POLICY_RA_STREAMS 8u
typedef struct gpumem_policy_readahead {
    uint32_t min_window, max_window; /* lines; defaults 4 and 64 (GAIA: 16 MiB cap, 64x the CPU's) */
    uint32_t slack;                  /* a miss this far past the expected line still continues it (8) */
    uint64_t expect[GPUMEM_POLICY_RA_STREAMS];
    uint32_t window[GPUMEM_POLICY_RA_STREAMS];
    uint32_t age[GPUMEM_POLICY_RA_STREAMS];
    uint32_t tick;
} gpumem_policy_readahead;

GPUMEM_API void gpumem_policy_readahead_init(gpumem_policy_readahead *r, uint32_t min_window, uint32_t max_window) {
    if (!r) return;
    gpumem__pzero(r, sizeof *r);
    r->min_window = min_window ? min_window : 4;
    r->max_window = max_window >= r->min_window ? max_window : r->min_window;
    r->slack = 8;
}

/* A demand miss on `line`: lines [*first, *first + *count) should be read
 * ahead (*count may be 0). */
GPUMEM_API void gpumem_policy_readahead_on_miss(gpumem_policy_readahead *r, uint64_t line, uint64_t *first,
                                                uint32_t *count) {
    uint32_t i, s = 0, oldest = 0;
    if (first) *first = line + 1; /* nothing to read ahead, whatever is NULL */
    if (count) *count = 0;
    if (!r || !first || !count) return;
    r->tick++;
    for (i = 0; i < GPUMEM_POLICY_RA_STREAMS; i++) {
        if (r->window[i] && line >= r->expect[i] && line <= r->expect[i] + r->slack) {
            s = i;
            break;
        }
        if (r->age[i] < r->age[oldest]) oldest = i;
    }
    if (i == GPUMEM_POLICY_RA_STREAMS) { /* a new stream: no readahead yet, one line of evidence */
        r->window[oldest] = r->min_window;
        r->expect[oldest] = line + 1;
        r->age[oldest] = r->tick;
        return;
    }
    r->window[s] = r->window[s] * 2 > r->max_window ? r->max_window : r->window[s] * 2;
    *count = r->window[s];
    r->expect[s] = line + 1 + r->window[s];
    r->age[s] = r->tick;
}

/* Readahead for GPU miss streams, a batch at a time (GAIA §4.2 and
 * §10.1 item 8). A GPU reports its misses in batches (the hardware coalesces
 * up to 256 faults; here, a miss queue drained by a host thread), and in a
 * scrambled order: thread blocks run in no fixed order, so a kernel reading
 * a file front to back, a stride per block, looks random to a cursor that
 * sees one miss at a time (the single-miss readahead above, and Linux's).
 * So each batch is sorted first, then cut into runs of misses a constant
 * stride apart (holes of up to GPUMEM_POLICY_RA_HOLES strides allowed:
 * lines that hit never miss), and each run is matched against a small table
 * of streams keyed by stride. A run that continues a stream doubles its
 * window; a run of at least min_run misses that continues none starts one
 * (two misses a stride apart in a random batch happen by chance; three
 * evenly spaced do not); a shorter one is no evidence and reads nothing
 * ahead. The window is capped in bytes: 16 MiB for a GPU stream (GAIA's
 * cap), 256 KiB for a host stream (Linux's, GAIA's "64x smaller").
 * Host or device code; one caller at a time (the thread draining the miss
 * queue, or a caller's lock). The batch is sorted in place. */
#define GPUMEM_POLICY_RA_GPU_CAP (16u << 20)   /* bytes: GAIA's window for GPU I/O */
#define GPUMEM_POLICY_RA_HOST_CAP (256u << 10) /* bytes: the CPU's (Linux's default cap) */
#ifndef GPUMEM_POLICY_RA_HOLES
#define GPUMEM_POLICY_RA_HOLES 4u /* a run may skip this many strides minus one (lines that hit) */
#endif
#define GPUMEM_POLICY_RA_BATCH_STREAMS 16u

/* Lines first, first + stride, ... (count of them) to read ahead. */
typedef struct gpumem_policy_ra_span {
    uint64_t first;
    uint32_t stride, count;
} gpumem_policy_ra_span;

typedef struct gpumem_policy_ra_batch {
    uint64_t n_lines;     /* nothing past the end is proposed */
    uint32_t min_window;  /* lines a new stream reads ahead at least (4) */
    uint32_t max_window;  /* lines: the cap in bytes / line size, at least min_window */
    uint32_t max_stride;  /* a larger gap ends a run (64 lines) */
    uint32_t min_run;     /* misses a run needs to start a stream (3) */
    uint32_t tick;
    struct {
        uint64_t next;    /* the line the stream is expected to miss next */
        uint64_t ahead;   /* the last line already proposed (next - stride: none) */
        uint32_t stride, window, age; /* window 0: a free entry */
    } s[GPUMEM_POLICY_RA_BATCH_STREAMS];
} gpumem_policy_ra_batch;

/* cap_bytes: GPUMEM_POLICY_RA_GPU_CAP or GPUMEM_POLICY_RA_HOST_CAP (or the
 * caller's); line_bytes: the cache's line size. */
GPUMEM_API void gpumem_policy_ra_batch_init(gpumem_policy_ra_batch *r, uint64_t n_lines, uint32_t line_bytes,
                                            uint32_t cap_bytes) {
    if (!r) return;
    gpumem__pzero(r, sizeof *r);
    r->n_lines = n_lines;
    r->min_window = 4;
    r->max_window = line_bytes ? cap_bytes / line_bytes : 0;
    if (r->max_window < r->min_window) r->max_window = r->min_window;
    r->max_stride = 64;
    r->min_run = 3;
}

/* Sort a batch of line numbers in place: Shell's sort with Knuth's gaps
 * (1, 4, 13, 40, ...), no table, recursion or allocation (device code),
 * about n^1.5 steps: small against the I/O of a batch of a few hundred. */
GPUMEM_API void gpumem_policy_sort_lines(uint64_t *a, uint32_t n) {
    uint32_t h = 1, i, j;
    while (h < n / 3) h = 3 * h + 1;
    for (; h > 0; h /= 3) {
        for (i = h; i < n; i++) {
            uint64_t v = a[i];
            for (j = i; j >= h && a[j - h] > v; j -= h) a[j] = a[j - h];
            a[j] = v;
        }
    }
}

/* A run [lo, hi] of `misses` misses `stride` apart (misses 1: stride 0):
 * continue the stream it belongs to or start one, and propose what to read
 * ahead in *span. Returns 1 if *span holds lines. */
GPUMEM_API int gpumem__ra_batch_run(gpumem_policy_ra_batch *r, uint64_t lo, uint64_t hi, uint32_t stride,
                                    uint32_t misses, gpumem_policy_ra_span *span) {
    uint32_t i, k = GPUMEM_POLICY_RA_BATCH_STREAMS, oldest = 0;
    uint64_t from, to, window;
    for (i = 0; i < GPUMEM_POLICY_RA_BATCH_STREAMS; i++) {
        const uint32_t d = r->s[i].stride;
        /* Continues stream i: on its stride, from just behind what it was
         * expected to miss (scrambled stragglers) to a little past what was
         * read ahead for it. A lone miss (stride 0) takes the stream's, and
         * so does a run of a few strides at a time (holes: lines that hit). */
        if (r->s[i].window && stride % d == 0 && stride / d <= GPUMEM_POLICY_RA_HOLES && lo + (uint64_t)d * r->max_window >= r->s[i].next &&
            lo <= (r->s[i].ahead > r->s[i].next ? r->s[i].ahead : r->s[i].next) + (uint64_t)d * GPUMEM_POLICY_RA_HOLES &&
            (lo > r->s[i].next ? lo - r->s[i].next : r->s[i].next - lo) % d == 0) {
            k = i;
            break;
        }
        /* Otherwise replace a free entry, or the one continued longest ago. */
        if (r->s[oldest].window && (!r->s[i].window || r->s[i].age < r->s[oldest].age)) oldest = i;
    }
    if (k == GPUMEM_POLICY_RA_BATCH_STREAMS) {
        if (stride == 0 || misses < r->min_run) return 0; /* no evidence of a stream */
        k = oldest;
        r->s[k].stride = stride;
        r->s[k].window = (uint64_t)misses * 2 > r->min_window ? misses * 2 : r->min_window;
        r->s[k].ahead = hi;
    } else {
        r->s[k].window *= 2;
    }
    if (r->s[k].window > r->max_window) r->s[k].window = r->max_window;
    stride = r->s[k].stride;
    r->s[k].age = ++r->tick;
    if (hi + stride > r->s[k].next) r->s[k].next = hi + stride;
    /* Keep the window ahead of the newest miss; never propose a line twice. */
    window = (uint64_t)r->s[k].window * stride;
    from = (r->s[k].ahead > hi ? r->s[k].ahead : hi) + stride;
    to = hi + window;
    if (to >= r->n_lines) to = r->n_lines ? r->n_lines - 1 : 0;
    if (from > to || from >= r->n_lines) return 0;
    span->first = from;
    span->stride = stride;
    span->count = (uint32_t)((to - from) / stride + 1);
    r->s[k].ahead = from + (uint64_t)(span->count - 1) * stride;
    return 1;
}

/* A batch of n demand misses (sorted in place; duplicates are fine):
 * writes up to max_spans spans of lines to read ahead into spans and
 * returns how many. The caller skips lines it already holds. */
GPUMEM_API uint32_t gpumem_policy_ra_batch_on_misses(gpumem_policy_ra_batch *r, uint64_t *misses, uint32_t n,
                                                     gpumem_policy_ra_span *spans, uint32_t max_spans) {
    uint32_t i = 0, out = 0;
    gpumem_policy_sort_lines(misses, n);
    while (i < n && out < max_spans) {
        uint64_t lo = misses[i], hi = lo;
        uint32_t stride = 0, count = 1, j = i + 1;
        for (; j < n; j++) {
            uint64_t gap = misses[j] - hi;
            if (gap == 0) continue; /* the same line twice (threads of one warp) */
            if (stride == 0) {
                if (gap > r->max_stride) break;
                stride = (uint32_t)gap;
            } else if (gap % stride != 0 || gap / stride > GPUMEM_POLICY_RA_HOLES) {
                break;
            }
            hi = misses[j];
            count++;
        }
        if (gpumem__ra_batch_run(r, lo, hi, stride, count, &spans[out])) out++;
        i = j;
    }
    return out;
}

/* ObservUVM's feedback-directed prefetch (FDP, §6.1): regions of 2^shift
 * lines; aggressive mode (AP) reads the whole region on a miss in it (the
 * caller skips lines it holds), the tree-threshold mode (TBP) reads the rest
 * of a region once more than threshold_pct of it has missed (counting the
 * region's misses since its last such read: the header cannot see residency). Feedback from prefetched lines - used
 * before eviction or evicted unused - picks the mode over windows of
 * `period` events: AP while more than 80% are used. */
typedef struct gpumem_policy_fdp {
    uint32_t shift, threshold_pct, period, ap_pct;
    uint32_t ap;           /* 1: aggressive mode */
    uint32_t used, wasted; /* this window */
    uint8_t *missed;       /* per region: demand misses seen (saturating) */
    uint64_t n_regions;
} gpumem_policy_fdp;

GPUMEM_API size_t gpumem_policy_fdp_bytes(uint64_t n_lines, uint32_t shift) {
    return (size_t)((n_lines + (1ull << shift) - 1) >> shift);
}

GPUMEM_API void gpumem_policy_fdp_init(gpumem_policy_fdp *f, uint64_t n_lines, uint32_t shift, void *mem) {
    if (!f || !mem) return;
    gpumem__pzero(f, sizeof *f);
    f->shift = shift;       /* 5: 2 MiB regions of 64 KiB pages, as in UVM */
    f->threshold_pct = 51;  /* the UVM driver's default */
    f->period = 256;        /* not given; long enough to be a rate, short enough to switch back */
    f->ap_pct = 80;         /* paper */
    f->ap = 1;              /* start aggressive: every application but GMM chose AP */
    f->missed = (uint8_t *)mem;
    f->n_regions = gpumem_policy_fdp_bytes(n_lines, shift);
    gpumem__pzero(mem, (size_t)f->n_regions);
}

GPUMEM_API void gpumem_policy_fdp_on_miss(gpumem_policy_fdp *f, uint64_t line, uint64_t *first, uint32_t *count) {
    if (!f || !first || !count) return;
    uint64_t r = line >> f->shift;
    uint32_t size = 1u << f->shift, m = f->missed[r];
    *first = r << f->shift;
    *count = 0;
    if (f->ap) { /* the region is (re)read on any miss in it */
        *count = size;
        return;
    }
    if (m < 255) f->missed[r] = (uint8_t)++m;
    if (m * 100 > size * f->threshold_pct) { /* past the threshold: the rest; count again from 0 */
        *count = size;
        f->missed[r] = 0;
    }
}

/* A prefetched line was used (1) or evicted unused (0). */
GPUMEM_API void gpumem_policy_fdp_feedback(gpumem_policy_fdp *f, int used) {
    if (!f) return;
    if (used) f->used++;
    else f->wasted++;
    if (f->used + f->wasted >= f->period) {
        f->ap = (uint64_t)f->used * 100 > (uint64_t)(f->used + f->wasted) * f->ap_pct;
        f->used = f->wasted = 0;
    }
}

/* ======================================================================== */
/* 5. Access traces                                                          */
/* ======================================================================== */

#define GPUMEM_POLICY_TRACE_MAGIC "GPMTRC01"
#define GPUMEM_POLICY_TRACE_MAGIC_HINTS "GPMTRC02" /* a trace with hint records */
#define GPUMEM_POLICY_TRACE_WRITE (1ull << 63)
#define GPUMEM_POLICY_TRACE_CONTROL (1ull << 62) /* GPMTRC02: a hint record, not an access */
#define GPUMEM_POLICY_TRACE_OP_SHIFT 56          /* GPMTRC02: the record's kind in bits 56..61 */
#define GPUMEM_POLICY_TRACE_HINT_LINES (1ull << 56) /* lines a hint record can name */
enum {
    GPUMEM_POLICY_TRACE_NOP = 0,    /* nothing (fills a record cut at the trace's capacity) */
    GPUMEM_POLICY_TRACE_HINT = 1,   /* the line's next use is at the epoch in the next word */
    GPUMEM_POLICY_TRACE_DEMOTE = 2, /* done with the line */
    GPUMEM_POLICY_TRACE_EPOCH = 3,  /* the clock is at the epoch in the next word */
    GPUMEM_POLICY_TRACE_SOON = 4,   /* the line is needed soon, at that epoch: a prefetch hint */
    GPUMEM_POLICY_TRACE_WEIGHT = 5  /* the line's weight is in the next word */
};

/* Caller memory for `cap` accesses; accesses past it are counted in
 * `dropped`, not recorded. Safe from any number of host or GPU threads. */
typedef struct gpumem_policy_trace {
    uint64_t *buf;
    uint64_t cap;
    uint64_t n;       /* slots handed out (may exceed cap) */
    uint64_t hints;   /* hint records among them: written as GPMTRC02 */
} gpumem_policy_trace;

GPUMEM_API void gpumem_policy_trace_record(gpumem_policy_trace *t, uint64_t line, int write) {
    if (!t) return;
    uint64_t i = gpumem_atomic_fetch_add_u64(&t->n, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    if (i < t->cap) t->buf[i] = line | (write ? GPUMEM_POLICY_TRACE_WRITE : 0);
}

/* A hint record (GPUMEM_POLICY_TRACE_HINT .. _WEIGHT) about `line` (below
 * 2^56; ignored for EPOCH) with `value` (the epoch or the weight; ignored for DEMOTE),
 * in its two words at once. A record the capacity cuts becomes a NOP. */
GPUMEM_API void gpumem_policy_trace_hint(gpumem_policy_trace *t, uint32_t op, uint64_t line, uint64_t value) {
    uint32_t words = op == GPUMEM_POLICY_TRACE_DEMOTE ? 1u : 2u;
    uint64_t i, head;
    if (!t || op == GPUMEM_POLICY_TRACE_NOP || op > GPUMEM_POLICY_TRACE_WEIGHT) return;
    head = GPUMEM_POLICY_TRACE_CONTROL | ((uint64_t)op << GPUMEM_POLICY_TRACE_OP_SHIFT) |
           (op == GPUMEM_POLICY_TRACE_EPOCH ? 0 : line & (GPUMEM_POLICY_TRACE_HINT_LINES - 1));
    i = gpumem_atomic_fetch_add_u64(&t->n, words, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    gpumem_atomic_fetch_add_u64(&t->hints, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    if (i + words <= t->cap) {
        t->buf[i] = head;
        if (words == 2) t->buf[i + 1] = value & (GPUMEM_POLICY_TRACE_WRITE - 1);
    } else if (i < t->cap) {
        t->buf[i] = GPUMEM_POLICY_TRACE_CONTROL; /* NOP */
    }
}

GPUMEM_API uint64_t gpumem_policy_trace_count(const gpumem_policy_trace *t) {
    return !t ? 0 : t->n < t->cap ? t->n : t->cap;
}

#if !GPUMEM_ON_DEVICE && !defined(GPUMEM_NO_HOST_SHIM) && (defined(GPUMEM_IMPLEMENTATION) || defined(GPUMEM_POLICY_TRACE_IO))
#include <stdio.h>
/* Write the recorded accesses to `path` in the binary trace format
 * (little-endian hosts): GPMTRC02 if hint records were made, GPMTRC01 if
 * not. Host only. */
static inline gpumem_status gpumem_policy_trace_write(const gpumem_policy_trace *t, const char *path) {
    if (!t || !path || (!t->buf && t->n)) return GPUMEM_ENULL;
    FILE *f = fopen(path, "wb");
    uint64_t n = gpumem_policy_trace_count(t);
    int ok;
    if (!f) return GPUMEM_EIO;
    ok = fwrite(t->hints ? GPUMEM_POLICY_TRACE_MAGIC_HINTS : GPUMEM_POLICY_TRACE_MAGIC, 1, 8, f) == 8 &&
         fwrite(t->buf, 8, (size_t)n, f) == (size_t)n;
    ok = (fclose(f) == 0) && ok;
    return ok ? GPUMEM_OK : GPUMEM_EIO;
}
#endif

#endif /* GPUMEM_POLICY_H */
