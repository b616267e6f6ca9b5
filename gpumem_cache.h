/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_cache.h - a software cache in fast memory in front of NVMe queues or
 * plain memory, shared by thousands of threads: one fetch-add per hit, one
 * I/O per missed line however many threads miss it together (BaM
 * dissertation, Ch. 6-7).
 *
 * USAGE (host threads, memory or NVMe behind the cache)
 *
 *   #define _POSIX_C_SOURCE 200809L
 *   #define GPUMEM_IMPLEMENTATION             // in exactly one .c file
 *   #include "gpumem_cache.h"
 *   #include "gpumem_swctl.h"                 // only for a software controller (below)
 *
 *   // given: gpumem_swctl *ctl, gpumem_nvme_qp **pairs, uint32_t n_pairs, uint64_t data_bytes, uint64_t line, uint64_t i, uint64_t j, uint64_t n, void (*use)(void *)
 *   gpumem_cache_desc d = gpumem_cache_desc_default();
 *   d.n_lines    = data_bytes / 4096;          // lines of the data behind the cache
 *   d.line_bytes = 4096;                       // a power of two, 512 B .. 2 MiB
 *   d.n_slots    = 1024;                       // lines the cache holds (4 MiB here)
 *   gpumem_nvme_ns ns = gpumem_swctl_ns(ctl);  // what the controller serves
 *   d.backing    = gpumem_cache_backing_nvme(pairs, 1, n_pairs, &ns, 0, GPUMEM_CACHE_STRIPE);
 *                  // the pairs array is copied: a local array is fine
 *   //   or      = gpumem_cache_backing_memory(data);   // plain memory
 *   gpumem_cache *c;
 *   gpumem_cache_create(&d, &c);               // host allocation; see gpumem_cache_init
 *                                              // for memory you place yourself (GPU)
 *   // any number of threads:
 *   void *p;
 *   if (gpumem_cache_acquire(c, line, 1, 0, &p) == GPUMEM_OK) {   // 0: read, 1: write
 *       use(p);                                 // line_bytes bytes, pinned while held
 *       gpumem_cache_release(c, line, 1);
 *   }
 *   // or element by element, keeping the current line between accesses:
 *   gpumem_cache_array a = gpumem_cache_array_make(c, sizeof(double), 0, n);
 *   gpumem_cache_ref r = gpumem_cache_ref_make(&a);
 *   double x; gpumem_cache_ref_get(&r, i, &x); gpumem_cache_ref_put(&r, j, &x);
 *   uint64_t k; gpumem_cache_ref_span(&r, i, n, 0, &p, &k);   // elements i .. i+k-1 at p: one line
 *   gpumem_cache_ref_drop(&r);                 // releases the line it keeps
 *
 *   // With desc.policy = GPUMEM_POLICY_HINTED_RRIP (lock-free, host or device),
 *   // or desc.seq_policy a GPUMEM_POLICY_HINTED policy (gpumem_policy.h),
 *   // tell it the future (advice: a wrong hint never changes a read):
 *   gpumem_cache_epoch(c, 7);                  // the application's clock
 *   gpumem_cache_hint(c, line, 9);             // `line` is next used at epoch 9
 *   gpumem_cache_array_hint(&a, i, 16, 8);     // elements i .. i+15 at epoch 8
 *   gpumem_cache_demote(c, line);              // done with it
 *   gpumem_cache_weight(c, line, 40);          // worth 40 beyond its hints (hinted sequential policy)
 *   gpumem_cache_prefetch(c, line, 8);         // needed at epoch 8: read it ahead now
 *                                              // (EAGAIN: gave way to demand misses)
 *
 *   gpumem_cache_flush(c, NULL);               // write back the dirty lines, durably
 *                                              // (EAGAIN: some were still held)
 *   gpumem_cache_stats s; gpumem_cache_get_stats(c, &s);
 *   gpumem_cache_destroy(c);
 *
 * In device code use gpumem_cache_acquire_coalesced / _release_coalesced:
 * lanes of a warp that want the same line elect a leader, which acquires once
 * for the whole group (dissertation §7.2.1). The array reference uses them.
 * C++ callers can use gpumem::cache_array_ref<T> (operator[] style) at the end.
 *
 * DESIGN
 *
 * Line state (§6.4, Table 6.1) is one 32-bit word per line of the data:
 *     bit 31 VALID  the line is in a slot
 *     bit 30 BUSY   being filled, evicted or written back: wait
 *     bit 29 DIRTY  the slot's copy is newer than the backing
 *     28..0  count  references (threads using or waiting for the line)
 * Acquire is one fetch_add of the group's count, which both takes the
 * reference and reads the state: t threads hitting one line cost exactly t
 * atomics (a compare-and-swap count costs up to t(t+1)/2). A thread that
 * found the line neither valid nor busy tries fetch_or(BUSY); the one that saw
 * BUSY clear fills the line and ends with one fetch_xor(VALID|BUSY); every
 * other thread keeps its counted reference and waits for BUSY to clear. So a
 * burst of misses on one line costs one read. Release is one fetch_sub with
 * release order, which publishes the thread's writes to the slot to whoever
 * evicts the line next.
 *
 * Slots. Each slot has a lock word, a CLOCK reference bit and the tag (the
 * line it holds, or EMPTY). A direct map from line to {state, slot} makes a
 * lookup one load, with no search. The filler picks a victim slot through
 * the replacement policy: cold (never used) slots first, then the hand of a
 * slot policy from gpumem_policy.h - BRRIP (the default: a 2-bit
 * re-reference prediction per slot, 0 on a hit, most fills predicted
 * distant so a scan cannot flush the cache), SRRIP, CLOCK (a reference bit
 * set on every hit, a second chance on the sweep) or BaM's plain round-robin
 * hand (FIFO). Or any sequential policy of gpumem_policy.h (LRU, LFU, cyclic
 * protection, HPE, the tournament) through desc.seq_policy: its calls are
 * serialised by one lock, hits update it only when the lock is free, and
 * slots found in use are pinned so it names another victim. A candidate is
 * taken only if its line has count 0 and is not busy, checked before and again
 * in the fetch_or(BUSY) that claims it: a thread that acquired the line in
 * between either raised the count (the evictor backs off) or sees BUSY and
 * waits, and is then the one that fills the line again. A dirty victim is
 * written back before the slot is reused; if the write fails, the line stays
 * cached and dirty and the acquire that needed the slot returns GPUMEM_EIO (no
 * data is dropped).
 *
 * A full cache. When every slot holds a line in use, the filler sweeps the
 * slots, waits (back-off on the GPU, parking on the host), and sweeps again,
 * up to `full_sweeps` times; then it withdraws its reference and its BUSY
 * claim and returns GPUMEM_EAGAIN. Its caller must release the lines it holds
 * before retrying - a thread holding lines while it waits for a slot is how a
 * too-small cache deadlocks, and the bound turns that into a status. The
 * array reference below holds at most one line per thread and releases it
 * before acquiring the next, so n_slots >= 1 always makes progress.
 *
 * Reference-count overflow. An acquire that finds the count at or above
 * 2^28 undoes its add and returns GPUMEM_EOVERFLOW. Between that limit and
 * the 29-bit field's end there is room for 2^28 / GPUMEM_CACHE_MAX_GROUP =
 * 262144 simultaneous overshooting adds, so the count never carries into
 * DIRTY.
 *
 * Backing. Memory (a copy) or NVMe queue pairs of one or several
 * controllers, striped (line l on controller l mod n) or replicated (reads
 * spread by line, writes to every controller). The kind is a switch on a
 * field, not a function pointer, so device code pays no indirect call.
 *
 * Scope. The cache's own atomics are device scope: one cache is used by GPU
 * threads or by host threads, not by both at the same time (flush from the
 * host after the kernel has finished, as the CUDA test does). Slot data that
 * a real SSD writes by DMA into GPU memory would also need BaM's GPUDirect
 * ordering fix (a read through the same path before publishing VALID,
 * dissertation §8.2.1); it is not implemented, so such slots must be host
 * memory for now.
 *
 * Tracing: with desc.trace set, every acquire appends its line to that
 * gpumem_policy_trace (one fetch-add; device-safe), in the order the
 * accesses claimed their places, and every hint its record (whatever the
 * policy); gpumem_policy_trace_write saves it for bench/policy_sim.
 *
 * Hints (issue 43, the section "Next-use hints"): the application's next
 * uses go to the slot kind HINTED_RRIP without a lock (they set a slot's
 * RRPV word, or wait in its pending table for the line's fill), or to a
 * hinted sequential policy under its lock, which a hit skips when taken: a
 * use it misses leaves its hint standing until the epoch passes, judged wrong
 * then (heavy contention costs trust in the hints, never an answer).
 *
 * Statistics: counted per SM on the device (GPUMEM_CACHE_STAT_SHARDS shards,
 * summed by gpumem_cache_get_stats), or not at all with GPUMEM_NO_STATS.
 *
 * Configuration: GPUMEM_CACHE_CHECK (default 0) adds a check on every hit
 * that the slot still holds the line, counted in stats.violations.
 * GPUMEM_CACHE_TIER (default 1) compiles in the host tier's hooks
 * (gpumem_tier_path.h, included here; the tier's API is gpumem_tier.h). 0
 * compiles them out for kernels that never use a host tier: their calls may
 * cost a register even with no tier attached (bench/results/registers-*.md).
 * A cache with a tier attached is then refused (GPUMEM_ESTATE), never
 * silently bypassed; every file that uses such a cache needs the hooks.
 */
#ifndef GPUMEM_CACHE_H
#define GPUMEM_CACHE_H

#include "gpumem_share_path.h" /* the layout (gpumem_cache_core.h) and the tier's and share's data paths */

/* Pairs behind the cache (0 for memory). */
GPUMEM_API size_t gpumem__cache_n_pairs(const gpumem_cache_backing *b) {
    return b->kind == GPUMEM_CACHE_BACKING_NVME ? (size_t)b->n_ctrls * b->pairs_per_ctrl : 0;
}

/* Bytes of metadata for gpumem_cache_init: the line map, the slot table and
 * the cache's own copy of the backing's pairs array. */
GPUMEM_API size_t gpumem_cache_meta_bytes(const gpumem_cache_desc *d) {
    if (!d) return 0;
    return (size_t)d->n_lines * sizeof(gpumem__cache_line) + (size_t)d->n_slots * sizeof(gpumem__cache_slot) +
           gpumem__cache_n_pairs(&d->backing) * sizeof(gpumem_nvme_qp *);
}

/* Bytes of PRP-list memory: one list page per slot when a line spans more
 * than two memory pages and the backing is NVMe; 0 otherwise. */
GPUMEM_API size_t gpumem_cache_prp_bytes(uint32_t line_bytes, uint32_t n_slots, uint32_t backing_kind) {
    if (backing_kind != GPUMEM_CACHE_BACKING_NVME || line_bytes <= 2 * GPUMEM_NVME_PAGE_BYTES) return 0;
    return (size_t)n_slots * GPUMEM_NVME_PAGE_BYTES;
}

/* End a BUSY claim on a line: keep only the bits in `keep` (~BUSY to give
 * the line back as it was; fewer to also drop DIRTY or VALID). Release: what
 * the claimer did to the slot is visible to whoever sees BUSY clear, and the
 * threads parked on it are woken. */
GPUMEM_API void gpumem__line_end_claim(gpumem_cache *c, uint32_t *state, uint32_t keep) {
    gpumem_atomic_fetch_and_u32(state, keep, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
    gpumem_event_notify(&c->event);
}

/* ---- replacement policy hooks (a switch, not a pointer: no indirect call) */

/* The policy's words live in the slot table; the hooks are gpumem_policy.h's
 * slot policies (a switch on the kind inside, no function pointer).
 *
 * A sequential policy (c->seq) is one structure for all threads: every call
 * into it holds seq_lock. Fills and candidate picks wait for the lock; a hit
 * updates it only if the lock is free at once (a load, then one
 * compare-and-swap if it looked free), so hits never queue behind each
 * other - the policy sees a sample of them under contention, all of them
 * without. The slot's `ref` word then says whether the policy lists the
 * slot (filled once), read and written under the lock. */
/* Hits only try it (gpumem__spin_trylock looks before its CAS, so failed
 * tries share the line); fills and victim picks wait for it, parked on the
 * cache's event on the host, so unlock wakes them. */
GPUMEM_API int gpumem__seq_trylock(gpumem_cache *c) { return gpumem__spin_trylock(&c->seq_lock.v, GPUMEM__CDEV, 1); }

GPUMEM_API void gpumem__seq_lock(gpumem_cache *c) { gpumem__spin_lock(&c->seq_lock.v, GPUMEM__CDEV, 1, &c->event); }

GPUMEM_API void gpumem__seq_unlock(gpumem_cache *c) { gpumem__spin_unlock(&c->seq_lock.v, GPUMEM__CDEV, &c->event); }

GPUMEM_API void gpumem__policy_touch(gpumem_cache *c, uint32_t k, uint64_t line) {
    if (!c->seq) {
        gpumem_policy_slot_hit(c->policy, &c->slots[k].ref);
    } else if (gpumem__seq_trylock(c)) {
        /* The slot may have been refilled since our acquire read it: the
         * policy's own record of the line decides. */
        if (c->seq->line_of[k] == line) gpumem_policy_on_access(c->seq, k, line);
        gpumem__seq_unlock(c);
    }
}

/* The hinted next use of slot k's line, or GPUMEM_POLICY_UNHINTED (none
 * stands, or the policy takes none), for a prefetch's sweep. It locks the
 * sequential policy: a slot's lock may be held, not the policy's. */
GPUMEM_API uint64_t gpumem__slot_next_use(gpumem_cache *c, uint32_t k) {
    uint64_t when = GPUMEM_POLICY_UNHINTED;
    if (!c->seq) {
        if (c->policy == GPUMEM_POLICY_HINTED_RRIP)
            when = gpumem_policy_slot_next_use(
                &c->slot_hints, gpumem_atomic_load_u32(&c->slots[k].ref, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV));
    } else if (GPUMEM__HINT_HOOKS && c->seq->d.kind == GPUMEM_POLICY_HINTED) {
        gpumem__seq_lock(c);
        when = gpumem_policy_next_use(c->seq, k);
        gpumem__seq_unlock(c);
    }
    return when;
}

#define GPUMEM__CANDIDATE_STOP 0xFFFFFFFEu /* the candidate's "end the search" (not GPUMEM_POLICY_NONE) */

/* The next slot to consider, or n_slots to skip this turn. A sequential
 * policy names its victim among the slots not pinned in seq->pin (the ones
 * found in use lately, see gpumem__policy_refused); when every slot is
 * pinned the pins are forgotten and it names one anyway. `spare`: 0 for a
 * demand miss (folded away), a prefetch's epoch + 1: a slot kind passes
 * over a line hinted before it without aging or judging it; the sequential
 * kind, whose victim is its farthest hinted line, ends the search (STOP)
 * when even that one is sooner, unpinned. */
GPUMEM_API uint32_t gpumem__policy_candidate(gpumem_cache *c, uint64_t spare) {
    uint32_t k;
    if (!c->seq) {
        k = gpumem_policy_slot_next(&c->hand.v, c->n_slots);
        if (spare && gpumem__slot_next_use(c, k) < spare) return c->n_slots;
        return gpumem_policy_slot_consider_hinted(c->policy, &c->slots[k].ref, &c->slot_hints) ? k : c->n_slots;
    }
    gpumem__seq_lock(c);
    k = gpumem_policy_victim(c->seq, c->seq->pin);
    if (k == GPUMEM_POLICY_NONE && c->seq->n_pin) {
        gpumem__pzero(c->seq->pin, c->n_slots);
        c->seq->n_pin = 0;
        k = gpumem_policy_victim(c->seq, c->seq->pin);
    }
    if (spare && k != GPUMEM_POLICY_NONE && gpumem_policy_next_use(c->seq, k) < spare) k = GPUMEM__CANDIDATE_STOP;
    gpumem__seq_unlock(c);
    return k == GPUMEM_POLICY_NONE ? c->n_slots : k;
}

/* The candidate k could not be taken: its line is in use (or another thread
 * has the slot). A sequential policy gets it pinned, so its next victim is
 * another slot, without a change to its order. */
GPUMEM_API void gpumem__policy_refused(gpumem_cache *c, uint32_t k) {
    if (!c->seq) return;
    gpumem__seq_lock(c);
    if (!c->seq->pin[k]) {
        c->seq->pin[k] = 1;
        c->seq->n_pin++;
    }
    gpumem__seq_unlock(c);
}

/* Pins age out (a line released since is a candidate again): past half the
 * slots they are all cleared, amortised O(1), at a search's start, never
 * inside one: there a search whose policy names the held lines first went
 * round them and answered EAGAIN with a slot free (fuzz_cache_hints). */
GPUMEM__CACHE_HOOK void gpumem__policy_age_pins(gpumem_cache *c) {
    gpumem__seq_lock(c);
    if (c->seq->n_pin > c->n_slots / 2) {
        gpumem__pzero(c->seq->pin, c->n_slots);
        c->seq->n_pin = 0;
    }
    gpumem__seq_unlock(c);
}

/* Candidates looked at in one sweep: every slot at least once (a sequential
 * policy moves each refused candidate away, so n_slots steps see them all;
 * twice that for slack). */
GPUMEM_API uint32_t gpumem__policy_sweep_len(const gpumem_cache *c) {
    return c->seq ? 2 * c->n_slots : gpumem_policy_slot_sweep_len(c->policy, c->n_slots);
}

/* Slot k now holds `line` (the caller holds the slot's lock); `ahead`: it
 * is read ahead (a prefetch), not used. */
GPUMEM_API void gpumem__policy_fill(gpumem_cache *c, uint32_t k, uint64_t line, int ahead) {
    if (!c->seq) {
        /* read ahead or not, as a miss ("long" for a prefetch: no better,
         * bench/results/policy-prefetch-vm.md) */
        gpumem_policy_slot_fill_hinted(c->policy, &c->slots[k].ref, &c->fills.v, &c->slot_hints, line);
        return;
    }
    gpumem__seq_lock(c);
    if (c->slots[k].ref) gpumem_policy_on_evict(c->seq, k, c->seq->line_of[k]);
    if (ahead) gpumem_policy_on_fill_ahead(c->seq, k, line);
    else gpumem_policy_on_fill(c->seq, k, line);
    c->slots[k].ref = 1;
    if (c->seq->pin[k]) c->seq->pin[k] = 0, c->seq->n_pin--;
    gpumem__seq_unlock(c);
}

/* ---- eviction ------------------------------------------------------------- */

/* A search for a slot is split in two, so that no I/O happens inside the
 * sweep's loops: gpumem__slot_claim picks and claims (no I/O; the host
 * tier's placement may keep a candidate and the sweep goes on), then, once
 * the search has ended, the miss's steps (gpumem__miss_step, below) move
 * the victim to the host tier or write it back (I/O) and take the slot. On the
 * device every value live in the sweep would otherwise add to the registers
 * of the NVMe command under it, and so to those of every kernel that
 * acquires a line (bench/results/registers-*.md). */
enum { GPUMEM__CLAIM_NO = 0, GPUMEM__CLAIM_OK = 1 };

/* ---- taking a slot's line: the one step that eviction, write-back and
 * invalidation share. With the slot locked, claim the line it holds (BUSY),
 * so that nobody can acquire, fill, evict or write it until the claim ends.
 * (Locking stays with the callers: eviction tries a slot, the sweeps wait
 * for it; taking the lock inside costs the miss path two registers.) */

enum {
    GPUMEM__TAKE_SKIP = 0, /* the line is not what `look` asks (or none, gpumem__sweep_take): slot unlocked */
    GPUMEM__TAKE_BUSY,     /* the line is another's claim (a fill, an eviction): slot unlocked */
    GPUMEM__TAKE_HELD,     /* the line has holders: claim undone, slot unlocked */
    GPUMEM__TAKE_OK        /* slot still locked, line claimed with no holder; *prev: its state before */
};

/* Slot k is locked by the caller and holds `line`. `look_mask`/`look_want`:
 * a relaxed look at the state before the claim, (state & look_mask) ==
 * look_want or skip. It is cheap, keeps a sweep from setting BUSY on lines
 * it would leave (an eviction on lines in use, a write-back on clean ones),
 * and the claim checks again. `wait`: wait out an acquirer's brief claim on
 * a valid line rather than report BUSY (write-back: the line is dirty, and
 * skipping it would leave it unwritten). */
GPUMEM_API int gpumem__slot_take_line(gpumem_cache *c, uint32_t k, uint64_t line, int wait, uint32_t look_mask,
                                      uint32_t look_want, uint32_t *prev) {
    uint32_t *w = gpumem__line_state(c, line), p;
    if ((gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) & look_mask) != look_want) {
        gpumem__slot_unlock(c->slots, k, &c->event);
        return GPUMEM__TAKE_SKIP;
    }
    /* The claim. Acquire: if the count is 0 here, every holder's release
     * (fetch_sub, release order) came before, so their writes to the slot
     * are visible to whatever the taker does with it. BUSY on a valid line,
     * while we hold the slot lock that every taker needs, can only be an
     * acquirer's claim that it undoes at once (it found the line filled). */
    while ((p = gpumem_atomic_fetch_or_u32(w, GPUMEM_CACHE_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV)) &
               GPUMEM_CACHE_BUSY &&
           p & GPUMEM_CACHE_VALID && wait)
        GPUMEM_WAIT_UNTIL(&c->event,
                          !(gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) & GPUMEM_CACHE_BUSY));
    *prev = p;
    if (p & GPUMEM_CACHE_BUSY) { /* not ours: leave it alone */
        gpumem__slot_unlock(c->slots, k, &c->event);
        return GPUMEM__TAKE_BUSY;
    }
    if (p & GPUMEM_CACHE_COUNT_MASK) { /* acquired since the look */
        gpumem__line_end_claim(c, w, ~GPUMEM_CACHE_BUSY);
        gpumem__slot_unlock(c->slots, k, &c->event);
        return GPUMEM__TAKE_HELD;
    }
    return GPUMEM__TAKE_OK;
}

/* The sweeps' take (write-back, invalidation): wait for slot k's lock, then
 * take its line (*line); TAKE_SKIP, unlocked, for an empty slot. */
GPUMEM_API int gpumem__sweep_take(gpumem_cache *c, uint32_t k, int wait, uint32_t look_mask, uint32_t look_want,
                                  uint64_t *line, uint32_t *prev) {
    if ((*line = gpumem__slot_lock(c->slots, k, &c->event)) == GPUMEM_CACHE_EMPTY) {
        gpumem__slot_unlock(c->slots, k, &c->event);
        return GPUMEM__TAKE_SKIP;
    }
    return gpumem__slot_take_line(c, k, *line, wait, look_mask, look_want, prev);
}

/* Claim slot k for a miss: an empty slot, or one whose valid line nobody
 * uses (taken, see gpumem__slot_take_line). *skips (NULL: none) is how many
 * more candidates the host tier's placement may keep in this search; *where
 * is its placement for the victim (GPUMEM_PLACE_*, BYPASS without a tier).
 * On CLAIM_OK the slot is locked and its line, if any, claimed with count 0:
 * the miss's steps finish. */
GPUMEM_API int gpumem__slot_claim(gpumem_cache *c, uint32_t k, uint32_t *skips, uint32_t *where, uint64_t spare) {
    uint64_t victim;
    uint32_t prev;
    if (!gpumem__slot_trylock(c->slots, k)) return GPUMEM__CLAIM_NO; /* any slot will do: try the next */
    *where = GPUMEM_PLACE_BYPASS;
    victim = gpumem__slot_tag(c->slots, k);
    if (victim == GPUMEM_CACHE_EMPTY) return GPUMEM__CLAIM_OK;
    if (gpumem__slot_take_line(c, k, victim, 0, GPUMEM_CACHE_BUSY | GPUMEM_CACHE_COUNT_MASK | GPUMEM_CACHE_VALID,
                               GPUMEM_CACHE_VALID, &prev) != GPUMEM__TAKE_OK)
        return GPUMEM__CLAIM_NO;
    if (GPUMEM_CACHE_CHECK &&
        gpumem_atomic_load_u32(&c->lines[victim].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) != k)
        gpumem__cache_count(c, victim, GPUMEM__ST_VIOLATIONS, 1);
    /* A prefetch's victim hinted sooner (since its candidate was chosen):
     * undone as TAKE_HELD's, before the placement records anything. */
    if (spare && gpumem__slot_next_use(c, k) < spare) {
        gpumem__line_end_claim(c, gpumem__line_state(c, victim), ~GPUMEM_CACHE_BUSY);
        gpumem__slot_unlock(c->slots, k, &c->event);
        return GPUMEM__CLAIM_NO;
    }
    /* The placement decides while the line is ours and nobody can use it. */
    if (GPUMEM__HAS_TIER(c) &&
        (*where = gpumem__tier_place(c->tier, victim, skips ? *skips : 0)) == GPUMEM_PLACE_KEEP) {
        /* predicted short reuse: a second chance, look further */
        (*skips)--;
        gpumem__line_end_claim(c, gpumem__line_state(c, victim), ~GPUMEM_CACHE_BUSY);
        gpumem__slot_unlock(c->slots, k, &c->event);
        gpumem__policy_touch(c, k, victim);
        return GPUMEM__CLAIM_NO;
    }
    return GPUMEM__CLAIM_OK;
}

/* One sweep for a slot: cold slots first, then the policy's hand. Returns
 * OK with *slot claimed (see gpumem__slot_claim), EAGAIN if no candidate
 * was free. *skips: the host tier's keeps left to this search. `spare`
 * (0 on the demand path: folded away): a prefetch's epoch + 1; then no
 * line hinted before it is taken, nothing pinned, and a sequential
 * policy's first refusal ends the search (a prefetch gives way). */
GPUMEM_API gpumem_status gpumem__cache_sweep(gpumem_cache *c, uint32_t *slot, uint32_t *skips, uint32_t *where,
                                             uint64_t spare) {
    uint32_t i, n = gpumem__policy_sweep_len(c);
    /* Step 0 is a cold slot (if any are left), steps 1..n the policy's
     * candidates: one claim site for both (its code is inlined). */
    for (i = 0; i <= n; i++) {
        uint32_t k = c->n_slots;
        if (i > 0) k = gpumem__policy_candidate(c, spare);
        else if (gpumem_atomic_load_u32(&c->cold.v, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) < c->n_slots)
            /* The hand may have taken this cold slot already: then it is not
             * empty and slot_claim treats it as any other candidate. */
            k = gpumem_atomic_fetch_add_u32(&c->cold.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
        if (k == GPUMEM__CANDIDATE_STOP) break;
        if (k >= c->n_slots) continue;
        if (gpumem__slot_claim(c, k, skips, where, spare) == GPUMEM__CLAIM_OK) {
            *slot = k;
            return GPUMEM_OK;
        }
        if (spare && c->seq) break;
        if (i > 0 && !spare) gpumem__policy_refused(c, k);
    }
    return GPUMEM_EAGAIN;
}

/* Find a slot, waiting up to full_sweeps sweeps, and claim it (see
 * gpumem__slot_claim; the miss's steps evict its line). The host tier may
 * keep GPUMEM_TIER_MAX_SKIPS candidates in the whole search (not per sweep:
 * a sweep of a small cache could keep every slot, every time). *where: the
 * host tier's placement of the claimed slot's line. The search's counters
 * are dead once a slot is claimed: the eviction's I/O runs without them.
 * A prefetch (spare != 0, see gpumem__cache_sweep) makes one sweep and
 * never waits: it gives way to demand misses. */
GPUMEM_API gpumem_status gpumem__cache_find_slot(gpumem_cache *c, uint32_t *slot, uint32_t *where, uint64_t spare) {
    gpumem_status st = GPUMEM_EAGAIN;
    uint32_t sweeps = 0, skips = GPUMEM_TIER_MAX_SKIPS;
    *where = GPUMEM_PLACE_BYPASS;
    if (c->seq) gpumem__policy_age_pins(c); /* called, not inlined, on the device: 2 registers inlined */
    if (spare) return gpumem__cache_sweep(c, slot, &skips, where, spare);
    GPUMEM_WAIT_UNTIL(&c->event, (st = gpumem__cache_sweep(c, slot, &skips, where, 0)) != GPUMEM_EAGAIN ||
                                     ++sweeps >= c->full_sweeps);
    return st;
}

/* Slot k holds `line` now: publish it. A writer's DIRTY (or the host
 * tier's) is set (not toggled) while BUSY still keeps everyone out, then
 * VALID on and BUSY off in one step. Release: the slot data and the slot
 * index are visible to every thread whose acquire reads VALID. */
GPUMEM_API void gpumem__cache_publish(gpumem_cache *c, uint64_t line, uint32_t k, int dirty) {
    uint32_t *st_word = gpumem__line_state(c, line);
    gpumem_atomic_store_u32(&c->lines[line].slot, k, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    if (dirty) gpumem_atomic_fetch_or_u32(st_word, GPUMEM_CACHE_DIRTY, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    gpumem_atomic_fetch_xor_u32(st_word, GPUMEM_CACHE_VALID | GPUMEM_CACHE_BUSY, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
    gpumem_event_notify(&c->event);
    gpumem__cache_count(c, line, GPUMEM__ST_FILLS, 1);
}

/* ---- the miss path: steps around one I/O site -------------------------------
 *
 * The miss winner's job: find a slot, evict the slot's old line (move it to
 * the host tier, or write it back if dirty, after writing a dirty host line
 * that the move displaces), read the line into the slot (from the host tier
 * if it is there, else from the backing), publish it. That is up to three
 * I/Os, each an NVMe command that waits for an ID and a completion, and
 * up to four calls of the host tier's hooks. On the device, every value
 * live through a command's waits or a hook's call adds to the registers of
 * every kernel that acquires a line (bench/results/registers-*.md). So the
 * miss runs as steps (gpumem__miss_step) around one I/O site
 * (gpumem__cache_fill): each step does the work between two I/Os and sets
 * up the next one; what the miss must remember across them is kept in a
 * record in the thread's local frame (gpumem__miss), read and written
 * through a volatile pointer, so that the compiler keeps it there rather
 * than in registers. The steps, in order (an arrow: an I/O between):
 *   EVICT -> DISPLACED -> PLACED -> WRITTEN -> EVICTED -> TAKE -> READ -> PUBLISH
 * skipping what a miss does not need; UNDO (a failure before the slot is
 * taken) and WITHDRAW end a miss that failed. */
enum {
    GPUMEM__MISS_EVICT,     /* a slot is claimed: its old line, if any, goes */
    GPUMEM__MISS_DISPLACED, /* the host line the tier displaces was written (or not) */
    GPUMEM__MISS_PLACED,    /* the host tier has placed the old line (or bypassed) */
    GPUMEM__MISS_WRITTEN,   /* the old line was written back (or not) */
    GPUMEM__MISS_EVICTED,   /* the old line is out of the slot */
    GPUMEM__MISS_TAKE,      /* the slot is free: it is the line's now */
    GPUMEM__MISS_READ,      /* the line was read into its slot (or not) */
    GPUMEM__MISS_PUBLISH,   /* the line is in its slot */
    GPUMEM__MISS_DONE,      /* filled, or left to the caller's copy (cp) */
    GPUMEM__MISS_UNDO,      /* failed before the slot was taken */
    GPUMEM__MISS_WITHDRAW   /* failed: the line goes back to "not cached" */
};

/* A miss in progress: the acquire's request, where the miss is, and the
 * next I/O (the I/O in the form the host tier hands over a line to write:
 * gpumem__tier_io). */
typedef struct gpumem__miss {
    uint64_t line;         /* the line being filled */
    gpumem__tier_copy *cp; /* the caller's copy job (a warp's leader), or NULL */
    void **data;           /* where the acquire's caller gets the slot's data */
    uint32_t count;        /* the references the acquire took */
    uint32_t write;        /* the acquire writes */
    uint32_t step;         /* GPUMEM__MISS_* */
    gpumem_status status;  /* how it ended (WITHDRAW, or done) */
    uint32_t k;            /* the slot claimed for the line */
    uint32_t where;        /* the host tier's placement of the slot's old line */
    uint32_t placed;       /* and what the tier did with it (GPUMEM__TIER_*) */
    uint32_t in_host;      /* the line's host-tier copy is claimed for the fill */
    uint32_t io_write;     /* the next I/O: its direction, line, pool and slot */
    gpumem__tier_io io;
    gpumem__tier_copy own; /* the copy job when the caller gave none */
} gpumem__miss;

/* Whether the line in slot k (the caller holds the slot's lock and the
 * line's BUSY, so no holder can set DIRTY, and newcomers wait) is dirty. */
GPUMEM_API int gpumem__slot_dirty(gpumem_cache *c, uint32_t k) {
    return (gpumem_atomic_load_u32(gpumem__slot_line_state(c, k), GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) &
            GPUMEM_CACHE_DIRTY) != 0;
}

/* Set up the miss's next I/O (the line of slot k in `pool`), to be
 * followed by step `next` with its status. Returns 1 (an I/O to do). */
GPUMEM_API int gpumem__miss_io(volatile gpumem__miss *m, int write, uint64_t line, const gpumem__slot_pool *pool,
                               uint32_t k, uint32_t next) {
    m->io_write = (uint32_t)write;
    m->io.line = line;
    m->io.pool = pool;
    m->io.k = k;
    m->step = next;
    return 1;
}

/* Carry the miss on from its last I/O (whose status is io_st) to its next
 * one (set up in m; returns 1) or to its end (returns 0; m->status). Steps
 * only move forward (the list above), so each is a block tried in turn,
 * without a loop. The slot is locked, and its old line claimed BUSY with
 * count 0, from EVICT to TAKE, so the slot's tag and that line's DIRTY bit
 * are read again where used rather than kept. */
GPUMEM_API int gpumem__miss_step(gpumem_cache *c, volatile gpumem__miss *m, gpumem_status io_st) {
    /* The record is a plain object; the tier's hooks take plain pointers into it. */
    gpumem__miss *plain = (gpumem__miss *)(uintptr_t)m;
    const uint32_t k = m->k;
    if (m->step == GPUMEM__MISS_EVICT) {
        m->step = GPUMEM__MISS_TAKE;
        if (gpumem__slot_tag(c->slots, k) != GPUMEM_CACHE_EMPTY) {
            m->placed = GPUMEM__TIER_BYPASS;
            m->step = GPUMEM__MISS_PLACED;
            if (GPUMEM__HAS_TIER(c) &&
                (m->placed = gpumem__tier_evict(c->tier, k, m->where, &plain->io)) == GPUMEM__TIER_WRITE_FIRST) {
                m->io_write = 1; /* the host line it displaces, written by us */
                m->step = GPUMEM__MISS_DISPLACED;
                return 1;
            }
        }
    }
    if (m->step == GPUMEM__MISS_DISPLACED) {
        m->placed = gpumem__tier_evict_resume(c->tier, k, &plain->io, io_st);
        m->step = GPUMEM__MISS_PLACED;
    }
    if (m->step == GPUMEM__MISS_PLACED) {
        /* Moved to the host tier: dirty there, so nothing is written here. */
        if (m->placed != GPUMEM__TIER_MOVED && gpumem__slot_dirty(c, k))
            return gpumem__miss_io(m, 1, gpumem__slot_tag(c->slots, k), &c->pool, k, GPUMEM__MISS_WRITTEN);
        m->step = GPUMEM__MISS_EVICTED;
    }
    if (m->step == GPUMEM__MISS_WRITTEN) {
        m->step = GPUMEM__MISS_EVICTED;
        if (io_st != GPUMEM_OK) {
            /* Keep the only up-to-date copy: still valid, still dirty. */
            gpumem__line_end_claim(c, gpumem__slot_line_state(c, k), ~GPUMEM_CACHE_BUSY);
            gpumem__slot_unlock(c->slots, k, &c->event);
            m->status = GPUMEM_EIO;
            m->step = GPUMEM__MISS_UNDO;
        } else {
            gpumem__cache_count(c, gpumem__slot_tag(c->slots, k), GPUMEM__ST_WRITEBACKS, 1);
        }
    }
    if (m->step == GPUMEM__MISS_EVICTED) {
        /* Clear VALID, BUSY and DIRTY, keep the count of threads that
         * arrived since (they wait on BUSY and will refill the line).
         * Release: our reads of the slot for the write-back are done before
         * anyone can claim the line again. */
        gpumem__line_end_claim(c, gpumem__slot_line_state(c, k), GPUMEM_CACHE_COUNT_MASK);
        gpumem__cache_count(c, gpumem__slot_tag(c->slots, k), GPUMEM__ST_EVICTIONS, 1);
        m->step = GPUMEM__MISS_TAKE;
    }
    if (m->step == GPUMEM__MISS_TAKE) {
        gpumem__slot_set_tag(c->slots, k, m->line);
        /* count 0: a prefetch, inserted as read ahead; on the device as any
         * fill (telling them apart there cost the share's write 2 registers) */
        gpumem__policy_fill(c, k, m->line, !GPUMEM_ON_DEVICE && m->count == 0);
        gpumem__slot_unlock(c->slots, k, &c->event);
        if (!m->in_host) return gpumem__miss_io(m, 0, m->line, &c->pool, k, GPUMEM__MISS_READ);
        {
            gpumem__tier_copy *job = m->cp ? m->cp : &plain->own;
            job->slot = k;
            job->write = m->write;
            job->dst = gpumem__slot_data(c, k);
            m->step = GPUMEM__MISS_DONE;
            if (m->cp) {
                m->cp->pending = 1; /* the caller's group copies */
            } else {
                gpumem__tier_copy_part(job->dst, job->src, job->bytes, 0, 1);
                gpumem__tier_fetch_done(c->tier, m->line, job);
                m->step = GPUMEM__MISS_PUBLISH;
            }
        }
    }
    if (m->step == GPUMEM__MISS_READ) {
        m->step = GPUMEM__MISS_PUBLISH;
        if (io_st != GPUMEM_OK) { /* give the slot back empty */
            gpumem__slot_lock(c->slots, k, &c->event);
            gpumem__slot_set_tag(c->slots, k, GPUMEM_CACHE_EMPTY);
            gpumem__slot_unlock(c->slots, k, &c->event);
            m->status = io_st;
            m->step = GPUMEM__MISS_WITHDRAW;
        }
    }
    if (m->step == GPUMEM__MISS_PUBLISH) {
        gpumem__cache_publish(c, m->line, k, m->write || (m->in_host && (m->cp ? m->cp : &plain->own)->dirty));
        m->step = GPUMEM__MISS_DONE;
    }
    if (m->step == GPUMEM__MISS_DONE) {
        gpumem__cache_count(c, m->line, GPUMEM__ST_MISSES, m->count);
        *m->data = gpumem__slot_data(c, k);
        m->status = GPUMEM_OK;
        return 0;
    }
    if (m->step == GPUMEM__MISS_UNDO && GPUMEM__TIER_ALONE(c))
        gpumem__tier_undo_lookup(c->tier, m->line, m->cp ? m->cp : &plain->own, (int)m->in_host);
    /* WITHDRAW: the line goes back to "not cached" and the caller's
     * reference is withdrawn, both in one fetch_sub (BUSY is known set and
     * the count is known to include ours, so nothing borrows across
     * fields). */
    if (m->status == GPUMEM_EAGAIN && m->count) /* count 0: a prefetch that gave way */
        gpumem__cache_count(c, m->line, GPUMEM__ST_FULL, 1);
    gpumem_atomic_fetch_sub_u32(gpumem__line_state(c, m->line), GPUMEM_CACHE_BUSY + m->count, GPUMEM_ORDER_RELEASE,
                                GPUMEM__CDEV);
    gpumem_event_notify(&c->event);
    return 0;
}

/* The miss winner's job (see above). The host copy is claimed before the
 * search for a slot, so the evictions that search makes cannot displace
 * it. With `cp` given (a warp's leader) the copy from the host tier is left
 * to the caller (cp->pending), who makes it and calls
 * gpumem__cache_fill_finish. On failure the line goes back to "not cached"
 * and the caller's reference is withdrawn. A prefetch fills with count 0
 * (no reference: the line is left to the policy once published) and
 * `spare` its epoch + 1 (gpumem__cache_sweep); a demand miss, spare 0. */
GPUMEM_API gpumem_status gpumem__cache_fill(gpumem_cache *c, uint64_t line, uint32_t count, int write,
                                            void **data, gpumem__tier_copy *cp, uint64_t spare) {
    gpumem__miss rec;
    volatile gpumem__miss *m = &rec;
    gpumem_status st;
    uint32_t k = 0, where = GPUMEM_PLACE_BYPASS;
    memset(&rec.own, 0, sizeof rec.own);
    m->line = line;
    m->cp = cp;
    m->data = data;
    m->count = count;
    m->write = (uint32_t)write;
    m->in_host = 0;
    if (GPUMEM__TIER_ALONE(c)) m->in_host = (uint32_t)gpumem__tier_lookup(c->tier, line, cp ? cp : &rec.own);
    st = gpumem__cache_find_slot(c, &k, &where, spare);
    m->k = k;
    m->where = where;
    m->status = st;
    m->step = st == GPUMEM_OK ? GPUMEM__MISS_EVICT : GPUMEM__MISS_UNDO;
    /* The one I/O site: each command of each I/O of the miss is made here. */
    while (gpumem__miss_step(c, m, st)) {
        uint32_t nth = 0;
        if (GPUMEM__HAS_SHARE(c) && !m->io_write) { /* a fill: the share picks the source */
            st = gpumem__share_fill(c->share, c, m->io.line, m->io.k);
            continue;
        }
        do st = gpumem__cache_io_cmd(c, (int)m->io_write, m->io.line, m->io.pool, m->io.k, nth);
        while (st == GPUMEM_OK && ++nth < gpumem__cache_io_cmds(c, (int)m->io_write));
    }
    return m->status;
}

/* The caller has copied a pending host-tier line (cp) into its slot: free
 * the host slot, publish the line. */
GPUMEM_API void gpumem__cache_fill_finish(gpumem_cache *c, uint64_t line, const gpumem__tier_copy *cp) {
    gpumem__tier_fetch_done(c->tier, line, cp);
    gpumem__cache_publish(c, line, cp->slot, cp->write || cp->dirty);
}

/* ---- public API ----------------------------------------------------------- */

/* Take `count` references to `line` (count > 1: on behalf of a group of
 * threads, see acquire_coalesced) and return its data in *data, filling it
 * on a miss. write != 0 marks the line dirty. Every OK must be matched by a
 * release of the same count. Statuses: ERANGE (no such line), EINVAL (count
 * 0 or above GPUMEM_CACHE_MAX_GROUP), EOVERFLOW (too many references),
 * EAGAIN (every slot in use: release what you hold, then retry), EIO (the
 * backing failed). On any status but OK no reference is held. */
GPUMEM_API gpumem_status gpumem__cache_acquire(gpumem_cache *c, uint64_t line, uint32_t count, int write,
                                              void **data, gpumem__tier_copy *cp) {
    uint32_t *st_word, s;
    int missed = 0;
    if (!c || !data) return GPUMEM_ENULL;
    if (line >= c->n_lines) return GPUMEM_ERANGE;
    if (count == 0 || count > GPUMEM_CACHE_MAX_GROUP) return GPUMEM_EINVAL;
    st_word = gpumem__line_state(c, line);
    if (c->trace) gpumem_policy_trace_record(c->trace, line, write); /* one access per group */
    if (!GPUMEM_CACHE_TIER && c->tier) return GPUMEM_ESTATE; /* a tier this file cannot serve */
    if (!GPUMEM_CACHE_SHARE && c->share) return GPUMEM_ESTATE; /* a share this file cannot serve */
    if (GPUMEM__HAS_TIER(c)) gpumem__tier_on_access(c->tier, line);
    /* The reference and the look at the state in one step. Acquire: if VALID
     * is set, the filler's writes (data and slot index) are visible. */
    s = gpumem_atomic_fetch_add_u32(st_word, count, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
    if ((s & GPUMEM_CACHE_COUNT_MASK) >= GPUMEM_CACHE_COUNT_LIMIT) {
        gpumem_atomic_fetch_sub_u32(st_word, count, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
        return GPUMEM_EOVERFLOW;
    }
    for (;;) {
        if ((s & (GPUMEM_CACHE_VALID | GPUMEM_CACHE_BUSY)) == GPUMEM_CACHE_VALID) { /* hit */
            uint32_t k = gpumem_atomic_load_u32(&c->lines[line].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
            if (write && !(s & GPUMEM_CACHE_DIRTY))
                gpumem_atomic_fetch_or_u32(st_word, GPUMEM_CACHE_DIRTY, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
            if (GPUMEM_CACHE_CHECK && gpumem__slot_tag(c->slots, k) != line)
                gpumem__cache_count(c, line, GPUMEM__ST_VIOLATIONS, 1);
            gpumem__policy_touch(c, k, line);
            gpumem__cache_count(c, line, missed ? GPUMEM__ST_MISSES : GPUMEM__ST_HITS, count);
            *data = gpumem__slot_data(c, k);
            return GPUMEM_OK;
        }
        missed = 1;
        if (!(s & GPUMEM_CACHE_BUSY)) { /* not cached and nobody filling: try to be the one */
            uint32_t prev = gpumem_atomic_fetch_or_u32(st_word, GPUMEM_CACHE_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
            if (!(prev & GPUMEM_CACHE_BUSY)) {
                if (prev & GPUMEM_CACHE_VALID) { /* filled meanwhile: undo, and it is a hit */
                    s = gpumem_atomic_fetch_and_u32(st_word, ~GPUMEM_CACHE_BUSY, GPUMEM_ORDER_ACQ_REL, GPUMEM__CDEV) &
                        ~GPUMEM_CACHE_BUSY;
                    gpumem_event_notify(&c->event);
                    continue;
                }
                return gpumem__cache_fill(c, line, count, write, data, cp, 0);
            }
        }
        /* Busy: wait with our reference counted, so the line cannot be chosen
         * as a victim once it is valid. */
        GPUMEM_WAIT_UNTIL(&c->event, !((s = gpumem_atomic_load_u32(st_word, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV)) &
                                       GPUMEM_CACHE_BUSY));
    }
}

/* The public acquire: the miss winner makes any copy from the host tier itself. */
GPUMEM_API gpumem_status gpumem_cache_acquire(gpumem_cache *c, uint64_t line, uint32_t count, int write,
                                             void **data) {
    return gpumem__cache_acquire(c, line, count, write, data, (gpumem__tier_copy *)0);
}

/* Drop `count` references. Release order: the caller's writes to the line
 * happen before any eviction that finds the count at zero. A release of more
 * than is held is refused (GPUMEM_ESTATE) when the count shows it; one that
 * races with other threads' releases cannot be seen and is undefined. */
GPUMEM_API gpumem_status gpumem_cache_release(gpumem_cache *c, uint64_t line, uint32_t count) {
    uint32_t *w;
    if (!c) return GPUMEM_ENULL;
    if (line >= c->n_lines) return GPUMEM_ERANGE;
    if (count == 0 || count > GPUMEM_CACHE_MAX_GROUP) return GPUMEM_EINVAL;
    w = gpumem__line_state(c, line);
    if ((gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) & GPUMEM_CACHE_COUNT_MASK) < count) {
        gpumem__cache_count(c, line, GPUMEM__ST_VIOLATIONS, 1);
        return GPUMEM_ESTATE;
    }
    gpumem_atomic_fetch_sub_u32(w, count, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
    return GPUMEM_OK;
}

/* Mark a line the caller holds as written (for callers that acquired it for
 * reading and then decided to write). ESTATE if the line is not cached. */
GPUMEM_API gpumem_status gpumem_cache_mark_dirty(gpumem_cache *c, uint64_t line) {
    uint32_t *w, s;
    if (!c) return GPUMEM_ENULL;
    if (line >= c->n_lines) return GPUMEM_ERANGE;
    w = gpumem__line_state(c, line);
    s = gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    if (!(s & GPUMEM_CACHE_VALID) || !(s & GPUMEM_CACHE_COUNT_MASK)) return GPUMEM_ESTATE;
    if (!(s & GPUMEM_CACHE_DIRTY)) gpumem_atomic_fetch_or_u32(w, GPUMEM_CACHE_DIRTY, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    return GPUMEM_OK;
}

/* ---- warp coalescing (§7.2.1) ---------------------------------------------- */

#if defined(__CUDACC__) /* both CUDA passes see it; only device code can call it */
/* The active lanes of this warp that do the same operation (`op`: 0
 * acquire, 1 release) on the same line of the same cache: their mask, and the
 * leader (the lowest lane). The op keeps lanes that meet at different call
 * sites from forming one group. */
typedef struct gpumem_warp_group {
    uint32_t mask;
    int leader;
} gpumem_warp_group;

__device__ static inline gpumem_warp_group gpumem_warp_group_of(const gpumem_cache *c, uint64_t line, int op) {
    gpumem_warp_group g;
    const uint32_t active = __activemask();
    g.mask = __match_any_sync(active, (unsigned long long)(line << 1 | (uint64_t)(op & 1))) &
             __match_any_sync(active, (unsigned long long)(uintptr_t)c);
    g.leader = __ffs(g.mask) - 1;
    return g;
}
#endif

/* Acquire as a group: on the GPU, the active lanes of the warp that want the
 * same line of the same cache elect their lowest lane as leader, which
 * acquires once with the group's size and hands the data pointer and status
 * to the others (up to 32x fewer atomics on the state word). Any writer in
 * the group makes the acquire a write. On the host a thread is a group of
 * one. Every lane that got OK must call gpumem_cache_release_coalesced. */
GPUMEM_API gpumem_status gpumem_cache_acquire_coalesced(gpumem_cache *c, uint64_t line, int write, void **data) {
    if (!c || !data) return GPUMEM_ENULL; /* before the group forms: such lanes take no part */
#if GPUMEM_ON_DEVICE
    const gpumem_warp_group g = gpumem_warp_group_of(c, line, 0);
    const int any_write = __any_sync(g.mask, write);
    const int lane = (int)gpumem_lane_id();
    unsigned long long p = 0;
    int st = GPUMEM_OK, pending;
    gpumem__tier_copy cp;
    cp.pending = 0;
    if (lane == g.leader) {
        void *d = 0;
        st = (int)gpumem__cache_acquire(c, line, (uint32_t)__popc(g.mask), any_write, &d, &cp);
        p = (unsigned long long)(uintptr_t)d;
    }
    /* A miss served from the host tier: the group copies the line from host
     * memory together (each lane a strided share, GMT's warp zero-copy), and
     * the leader publishes it once every lane's share is written. */
    pending = GPUMEM_CACHE_TIER && __shfl_sync(g.mask, (int)cp.pending, g.leader); /* (0: compiled out) */
    if (pending) {
        const unsigned long long src = __shfl_sync(g.mask, (unsigned long long)(uintptr_t)cp.src, g.leader);
        const uint32_t bytes = __shfl_sync(g.mask, cp.bytes, g.leader);
        gpumem__tier_copy_part((unsigned char *)(uintptr_t)p, (const unsigned char *)(uintptr_t)src, bytes,
                               (uint32_t)__popc(g.mask & ((1u << lane) - 1u)), (uint32_t)__popc(g.mask));
        __threadfence(); /* the shares are written before the leader's release publishes them */
        __syncwarp(g.mask);
        if (lane == g.leader) gpumem__cache_fill_finish(c, line, &cp);
    }
    /* The leader's acquire ordered the slot data for the leader only; the
     * barrier extends that order to the group (a shuffle carries no memory
     * order). */
    __syncwarp(g.mask);
    p = __shfl_sync(g.mask, p, g.leader);
    st = __shfl_sync(g.mask, st, g.leader);
    *data = (void *)(uintptr_t)p;
    return (gpumem_status)st;
#else
    return gpumem_cache_acquire(c, line, 1, write, data);
#endif
}

/* Release as a group; every lane of the group has finished with the data
 * (__syncwarp) before the leader lets the line go. */
GPUMEM_API gpumem_status gpumem_cache_release_coalesced(gpumem_cache *c, uint64_t line) {
#if GPUMEM_ON_DEVICE
    const gpumem_warp_group g = gpumem_warp_group_of(c, line, 1);
    int st = GPUMEM_OK;
    __syncwarp(g.mask);
    if ((int)gpumem_lane_id() == g.leader) st = (int)gpumem_cache_release(c, line, (uint32_t)__popc(g.mask));
    return (gpumem_status)__shfl_sync(g.mask, st, g.leader);
#else
    return gpumem_cache_release(c, line, 1);
#endif
}

/* ---- write-back and invalidation -------------------------------------------- */

/* Write back every dirty line in slots [first, end) that nobody holds, and
 * mark it clean. A line still held is skipped and stays dirty: its holder
 * may be writing it, and copying it meanwhile would be a data race. Slots
 * whose line is being filled hold nothing dirty. Returns OK when every dirty
 * line was written, EAGAIN when some were held (call again once their holders
 * have released them), EIO when a write failed (the line stays dirty).
 * *written (may be NULL) counts lines written. Device code can split the
 * slots over threads; gpumem_cache_flush does all of them and makes the
 * writes durable. */
GPUMEM_API gpumem_status gpumem_cache_writeback(gpumem_cache *c, uint32_t first, uint32_t end, uint64_t *written) {
    uint32_t k;
    uint64_t n = 0;
    gpumem_status result = GPUMEM_OK;
    if (!c) return GPUMEM_ENULL;
    if (first > end || end > c->n_slots) return GPUMEM_ERANGE;
    for (k = first; k < end; k++) {
        uint64_t line;
        uint32_t prev;
        switch (gpumem__sweep_take(c, k, 1, GPUMEM_CACHE_DIRTY, GPUMEM_CACHE_DIRTY, &line, &prev)) {
        case GPUMEM__TAKE_OK: break;
        case GPUMEM__TAKE_SKIP: continue; /* empty or clean */
        default: /* held, or a fill: dirty only when the host tier (gpumem_tier.h) hands up a dirty line */
            if (result == GPUMEM_OK) result = GPUMEM_EAGAIN;
            continue;
        }
        if (gpumem__cache_io(c, 1, line, k) == GPUMEM_OK) {
            /* Nobody holds it and BUSY keeps newcomers waiting, so no write
             * can slip in between the copy and the clean mark. */
            n++;
            gpumem__cache_count(c, line, GPUMEM__ST_WRITEBACKS, 1);
            gpumem__line_end_claim(c, gpumem__line_state(c, line), ~(GPUMEM_CACHE_BUSY | GPUMEM_CACHE_DIRTY));
        } else {
            result = GPUMEM_EIO;
            gpumem__line_end_claim(c, gpumem__line_state(c, line), ~GPUMEM_CACHE_BUSY);
        }
        gpumem__slot_unlock(c->slots, k, &c->event);
    }
    if (written) *written = n;
    return result;
}

/* Write back every dirty line nobody holds, then send each NVMe controller a
 * Flush so the data is durable. With a host tier, its dirty lines are
 * written back too (nobody holds those). Statuses as gpumem_cache_writeback;
 * the Flush commands are sent only when it returns OK. */
GPUMEM_API gpumem_status gpumem__cache_flush(gpumem_cache *c, uint64_t *written, int only_if_written) {
    gpumem_status st, host = GPUMEM_OK;
    uint64_t n = 0, in_host = 0;
    uint32_t j;
    if (!c) return GPUMEM_ENULL;
    st = gpumem_cache_writeback(c, 0, c->n_slots, &n);
    if (!GPUMEM_CACHE_TIER && c->tier) return GPUMEM_ESTATE;
    if (GPUMEM__HAS_TIER(c)) host = gpumem__tier_writeback(c->tier, &in_host);
    if (st == GPUMEM_OK || (st == GPUMEM_EAGAIN && host == GPUMEM_EIO)) st = host;
    n += in_host;
    if (written) *written = n;
    if (c->backing.kind == GPUMEM_CACHE_BACKING_NVME && (n || !only_if_written))
        for (j = 0; j < c->backing.n_ctrls && st == GPUMEM_OK; j++)
            st = gpumem_nvme_qp_flush(c->backing.pairs[(size_t)j * c->backing.pairs_per_ctrl], 0);
    return st;
}

GPUMEM_API gpumem_status gpumem_cache_flush(gpumem_cache *c, uint64_t *written) {
    return gpumem__cache_flush(c, written, 0);
}

/* Drop the clean lines nobody holds in slots [first, end), so the next access
 * reads the backing again. Dirty or held lines stay. *dropped (may be NULL)
 * counts lines dropped. */
GPUMEM_API gpumem_status gpumem_cache_invalidate(gpumem_cache *c, uint32_t first, uint32_t end, uint64_t *dropped) {
    uint32_t k;
    uint64_t n = 0;
    if (!c) return GPUMEM_ENULL;
    if (first > end || end > c->n_slots) return GPUMEM_ERANGE;
    for (k = first; k < end; k++) {
        uint64_t line;
        uint32_t prev;
        if (gpumem__sweep_take(c, k, 0, 0, 0, &line, &prev) != GPUMEM__TAKE_OK) continue; /* empty, held, claimed */
        if ((prev & (GPUMEM_CACHE_DIRTY | GPUMEM_CACHE_VALID)) == GPUMEM_CACHE_VALID) {
            gpumem__line_end_claim(c, gpumem__line_state(c, line), GPUMEM_CACHE_COUNT_MASK);
            gpumem__slot_set_tag(c->slots, k, GPUMEM_CACHE_EMPTY);
            gpumem__cache_count(c, line, GPUMEM__ST_INVALIDATIONS, 1);
            n++;
        } else {
            gpumem__line_end_claim(c, gpumem__line_state(c, line), ~GPUMEM_CACHE_BUSY);
        }
        gpumem__slot_unlock(c->slots, k, &c->event);
    }
    if (dropped) *dropped = n;
    return GPUMEM_OK;
}

/* ---- setup ---------------------------------------------------------------- */

/* Check the description's shape against the backing (line size against the
 * namespace's block size, transfer limit and capacity). The memory the
 * caller places is checked by gpumem_cache_init; gpumem_cache_create checks
 * the shape before it allocates. */
GPUMEM_API gpumem_status gpumem__cache_check_desc(const gpumem_cache_desc *d, uint32_t *blocks_per_line) {
    const gpumem_cache_backing *b = &d->backing;
    *blocks_per_line = 0;
    if (d->line_bytes < GPUMEM_CACHE_MIN_LINE || d->line_bytes > GPUMEM_CACHE_MAX_LINE ||
        !gpumem_is_pow2_u64(d->line_bytes))
        return GPUMEM_EINVAL;
    if (d->n_slots == 0 || d->n_lines == 0) return GPUMEM_EINVAL;
    /* sizes in bytes must not wrap: metadata, the data behind, the slots */
    if (d->n_lines > ((uint64_t)SIZE_MAX - (uint64_t)d->n_slots * sizeof(gpumem__cache_slot)) /
                         sizeof(gpumem__cache_line) ||
        d->n_lines > UINT64_MAX / d->line_bytes || (uint64_t)d->n_slots * d->line_bytes > (uint64_t)SIZE_MAX / 2)
        return GPUMEM_ERANGE;
    if (d->seq_policy ? d->seq_policy->d.n_slots != d->n_slots : d->policy >= GPUMEM_POLICY_SLOT_KINDS)
        return GPUMEM_EINVAL;
    if (b->kind == GPUMEM_CACHE_BACKING_MEMORY) return b->mem ? GPUMEM_OK : GPUMEM_ENULL;
    if (b->kind != GPUMEM_CACHE_BACKING_NVME) return GPUMEM_EINVAL;
    if (!b->pairs) return GPUMEM_ENULL;
    if (b->n_ctrls == 0 || b->pairs_per_ctrl == 0 || b->layout > GPUMEM_CACHE_REPLICATE) return GPUMEM_EINVAL;
    if ((uint64_t)b->n_ctrls * b->pairs_per_ctrl > 65536) return GPUMEM_EINVAL;
    {
        uint32_t j, shift = b->ns.lba_shift, bpl;
        uint64_t per_ctrl = b->layout == GPUMEM_CACHE_STRIPE ? (d->n_lines + b->n_ctrls - 1) / b->n_ctrls
                                                             : d->n_lines;
        /* The pointers only: the pairs may live where this thread cannot read. */
        for (j = 0; j < b->n_ctrls * b->pairs_per_ctrl; j++)
            if (!b->pairs[j]) return GPUMEM_ENULL;
        if (shift < 9 || shift > 16 || b->ns.n_blocks == 0) return GPUMEM_EINVAL; /* no namespace given */
        if ((1u << shift) > d->line_bytes) return GPUMEM_EINVAL;                 /* a line smaller than a block */
        bpl = d->line_bytes >> shift;
        if (bpl > b->ns.max_blocks) return GPUMEM_EINVAL; /* above the transfer limit (MDTS) */
        if (b->first_lba > b->ns.n_blocks || per_ctrl > (b->ns.n_blocks - b->first_lba) / bpl)
            return GPUMEM_ERANGE;
        *blocks_per_line = bpl;
    }
    return GPUMEM_OK;
}

#if !GPUMEM_ON_DEVICE
#if defined(__CUDACC__)
/* What the CUDA runtime calls the memory at p: its cudaMemoryType, or
 * cudaMemoryTypeUnregistered where it does not know the memory (ordinary
 * host memory, or no GPU to ask). The one place the question is asked
 * (the cache's and the share's checks). */
static inline int gpumem__memory_type(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* the failed call's error is not left for the caller's next check */
        return cudaMemoryTypeUnregistered;
    }
    return a.type;
}
#endif

/* Whether the host may read *p. In a CUDA build: unless the runtime calls
 * it GPU memory (host, registered, managed and memory the runtime does not
 * know are readable). In a plain build it cannot tell: -1. */
static inline int gpumem__cache_host_readable(const void *p) {
#if defined(__CUDACC__)
    return gpumem__memory_type(p) != cudaMemoryTypeDevice;
#else
    (void)p;
    return -1;
#endif
}

/* Mixed namespaces behind one cache are refused at init where the pairs can
 * be read (issue 30): each pair must serve the backing's namespace - its
 * block size, lines within its transfer limit, and the blocks the cache
 * reaches on its controller. `unknown_readable`: what to assume of a pair
 * when gpumem__cache_host_readable cannot tell (gpumem_cache_create: 1, its
 * pairs are driven by the host threads that use a host cache;
 * gpumem_cache_init: 0, they may be in GPU memory). Pairs not read here
 * are still checked for their block size at each I/O
 * (gpumem__cache_io_cmd). GPUMEM_EINVAL or GPUMEM_ERANGE, logged with the
 * pair and what was expected and found. */
static inline gpumem_status gpumem__cache_check_pairs(const gpumem_cache_desc *d, uint32_t blocks_per_line,
                                                      int unknown_readable) {
    const gpumem_cache_backing *b = &d->backing;
    uint64_t per_ctrl, reach;
    uint32_t j;
    if (b->kind != GPUMEM_CACHE_BACKING_NVME) return GPUMEM_OK; /* (then n_ctrls is 0) */
    per_ctrl = b->layout == GPUMEM_CACHE_STRIPE ? (d->n_lines + b->n_ctrls - 1) / b->n_ctrls : d->n_lines;
    reach = b->first_lba + per_ctrl * blocks_per_line; /* blocks the cache uses on each controller */
    for (j = 0; j < b->n_ctrls * b->pairs_per_ctrl; j++) {
        const gpumem_nvme_qp *qp = b->pairs[j];
        int readable = gpumem__cache_host_readable(qp);
        if (!(readable < 0 ? unknown_readable : readable)) continue;
        if (qp->ns.lba_shift != b->ns.lba_shift) {
            GPUMEM_LOG("cache: pair %u (controller %u) serves %u-byte blocks, the backing's namespace %u-byte "
                       "ones: every pair must serve that namespace",
                       j, j / b->pairs_per_ctrl, 1u << (qp->ns.lba_shift & 31u), 1u << b->ns.lba_shift);
            return GPUMEM_EINVAL;
        }
        if (qp->ns.max_blocks < blocks_per_line) {
            GPUMEM_LOG("cache: pair %u (controller %u) moves at most %u blocks a command, a line needs %u", j,
                       j / b->pairs_per_ctrl, qp->ns.max_blocks, blocks_per_line);
            return GPUMEM_EINVAL;
        }
        if (qp->ns.n_blocks < reach) {
            GPUMEM_LOG("cache: pair %u (controller %u) serves %llu blocks, the cache reaches block %llu", j,
                       j / b->pairs_per_ctrl, (unsigned long long)qp->ns.n_blocks,
                       (unsigned long long)(reach - 1));
            return GPUMEM_ERANGE;
        }
    }
    return GPUMEM_OK;
}
#endif

/* Initialise a cache in memory the caller placed (host, or unified memory
 * the GPU will use). Every line starts not cached, every slot cold. With
 * an NVMe backing, the pairs the host can read must serve the backing's
 * namespace (GPUMEM_EINVAL, GPUMEM_ERANGE, logged): in a CUDA build those
 * not in GPU memory; a plain build cannot tell GPU memory from the host's,
 * and reads none (gpumem_cache_create reads all). Pairs not read are
 * checked for their block size at each I/O. */
GPUMEM_API gpumem_status gpumem_cache_init(gpumem_cache *c, const gpumem_cache_desc *in) {
    uint32_t bpl = 0, k;
    uint64_t i, data_iova, prp_iova;
    gpumem_status st;
    gpumem_cache_desc resolved;
    const gpumem_cache_desc *d = &resolved; /* zero means default */
    if (!c || !in || !in->meta || !in->data) return GPUMEM_ENULL;
    resolved = gpumem_cache_desc_resolved(in);
    if ((st = gpumem__cache_check_desc(d, &bpl)) != GPUMEM_OK) return st;
#if !GPUMEM_ON_DEVICE
    if ((st = gpumem__cache_check_pairs(d, bpl, 0)) != GPUMEM_OK) return st;
#endif
    if (d->meta_bytes < gpumem_cache_meta_bytes(d)) return GPUMEM_ENOMEM;
    if (((uintptr_t)d->meta & 7u) != 0) return GPUMEM_EINVAL;
    data_iova = d->data_iova ? d->data_iova : (uint64_t)(uintptr_t)d->data;
    prp_iova = d->prp_lists_iova ? d->prp_lists_iova : (uint64_t)(uintptr_t)d->prp_lists;
    if (d->backing.kind == GPUMEM_CACHE_BACKING_NVME) {
        /* Lines of a page or more start on a page: then a line spans
         * line_bytes / 4096 pages and its PRP list fits the slot's list page. */
        uint64_t align = d->line_bytes < GPUMEM_NVME_PAGE_BYTES ? d->line_bytes : GPUMEM_NVME_PAGE_BYTES;
        if ((data_iova & (align - 1)) != 0) return GPUMEM_EALIGN;
        if (d->line_bytes > 2 * GPUMEM_NVME_PAGE_BYTES && !d->prp_lists) return GPUMEM_ENULL;
        if (d->prp_lists && (prp_iova & (GPUMEM_NVME_PAGE_BYTES - 1)) != 0) return GPUMEM_EALIGN;
    }
    memset(c, 0, sizeof *c);
    c->lines = (gpumem__cache_line *)d->meta;
    c->slots = (gpumem__cache_slot *)(c->lines + d->n_lines);
    c->pool.data = (unsigned char *)d->data;
    c->pool.data_iova = data_iova;
    c->pool.prp_lists = d->prp_lists;
    c->pool.prp_lists_iova = prp_iova;
    c->backing = d->backing;
    if (gpumem__cache_n_pairs(&d->backing)) {
        /* Our own copy: the caller's array may be gone once init returns. */
        gpumem_nvme_qp **copy = (gpumem_nvme_qp **)(c->slots + d->n_slots);
        size_t j;
        for (j = 0; j < gpumem__cache_n_pairs(&d->backing); j++) copy[j] = d->backing.pairs[j];
        c->backing.pairs = copy;
    }
    c->n_lines = d->n_lines;
    c->n_slots = d->n_slots;
    c->line_bytes = d->line_bytes;
    c->line_shift = gpumem_log2_u64(d->line_bytes);
    c->policy = d->policy;
    gpumem_policy_slot_hints_init(&c->slot_hints);
    c->trace = d->trace;
    c->seq = d->seq_policy;
    c->full_sweeps = d->full_sweeps;
    c->prefetch_budget = d->prefetch_budget;
    c->blocks_per_line = bpl;
    for (i = 0; i < d->n_lines; i++) c->lines[i].state = c->lines[i].slot = 0;
    for (k = 0; k < d->n_slots; k++) {
        c->slots[k].lock = c->slots[k].ref = 0;
        c->slots[k].tag = GPUMEM_CACHE_EMPTY;
    }
    return GPUMEM_OK;
}

/* Sum the counters over the shards: atomic loads, so safe while threads run
 * (each count is monotonic; together they are a recent snapshot, not one
 * instant). Built with GPUMEM_NO_STATS: all zero, and GPUMEM_ESTATE. */
GPUMEM_API gpumem_status gpumem_cache_get_stats(gpumem_cache *c, gpumem_cache_stats *out) {
    uint64_t *o = (uint64_t *)out;
    uint32_t i, j;
    if (!c || !out) return GPUMEM_ENULL;
    for (j = 0; j < GPUMEM__CACHE_N_STATS; j++) o[j] = 0;
#if defined(GPUMEM_NO_STATS)
    (void)i;
    return GPUMEM_ESTATE;
#else
    for (i = 0; i < GPUMEM_CACHE_STAT_SHARDS; i++)
        for (j = 0; j < GPUMEM__CACHE_N_STATS; j++)
            o[j] += gpumem_atomic_load_u64(&c->stats[i].v[j], GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    return GPUMEM_OK;
#endif
}

/* The first line from `from` on that a thread holds or a fill or write-back
 * has claimed, or (dirty_too) that holds a write the backing lacks;
 * c->n_lines if none (a NULL cache: 0, so that a caller refuses). For
 * whoever is about to free a cache's memory: nobody may be using it then,
 * and, where nothing can write back, no write may be lost. Acquire: the
 * holders' releases are done before the caller frees. */
GPUMEM_API uint64_t gpumem_cache_find_in_use(gpumem_cache *c, uint64_t from, int dirty_too) {
    const uint32_t in_use = GPUMEM_CACHE_BUSY | GPUMEM_CACHE_COUNT_MASK | (dirty_too ? GPUMEM_CACHE_DIRTY : 0u);
    uint64_t i;
    if (!c) return 0;
    for (i = from; i < c->n_lines; i++)
        if (gpumem_atomic_load_u32(gpumem__line_state(c, i), GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV) & in_use) break;
    return i < c->n_lines ? i : c->n_lines;
}

/* Check the structure while no thread uses the cache: every tagged slot's
 * line is valid and maps back to that slot (so no line is in two slots),
 * every valid line's slot carries its tag, nothing is busy, no count is left,
 * no slot lock is held. Returns the number of problems (0 is healthy). */
GPUMEM_API uint64_t gpumem_cache_check_quiescent(const gpumem_cache *c) {
    uint64_t bad = 0, i;
    uint32_t k;
    if (!c) return 1;
    for (k = 0; k < c->n_slots; k++) {
        uint64_t t = c->slots[k].tag;
        if (c->slots[k].lock != 0) bad++;
        if (t == GPUMEM_CACHE_EMPTY) continue;
        if (t >= c->n_lines || !(c->lines[t].state & GPUMEM_CACHE_VALID) || c->lines[t].slot != k) bad++;
    }
    for (i = 0; i < c->n_lines; i++) {
        uint32_t s = c->lines[i].state;
        if (s & (GPUMEM_CACHE_BUSY | GPUMEM_CACHE_COUNT_MASK)) bad++;
        if (!(s & GPUMEM_CACHE_VALID) && (s & GPUMEM_CACHE_DIRTY)) bad++;
        if ((s & GPUMEM_CACHE_VALID) && (c->lines[i].slot >= c->n_slots || c->slots[c->lines[i].slot].tag != i)) bad++;
    }
    return bad;
}

/* ---- typed array view (§7.2.2) ------------------------------------------------ */

/* n elements of elem_bytes bytes, element 0 at byte `offset` of the cached
 * data. Elements never straddle lines: elem_bytes divides line_bytes and
 * offset is a multiple of elem_bytes. */
typedef struct gpumem_cache_array {
    gpumem_cache *cache;
    uint64_t offset;
    uint64_t n;
    uint32_t elem_bytes;
    uint32_t valid; /* 1 if the shape was accepted by gpumem_cache_array_make */
} gpumem_cache_array;

GPUMEM_API gpumem_cache_array gpumem_cache_array_make(gpumem_cache *c, uint32_t elem_bytes, uint64_t offset,
                                                      uint64_t n) {
    gpumem_cache_array a;
    a.cache = c;
    a.offset = offset;
    a.n = n;
    a.elem_bytes = elem_bytes;
    a.valid = c && elem_bytes && c->line_bytes % elem_bytes == 0 && offset % elem_bytes == 0 &&
              offset <= ((uint64_t)c->n_lines << c->line_shift) &&
              n <= (((uint64_t)c->n_lines << c->line_shift) - offset) / elem_bytes;
    return a;
}

/* A thread's reference into an array: keeps the line it last used, so
 * consecutive accesses to one line cost one acquire. Drop it (or move it
 * elsewhere) before waiting on other threads: a held line cannot be evicted.
 * It keeps a pointer to the array (and the array one to its cache): both
 * must outlive the reference. */
typedef struct gpumem_cache_ref {
    const gpumem_cache_array *array;
    uint64_t line;       /* held line, or GPUMEM_CACHE_EMPTY */
    unsigned char *base; /* its data */
    int dirty;           /* written through this reference */
} gpumem_cache_ref;

GPUMEM_API gpumem_cache_ref gpumem_cache_ref_make(const gpumem_cache_array *a) {
    gpumem_cache_ref r = {a, GPUMEM_CACHE_EMPTY, 0, 0};
    return r;
}

/* Release the held line, if any. */
GPUMEM_API gpumem_status gpumem_cache_ref_drop(gpumem_cache_ref *r) {
    gpumem_status st = GPUMEM_OK;
    if (!r) return GPUMEM_ENULL;
    if (r->line != GPUMEM_CACHE_EMPTY) {
        if (r->dirty) (void)gpumem_cache_mark_dirty(r->array->cache, r->line); /* held: cannot fail */
        st = gpumem_cache_release_coalesced(r->array->cache, r->line);
    }
    *r = gpumem_cache_ref_make(r->array);
    return st;
}

/* Address of element i in the cache (*elems), valid until the reference
 * moves to another line or is dropped, and in *count (0 on failure) how many
 * elements from i on, at most n, lie in that line: a loop over a range makes
 * one call a line, not one an element. The held line is released before the
 * next is acquired, so a thread never holds two lines here. */
GPUMEM_API gpumem_status gpumem_cache_ref_span(gpumem_cache_ref *r, uint64_t i, uint64_t n, int write, void **elems,
                                               uint64_t *count) {
    const gpumem_cache_array *a;
    uint64_t byte, line, in_line;
    if (count) *count = 0;
    if (!r || !elems || !count || !r->array) return GPUMEM_ENULL;
    a = r->array;
    if (!a->valid || n == 0) return GPUMEM_EINVAL;
    if (i >= a->n) return GPUMEM_ERANGE;
    byte = a->offset + i * a->elem_bytes;
    line = byte >> a->cache->line_shift;
    if (line != r->line) {
        void *p = 0;
        gpumem_status st = gpumem_cache_ref_drop(r);
        if (st != GPUMEM_OK) return st;
        st = gpumem_cache_acquire_coalesced(a->cache, line, write, &p);
        if (st != GPUMEM_OK) return st;
        r->line = line;
        r->base = (unsigned char *)p;
    }
    if (write) r->dirty = 1;
    byte &= a->cache->line_bytes - 1;
    *elems = r->base + byte;
    in_line = (a->cache->line_bytes - byte) / a->elem_bytes;
    *count = n < in_line && n < a->n - i ? n : in_line < a->n - i ? in_line : a->n - i;
    return GPUMEM_OK;
}

/* Address of element i: a span of one. */
GPUMEM_API gpumem_status gpumem_cache_ref_at(gpumem_cache_ref *r, uint64_t i, int write, void **elem) {
    uint64_t one;
    return gpumem_cache_ref_span(r, i, 1, write, elem, &one);
}

/* Copy element i out of / into the cache: typed copies where the element's
 * size and both addresses allow (gpumem_copy_value), bytes otherwise. */
GPUMEM_API gpumem_status gpumem_cache_ref_get(gpumem_cache_ref *r, uint64_t i, void *out) {
    void *p = 0;
    gpumem_status st = out ? gpumem_cache_ref_at(r, i, 0, &p) : GPUMEM_ENULL;
    if (st == GPUMEM_OK) gpumem_copy_value(out, p, r->array->elem_bytes);
    return st;
}

GPUMEM_API gpumem_status gpumem_cache_ref_put(gpumem_cache_ref *r, uint64_t i, const void *in) {
    void *p = 0;
    gpumem_status st = in ? gpumem_cache_ref_at(r, i, 1, &p) : GPUMEM_ENULL;
    if (st == GPUMEM_OK) gpumem_copy_value(p, in, r->array->elem_bytes);
    return st;
}

/* ======================================================================== */
/* Next-use hints (issue 43)                                                */
/* ======================================================================== */

/* The application says what it knows of its future: the epoch of a line's
 * next use on a clock of its own (a BFS level, a PageRank sweep, a
 * mini-batch, or finer), that it is done with a line (demote), its weight
 * beyond that (the hinted sequential policy only), and where its clock is.
 * Any thread, host or device; gpumem_cache_hint_coalesced sends one hint
 * per group of lanes. The slot kind GPUMEM_POLICY_HINTED_RRIP (desc.policy)
 * takes hints from host and device alike; the hinted sequential policy
 * (desc.seq_policy) is host code: from device code a hint to it is
 * recorded and answers ESTATE (gpumem_policy.h says why). Hints are advice:
 * they change which lines are kept, never what a read returns. Every hint
 * is recorded in desc.trace whatever the policy (bench/policy_sim replays
 * it). Statuses: ENULL, ERANGE (a line past the end; the policy's ERANGE:
 * a hint for an epoch already past), EOVERFLOW (an epoch of UINT64_MAX),
 * ESTATE (the cache's policy takes no such hint: recorded, and that is
 * all). */
/* The slot holding `line`, if it is cached and not in flux, or NONE. */
GPUMEM_API uint32_t gpumem__cache_resident_slot(gpumem_cache *c, uint64_t line) {
    uint32_t s = gpumem_atomic_load_u32(gpumem__line_state(c, line), GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    return (s & (GPUMEM_CACHE_VALID | GPUMEM_CACHE_BUSY)) == GPUMEM_CACHE_VALID
               ? gpumem_atomic_load_u32(&c->lines[line].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV)
               : GPUMEM_POLICY_NONE;
}

/* A hint to a cache of the slot kind GPUMEM_POLICY_HINTED_RRIP: no lock, host or device. The line's slot
 * is read without one (relaxed: the slot word steers replacement only, the line's data is guarded by its
 * state and the slot lock as ever); a hint for a line not resident waits for its fill in the pending table. */
GPUMEM_API gpumem_status gpumem__cache_slot_hint(gpumem_cache *c, uint32_t op, uint64_t line, uint64_t when) {
    uint64_t e = gpumem_atomic_load_u64(&c->slot_hints.epoch, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    uint32_t k;
    if (op == GPUMEM_POLICY_TRACE_EPOCH) { /* recorded when it moves, as the sequential kind's */
        if (c->trace && when > e && when != UINT64_MAX) gpumem_policy_trace_hint(c->trace, op, 0, when);
        return gpumem_policy_slot_epoch(&c->slot_hints, when);
    }
    if (c->trace) gpumem_policy_trace_hint(c->trace, op, line, when);
    if (op == GPUMEM_POLICY_TRACE_WEIGHT) return GPUMEM_ESTATE; /* the sequential kind's alone */
    k = gpumem__cache_resident_slot(c, line);
    /* One hint a line: a prefetch's never replaces one for a sooner use. */
    if (op == GPUMEM_POLICY_TRACE_SOON && when >= e &&
        (k < c->n_slots ? gpumem__slot_next_use(c, k)
                        : gpumem_policy_slot_pending_next_use(&c->slot_hints, line)) <= when)
        return GPUMEM_OK;
    if (k >= c->n_slots) /* kept for its fill */
        return gpumem_policy_slot_hint_later(&c->slot_hints, line, when, op == GPUMEM_POLICY_TRACE_DEMOTE);
    return gpumem_policy_slot_hint(&c->slot_hints, &c->slots[k].ref, when, op == GPUMEM_POLICY_TRACE_DEMOTE);
}

GPUMEM_API gpumem_status gpumem__cache_hint(gpumem_cache *c, uint32_t op, uint64_t line, uint64_t when) {
    gpumem_status st = GPUMEM_OK;
    int hinted;
    if (!c) return GPUMEM_ENULL;
    if (op != GPUMEM_POLICY_TRACE_EPOCH && line >= c->n_lines) return GPUMEM_ERANGE;
    if (!c->seq && c->policy == GPUMEM_POLICY_HINTED_RRIP) return gpumem__cache_slot_hint(c, op, line, when);
    hinted = c->seq && c->seq->d.kind == GPUMEM_POLICY_HINTED;
    if (op != GPUMEM_POLICY_TRACE_EPOCH) {
        if (c->trace) gpumem_policy_trace_hint(c->trace, op, line, when);
        if (!hinted) return GPUMEM_ESTATE;
    } else if (!hinted) { /* the clock: recorded when it moves (each record later than the one before) */
        if (c->trace) gpumem_policy_trace_hint(c->trace, op, 0, when);
        return GPUMEM_ESTATE;
    }
    gpumem__seq_lock(c);
    if (op == GPUMEM_POLICY_TRACE_EPOCH) {
        if (when > c->seq->hint.epoch) {
            st = gpumem_policy_epoch(c->seq, when);
            if (st == GPUMEM_OK && c->trace) gpumem_policy_trace_hint(c->trace, op, 0, when);
        }
    } else {
        /* The slot holding the line, if it is cached and not in flux; the
         * policy's own record of the slot's line has the last word. */
        uint32_t k = gpumem__cache_resident_slot(c, line);
        if (k != GPUMEM_POLICY_NONE && (k >= c->n_slots || c->seq->line_of[k] != line)) k = GPUMEM_POLICY_NONE;
        st = op == GPUMEM_POLICY_TRACE_DEMOTE   ? gpumem_policy_demote(c->seq, k, line)
             : op == GPUMEM_POLICY_TRACE_WEIGHT ? gpumem_policy_weight(c->seq, k, line, when)
                                                : gpumem_policy_hint(c->seq, k, line, when);
    }
    gpumem__seq_unlock(c);
    return st;
}

/* `line` will next be used at epoch `when`. */
GPUMEM_API gpumem_status gpumem_cache_hint(gpumem_cache *c, uint64_t line, uint64_t when) {
    return gpumem__cache_hint(c, GPUMEM_POLICY_TRACE_HINT, line, when);
}

/* The application is done with `line`: it is the first to go. */
GPUMEM_API gpumem_status gpumem_cache_demote(gpumem_cache *c, uint64_t line) {
    return gpumem__cache_hint(c, GPUMEM_POLICY_TRACE_DEMOTE, line, 0);
}

/* `line` weighs `weight` beyond its hints (gpumem_policy_weight); EOVERFLOW at 2^63 (no trace holds it). */
GPUMEM_API gpumem_status gpumem_cache_weight(gpumem_cache *c, uint64_t line, uint64_t weight) {
    return weight >> 63 ? GPUMEM_EOVERFLOW : gpumem__cache_hint(c, GPUMEM_POLICY_TRACE_WEIGHT, line, weight);
}

/* The application's clock is at `epoch` now: it only moves forward, so a
 * thread behind the others (epoch at or below the clock) changes nothing. */
GPUMEM_API gpumem_status gpumem_cache_epoch(gpumem_cache *c, uint64_t epoch) {
    return gpumem__cache_hint(c, GPUMEM_POLICY_TRACE_EPOCH, 0, epoch);
}

/* The lines [*line, *end) that elements [first, first + count) of array
 * `a` lie on (none for count 0), or the status of a bad request. */
GPUMEM_API gpumem_status gpumem__cache_array_lines(const gpumem_cache_array *a, uint64_t first, uint64_t count,
                                                   uint64_t *line, uint64_t *end) {
    *line = *end = 0;
    if (!a || !a->cache) return GPUMEM_ENULL;
    if (!a->valid) return GPUMEM_EINVAL;
    if (first > a->n || count > a->n - first) return GPUMEM_ERANGE;
    if (count == 0) return GPUMEM_OK;
    *line = (a->offset + first * a->elem_bytes) >> a->cache->line_shift;
    *end = ((a->offset + (first + count) * a->elem_bytes - 1) >> a->cache->line_shift) + 1;
    return GPUMEM_OK;
}

/* gpumem_cache_hint for a warp: the active lanes hinting the same line of
 * the same cache for the same epoch send one hint (their lowest lane), and
 * all get its status. On the host, one thread's hint. */
GPUMEM_API gpumem_status gpumem_cache_hint_coalesced(gpumem_cache *c, uint64_t line, uint64_t when) {
#if GPUMEM_ON_DEVICE
    const uint32_t active = __activemask();
    const uint32_t mask = __match_any_sync(active, (unsigned long long)line) &
                          __match_any_sync(active, (unsigned long long)when) &
                          __match_any_sync(active, (unsigned long long)(uintptr_t)c);
    const int leader = __ffs(mask) - 1;
    int st = GPUMEM_OK;
    if ((int)gpumem_lane_id() == leader) st = (int)gpumem_cache_hint(c, line, when);
    return (gpumem_status)__shfl_sync(mask, st, leader);
#else
    return gpumem_cache_hint(c, line, when);
#endif
}

/* ---- hinted prefetch --------------------------------------------------------- */

/* `line` is needed soon, at epoch `when`: hinted so (a "soon" record) and
 * read ahead now, if not cached, by the calling thread through the pairs:
 * a thread ahead of the users (a prefetcher, an idle warp) turns their
 * misses into hits. Below demand misses: at most desc.prefetch_budget
 * prefetch fills at once, one sweep for a slot and no wait, no slot taken
 * whose line is hinted for `when` or sooner, nothing changed in what the
 * sweep passes over (no aging, judging or pin); else EAGAIN, nothing
 * evicted (stats.prefetch_declined). No reference is taken: the line is
 * the policy's once in (a fill, not a use of it; on the device, a use). It
 * counts in fills, reads (unless from the host tier) and prefetches, not
 * misses. Its hint never replaces one for a sooner use. Advice: no read
 * returns other bytes with or without it. Statuses: OK (read ahead, or
 * already cached, filled or evicted by another), ENULL, ERANGE (a line
 * past the end, `when` behind a hinted clock), EOVERFLOW (`when`
 * UINT64_MAX), EAGAIN (gave way), ESTATE (a tier or share this file cannot
 * serve), EIO (the read or the victim's write-back failed: not cached). */
GPUMEM_API gpumem_status gpumem_cache_prefetch(gpumem_cache *c, uint64_t line, uint64_t when) {
    uint32_t *st_word, prev;
    void *data = 0;
    gpumem_status st;
    if (!c) return GPUMEM_ENULL;
    if (line >= c->n_lines) return GPUMEM_ERANGE;
    if (when == UINT64_MAX) return GPUMEM_EOVERFLOW;
    if ((!GPUMEM_CACHE_TIER && c->tier) || (!GPUMEM_CACHE_SHARE && c->share)) return GPUMEM_ESTATE;
    st = gpumem__cache_hint(c, GPUMEM_POLICY_TRACE_SOON, line, when);
    if (st != GPUMEM_OK && st != GPUMEM_ESTATE) return st; /* ESTATE: a policy without hints reads ahead all the same */
    st_word = gpumem__line_state(c, line);
    if (gpumem_atomic_load_u32(st_word, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) & (GPUMEM_CACHE_VALID | GPUMEM_CACHE_BUSY))
        return GPUMEM_OK; /* cached, or on its way */
    if (gpumem_atomic_fetch_add_u32(&c->prefetching.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) >= c->prefetch_budget) {
        gpumem_atomic_fetch_sub_u32(&c->prefetching.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
        gpumem__cache_count(c, line, GPUMEM__ST_PREFETCH_DECLINED, 1);
        return GPUMEM_EAGAIN;
    }
    /* The miss winner's claim, as in acquire, with no reference taken.
     * Acquire: if VALID is set meanwhile, the filler's writes are visible. */
    prev = gpumem_atomic_fetch_or_u32(st_word, GPUMEM_CACHE_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
    if (prev & GPUMEM_CACHE_BUSY) {
        st = GPUMEM_OK; /* another thread fills it */
    } else if (prev & GPUMEM_CACHE_VALID) { /* filled meanwhile: our BUSY undone */
        gpumem_atomic_fetch_and_u32(st_word, ~GPUMEM_CACHE_BUSY, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
        gpumem_event_notify(&c->event);
        st = GPUMEM_OK;
    } else {
        st = gpumem__cache_fill(c, line, 0, 0, &data, (gpumem__tier_copy *)0, when + 1);
        if (st == GPUMEM_OK) gpumem__cache_count(c, line, GPUMEM__ST_PREFETCHES, 1);
        else if (st == GPUMEM_EAGAIN) gpumem__cache_count(c, line, GPUMEM__ST_PREFETCH_DECLINED, 1);
    }
    gpumem_atomic_fetch_sub_u32(&c->prefetching.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    return st;
}

/* Hint (prefetch 0) or prefetch each line of elements [first, first + count)
 * of `a`, in order, whatever the statuses; the first that is not OK. */
GPUMEM_API gpumem_status gpumem__cache_array_each(const gpumem_cache_array *a, uint64_t first, uint64_t count,
                                                  uint64_t when, int prefetch) {
    uint64_t line, end;
    gpumem_status st = gpumem__cache_array_lines(a, first, count, &line, &end), one;
    for (; line < end; line++) { /* none on a bad request: then line == end == 0 */
        one = prefetch ? gpumem_cache_prefetch(a->cache, line, when) : gpumem_cache_hint(a->cache, line, when);
        if (one != GPUMEM_OK && st == GPUMEM_OK) st = one;
    }
    return st;
}

/* Elements [first, first + count) of array `a` will next be used at epoch
 * `when`: a hint for each line they lie on. Every line is hinted (and
 * recorded) whatever the statuses; the first status that is not OK is
 * returned. EINVAL: an array gpumem_cache_array_make refused; ERANGE:
 * elements past its end (nothing hinted). */
GPUMEM_API gpumem_status gpumem_cache_array_hint(const gpumem_cache_array *a, uint64_t first, uint64_t count,
                                                 uint64_t when) {
    return gpumem__cache_array_each(a, first, count, when, 0);
}

/* gpumem_cache_prefetch for the lines that elements [first, first + count)
 * of array `a` lie on, in order. Every line is tried whatever the
 * statuses; the first that is not OK is returned. EINVAL and ERANGE as
 * gpumem_cache_array_hint. */
GPUMEM_API gpumem_status gpumem_cache_array_prefetch(const gpumem_cache_array *a, uint64_t first, uint64_t count,
                                                     uint64_t when) {
    return gpumem__cache_array_each(a, first, count, when, 1);
}

/* ======================================================================== */
/* Host convenience: allocate and initialise in one call                    */
/* ======================================================================== */
#if !defined(GPUMEM_NO_HOST_SHIM)
#ifdef __cplusplus
extern "C" {
#endif
/* Allocates the cache, its metadata, its slots (page aligned) and PRP lists
 * with GPUMEM_MALLOC; the backing's memory or pairs stay the caller's.
 * Every pair must serve the backing's namespace (its block size, transfer
 * limit and capacity): GPUMEM_EINVAL or GPUMEM_ERANGE, logged, otherwise
 * (a host cache's pairs are read here: host threads drive them). The
 * slots' I/O addresses are their virtual addresses (right for the software
 * controller; a real controller needs gpumem_cache_init with DMA memory). */
gpumem_status gpumem_cache_create(const gpumem_cache_desc *d, gpumem_cache **out);
/* Free a cache made by gpumem_cache_create, never losing a write: dirty
 * lines are written back first (and, if there were any, made durable with a
 * Flush to each NVMe controller). Refuses, freeing nothing, with
 * GPUMEM_EBUSY while any line is held or busy (a thread still uses the
 * cache), or with the write-back's failure (GPUMEM_EIO, also when the
 * controller was stopped first; the dirty lines stay, retry once the backing
 * works). So destroy caches before stopping their controllers.
 * GPUMEM_EINVAL for a cache set up with gpumem_cache_init (its memory is
 * the caller's: flush it, then free that). GPUMEM_EBUSY too while a host
 * tier is attached (gpumem_tier_destroy first). */
gpumem_status gpumem_cache_destroy(gpumem_cache *c);
#ifdef __cplusplus
}
#endif

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE
/* One GPUMEM_MALLOC block for an object of obj_bytes, its metadata, its
 * line-sized slots and their PRP lists (prp_bytes, may be 0), each part on a
 * page of its own (slots and PRP lists must start on one). The cache's and
 * the host tier's create use it; raw is what to free. */
typedef struct gpumem__slot_block {
    unsigned char *raw, *obj, *meta, *data;
    uint64_t *prp_lists; /* NULL when prp_bytes is 0 */
    size_t meta_bytes;   /* rounded up to a page */
} gpumem__slot_block;

/* Points a description's placement fields (a gpumem_cache_desc or a
 * gpumem_tier_desc: both name them alike) at the block; host memory, so
 * the I/O addresses are the virtual ones (iova 0). */
#define GPUMEM__DESC_PLACE_IN_BLOCK(e, b)                                                        \
    ((e).meta = (b).meta, (e).meta_bytes = (b).meta_bytes, (e).data = (b).data, (e).data_iova = 0, \
     (e).prp_lists = (b).prp_lists, (e).prp_lists_iova = 0)

static gpumem_status gpumem__slot_block_alloc(size_t obj_bytes, size_t meta_bytes, size_t data_bytes,
                                              size_t prp_bytes, gpumem__slot_block *b) {
    const size_t pg = GPUMEM_NVME_PAGE_BYTES;
    b->meta_bytes = GPUMEM_ALIGN_UP(meta_bytes, pg);
    b->raw = (unsigned char *)GPUMEM_MALLOC(GPUMEM_ALIGN_UP(obj_bytes, pg) + b->meta_bytes +
                                            GPUMEM_ALIGN_UP(data_bytes, pg) + prp_bytes + pg);
    if (!b->raw) return GPUMEM_ENOMEM;
    b->obj = (unsigned char *)GPUMEM_ALIGN_UP((uintptr_t)b->raw, pg);
    b->meta = b->obj + GPUMEM_ALIGN_UP(obj_bytes, pg);
    b->data = b->meta + b->meta_bytes;
    b->prp_lists = prp_bytes ? (uint64_t *)(void *)(b->data + GPUMEM_ALIGN_UP(data_bytes, pg)) : NULL;
    return GPUMEM_OK;
}

gpumem_status gpumem_cache_create(const gpumem_cache_desc *in, gpumem_cache **out) {
    gpumem__slot_block b;
    gpumem_cache_desc e, resolved;
    const gpumem_cache_desc *d = &resolved; /* zero means default */
    uint32_t bpl;
    gpumem_status st;
    if (!in || !out) return GPUMEM_ENULL;
    resolved = gpumem_cache_desc_resolved(in);
    *out = NULL;
    if ((st = gpumem__cache_check_desc(d, &bpl)) != GPUMEM_OK) return st; /* before sizes are computed */
    /* A host cache: its pairs are driven by host threads, so they are readable. */
    if ((st = gpumem__cache_check_pairs(d, bpl, 1)) != GPUMEM_OK) return st;
    if ((st = gpumem__slot_block_alloc(sizeof(gpumem_cache), gpumem_cache_meta_bytes(d),
                                       (size_t)d->n_slots * d->line_bytes,
                                       gpumem_cache_prp_bytes(d->line_bytes, d->n_slots, d->backing.kind), &b)) !=
        GPUMEM_OK)
        return st;
    e = *d;
    GPUMEM__DESC_PLACE_IN_BLOCK(e, b);
    if ((st = gpumem_cache_init((gpumem_cache *)(void *)b.obj, &e)) != GPUMEM_OK) {
        GPUMEM_FREE(b.raw);
        return st;
    }
    ((gpumem_cache *)(void *)b.obj)->owned_ = b.raw;
    *out = (gpumem_cache *)(void *)b.obj;
    return GPUMEM_OK;
}

gpumem_status gpumem_cache_destroy(gpumem_cache *c) {
    gpumem_status st;
    if (!c) return GPUMEM_ENULL;
    if (!c->owned_) return GPUMEM_EINVAL;
    if (c->tier) return GPUMEM_EBUSY; /* a host tier still uses it: destroy that first */
    if (c->share) return GPUMEM_EBUSY; /* an owner of a share: destroy the share first */
    if (gpumem_cache_find_in_use(c, 0, 0) < c->n_lines) return GPUMEM_EBUSY;
    /* Nobody holds a line, so write-back skips none (no EAGAIN); a clean
     * cache sends no command, so it can be destroyed after its controllers
     * stopped. */
    if ((st = gpumem__cache_flush(c, NULL, 1)) != GPUMEM_OK) return st;
    GPUMEM_FREE(c->owned_);
    return GPUMEM_OK;
}
#endif /* GPUMEM_IMPLEMENTATION */
#endif /* GPUMEM_NO_HOST_SHIM */

/* ======================================================================== */
/* C++: a typed reference, operator[] style (dissertation Listing 7.8)      */
/* ======================================================================== */
#ifdef __cplusplus
namespace gpumem {
/* One per thread. Reads with get(i) or r[i]; writes with set(i, v). Errors
 * (a full cache, the backing failing) are kept in status() and read as T();
 * check status() where that matters. */
template <typename T>
struct cache_array_ref {
    gpumem_cache_ref r;
    gpumem_status st;
    GPUMEM_HD explicit cache_array_ref(const gpumem_cache_array *a) : r(gpumem_cache_ref_make(a)), st(GPUMEM_OK) {}
    GPUMEM_HD ~cache_array_ref() { gpumem_cache_ref_drop(&r); }
    cache_array_ref(const cache_array_ref &) = delete;
    cache_array_ref &operator=(const cache_array_ref &) = delete;
    GPUMEM_HD T get(uint64_t i) {
        void *p = 0;
        if ((st = gpumem_cache_ref_at(&r, i, 0, &p)) != GPUMEM_OK) return T();
        return *(const T *)p;
    }
    GPUMEM_HD T operator[](uint64_t i) { return get(i); }
    GPUMEM_HD gpumem_status set(uint64_t i, const T &v) {
        void *p = 0;
        if ((st = gpumem_cache_ref_at(&r, i, 1, &p)) == GPUMEM_OK) *(T *)p = v;
        return st;
    }
    GPUMEM_HD gpumem_status status() const { return st; }
};
} /* namespace gpumem */
#endif

#endif /* GPUMEM_CACHE_H */
