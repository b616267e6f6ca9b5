/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_tier.h - a host-memory tier below the gpumem cache: three tiers
 * (GPU memory, host memory, storage) orchestrated by the threads that use
 * them, with GMT's reuse-based placement (the GMT paper; docs/tier.md).
 *
 * USAGE (host threads; a cache made as in gpumem_cache.h)
 *
 *   #define _POSIX_C_SOURCE 200809L
 *   #define GPUMEM_IMPLEMENTATION             // in exactly one .c file
 *   #include "gpumem_tier.h"                  // includes gpumem_cache.h
 *
 *   // given: gpumem_cache *cache, uint32_t n_slots
 *   gpumem_tier_desc td = gpumem_tier_desc_default(cache, 4 * n_slots);  // host slots, in lines
 *   td.placement = GPUMEM_TIER_GMT_REUSE;      // or GPUMEM_TIER_ORDER, GPUMEM_TIER_NEVER_HOST
 *   td.policy    = GPUMEM_POLICY_FIFO;         // host-tier replacement: FIFO or CLOCK
 *   gpumem_tier *t;
 *   gpumem_tier_create(&td, &t);               // attaches itself to the cache
 *   // threads use the cache exactly as before (gpumem_cache_acquire, refs, ...):
 *   // misses look in host memory first, evictions may move lines there.
 *   // GMT-Reuse learns from a CPU thread (the paper's "dedicated CPU thread"):
 *   gpumem_tier_train(t, NULL);                // now and then; refits the model
 *   gpumem_cache_flush(cache, NULL);           // writes back BOTH tiers' dirty lines
 *   gpumem_tier_stats s; gpumem_tier_get_stats(t, &s);
 *   gpumem_tier_destroy(t);                    // writes back the host tier, detaches
 *   gpumem_cache_destroy(cache);               // (refused while a tier is attached)
 *
 * In device code, use the cache as usual (gpumem_cache_acquire_coalesced and
 * the array reference): a miss served from host memory is copied into the
 * GPU slot by the whole coalesced group, each lane a strided share. Place
 * the tier with gpumem_tier_init: metadata in GPU memory (the per-line
 * lookup is then one load of GPU memory, as GMT's ~50 ns), host slots in
 * pinned memory mapped into the GPU (cudaHostAlloc(..., cudaHostAllocMapped)).
 * gpumem_tier_create uses GPUMEM_MALLOC (host threads only).
 *
 * DESIGN
 *
 * Exclusive tiers. A line is in a GPU slot or in a host slot, never both.
 * Reads from storage go straight into GPU slots (GMT's up-path bypass). On
 * a GPU eviction the placement decides, while the evicting thread owns the
 * line (BUSY, no references, slot locked):
 *   - keep: the line stays, with a second chance in the cache's policy, and
 *     the sweep looks at the next candidate (at most GPUMEM_TIER_MAX_SKIPS
 *     per sweep);
 *   - host: the line is copied into a host slot, dirty or not; a dirty line
 *     stays dirty there and is written to storage only when displaced from
 *     the host tier or flushed;
 *   - bypass: the cache drops a clean line and writes a dirty one to storage.
 * Placements: GMT-Reuse (gpumem_policy_gmt: the reuse-distance predictor;
 * host when its class is Tier-2, and when the host tier is full it displaces
 * the oldest; Tier-3 goes to a free host slot only under the 80% override),
 * tier order (always host, displacing when full) and never-host (BaM's two
 * tiers).
 *
 * The three-tier read path. A GPU-cache miss (the thread that won the line's
 * BUSY) looks at the line's host word first: in host memory, it claims the
 * word (BUSY) before it looks for a GPU slot - so the evictions that free
 * one cannot displace the line it came for - then copies the host slot into
 * the GPU slot, frees the host slot, and publishes the line (dirty if the
 * host copy was); otherwise it reads storage. On the device the copy is the
 * coalesced group's (see above); on the host, one memcpy.
 *
 * Host words (one 32-bit word per line of the data, the cache's discipline):
 *     bit 31 IN     the line is in host slot `slot`
 *     bit 30 BUSY   being moved up, displaced or written back: wait
 *     bit 29 DIRTY  the host copy is newer than storage
 *     28..0  slot
 * Every change of a present word is a compare-and-swap to BUSY first, so a
 * fetch, a displacement and a write-back of one line never overlap; a fetch
 * that finds BUSY waits, so it never reads storage while a displaced dirty
 * line is still being written there. Host slots have the cache's slot record
 * (lock, policy word, tag): the lock is taken to change a tag. Free slots
 * are counted (n_free) and marked in a bitmap: an insertion reserves one by
 * decrementing the count, then takes a set bit (fetch_and), so finding it
 * costs a scan of n/64 words, not of the slots; a move up frees its slot by
 * setting its bit, then the count. Replacement (FIFO or CLOCK of
 * gpumem_policy.h, a fetch-add hand) looks only at occupied slots.
 *
 * Who owns what when: a line moving down is BUSY in the cache (the evictor
 * owns it) until its host word is published (release), so the next filler,
 * which acquires the cache word, sees the host word. A line moving up is
 * BUSY in the cache (the filler) and BUSY in the host tier until copied; its
 * cache word gets DIRTY before its host copy is freed, so a flush never
 * finds a dirty line in neither place (gpumem_cache_writeback reports a dirty
 * line being filled as EAGAIN).
 *
 * GMT-Reuse's learning. Virtual time counts acquires (one per coalesced
 * group). The first `train_accesses` accesses are recorded in a sample
 * buffer; gpumem_tier_train (host, one thread at a time) computes their
 * exact reuse distances (gpumem_policy_rd), fits RD = m * VTD + b and hands
 * the model to the predictor. The predictor itself (per-line history, the
 * transition weights) is sequential: its calls hold the tier's gmt_lock
 * (a miss learns only if the lock is free at once; a placement waits).
 * Until a model exists it places as tier order (the paper's fallback).
 *
 * Destroying never drops dirty data: gpumem_tier_detach writes back the host
 * tier (and the cache's dirty lines), sends a Flush, and only then detaches;
 * it refuses with GPUMEM_EBUSY while a line is held or moving, and returns
 * the write-back's failure (GPUMEM_EIO) keeping everything attached.
 */
#ifndef GPUMEM_TIER_H
#define GPUMEM_TIER_H

#include "gpumem_cache.h"

#if !GPUMEM_CACHE_TIER
#error "gpumem_tier.h: the cache was compiled without the tier's hooks (GPUMEM_CACHE_TIER 0)"
#endif

GPUMEM_API const char *gpumem_tier_placement_name(uint32_t p) {
    return p == GPUMEM_TIER_GMT_REUSE ? "gmt-reuse" : p == GPUMEM_TIER_ORDER ? "tier-order"
                                                  : p == GPUMEM_TIER_NEVER_HOST ? "never-host" : "?";
}

typedef struct gpumem_tier_desc {
    gpumem_cache *cache;     /* the GPU tier; the tier attaches itself (cache->tier) */
    uint32_t n_slots;        /* host slots, in lines of the cache, >= 1 */
    uint32_t placement;      /* GPUMEM_TIER_GMT_REUSE (0, the default), _ORDER or _NEVER_HOST */
    uint32_t policy;         /* host replacement: GPUMEM_POLICY_FIFO or _CLOCK (0, GPUMEM_POLICY_DEFAULT:
                                FIFO, GMT §2.2) */
    uint64_t train_accesses; /* GMT-Reuse: accesses recorded for training (0: GPUMEM_TIER_DEFAULT_TRAIN;
                                GPUMEM_TIER_NO_TRAINING: none, no model) */
    gpumem_policy_gmt_desc gmt; /* the predictor's parameters (0s: the cache's and this tier's sizes,
                                   gpumem_policy_gmt_desc_resolved's defaults) */
    /* memory the caller places (gpumem_tier_init only) */
    void *meta;              /* gpumem_tier_meta_bytes() bytes, 8-byte aligned */
    size_t meta_bytes;
    void *data;              /* n_slots * line_bytes: the host slots */
    uint64_t data_iova;      /* their I/O address, contiguous (0: the virtual address) */
    uint64_t *prp_lists;     /* NVMe with lines > 8 KiB: gpumem_cache_prp_bytes(line, n_slots, kind) bytes */
    uint64_t prp_lists_iova;
} gpumem_tier_desc;

/* Counters (gpumem_tier_get_stats). */
typedef struct gpumem_tier_stats {
    uint64_t accesses;       /* virtual time: acquires seen (GMT-Reuse only) */
    uint64_t host_hits;      /* GPU-cache misses served from host memory */
    uint64_t host_misses;    /* GPU-cache misses that went to storage (a failed host lookup) */
    uint64_t moves;          /* GPU evictions moved to host memory */
    uint64_t dirty_moves;    /* ... of them dirty */
    uint64_t bypasses;       /* GPU evictions not moved (the cache dropped or wrote them) */
    uint64_t keeps;          /* eviction candidates kept in GPU memory (predicted short reuse) */
    uint64_t host_evictions; /* host lines displaced to make room */
    uint64_t writebacks;     /* dirty host lines written to storage (displaced or flushed) */
    uint64_t io_errors;      /* those writes that failed (the line stayed, dirty) */
    uint64_t violations;     /* broken invariants seen (always 0 unless there is a bug) */
    /* the predictor (GMT-Reuse) */
    uint64_t samples;        /* (VTD, RD) samples fitted */
    uint64_t model_updates;  /* fits handed to the predictor */
    uint64_t predicted[4];   /* eviction candidates by predicted class: [1] GPU, [2] host, [3] storage */
    uint64_t placed[5];      /* by placement: [GPUMEM_PLACE_KEEP], _HOST, _BYPASS, _HOST_IF_FREE */
    double m, b;             /* the fitted line RRD = m * RVTD + b */
    uint32_t model_ready;
    uint32_t host_resident;  /* host slots holding a line now */
} gpumem_tier_stats;


/* train_accesses saying: record nothing, fit no model (the model is set
 * another way, or never). */
#define GPUMEM_TIER_NO_TRAINING UINT64_MAX

/* Zero means default: the description with every field that has a default
 * and is 0 given it (policy, train_accesses, the predictor's sizes and
 * parameters), which is what gpumem_tier_init, gpumem_tier_create and
 * gpumem_tier_meta_bytes use. A way to see the values a description
 * resolves to (a NULL one resolves as all zero; the predictor's sizes need
 * the cache). */
GPUMEM_API gpumem_tier_desc gpumem_tier_desc_resolved(const gpumem_tier_desc *in) {
    gpumem_tier_desc d;
    memset(&d, 0, sizeof d);
    if (in) d = *in;
    if (d.policy == GPUMEM_POLICY_DEFAULT) d.policy = GPUMEM_POLICY_FIFO;
    if (!d.train_accesses) d.train_accesses = GPUMEM_TIER_DEFAULT_TRAIN;
    if (d.cache) {
        if (!d.gmt.n_lines) d.gmt.n_lines = d.cache->n_lines;
        if (!d.gmt.tier1_lines) d.gmt.tier1_lines = d.cache->n_slots;
    }
    if (!d.gmt.tier2_lines) d.gmt.tier2_lines = d.n_slots;
    d.gmt = gpumem_policy_gmt_desc_resolved(&d.gmt);
    return d;
}

/* Accesses a resolved description records for training. */
GPUMEM_API uint64_t gpumem__tier_train_cap(const gpumem_tier_desc *d) {
    return d->train_accesses == GPUMEM_TIER_NO_TRAINING ? 0 : d->train_accesses;
}

/* Bytes of metadata for gpumem_tier_init: the host words, the host slot
 * table and, for GMT-Reuse, the predictor's per-line state, the sample
 * buffer and the trainer's reuse-distance state. */
GPUMEM_API size_t gpumem_tier_meta_bytes(const gpumem_tier_desc *in) {
    size_t n;
    uint64_t lines;
    gpumem_tier_desc resolved;
    const gpumem_tier_desc *d = &resolved;
    if (!in || !in->cache) return 0;
    resolved = gpumem_tier_desc_resolved(in);
    lines = d->cache->n_lines;
    n = gpumem__tier_align8((size_t)lines * 4) + (size_t)d->n_slots * sizeof(gpumem__cache_slot) +
        gpumem__tier_map_words(d->n_slots) * 8;
    if (d->placement == GPUMEM_TIER_GMT_REUSE)
        n += gpumem__tier_align8(gpumem_policy_gmt_bytes(&d->gmt)) + (size_t)gpumem__tier_train_cap(d) * 8 +
             gpumem_policy_rd_bytes(lines, gpumem__tier_train_cap(d));
    return n;
}

/* A description for n_slots host slots below `cache`, every other field
 * its default (what a zeroed one with those two resolves to). */
GPUMEM_API gpumem_tier_desc gpumem_tier_desc_default(gpumem_cache *cache, uint32_t n_slots) {
    gpumem_tier_desc d;
    memset(&d, 0, sizeof d);
    d.cache = cache;
    d.n_slots = n_slots;
    return gpumem_tier_desc_resolved(&d);
}

/* ---- public API ------------------------------------------------------------ */

/* Check a description against its cache. */
GPUMEM_API gpumem_status gpumem__tier_check_desc(const gpumem_tier_desc *d) {
    if (!d->cache) return GPUMEM_ENULL;
    if (d->n_slots == 0 || d->placement >= GPUMEM_TIER_PLACEMENTS) return GPUMEM_EINVAL;
    if (d->n_slots > GPUMEM_TIER_MAX_SLOTS) return GPUMEM_ERANGE;
    if (d->policy != GPUMEM_POLICY_FIFO && d->policy != GPUMEM_POLICY_CLOCK) return GPUMEM_EINVAL;
    if ((uint64_t)d->n_slots * d->cache->line_bytes > (uint64_t)SIZE_MAX / 2 ||
        d->cache->n_lines > (uint64_t)SIZE_MAX / 32 || gpumem__tier_train_cap(d) > (uint64_t)SIZE_MAX / 32)
        return GPUMEM_ERANGE;
    if (d->placement == GPUMEM_TIER_GMT_REUSE &&
        (d->gmt.n_lines != d->cache->n_lines || d->gmt.override_pct > 100 || d->gmt.window == 0))
        return GPUMEM_EINVAL;
    return GPUMEM_OK;
}

/* Set up a tier in memory the caller placed and attach it to d->cache, while
 * no thread uses the cache (and none has a tier attached: EBUSY; nor is it
 * an owner of a share: ESTATE, attach the tier before making the share).
 * Every host slot starts empty. */
GPUMEM_API gpumem_status gpumem_tier_init(gpumem_tier *t, const gpumem_tier_desc *in) {
    gpumem_status st;
    gpumem_cache *c;
    unsigned char *m;
    uint64_t i;
    uint32_t k;
    gpumem_tier_desc resolved;
    const gpumem_tier_desc *d = &resolved; /* zero means default */
    if (!t || !in || !in->meta || !in->data) return GPUMEM_ENULL;
    resolved = gpumem_tier_desc_resolved(in);
    if ((st = gpumem__tier_check_desc(d)) != GPUMEM_OK) return st;
    c = d->cache;
    if (c->tier) return GPUMEM_EBUSY;
    if (c->share) return GPUMEM_ESTATE; /* the share keeps counts for its owners' tiers: attach before */
    if (d->meta_bytes < gpumem_tier_meta_bytes(d)) return GPUMEM_ENOMEM;
    if (((uintptr_t)d->meta & 7u) != 0) return GPUMEM_EINVAL;
    if (c->backing.kind == GPUMEM_CACHE_BACKING_NVME) { /* the cache's rules for its slots */
        uint64_t iova = d->data_iova ? d->data_iova : (uint64_t)(uintptr_t)d->data;
        uint64_t align = c->line_bytes < GPUMEM_NVME_PAGE_BYTES ? c->line_bytes : GPUMEM_NVME_PAGE_BYTES;
        if ((iova & (align - 1)) != 0) return GPUMEM_EALIGN;
        if (c->line_bytes > 2 * GPUMEM_NVME_PAGE_BYTES && !d->prp_lists) return GPUMEM_ENULL;
    }
    memset(t, 0, sizeof *t);
    t->cache = c;
    m = (unsigned char *)d->meta;
    t->home = (uint32_t *)m;
    m += gpumem__tier_align8((size_t)c->n_lines * 4);
    t->slots = (gpumem__cache_slot *)m;
    m += (size_t)d->n_slots * sizeof(gpumem__cache_slot);
    t->free_map = (uint64_t *)(void *)m;
    m += gpumem__tier_map_words(d->n_slots) * 8;
    t->pool.data = (unsigned char *)d->data;
    t->pool.data_iova = d->data_iova ? d->data_iova : (uint64_t)(uintptr_t)d->data;
    t->pool.prp_lists = d->prp_lists;
    t->pool.prp_lists_iova = d->prp_lists_iova ? d->prp_lists_iova : (uint64_t)(uintptr_t)d->prp_lists;
    t->n_lines = c->n_lines;
    t->n_slots = d->n_slots;
    t->placement = d->placement;
    t->policy = d->policy;
    for (i = 0; i < c->n_lines; i++) t->home[i] = 0;
    for (k = 0; k < d->n_slots; k++) {
        t->slots[k].lock = t->slots[k].ref = 0;
        t->slots[k].tag = GPUMEM_CACHE_EMPTY;
    }
    t->n_free.v = d->n_slots;
    for (k = 0; k < gpumem__tier_map_words(d->n_slots); k++)
        t->free_map[k] = (k + 1) * 64u <= d->n_slots ? ~0ull : (1ull << (d->n_slots % 64u)) - 1u;
    if (d->placement == GPUMEM_TIER_GMT_REUSE) {
        if ((st = gpumem_policy_gmt_init(&t->gmt, &d->gmt, m)) != GPUMEM_OK) return st;
        m += gpumem__tier_align8(gpumem_policy_gmt_bytes(&d->gmt));
        t->samples = (uint64_t *)(void *)m;
        t->sample_cap = gpumem__tier_train_cap(d);
        for (i = 0; i < t->sample_cap; i++) t->samples[i] = GPUMEM_TIER_NO_SAMPLE;
        m += (size_t)gpumem__tier_train_cap(d) * 8;
        gpumem_policy_rd_init(&t->rd, c->n_lines, gpumem__tier_train_cap(d), m);
    }
    c->tier = t;
    return GPUMEM_OK;
}

/* Write back both tiers (gpumem_cache_flush, Flush command included), then
 * detach the tier from its cache, which goes on alone. Refuses, changing
 * nothing: GPUMEM_EBUSY while a cache line is held or moving (threads still
 * use the cache), or the write-back's failure (GPUMEM_EIO: the dirty lines
 * stay where they are, the tier attached; retry once storage works). So
 * nothing dirty is ever dropped. For a tier set up with gpumem_tier_init;
 * gpumem_tier_destroy does this, then frees. */
GPUMEM_API gpumem_status gpumem_tier_detach(gpumem_tier *t) {
    gpumem_cache *c;
    gpumem_status st;
    uint64_t i;
    if (!t || !t->cache) return GPUMEM_ENULL;
    c = t->cache;
    if (c->tier != t) return GPUMEM_ESTATE;
    if (gpumem_cache_find_in_use(c, 0, 0) < c->n_lines) return GPUMEM_EBUSY; /* a line held or claimed */
    for (i = 0; i < c->n_lines; i++) /* acquire: the movers' releases are done */
        if (gpumem_atomic_load_u32(&t->home[i], GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) & GPUMEM_TIER_BUSY)
            return GPUMEM_EBUSY;
    if ((st = gpumem__cache_flush(c, (uint64_t *)0, 1)) != GPUMEM_OK) return st;
    c->tier = 0;
    return GPUMEM_OK;
}

/* Hand the predictor a model: RRD = m * RVTD + b (what gpumem_tier_train
 * does with its own fit; for a model found elsewhere). */
GPUMEM_API gpumem_status gpumem_tier_set_model(gpumem_tier *t, double m, double b) {
    if (!t) return GPUMEM_ENULL;
    if (t->placement != GPUMEM_TIER_GMT_REUSE) return GPUMEM_EINVAL;
    gpumem__tier_lock_gmt(t);
    gpumem_policy_gmt_set_model(&t->gmt, m, b);
    t->model_updates++;
    gpumem__tier_unlock_gmt(t);
    return GPUMEM_OK;
}

/* GMT's CPU side: take the samples recorded since the last call, compute
 * their exact reuse distances, refit RD = m * VTD + b and hand it to the
 * predictor. One thread at a time (the caller's "trainer"); safe while host
 * threads use the cache. Where GPU threads use it, train between kernels:
 * the model lock is a device-scope word there, and a host thread's lock
 * and model writes are not ordered with the GPU's atomics on it (the GPU
 * has no native host atomics). *fitted (may be NULL): samples in the fit
 * so far. With no new samples the model is left as it is (OK). EINVAL: not
 * GMT-Reuse. */
GPUMEM_API gpumem_status gpumem_tier_train(gpumem_tier *t, uint64_t *fitted) {
    double m, b;
    uint64_t got = 0;
    if (!t) return GPUMEM_ENULL;
    if (t->placement != GPUMEM_TIER_GMT_REUSE) return GPUMEM_EINVAL;
    while (t->trained < t->sample_cap) {
        uint64_t line =
            gpumem_atomic_load_u64(&t->samples[t->trained], GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM);
        if (line == GPUMEM_TIER_NO_SAMPLE) break; /* not written yet */
        gpumem_policy_rd_access(&t->rd, line);
        t->trained++;
        got++;
    }
    if (fitted) *fitted = t->rd.samples;
    if (!got) return GPUMEM_OK;
    gpumem__tier_lock_gmt(t); /* the figures get_stats reads */
    t->fitted = t->rd.samples;
    gpumem__tier_unlock_gmt(t);
    return gpumem_policy_ols_solve(&t->rd.ols, &m, &b) ? gpumem_tier_set_model(t, m, b) : GPUMEM_OK;
}

/* Sum the counters (atomic loads: safe while threads run; the predictor's
 * figures are read under its lock). */
GPUMEM_API gpumem_status gpumem_tier_get_stats(gpumem_tier *t, gpumem_tier_stats *out) {
    uint32_t k;
    if (!t || !out) return GPUMEM_ENULL;
    memset(out, 0, sizeof *out);
    out->accesses = gpumem_atomic_load_u64(&t->vt, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->host_hits = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_HOST_HITS], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->host_misses = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_HOST_MISSES], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->moves = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_MOVES], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->dirty_moves = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_DIRTY_MOVES], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->bypasses = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_BYPASSES], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->keeps = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_KEEPS], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->host_evictions =
        gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_HOST_EVICTIONS], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->writebacks = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_WRITEBACKS], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->io_errors = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_IO_ERRORS], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->violations = gpumem_atomic_load_u64(&t->stats[GPUMEM__TS_VIOLATIONS], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    out->host_resident = t->n_slots - gpumem_atomic_load_u32(&t->n_free.v, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    if (t->placement == GPUMEM_TIER_GMT_REUSE) {
        gpumem__tier_lock_gmt(t);
        out->samples = t->fitted;
        out->model_updates = t->model_updates;
        for (k = 0; k < 4; k++) out->predicted[k] = t->predicted[k];
        for (k = 0; k < 5; k++) out->placed[k] = t->placed[k];
        out->m = t->gmt.m;
        out->b = t->gmt.b;
        out->model_ready = t->gmt.ready;
        gpumem__tier_unlock_gmt(t);
    }
    return GPUMEM_OK;
}

/* Check both tiers while no thread uses the cache: the cache's own check,
 * and: no line is both in a GPU slot and in a host slot; every present host
 * word names a slot that carries its tag, and every tagged host slot is
 * named by its line's word; nothing is busy or locked; the free count equals
 * the empty slots. Returns the number of problems (0 is healthy). */
GPUMEM_API uint64_t gpumem_tier_check_quiescent(const gpumem_tier *t) {
    uint64_t bad, i, empty = 0;
    uint32_t k;
    if (!t || !t->cache) return 1;
    bad = gpumem_cache_check_quiescent(t->cache);
    for (i = 0; i < t->n_lines; i++) {
        uint32_t s = t->home[i];
        if (s & GPUMEM_TIER_BUSY) bad++;
        if (!(s & GPUMEM_TIER_IN)) {
            if (s) bad++; /* DIRTY or a slot without IN */
            continue;
        }
        if (t->cache->lines[i].state & GPUMEM_CACHE_VALID) bad++; /* in both tiers */
        if ((s & GPUMEM_TIER_SLOT_MASK) >= t->n_slots || t->slots[s & GPUMEM_TIER_SLOT_MASK].tag != i) bad++;
    }
    for (k = 0; k < t->n_slots; k++) {
        uint64_t tag = t->slots[k].tag;
        const int free_bit = (t->free_map[k / 64u] >> (k % 64u)) & 1u;
        if (t->slots[k].lock) bad++;
        if (free_bit != (tag == GPUMEM_CACHE_EMPTY)) bad++; /* the bitmap says what the tags say */
        if (tag == GPUMEM_CACHE_EMPTY) {
            empty++;
            continue;
        }
        if (tag >= t->n_lines || !(t->home[tag] & GPUMEM_TIER_IN) || (t->home[tag] & GPUMEM_TIER_SLOT_MASK) != k)
            bad++;
    }
    if (empty != t->n_free.v) bad++;
    if (t->gmt_lock.v) bad++;
    return bad;
}

/* ======================================================================== */
/* Host convenience: allocate, initialise and attach in one call            */
/* ======================================================================== */
#if !defined(GPUMEM_NO_HOST_SHIM)
#ifdef __cplusplus
extern "C" {
#endif
/* Allocates the tier, its metadata, its host slots (page aligned) and PRP
 * lists with GPUMEM_MALLOC and attaches it to d->cache (host threads; for
 * GPU threads place the memory yourself and use gpumem_tier_init). */
gpumem_status gpumem_tier_create(const gpumem_tier_desc *d, gpumem_tier **out);
/* gpumem_tier_detach (both tiers written back, never a dirty line dropped;
 * EBUSY / EIO as there, freeing nothing), then free. GPUMEM_EINVAL for a
 * tier set up with gpumem_tier_init (detach it, then free its memory). */
gpumem_status gpumem_tier_destroy(gpumem_tier *t);
#ifdef __cplusplus
}
#endif

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE
gpumem_status gpumem_tier_create(const gpumem_tier_desc *in, gpumem_tier **out) {
    gpumem__slot_block b; /* gpumem_cache.h's one-block layout */
    gpumem_tier_desc e, resolved;
    const gpumem_tier_desc *d = &resolved; /* zero means default */
    gpumem_status st;
    if (!in || !out) return GPUMEM_ENULL;
    resolved = gpumem_tier_desc_resolved(in);
    *out = NULL;
    if ((st = gpumem__tier_check_desc(d)) != GPUMEM_OK) return st; /* before sizes are computed */
    if ((st = gpumem__slot_block_alloc(
             sizeof(gpumem_tier), gpumem_tier_meta_bytes(d), (size_t)d->n_slots * d->cache->line_bytes,
             gpumem_cache_prp_bytes(d->cache->line_bytes, d->n_slots, d->cache->backing.kind), &b)) != GPUMEM_OK)
        return st;
    e = *d;
    GPUMEM__DESC_PLACE_IN_BLOCK(e, b);
    if ((st = gpumem_tier_init((gpumem_tier *)(void *)b.obj, &e)) != GPUMEM_OK) {
        GPUMEM_FREE(b.raw);
        return st;
    }
    ((gpumem_tier *)(void *)b.obj)->owned_ = b.raw;
    *out = (gpumem_tier *)(void *)b.obj;
    return GPUMEM_OK;
}

gpumem_status gpumem_tier_destroy(gpumem_tier *t) {
    gpumem_status st;
    if (!t) return GPUMEM_ENULL;
    if (!t->owned_) return GPUMEM_EINVAL;
    if ((st = gpumem_tier_detach(t)) != GPUMEM_OK) return st;
    GPUMEM_FREE(t->owned_);
    return GPUMEM_OK;
}
#endif /* GPUMEM_IMPLEMENTATION */
#endif /* GPUMEM_NO_HOST_SHIM */

#endif /* GPUMEM_TIER_H */
