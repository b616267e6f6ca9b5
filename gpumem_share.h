/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_share.h - one storage shared by several caches (owners: the host,
 * GPU 0..7), kept consistent the way GAIA keeps CPU and GPU page caches
 * (lazy release consistency with version vectors; the GAIA paper, §10.1):
 * release and acquire move no data, concurrent writers of one line are
 * merged byte by byte against a pristine base, and a miss may be served
 * from another owner's valid copy.
 *
 * USAGE (host threads standing for two devices over one memory storage)
 *
 *   #define _POSIX_C_SOURCE 200809L
 *   #define GPUMEM_IMPLEMENTATION             // in exactly one .c file
 *   #include "gpumem_share.h"                 // includes gpumem_cache.h
 *
 *   // given: gpumem_cache *host_cache, gpumem_cache *gpu_cache, uint64_t line, uint64_t n_lines, void *qmem
 *   gpumem_share_desc sd = gpumem_share_desc_default(3);  // storage, host, GPU 0
 *   sd.caches[GPUMEM_SHARE_HOST] = host_cache;   // caches over the same storage, same shape
 *   sd.caches[GPUMEM_SHARE_GPU0] = gpu_cache;
 *   gpumem_share *sh;
 *   if (gpumem_share_create(&sd, &sh) != GPUMEM_OK) return 1;
 *   // a producer (GPU 0's threads) writes through the share, which tracks the write:
 *   void *p;
 *   if (gpumem_share_get(sh, GPUMEM_SHARE_GPU0, line, 1, &p) == GPUMEM_OK) {
 *       ((unsigned char *)p)[0] = 42;
 *       gpumem_share_put(sh, GPUMEM_SHARE_GPU0, line, 1);
 *   }
 *   gpumem_share_release(sh, GPUMEM_SHARE_GPU0, 0, n_lines);  // kernel boundary: versions bumped
 *   // ... signal the consumer ...
 *   gpumem_share_acquire(sh, GPUMEM_SHARE_HOST, 0, n_lines);  // stale host copies dropped
 *   if (gpumem_share_get(sh, GPUMEM_SHARE_HOST, line, 0, &p) == GPUMEM_OK) {  // reads 42
 *       gpumem_share_put(sh, GPUMEM_SHARE_HOST, line, 0);
 *   }
 *   gpumem_share_flush(sh, GPUMEM_SHARE_GPU0);  // its writes merged into storage, durably
 *   // GPU threads' own misses: a miss queue and a host thread serving it
 *   // (qmem: gpumem_share_queue_bytes(256) bytes of mapped pinned memory; the
 *   // share in managed memory: DESIGN, "GPU threads")
 *   gpumem_share_server *srv;
 *   if (gpumem_share_queue_init(sh, qmem, gpumem_share_queue_bytes(256), 256, 0) == GPUMEM_OK &&
 *       gpumem_share_server_start(sh, 0, &srv) == GPUMEM_OK) {
 *       // ... kernels run: their misses are served ...
 *       gpumem_share_server_stop(srv);
 *   }
 *   gpumem_share_stats st; gpumem_share_get_stats(sh, &st);   // st.peer_reads, st.merges, ...
 *   gpumem_share_destroy(sh);                   // flushes every owner, detaches the caches
 *
 * Reads may also use the caches directly (gpumem_cache_acquire with write
 * 0, the array reference for reading): every miss goes through the share.
 * Writes must go through gpumem_share_get(..., 1, ...) and _put: that is
 * where a write is tracked (consistency-dirty bit, base, pin).
 *
 * THE CONTRACT (docs/share.md says it at length)
 *
 * Lazy release consistency. Writes by owner A become visible to owner B
 * once A has released the range and B has acquired it after that (B's
 * acquire returned OK); before that B may see them or not. This holds
 * whatever B holds: a copy of the line B wrote itself meanwhile (to other
 * bytes) gets the released writes too, and keeps B's. Happens-before is
 * kept: a write made after a release -> acquire of another owner's write
 * to the same bytes is the one every later reader and storage see.
 *
 * Same bytes, no synchronisation between: a race, decided byte by byte.
 * Each byte ends holding the value one of the racing owners gave it. A
 * copy's writes are found by comparing it with its base (the line as it
 * was when the owner first wrote it since the last merge), so a byte
 * written with the value it already held is no write. Of the owners that
 * changed a byte, the highest owner id wins it (a copy written without a
 * base - its owner was the only holder - is laid first, whole, and loses
 * every byte a based copy changed); the same on every run. So a racing
 * multi-byte write can end mixed with another's, or won by a lower id on
 * the bytes the higher id rewrote unchanged. Writes to different bytes of
 * one line are all kept (no false sharing). There is no snapshot
 * isolation: a reader of several lines may see some of a release and not
 * the rest until it acquires.
 *
 * Misuse gets a status and loses nothing: a put with nothing to give back
 * is ESTATE; an owner id out of range EINVAL (checked before it is used).
 *
 * DESIGN
 *
 * Owners: 0 is storage (never a cache), 1 the host, 2.. GPU 0..7 (at most
 * GPUMEM_SHARE_MAX_OWNERS = 10). Each owner's cache reaches storage through
 * its own queue pairs (or the same memory).
 *
 * Per line, only while some owner has a copy of it, an entry (the share's
 * data path, gpumem_share_path.h) keeps GAIA's version table: a
 * version vector per copy and one for storage's content, each owner's
 * release count, and the masks: holders, consistency-dirty (written since
 * the owner's last release; cleared only by release, so a write-back can
 * never lose a version bump) and dirty (written since the last merge).
 *
 * Writes. The first write of an owner to a line after a merge pins its copy
 * (the share keeps a reference, so the cache neither evicts it nor writes it
 * back: only a merge writes it to storage) and takes a pristine base unless
 * GAIA's elision applies (the owner is the only holder and its copy is up to
 * date; a read never takes one). The first write after a release appends
 * the line to the owner's written list: release walks that list, O(lines
 * written), never the resident lines.
 *
 * Release(owner, range) bumps the owner's own entry for each line it wrote.
 * Acquire(owner, range) drops each copy of the owner whose vector is below
 * the newest released state. A copy the owner wrote itself is merged first
 * (its writes and the other written copies of the line into storage: a GPU
 * thread asks the server), then dropped: the next access reads the merged
 * line. Only that merge moves data; release never does. So the copies one
 * merge lays over storage hold concurrent writes only: a write after an
 * acquire is made on a copy that has every write released before it, and
 * its base has them too, so the owner-id order decides races alone. A
 * record whose copy the cache dropped without the share's fill (a GPU
 * miss that ended ESTATE or ETIMEDOUT after the cache had evicted the
 * victim) is forgotten at acquire, never waited for. Release of a GPU owner
 * is followed by an acquire of the host, and acquire of a GPU owner is
 * preceded by a release of the host (GAIA's piggybacked host sync), so host
 * code that never calls them is consistent as producer -> signal ->
 * consumer.
 *
 * A miss (the cache's fill hook) merges first when another owner released
 * writes storage lacks; then takes the owner's host-tier copy if it is
 * still good (below), else copies from a peer whose copy is valid, clean
 * and up to date (counted; a stale copy is never a source), else reads
 * storage. A merge reads storage, lays the copies over it (unbased whole,
 * then based diffs in owner order: the race rule, per byte), writes it
 * back, unpins the copies and drops their bases: the next write takes one
 * again.
 *
 * GPU threads. A GPU thread never fills: its miss in a shared cache posts
 * (owner, line, slot) to the miss queue (gpumem_share_queue_init: a ring in
 * mapped pinned or managed memory; the protocol, with no word that both
 * sides read-modify-write, is at the queue's definition in gpumem_share_path.h)
 * and waits; host threads (gpumem_share_server_start) run the fill and
 * answer. The post and wait cost the cached element read no register (48,
 * make registers). The share goes in managed memory (gpumem_share_init),
 * whose system-scope atomics CUDA makes atomic between the host and a GPU
 * with concurrent managed access; so do the GPU owners' slots, which the
 * server fills while kernels run. The caches' words stay device-scope, so
 * a host thread never touches a GPU owner's cache words while its kernels
 * may run:
 *   - a peer read from a GPU owner's copy takes no pin: under the line's
 *     lock the slot holds the copy (a slot is refilled only by a fill,
 *     which forgets the old line under that line's lock first);
 *   - a merge made by a host thread leaves a GPU owner's pin owed, and puts
 *     the line on the owner's list (with its writes: O(lines written)); the
 *     owner drops it in its next release, acquire or flush, takes it over
 *     in its next write of the line, or drops them all when a write finds
 *     its cache full. Until then the merged copy stays resident;
 *   - a GPU owner's write that finds its cache full of its own written
 *     copies (pinned until merged) asks the server to make room: it merges
 *     them, leaving the pins owed;
 *   - the server's I/O goes through the host owner's cache (its pairs are
 *     host threads'), into the GPU owner's slot; a queue needs a host owner
 *     and refuses GPU owners with a host tier (the tier's words are
 *     device-scope);
 *   - a GPU owner's release on the device posts its host part (the host's
 *     acquire) to the server, which answers EAGAIN at once if a host thread
 *     holds a stale copy; its acquire makes its host part (the host's
 *     release: share words only) itself, and posts one request for the
 *     merge of its stale written copies, if it has any (the server merges
 *     them through the host's pairs, leaving its pins owed; the acquire's
 *     second look drops the pins and the copies).
 * The server never waits for a GPU thread: a fill whose merge a writer holds
 * up is answered EAGAIN and the GPU thread posts again (ETIMEDOUT if the
 * writer holds it past the queue's timeout). With no server
 * running a post ends ESTATE at once; one not taken within the queue's
 * timeout is withdrawn and ends ETIMEDOUT: never a hang, never served late.
 * get, put, acquire and release run on the device (acquire and release by
 * one thread at a kernel boundary); merge, flush and fetch are host calls,
 * between the kernels of the owners they touch or from a stream callback
 * (cudaLaunchHostFunc). tests/cuda/test_share_gpu.cu runs all of it on a
 * GPU (make gpu-test); the CPU tests run the same protocol with host
 * threads standing for GPU threads (gpumem_share_thread_as_gpu).
 *
 * A host tier under an owner's cache (gpumem_tier.h, attached before the
 * share is made). Copies evicted to it leave the share's sight, so the
 * cache does not look in the tier under a share; the fill hook does: a
 * copy there is taken back only if the line was not merged since the
 * owner's last fill of it (per-line merge counts, stamped at each fill:
 * the copy is then storage's content, as good as a storage read), else
 * dropped and the line filled as any miss (merge first, peer, storage).
 * A written copy is pinned until merged, so only clean copies go down;
 * the line's entry keeps its consistency-dirty bit and pending bump.
 * Cost: 4 bytes per line of the data for the counts, and 4 per line for
 * each owner with a tier.
 *
 * Fetch (gpumem_share_fetch, host): a range the owner lacks, a window at a
 * time; each run of one source moves in one transfer (storage: a command
 * per controller; a peer: one copy), and a short peer run amid storage's
 * lines is read from storage with them: a per-line source choice would
 * turn a sequential read into a transfer per line (GAIA's 10x). The fills
 * then take the lines from the run (a thread-local stage the fill hook
 * reads), checking each again under its lock.
 */
#ifndef GPUMEM_SHARE_H
#define GPUMEM_SHARE_H

#include "gpumem_cache.h"

#if !GPUMEM_CACHE_SHARE
#error "gpumem_share.h needs the cache's share hook: GPUMEM_CACHE_SHARE is 0"
#endif

/* Counters (gpumem_share_get_stats). */
typedef struct gpumem_share_stats {
    uint64_t storage_reads;   /* misses read from storage */
    uint64_t peer_reads;      /* misses copied from another owner's valid copy */
    uint64_t merges;          /* lines merged into storage */
    uint64_t merged_copies;   /* written copies merged (two writers of a line: 2) */
    uint64_t on_demand_merges; /* merges a miss made because another owner had released */
    uint64_t bases;           /* pristine bases taken */
    uint64_t bases_elided;    /* first writes that needed none (only holder, up to date) */
    uint64_t bumps;           /* version bumps made by release */
    uint64_t invalidated;     /* stale copies dropped by acquire */
    uint64_t kept_concurrent; /* stale copies acquire found written by their owner too: merged, then dropped */
    uint64_t violations;      /* broken invariants (always 0 unless there is a bug) */
    uint64_t storage_transfers; /* storage commands that read lines for a fill (a fetch: one per run) */
    uint64_t peer_transfers;  /* copies from a peer (a fetch: one per run, as one DMA or gather would be) */
    uint64_t tier_hits;       /* misses served from the owner's own host tier (its copy still good) */
    uint64_t tier_stale;      /* host-tier copies dropped at a miss: the line was merged since their fill */
    uint64_t served;          /* GPU threads' requests the miss queue's server answered */
    uint64_t post_timeouts;   /* requests not taken within the queue's timeout (ETIMEDOUT) */
    uint64_t owed_pins;       /* GPU copies merged while their kernels may run: pin left to the owner */
} gpumem_share_stats;

typedef struct gpumem_share_desc {
    uint32_t n_owners;  /* storage + caches: 2 .. GPUMEM_SHARE_MAX_OWNERS */
    gpumem_cache *caches[GPUMEM_SHARE_MAX_OWNERS]; /* [0] NULL (storage); NULL: no such owner */
    uint32_t n_entries; /* lines tracked at once (0: twice the caches' slots) */
    uint32_t n_bases;   /* pristine bases at once (0: the caches' slots) */
} gpumem_share_desc;

GPUMEM_API gpumem_share_desc gpumem_share_desc_default(uint32_t n_owners) {
    gpumem_share_desc d;
    memset(&d, 0, sizeof d);
    d.n_owners = n_owners;
    return d;
}

/* The owner's cache, checking the owner id: NULL for storage, an id out of
 * range or an owner without a cache. */
GPUMEM_API gpumem_cache *gpumem__share_cache(gpumem_share *s, uint32_t o) {
    return s && o >= 1 && o < s->n_owners && o < GPUMEM_SHARE_MAX_OWNERS ? s->caches[o] : (gpumem_cache *)0;
}

/* Check an owner and a range [first, first + n). */
GPUMEM_API gpumem_status gpumem__share_check(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
    if (!s) return GPUMEM_ENULL;
    if (!gpumem__share_cache(s, o)) return GPUMEM_EINVAL;
    if (first > s->n_lines || n > s->n_lines - first) return GPUMEM_ERANGE;
    return GPUMEM_OK;
}

/* ---- accesses -------------------------------------------------------------- */

/* Walk owner o's list (the owner's own call: a release, an acquire, a
 * flush, or a write that found its cache full): drop the pins merges left
 * it, and, with `bump`, bump its versions of the lines in [first, first + n)
 * it wrote since its last release; what stays pending goes back on the
 * list. O(lines the owner wrote), never O(lines resident). */
GPUMEM_API void gpumem__share_drain(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n, int bump) {
    const uint32_t bit = 1u << o;
    uint32_t i, count;
    uint64_t *list;
    gpumem__share_lock(s, &s->release_lock[o].v);
    gpumem__share_lock(s, &s->list_lock[o].v);
    list = s->written[o]; /* swap the lists: writers append to the fresh one meanwhile */
    s->written[o] = s->draining[o];
    s->draining[o] = list;
    count = s->n_written[o];
    s->n_written[o] = 0;
    gpumem__share_unlock(s, &s->list_lock[o].v);
    for (i = 0; i < count; i++) {
        const uint64_t line = list[i];
        uint32_t *lk;
        gpumem__share_entry *e = gpumem__share_lock_entry(s, line, &lk);
        if (!e || !(e->listed & bit)) {
            gpumem__share_count(s, GPUMEM__SS_VIOLATIONS, 1); /* a listed line has its entry and its bit */
        } else {
            e->listed &= ~bit;
            gpumem__share_settle(s, e, o);
            if ((e->cdirty & bit) && (!bump || line < first || line - first >= n)) {
                gpumem__share_list(s, e, o); /* not released: still pending */
            } else if (e->cdirty & bit) {
                e->rel[o]++;
                if (e->holders & bit) e->vv[o][o] = e->rel[o];
                /* Written copy merged (and maybe evicted) since: storage has the writes. */
                if (!(e->dirty & bit)) e->vv[0][o] = e->rel[o];
                e->cdirty &= ~bit;
                gpumem__share_count(s, GPUMEM__SS_BUMPS, 1);
            }
            gpumem__share_maybe_free(s, e);
        }
        gpumem__share_unlock(s, lk);
    }
    gpumem__share_unlock(s, &s->release_lock[o].v);
}

/* Take the line for owner o (write != 0: to write it) and return its data
 * in *data, as gpumem_cache_acquire does; every OK needs a put with the
 * same `write`. A write is tracked here: the first after a merge pins the
 * copy and takes its base (or elides it), the first after a release marks
 * the line consistency-dirty. Statuses: those of gpumem_cache_acquire;
 * EINVAL (no such owner), EAGAIN also when no base is free (merge or flush,
 * then retry), ENOMEM when no entry is free (make n_entries larger). */
GPUMEM_API gpumem_status gpumem_share_get(gpumem_share *s, uint32_t o, uint64_t line, int write, void **data) {
    gpumem_cache *c = gpumem__share_cache(s, o);
    gpumem__share_entry *e;
    uint32_t *lk, k, bit;
    gpumem_status st;
    if (!s || !data) return GPUMEM_ENULL;
    if (!c) return GPUMEM_EINVAL;
    if (line >= s->n_lines) return GPUMEM_ERANGE;
    bit = 1u << o; /* o checked: below GPUMEM_SHARE_MAX_OWNERS */
    /* The cache never sees a write: its copy stays clean, so it never
     * writes it back whole over another owner's merged bytes. */
    /* EAGAIN: every slot in use. Some may be pinned only by pins merges left
     * this owner (owed): drop them (its own words) and try once more. */
    if ((st = gpumem_cache_acquire(c, line, 1, 0, data)) == GPUMEM_EAGAIN) {
        gpumem__share_drain(s, o, 0, 0, 0);
        st = gpumem_cache_acquire(c, line, 1, 0, data);
    }
    /* Still full: of its own written copies, which only a merge unpins. A
     * GPU thread cannot merge; the server can (their pins then owed, which
     * it drops) - a host thread flushes instead (its caller: EAGAIN). */
    if (st == GPUMEM_EAGAIN && o >= GPUMEM_SHARE_GPU0 && gpumem__share_posts() &&
        gpumem__share_post(s, GPUMEM__SQ_MAKE_ROOM, o, o, 0, 0, 0) == GPUMEM_OK) {
        gpumem__share_drain(s, o, 0, 0, 0);
        st = gpumem_cache_acquire(c, line, 1, 0, data);
    }
    if (st != GPUMEM_OK || !write) return st;
    lk = gpumem__share_line_lock(s, line);
    k = gpumem_atomic_load_u32(&c->lines[line].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    gpumem__share_lock(s, lk);
    e = gpumem__share_find(s, line);
    if (!e || !(e->holders & bit) || e->slot[o] != k) { /* every fill is recorded: cannot be */
        gpumem__share_count(s, GPUMEM__SS_VIOLATIONS, 1);
        st = GPUMEM_ESTATE;
    } else if (!(e->dirty & bit)) {
        uint32_t home[GPUMEM_SHARE_MAX_OWNERS];
        gpumem__share_home(s, e, home);
        /* GAIA's elision: no base when this copy is the only one and has
         * everything: every release (versions) and every merged write, released
         * or not (read since the last merge). A stale copy written whole would
         * put back old bytes over another owner's merged ones. */
        if ((e->holders & ~bit) || !gpumem_share_vv_leq(home, e->vv[o], s->n_owners) || e->copy_gen[o] != e->gen) {
            uint32_t b = gpumem__share_take_base(s);
            if (b == GPUMEM__SHARE_NONE) {
                st = GPUMEM_EAGAIN;
            } else {
                /* No writer of this owner yet (dirty was clear): the copy is pristine. */
                memcpy(gpumem__share_base(s, b), *data, s->line_bytes);
                e->base[o] = b;
                e->based |= bit;
                gpumem__share_count(s, GPUMEM__SS_BASES, 1);
            }
        } else {
            gpumem__share_count(s, GPUMEM__SS_BASES_ELIDED, 1);
        }
        if (st == GPUMEM_OK) {
            /* We hold a reference, so the line stays valid: the pin is one
             * more - or the one a merge left owed, taken over. */
            if (e->owed & bit) e->owed &= ~bit;
            else gpumem__share_pin(c, line, 0, 1);
            e->dirty |= bit;
        }
    }
    if (st == GPUMEM_OK) {
        if (!(e->cdirty & bit)) {
            e->cdirty |= bit;
            gpumem__share_list(s, e, o);
        }
        e->writers[o]++;
    }
    gpumem__share_unlock(s, lk);
    if (st != GPUMEM_OK) gpumem_cache_release(c, line, 1);
    return st;
}

/* Give back what gpumem_share_get took (same owner, line and `write`).
 * ESTATE, and nothing given back, when the caller holds nothing to give:
 * the owner's copy is not resident, or every reference on it is the share's
 * own pin (a written or owed copy: put without a get, or a read put twice)
 * or a writer's (a read put for a write get); a write put with no writer.
 * Counted under the line's lock against the share's pin, so a misuse never
 * takes the pin that keeps a written copy from being evicted unmerged. */
GPUMEM_API gpumem_status gpumem_share_put(gpumem_share *s, uint32_t o, uint64_t line, int write) {
    gpumem_cache *c = gpumem__share_cache(s, o);
    gpumem__share_entry *e;
    gpumem_status st = GPUMEM_ESTATE;
    uint32_t *lk, bit, refs, pins;
    if (!s) return GPUMEM_ENULL;
    if (!c) return GPUMEM_EINVAL;
    if (line >= s->n_lines) return GPUMEM_ERANGE;
    bit = 1u << o;
    e = gpumem__share_lock_entry(s, line, &lk);
    /* The thread's own reference is counted in the line's state: the share
     * holds one more on a written copy (dirty) or one a merge left owed. */
    refs = gpumem_atomic_load_u32(gpumem__line_state(c, line), GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) &
           GPUMEM_CACHE_COUNT_MASK;
    pins = e && ((e->dirty | e->owed) & bit) ? 1u : 0u;
    if (e && (e->holders & bit) && refs > pins) {
        if (write && e->writers[o]) {
            e->writers[o]--;
            st = GPUMEM_OK;
        } else if (!write && refs - pins > e->writers[o]) {
            st = GPUMEM_OK; /* a reader's reference: more than the writers hold */
        }
    }
    gpumem__share_unlock(s, lk);
    return st == GPUMEM_OK ? gpumem_cache_release(c, line, 1) : st;
}

/* ---- release and acquire: no data moves -------------------------------------- */

/* Whether cache c may hold `line` in slot k (its own words: the owner's
 * call): valid there, or BUSY - being filled (the share records the fill
 * before the cache publishes the slot, so the line's slot word is still
 * the old one then) or being evicted; either way not gone for good. A
 * record of the share's can outlive the copy: the cache evicts a victim
 * before calling the fill hook, and a GPU thread's posted fill may end
 * without running (no server: ESTATE; withdrawn: ETIMEDOUT), so the share
 * never hears the victim's slot was taken. */
GPUMEM_API int gpumem__share_resident(gpumem_cache *c, uint64_t line, uint32_t k) {
    const uint32_t v = gpumem_atomic_load_u32(gpumem__line_state(c, line), GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
    if (v & GPUMEM_CACHE_BUSY) return 1;
    return (v & GPUMEM_CACHE_VALID) && gpumem_atomic_load_u32(&c->lines[line].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) == k;
}

/* Not a status of the API: acquire_line's "merge this line first". */
#define GPUMEM__SHARE_MERGE_FIRST ((gpumem_status)GPUMEM_STATUS_COUNT_)

#if !defined(GPUMEM_NO_HOST_SHIM) && !GPUMEM_ON_DEVICE
/* Merge the lines of [first, first + n) whose copy owner o wrote and that
 * are stale (for its acquire), the I/O through cache io; at_boundary as
 * gpumem__share_merge_line takes it. Host only (gpumem_share.h's
 * implementation). */
#ifdef __cplusplus
extern "C" {
#endif
gpumem_status gpumem__share_merge_stale(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n, gpumem_cache *io,
                                        uint32_t at_boundary);
#ifdef __cplusplus
}
#endif
#endif

/* Merge, for owner o's acquire, the lines of [first, first + n) whose copy
 * o wrote itself and that lack released writes of others. A GPU thread asks
 * the miss queue's server (its merge leaves o's pins owed: the acquire's
 * second look drops them); a host thread merges itself, through o's pairs,
 * at o's boundary. One request for the range: a second look of the acquire
 * (one post, not one per line, and the device's acquire stays small). */
GPUMEM_API gpumem_status gpumem__share_acquire_merge(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
#if GPUMEM_ON_DEVICE
    return gpumem__share_post(s, GPUMEM__SQ_MERGE, o, o, first, n, 0);
#elif defined(GPUMEM_NO_HOST_SHIM)
    return (void)s, (void)o, (void)first, (void)n, GPUMEM_ESTATE; /* no host merge in this build */
#else
    if (o >= GPUMEM_SHARE_GPU0 && gpumem__share_posts()) return gpumem__share_post(s, GPUMEM__SQ_MERGE, o, o, first, n, 0);
    return gpumem__share_merge_stale(s, o, first, n, s->caches[o], o);
#endif
}

/* Drop owner o's copy of `line` (in its slot k) if another owner released
 * newer data. A stale copy o wrote itself (dirty) is not dropped here:
 * GPUMEM__SHARE_MERGE_FIRST says it must be merged first - its writes and
 * every other written copy of the line into storage - and then dropped as
 * any stale copy, so that the next access reads the merged line, which has
 * both the released writes and o's own. (Kept as it was, it hid the
 * released writes from o for good, and o's later writes to it looked
 * concurrent with writes they came after.) So the copies one merge lays
 * over storage hold concurrent writes only: a write after a release ->
 * acquire is made on a copy that has the released ones. EAGAIN: stale but
 * held by a thread (acquire again once the owner's threads have put their
 * lines down). */
GPUMEM_API gpumem_status gpumem__share_acquire_line(gpumem_share *s, uint32_t o, uint64_t line, uint32_t k) {
    uint32_t *lk = gpumem__share_line_lock(s, line);
    uint32_t home[GPUMEM_SHARE_MAX_OWNERS];
    gpumem__share_entry *e;
    gpumem_status st = GPUMEM_OK;
    gpumem__share_lock(s, lk);
    e = gpumem__share_find(s, line);
    if (e && (e->holders & (1u << o)) && e->slot[o] == k) {
        gpumem__share_settle(s, e, o); /* the owner's own call: its pins to drop */
        gpumem__share_home(s, e, home);
        if (!gpumem_share_vv_leq(home, e->vv[o], s->n_owners)) {
            uint64_t dropped = 0;
            if (e->dirty & (1u << o)) { /* its own writes too: merged first */
                st = GPUMEM__SHARE_MERGE_FIRST;
            } else if (gpumem_cache_invalidate(s->caches[o], k, k + 1, &dropped) == GPUMEM_OK && dropped) {
                e->holders &= ~(1u << o);
                gpumem__share_set_slot_line(s, o, k, GPUMEM_CACHE_EMPTY);
                gpumem__share_count(s, GPUMEM__SS_INVALIDATED, 1);
                gpumem__share_maybe_free(s, e);
            } else if (!gpumem__share_resident(s->caches[o], line, k)) {
                /* Gone without a fill of the share's: the cache evicted it
                 * for a miss whose fill never ran (a served miss refused or
                 * withdrawn). Nothing is held: the record goes (its slot
                 * still holds these bytes, so it was no wrong source). */
                e->holders &= ~(1u << o);
                gpumem__share_set_slot_line(s, o, k, GPUMEM_CACHE_EMPTY);
                gpumem__share_maybe_free(s, e);
            } else {
                st = GPUMEM_EAGAIN;
            }
        }
    }
    gpumem__share_unlock(s, lk);
    return st;
}

/* Look at owner o's copies of [first, first + n): the lines of the range or
 * the owner's slots, whichever are fewer. */
GPUMEM_API gpumem_status gpumem__share_acquire(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
    gpumem_cache *c = s->caches[o];
    gpumem_status st = GPUMEM_OK, one;
    uint64_t i;
    if (n <= c->n_slots) {
        for (i = first; i < first + n; i++) {
            uint32_t v = gpumem_atomic_load_u32(gpumem__line_state(c, i), GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
            uint32_t k = gpumem_atomic_load_u32(&c->lines[i].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
            if (!(v & GPUMEM_CACHE_VALID) || k >= c->n_slots || gpumem__share_slot_line(s, o, k) != i) continue;
            if ((one = gpumem__share_acquire_line(s, o, i, k)) != GPUMEM_OK && st != GPUMEM__SHARE_MERGE_FIRST) st = one;
        }
    } else {
        for (i = 0; i < c->n_slots; i++) {
            uint64_t line = gpumem__share_slot_line(s, o, (uint32_t)i);
            if (line == GPUMEM_CACHE_EMPTY || line < first || line - first >= n) continue;
            if ((one = gpumem__share_acquire_line(s, o, line, (uint32_t)i)) != GPUMEM_OK && st != GPUMEM__SHARE_MERGE_FIRST)
                st = one;
        }
    }
    return st;
}

/* The whole acquire of o's copies of [first, first + n): a look, and if it
 * found stale copies o wrote, their merge and a second look, which drops
 * them (EAGAIN if one was written again meanwhile). */
GPUMEM_API gpumem_status gpumem__share_acquire_all(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
    gpumem_status st = gpumem__share_acquire(s, o, first, n);
    if (st != GPUMEM__SHARE_MERGE_FIRST) return st;
    if ((st = gpumem__share_acquire_merge(s, o, first, n)) != GPUMEM_OK) return st;
    gpumem__share_count(s, GPUMEM__SS_KEPT_CONCURRENT, 1);
    st = gpumem__share_acquire(s, o, first, n);
    return st == GPUMEM__SHARE_MERGE_FIRST ? GPUMEM_EAGAIN : st;
}

/* Owner o's writes to [first, first + n) since its last release become
 * visible to every owner that acquires the range after this: the versions
 * of the lines it wrote are bumped; nothing moves. A GPU owner's release is
 * followed by an acquire of the host (GAIA's piggybacked host sync).
 * Statuses: EINVAL (no such owner), ERANGE (past the end), and those of
 * gpumem_share_acquire for the host's part. Call it while none of the
 * owner's threads is in the middle of writing the range (a kernel boundary). */
GPUMEM_API gpumem_status gpumem_share_release(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
    gpumem_status st = gpumem__share_check(s, o, first, n);
    if (st != GPUMEM_OK) return st;
    gpumem__share_drain(s, o, first, n, 1);
    if (o < GPUMEM_SHARE_GPU0 || !gpumem__share_cache(s, GPUMEM_SHARE_HOST)) return st;
    /* The host's acquire touches the host cache's words: a GPU thread asks
     * the miss queue's server to make it (ESTATE: no server; the release is
     * made, the host must acquire itself). */
    if (gpumem__share_posts()) return gpumem__share_post(s, GPUMEM__SQ_HOST_ACQUIRE, o, GPUMEM_SHARE_HOST, first, n, 0);
    return gpumem__share_acquire_all(s, GPUMEM_SHARE_HOST, first, n);
}

/* Owner o will see every write to [first, first + n) released before this
 * call: its copies older than the newest release are dropped, so the next
 * access misses and fetches (merging first if needed). A stale copy o wrote
 * itself is merged into storage first (the only data this moves; a GPU
 * thread's merge is the server's). A GPU owner's acquire is preceded by a
 * release of the host. EAGAIN: a stale copy is held by one of the owner's
 * threads, or a line to merge is held by a writer (call again when they
 * have put it down: nothing held, it ends). ESTATE: a GPU thread's line to
 * merge and no server running; ETIMEDOUT: its merge request not taken
 * within the queue's timeout (call again). EIO: the merge's storage I/O
 * failed. */
GPUMEM_API gpumem_status gpumem_share_acquire(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
    gpumem_status st = gpumem__share_check(s, o, first, n);
    if (st != GPUMEM_OK) return st;
    if (o >= GPUMEM_SHARE_GPU0 && gpumem__share_cache(s, GPUMEM_SHARE_HOST))
        gpumem__share_drain(s, GPUMEM_SHARE_HOST, first, n, 1);
    gpumem__share_drain(s, o, 0, 0, 0); /* its own pins to drop first */
    return gpumem__share_acquire_all(s, o, first, n);
}

/* The same, naming the owner by its cache: ESTATE if the cache is not
 * attached to a share. */
GPUMEM_API gpumem_status gpumem_share_cache_release(gpumem_cache *c, uint64_t first, uint64_t n) {
    if (!c) return GPUMEM_ENULL;
    if (!c->share) return GPUMEM_ESTATE;
    return gpumem_share_release(c->share, gpumem__share_owner(c->share, c), first, n);
}

GPUMEM_API gpumem_status gpumem_share_cache_acquire(gpumem_cache *c, uint64_t first, uint64_t n) {
    if (!c) return GPUMEM_ENULL;
    if (!c->share) return GPUMEM_ESTATE;
    return gpumem_share_acquire(c->share, gpumem__share_owner(c->share, c), first, n);
}

GPUMEM_API gpumem_status gpumem_share_get_stats(gpumem_share *s, gpumem_share_stats *out) {
    uint64_t *v = (uint64_t *)out;
    uint32_t i;
    if (!s || !out) return GPUMEM_ENULL;
    for (i = 0; i < GPUMEM__SS_N; i++) v[i] = gpumem_atomic_load_u64(&s->stats[i], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    return GPUMEM_OK;
}

/* ---- host: create, merge, flush, destroy ---------------------------------------- */

/* Tunables (define before including to change them). */
#ifndef GPUMEM_SHARE_FETCH_LINES
#define GPUMEM_SHARE_FETCH_LINES 64u /* lines in one transfer at most (256 KiB of 4 KiB lines) */
#endif
#ifndef GPUMEM_SHARE_PEER_MIN_LINES
#define GPUMEM_SHARE_PEER_MIN_LINES 8u /* a shorter peer run amid storage's lines is read with them */
#endif
#ifndef GPUMEM_SHARE_POST_TIMEOUT_NS
#define GPUMEM_SHARE_POST_TIMEOUT_NS 10000000000ull /* a GPU thread's request waits 10 s at most to be taken */
#endif
#ifndef GPUMEM_SHARE_SERVER_THREADS
#define GPUMEM_SHARE_SERVER_THREADS 4u /* fills side by side by default */
#endif

#if !defined(GPUMEM_NO_HOST_SHIM)
#ifdef __cplusplus
extern "C" {
#endif
/* Make a share over desc->caches (each: same lines and line size, same
 * backing, nothing held or dirty, in the cache or in its host tier if it
 * has one; their clean lines are dropped, and the tier's are never taken
 * back, so every copy the share sees is one it recorded). Statuses:
 * EINVAL (owner count, storage given a cache, a cache given past n_owners,
 * no cache, shapes or backings that differ, one cache twice), ESTATE (a cache already in a share),
 * EBUSY (a cache or its tier holds a line or a dirty one), ENOMEM. */
gpumem_status gpumem_share_create(const gpumem_share_desc *d, gpumem_share **out);
/* The same in memory the caller places (CUDA managed memory, so that GPU
 * threads can call gpumem_share_get / _put): gpumem_share_bytes(d) bytes,
 * 8-byte aligned (0: d is bad). gpumem_share_destroy frees nothing then. */
size_t gpumem_share_bytes(const gpumem_share_desc *d);
gpumem_status gpumem_share_init(const gpumem_share_desc *d, void *mem, size_t bytes, gpumem_share **out);
/* Merge the written copies of [first, first + n) into storage (the I/O made
 * through owner o's cache). EAGAIN: some were being written (merge again). */
gpumem_status gpumem_share_merge(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n);
/* Merge every line owner o has written since its last merge (with the other
 * owners' writes to the same lines), then flush its cache: durable. */
gpumem_status gpumem_share_flush(gpumem_share *s, uint32_t o);
/* Flush every owner, detach the caches, free. EBUSY: something is held
 * (a thread's reference, a line being written, or a server running). EIO:
 * storage failed in a flush's merge or write-back (ENOMEM: no scratch line
 * for a merge); then nothing is detached or freed, the share works on, and
 * destroy may be called again. */
gpumem_status gpumem_share_destroy(gpumem_share *s);
/* Bring the lines of [first, first + n) that owner o lacks into its cache,
 * choosing each run's source and size together (GAIA's lesson: a per-line
 * choice made sequential reads 10x slower): contiguous lines move in one
 * transfer of up to GPUMEM_SHARE_FETCH_LINES, from one peer's valid copies
 * or from storage (one command per controller); a peer's run shorter than
 * GPUMEM_SHARE_PEER_MIN_LINES inside lines storage must serve anyway is read
 * from storage with them. For a host thread serving a batch of misses and
 * its readahead (gpumem_policy_ra_batch). Statuses: those of
 * gpumem_share_merge, ENOMEM, and those of gpumem_cache_acquire (EAGAIN:
 * the cache is full of lines in use; what was fetched stays). */
gpumem_status gpumem_share_fetch(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n);

/* GPU threads' misses: the miss queue and its server (DESIGN, "GPU threads").
 * Bytes for a queue of `cells` requests: a power of two, 8 to 65536 (0: bad). */
size_t gpumem_share_queue_bytes(uint32_t cells);
/* Attach a miss queue in `mem` (gpumem_share_queue_bytes(cells) bytes, 8-byte
 * aligned), memory GPU threads and the host both reach: pinned host memory
 * mapped into the GPU (cudaHostAlloc, cudaHostAllocMapped) or managed memory.
 * timeout_ns (0: GPUMEM_SHARE_POST_TIMEOUT_NS): how long a GPU thread's
 * request waits for a free cell and to be taken; it ends ETIMEDOUT then.
 * The GPU owners' caches must keep their slots in memory the host can write
 * (managed memory): the server fills them. The share itself must be in
 * managed memory on a GPU with concurrent managed access (gpumem_share_init):
 * the host and the GPUs compare-and-swap its words at once, which is atomic
 * there (CUDA's rule) and not in pinned host memory without native host
 * atomics. Statuses: ENULL; EINVAL (cells, size or alignment; in CUDA builds,
 * a queue the host or the GPU cannot reach, a share not in managed memory
 * with concurrent access, slots or PRP lists in device memory; no host owner: the server's I/O goes through the host owner's
 * cache, whose pairs are host threads'; a GPU owner with a host tier: the
 * tier's words are device-scope, so a host thread cannot fill from it while
 * kernels run); EBUSY (a queue is attached already). Attach it before
 * any thread of a GPU owner can miss; it stays attached until
 * gpumem_share_destroy, and the memory is the caller's. */
gpumem_status gpumem_share_queue_init(gpumem_share *s, void *mem, size_t bytes, uint32_t cells, uint64_t timeout_ns);
/* Host threads that serve the queue (`threads`, 1 to 64; 0: GPUMEM_SHARE_
 * SERVER_THREADS): each fill waits for its storage read, so fills run side
 * by side, one a thread. They poll (a GPU thread cannot wake a sleeping host
 * thread), spinning a while after each request and then sleeping
 * GPUMEM_SHARE_SERVER_SLEEP_NS between looks. Start them before the kernels
 * that may miss; while none runs, a GPU thread's miss or release ends
 * ESTATE at once. Each request is served once, whatever the threads.
 * Statuses: ENULL, EINVAL (threads), ESTATE (no queue attached), ENOMEM
 * (no thread could be made; none runs then). */
typedef struct gpumem_share_server gpumem_share_server;
gpumem_status gpumem_share_server_start(gpumem_share *s, uint32_t threads, gpumem_share_server **out);
/* Stop and join the threads. A request one took is answered first; one
 * still posted is taken back by its GPU thread, which gets ETIMEDOUT. */
gpumem_status gpumem_share_server_stop(gpumem_share_server *srv);
#ifdef __cplusplus
}
#endif

/* This host thread stands for a GPU thread (on != 0), in the calling
 * translation unit: its misses in GPU owners' caches and its GPU owners'
 * releases (their host part) go through the miss queue, exactly as a GPU
 * thread's do - the CPU tests run the GPU's protocol this way. */
static inline void gpumem_share_thread_as_gpu(int on) { gpumem__share_as_gpu = on != 0; }

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE
#include <stdlib.h>

#include <pthread.h>

/* Whether a cache's host tier holds a dirty line (a write the share never
 * saw: it cannot take it over). */
static int gpumem__share_tier_dirty(const gpumem_cache *c) {
#if GPUMEM_CACHE_TIER
    uint64_t l;
    if (!c->tier) return 0;
    for (l = 0; l < c->n_lines; l++)
        if (gpumem_atomic_load_u32(&c->tier->home[l], GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) &
            (GPUMEM_TIER_DIRTY | GPUMEM_TIER_BUSY))
            return 1;
    return 0;
#else
    return c->tier != 0; /* a tier this file cannot see into (the cache refuses it too) */
#endif
}

/* Which controller a pair reaches, as far as the host can tell (0: it
 * cannot - the pair is in GPU memory). A software controller's pairs (and
 * the io_uring forwarder's) notify its own doorbell event; a real
 * controller's doorbells lie in its BAR, queue id by queue id at the
 * doorbell stride (the SQ's and CQ's distance), so the first one's address
 * is the controller's. */
static uintptr_t gpumem__share_ctrl_id(const gpumem_nvme_qp *qp) {
    uintptr_t stride;
    if (!qp || gpumem__cache_host_readable(qp) == 0) return 0;
    if (qp->doorbell_event) return (uintptr_t)qp->doorbell_event;
    stride = (uintptr_t)qp->cq_doorbell - (uintptr_t)qp->sq_doorbell;
    return (uintptr_t)qp->sq_doorbell - (uintptr_t)2u * qp->qid * stride;
}

/* Whether two caches reach the same storage: memory at the same address,
 * or the same namespace at the same first LBA on the same controllers in
 * the same order and layout (controllers compared where the host can read
 * the pairs: gpumem__share_ctrl_id). Each owner may use its own pairs, and
 * as many per controller as it likes. */
static int gpumem__share_same_storage(const gpumem_cache *a, const gpumem_cache *b) {
    const gpumem_cache_backing *x = &a->backing, *y = &b->backing;
    uint32_t j;
    if (x->kind != y->kind) return 0;
    if (x->kind == GPUMEM_CACHE_BACKING_MEMORY) return x->mem == y->mem;
    if (x->n_ctrls != y->n_ctrls || x->first_lba != y->first_lba || x->ns.nsid != y->ns.nsid ||
        x->ns.lba_shift != y->ns.lba_shift || (x->n_ctrls > 1 && x->layout != y->layout))
        return 0;
    for (j = 0; j < x->n_ctrls; j++) {
        const uintptr_t p = gpumem__share_ctrl_id(x->pairs[j * x->pairs_per_ctrl]);
        const uintptr_t q = gpumem__share_ctrl_id(y->pairs[j * y->pairs_per_ctrl]);
        if (p && q && p != q) return 0;
    }
    return 1;
}

/* Check a desc (gpumem_share_create's statuses) and find its first cache,
 * the slots of all its caches and how many have a host tier. */
static gpumem_status gpumem__share_validate(const gpumem_share_desc *d, gpumem_cache **first_out, uint64_t *slots,
                                            uint32_t *tiers) {
    gpumem_cache *first = 0;
    uint32_t o, p;
    if (!d) return GPUMEM_ENULL;
    *slots = 0;
    *tiers = 0;
    if (d->n_owners < 2 || d->n_owners > GPUMEM_SHARE_MAX_OWNERS || d->caches[0]) return GPUMEM_EINVAL;
    /* A cache past n_owners would be left out of the share while its owner
     * went on using it over the same storage, unseen: refused. */
    for (o = d->n_owners; o < GPUMEM_SHARE_MAX_OWNERS; o++)
        if (d->caches[o]) return GPUMEM_EINVAL;
    for (o = 1; o < d->n_owners; o++) {
        gpumem_cache *c = d->caches[o];
        if (!c) continue;
        for (p = 1; p < o; p++)
            if (d->caches[p] == c) return GPUMEM_EINVAL;
        if (!first) first = c;
        if (c->share) return GPUMEM_ESTATE;
        if (c->tier) ++*tiers;
        if (c->n_lines != first->n_lines || c->line_bytes != first->line_bytes ||
            !gpumem__share_same_storage(c, first))
            return GPUMEM_EINVAL;
        *slots += c->n_slots;
    }
    if (!first) return GPUMEM_EINVAL;
    *first_out = first;
    return GPUMEM_OK;
}

static uint32_t gpumem__share_n_entries(const gpumem_share_desc *d, uint64_t slots) {
    return d->n_entries ? d->n_entries : (uint32_t)(2 * slots);
}

static uint32_t gpumem__share_n_bases(const gpumem_share_desc *d, uint64_t slots) {
    return d->n_bases ? d->n_bases : (uint32_t)slots;
}

size_t gpumem_share_bytes(const gpumem_share_desc *d) {
    gpumem_cache *first;
    uint64_t slots;
    uint32_t tiers;
    if (gpumem__share_validate(d, &first, &slots, &tiers) != GPUMEM_OK) return 0;
    /* Every carve below rounds up to 8 bytes: 8 per array at most, 9 arrays + 4 per owner. */
    return (size_t)(sizeof(gpumem_share) + first->n_lines * 4 * (1 + (tiers ? 1 + tiers : 0)) +
                    (uint64_t)gpumem__share_n_entries(d, slots) * (sizeof(gpumem__share_entry) + 4 + 16 * d->n_owners) +
                    (uint64_t)gpumem__share_n_bases(d, slots) * (first->line_bytes + 4) + slots * 8 +
                    8 * (9 + 4 * (uint64_t)d->n_owners));
}

gpumem_status gpumem_share_init(const gpumem_share_desc *d, void *mem, size_t bytes, gpumem_share **out) {
    gpumem_share *s;
    gpumem_cache *first = 0;
    uint64_t slots = 0;
    uint32_t o, i, n_entries, n_bases, tiers;
    unsigned char *m = (unsigned char *)mem;
    gpumem_status st;
    if (!out || !mem) return GPUMEM_ENULL;
    *out = 0;
    if ((st = gpumem__share_validate(d, &first, &slots, &tiers)) != GPUMEM_OK) return st;
    if (((uintptr_t)mem & 7u) || bytes < gpumem_share_bytes(d)) return GPUMEM_EINVAL;
    for (o = 1; o < d->n_owners; o++)
        if (d->caches[o] && (gpumem_cache_find_in_use(d->caches[o], 0, 1) < first->n_lines ||
                             gpumem__share_tier_dirty(d->caches[o])))
            return GPUMEM_EBUSY;
    n_entries = gpumem__share_n_entries(d, slots);
    n_bases = gpumem__share_n_bases(d, slots);
    memset(mem, 0, bytes);
    s = (gpumem_share *)m;
    m += sizeof *s;
    s->n_lines = first->n_lines;
    s->line_bytes = first->line_bytes;
    s->n_owners = d->n_owners;
#define GPUMEM__SHARE_CARVE(ptr, type, count) \
    (m = (unsigned char *)(((uintptr_t)m + 7u) & ~(uintptr_t)7u), ptr = (type *)m, m += (size_t)(count) * sizeof(type))
    GPUMEM__SHARE_CARVE(s->entries, gpumem__share_entry, n_entries);
    GPUMEM__SHARE_CARVE(s->dir, uint32_t, first->n_lines);
    GPUMEM__SHARE_CARVE(s->free_entries, uint32_t, n_entries);
    GPUMEM__SHARE_CARVE(s->free_bases, uint32_t, n_bases);
    for (o = 1; o < d->n_owners; o++) {
        GPUMEM__SHARE_CARVE(s->written[o], uint64_t, n_entries);
        GPUMEM__SHARE_CARVE(s->draining[o], uint64_t, n_entries);
        if (d->caches[o]) GPUMEM__SHARE_CARVE(s->slot_line[o], uint64_t, d->caches[o]->n_slots);
        /* Zero (memset above): no fill recorded, so the tier's copies from
         * before the share are never taken. */
        if (d->caches[o] && d->caches[o]->tier) GPUMEM__SHARE_CARVE(s->filled[o], uint32_t, first->n_lines);
    }
    if (tiers) GPUMEM__SHARE_CARVE(s->merges, uint32_t, first->n_lines);
    GPUMEM__SHARE_CARVE(s->bases, unsigned char, (uint64_t)n_bases * first->line_bytes);
#undef GPUMEM__SHARE_CARVE
    s->n_entries = n_entries;
    s->n_bases = n_bases;
    for (i = 0; i < n_entries; i++) {
        s->entries[i].line = GPUMEM_CACHE_EMPTY;
        s->free_entries[i] = n_entries - 1 - i;
    }
    s->n_free_entries = n_entries;
    for (i = 0; i < n_bases; i++) s->free_bases[i] = n_bases - 1 - i;
    s->n_free_bases = n_bases;
    for (o = 1; o < d->n_owners; o++) {
        gpumem_cache *c = d->caches[o];
        if (!c) continue;
        for (i = 0; i < c->n_slots; i++) s->slot_line[o][i] = GPUMEM_CACHE_EMPTY;
        gpumem_cache_invalidate(c, 0, c->n_slots, NULL); /* copies the share never saw */
        s->caches[o] = c;
        c->share = s;
    }
    *out = s;
    return GPUMEM_OK;
}

gpumem_status gpumem_share_create(const gpumem_share_desc *d, gpumem_share **out) {
    size_t bytes;
    void *mem;
    gpumem_status st;
    gpumem_cache *first;
    uint64_t slots;
    uint32_t tiers;
    if (!d || !out) return GPUMEM_ENULL;
    *out = 0;
    if ((st = gpumem__share_validate(d, &first, &slots, &tiers)) != GPUMEM_OK) return st;
    bytes = gpumem_share_bytes(d);
    if (!(mem = malloc(bytes))) return GPUMEM_ENOMEM;
    if ((st = gpumem_share_init(d, mem, bytes, out)) != GPUMEM_OK) {
        free(mem);
        return st;
    }
    (*out)->owned_ = mem;
    return GPUMEM_OK;
}

/* A scratch line for a merge made outside any slot, page aligned, with its
 * own PRP-list page (NVMe lines over two pages); NULL: no memory. Free the
 * returned block. */
static void *gpumem__share_scratch(const gpumem_share *s, gpumem__slot_pool *pool) {
    void *mem;
    if (posix_memalign(&mem, 4096, (size_t)s->line_bytes + 4096) != 0) return NULL;
    memset(pool, 0, sizeof *pool);
    pool->data = (unsigned char *)mem;
    pool->data_iova = (uint64_t)(uintptr_t)mem;
    pool->prp_lists = (uint64_t *)((unsigned char *)mem + s->line_bytes);
    pool->prp_lists_iova = pool->data_iova + s->line_bytes;
    return mem;
}

gpumem_status gpumem_share_merge(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
    gpumem_status st = gpumem__share_check(s, o, first, n), one;
    gpumem__slot_pool pool;
    void *mem;
    uint64_t line;
    if (st != GPUMEM_OK) return st;
    /* The merge's I/O goes through owner o's pairs, into a scratch line. */
    if (!(mem = gpumem__share_scratch(s, &pool))) return GPUMEM_ENOMEM;
    for (line = first; line < first + n; line++) {
        uint32_t *lk;
        gpumem__share_entry *e;
        if (!gpumem_atomic_load_u32(&s->dir[line], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV)) continue;
        if ((e = gpumem__share_lock_entry(s, line, &lk)) != 0) {
            /* Owner o's own call, at its kernel boundary: its pins to drop. */
            if (e->dirty && (one = gpumem__share_merge_line(s, e, s->caches[o], &pool, 0, o)) != GPUMEM_OK &&
                st != GPUMEM_EIO)
                st = one;
            gpumem__share_settle(s, e, o);
        }
        gpumem__share_unlock(s, lk);
    }
    free(mem);
    return st;
}

/* Which written lines a merge walk takes: those in owner o's slots (every
 * one, or with `mine_only` those o wrote itself), or with `stale` those of
 * [first, first + n) whose copy o holds and wrote and which lacks released
 * writes (gpumem__share_merge_stale). */
typedef struct gpumem__share_pick {
    int mine_only, stale;
    uint64_t first, n;
} gpumem__share_pick;

/* Whether the walk merges entry e, met in o's slot k (k unknown, walking a
 * range by line: only a stale pick does that, and needs no slot). */
static int gpumem__share_picked(gpumem_share *s, gpumem__share_entry *e, uint32_t o, uint32_t k,
                                const gpumem__share_pick *p) {
    uint32_t home[GPUMEM_SHARE_MAX_OWNERS];
    if (!p->stale) return e->dirty && (!p->mine_only || ((e->dirty & (1u << o)) && e->slot[o] == k));
    if (!(e->holders & (1u << o)) || !(e->dirty & (1u << o))) return 0;
    gpumem__share_home(s, e, home);
    return !gpumem_share_vv_leq(home, e->vv[o], s->n_owners);
}

/* Merge the lines `p` picks, one line at a time through cache io's pairs,
 * into one scratch line; at_boundary as gpumem__share_merge_line takes it.
 * O(o's slots), or O(n) for a stale pick of a range smaller than the cache:
 * the lines an owner wrote are pinned in its slots. The first failure is
 * returned (EIO before any other); EAGAIN: a line was being written, and
 * stays written. */
static gpumem_status gpumem__share_merge_picked(gpumem_share *s, uint32_t o, gpumem_cache *io, uint32_t at_boundary,
                                                const gpumem__share_pick *p) {
    gpumem_cache *c = s->caches[o];
    const int by_line = p->stale && p->n <= c->n_slots;
    const uint64_t count = by_line ? p->n : c->n_slots;
    gpumem_status st = GPUMEM_OK, one;
    gpumem__slot_pool pool;
    void *mem;
    uint64_t i;
    if (!io) return GPUMEM_ESTATE;
    if (!(mem = gpumem__share_scratch(s, &pool))) return GPUMEM_ENOMEM;
    for (i = 0; i < count; i++) {
        const uint64_t line = by_line ? p->first + i : gpumem__share_slot_line(s, o, (uint32_t)i);
        uint32_t *lk;
        gpumem__share_entry *e;
        if (line == GPUMEM_CACHE_EMPTY ||
            (p->stale && (line < p->first || line - p->first >= p->n ||
                          !gpumem_atomic_load_u32(&s->dir[line], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV))))
            continue;
        e = gpumem__share_lock_entry(s, line, &lk);
        if (e && gpumem__share_picked(s, e, o, (uint32_t)i, p) &&
            (one = gpumem__share_merge_line(s, e, io, &pool, 0, at_boundary)) != GPUMEM_OK &&
            (st == GPUMEM_OK || one == GPUMEM_EIO))
            st = one;
        gpumem__share_unlock(s, lk);
    }
    free(mem);
    return st;
}

gpumem_status gpumem_share_flush(gpumem_share *s, uint32_t o) {
    const gpumem__share_pick every = {0, 0, 0, 0};
    gpumem_status st = gpumem__share_check(s, o, 0, 0), one;
    if (st != GPUMEM_OK) return st;
    /* Owner o's own call, at its kernel boundary: its pins are its to drop. */
    st = gpumem__share_merge_picked(s, o, s->caches[o], o, &every);
    gpumem__share_drain(s, o, 0, 0, 0); /* pins left owed, and lines listed only for them */
    one = gpumem_cache_flush(s->caches[o], NULL);
    return st != GPUMEM_OK ? st : one;
}

gpumem_status gpumem_share_destroy(gpumem_share *s) {
    gpumem_status st;
    uint32_t o;
    if (!s) return GPUMEM_ENULL;
    if (s->queue && gpumem_atomic_load_u32(&s->queue->servers, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV))
        return GPUMEM_EBUSY; /* a server runs: stop it first */
    for (o = 1; o < s->n_owners; o++)
        if (s->caches[o] && (st = gpumem_share_flush(s, o)) != GPUMEM_OK) return st == GPUMEM_EAGAIN ? GPUMEM_EBUSY : st;
    /* Merged: the share holds no pin now; a reference left is a thread's. */
    for (o = 1; o < s->n_owners; o++)
        if (s->caches[o] && gpumem_cache_find_in_use(s->caches[o], 0, 0) < s->n_lines) return GPUMEM_EBUSY;
    for (o = 1; o < s->n_owners; o++)
        if (s->caches[o]) s->caches[o]->share = 0;
    free(s->owned_); /* NULL for gpumem_share_init's: the caller's memory */
    return GPUMEM_OK;
}

/* The source owner o would read `line` from now: a peer with a valid copy,
 * or 0 (storage; also when other owners' released writes must be merged
 * first, which the fill does). A plan only: the fill checks again. */
static uint32_t gpumem__share_plan_source(gpumem_share *s, uint32_t o, uint64_t line) {
    uint32_t *lk = gpumem__share_line_lock(s, line), home[GPUMEM_SHARE_MAX_OWNERS], p, from = 0;
    gpumem__share_entry *e;
    if (!gpumem_atomic_load_u32(&s->dir[line], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV)) return 0;
    gpumem__share_lock(s, lk);
    if ((e = gpumem__share_find(s, line)) != 0 && !gpumem__share_released_elsewhere(s, e, o)) {
        gpumem__share_home(s, e, home);
        for (p = 1; p < s->n_owners && !from; p++)
            if (p != o && gpumem__share_is_source(s, e, p, home)) from = p;
    }
    gpumem__share_unlock(s, lk);
    return from;
}

/* Read lines [first, first + n) of storage into buf with the fewest
 * commands owner o's backing allows: one memcpy for memory, one command
 * per controller for NVMe (a striped run's lines on one controller are
 * contiguous there; tmp, as large as buf, takes them before they are put
 * in line order). Returns the commands made in *transfers. */
static gpumem_status gpumem__share_read_run(gpumem_share *s, gpumem_cache *c, uint64_t first, uint64_t n,
                                            unsigned char *buf, unsigned char *tmp, uint64_t *transfers) {
    const gpumem_cache_backing *b = &c->backing;
    const uint64_t lb = s->line_bytes;
    uint32_t j, n_ctrls = b->layout == GPUMEM_CACHE_STRIPE ? b->n_ctrls : 1;
    *transfers = 0;
    if (b->kind == GPUMEM_CACHE_BACKING_MEMORY) {
        memcpy(buf, b->mem + first * lb, (size_t)(n * lb));
        *transfers = 1;
        return GPUMEM_OK;
    }
    if (n < n_ctrls) n_ctrls = (uint32_t)n;
    for (j = 0; j < n_ctrls; j++) {
        /* Controller of line first + j, and every n_ctrls-th line after it:
         * contiguous there, in commands of at most MDTS. */
        const uint64_t line0 = first + j, ctrl = b->layout == GPUMEM_CACHE_STRIPE ? line0 % b->n_ctrls : 0;
        const uint64_t count = (n - j + n_ctrls - 1) / n_ctrls;
        const uint64_t at = b->layout == GPUMEM_CACHE_STRIPE ? line0 / b->n_ctrls : line0;
        const uint64_t per_cmd = b->ns.max_blocks >= c->blocks_per_line ? b->ns.max_blocks / c->blocks_per_line : 1;
        gpumem_nvme_qp *qp = b->pairs[ctrl * b->pairs_per_ctrl + (at % b->pairs_per_ctrl)];
        unsigned char *dst = n_ctrls == 1 ? buf : tmp;
        uint64_t i, done;
        for (done = 0; done < count; done += per_cmd) {
            const uint64_t lines = count - done < per_cmd ? count - done : per_cmd;
            gpumem_status st = gpumem_nvme_qp_read_buf(qp, b->first_lba + (at + done) * c->blocks_per_line,
                                                       (uint32_t)(lines * c->blocks_per_line), dst + done * lb, NULL);
            if (st != GPUMEM_OK) return st;
            ++*transfers;
        }
        if (n_ctrls > 1)
            for (i = 0; i < count; i++) memcpy(buf + (j + i * n_ctrls) * lb, tmp + i * lb, (size_t)lb);
    }
    return GPUMEM_OK;
}

/* Fill lines [first, first + n) into owner o's cache through its fills,
 * with `stage` set for them (their source chosen, moved already). */
static gpumem_status gpumem__share_install(gpumem_share *s, uint32_t o, const gpumem__share_stage *stage) {
    gpumem_status st = GPUMEM_OK;
    uint64_t line;
    gpumem__share_staged = stage;
    for (line = stage->first; line < stage->first + stage->n && st == GPUMEM_OK; line++) {
        void *p;
        if ((st = gpumem_cache_acquire(s->caches[o], line, 1, 0, &p)) == GPUMEM_OK)
            st = gpumem_cache_release(s->caches[o], line, 1);
    }
    gpumem__share_staged = 0;
    return st;
}

gpumem_status gpumem_share_fetch(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n) {
    gpumem_status st = gpumem__share_check(s, o, first, n);
    gpumem_cache *c;
    unsigned char *buf;
    uint32_t from[GPUMEM_SHARE_FETCH_LINES];
    uint64_t i = first, end = first + n;
    if (st != GPUMEM_OK) return st;
    c = s->caches[o];
    if (posix_memalign((void **)&buf, 4096, (size_t)2 * GPUMEM_SHARE_FETCH_LINES * s->line_bytes) != 0)
        return GPUMEM_ENOMEM;
    while (i < end && st == GPUMEM_OK) {
        uint64_t w = 0, a, b;
        /* A window: the next lines the cache lacks, contiguous, and their planned sources. */
        while (i < end && (gpumem_atomic_load_u32(gpumem__line_state(c, i), GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) &
                           GPUMEM_CACHE_VALID))
            i++;
        while (i + w < end && w < GPUMEM_SHARE_FETCH_LINES &&
               !(gpumem_atomic_load_u32(gpumem__line_state(c, i + w), GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) &
                 GPUMEM_CACHE_VALID)) {
            from[w] = gpumem__share_plan_source(s, o, i + w);
            w++;
        }
        /* The size decides the source: a peer's run too short to be worth
         * its own transfer, amid lines storage serves, goes with them. */
        for (a = 0; a < w; a = b) {
            for (b = a + 1; b < w && from[b] == from[a]; b++) continue;
            if (from[a] && b - a < GPUMEM_SHARE_PEER_MIN_LINES && b - a < w)
                memset(&from[a], 0, (size_t)(b - a) * sizeof from[0]);
        }
        /* Each run of one source: one transfer, then the fills. */
        for (a = 0; a < w && st == GPUMEM_OK; a = b) {
            gpumem__share_stage stage;
            uint64_t moved = 1;
            for (b = a + 1; b < w && from[b] == from[a]; b++) continue;
            memset(&stage, 0, sizeof stage);
            stage.share = s;
            stage.owner = o;
            stage.from = from[a];
            stage.first = i + a;
            stage.n = b - a;
            stage.data = buf;
            if (!from[a]) {
                stage.epoch = gpumem_atomic_load_u32(&s->merge_epoch, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV);
                st = gpumem__share_read_run(s, c, i + a, b - a, buf, buf + GPUMEM_SHARE_FETCH_LINES * s->line_bytes,
                                            &moved);
            }
            if (st != GPUMEM_OK) break;
            gpumem__share_count(s, from[a] ? GPUMEM__SS_PEER_TRANSFERS : GPUMEM__SS_STORAGE_TRANSFERS, moved);
            st = gpumem__share_install(s, o, &stage);
        }
        i += w;
    }
    free(buf);
    return st;
}

/* ---- the miss queue's server ------------------------------------------------------ */

size_t gpumem_share_queue_bytes(uint32_t cells) {
    if (cells < 8 || cells > 65536 || (cells & (cells - 1))) return 0;
    return sizeof(gpumem_share_queue) + (size_t)cells * sizeof(gpumem__share_cell);
}

#if defined(__CUDACC__)
/* Whether there is a GPU to check memory against: a CUDA build on a machine
 * without one has only host threads (standing for GPU threads, in tests). */
static int gpumem__share_gpu_present(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n > 0;
}
#endif

/* Whether memory is reachable by both the host and the GPU: 1, 0, or -1
 * where this build cannot tell (no CUDA runtime, or no GPU). */
static int gpumem__share_both_reach(const void *p) {
#if defined(__CUDACC__)
    int type;
    if (!gpumem__share_gpu_present()) return -1;
    type = gpumem__memory_type(p); /* unregistered: ordinary host memory, the GPU cannot reach it */
    return type == cudaMemoryTypeHost || type == cudaMemoryTypeManaged;
#else
    (void)p;
    return -1;
#endif
}

/* Whether the share's words, which the host and the GPUs compare-and-swap
 * at once, are atomic between them: in managed memory on a GPU with
 * concurrent managed access (CUDA's rule for system-scope atomics; pinned
 * host memory would need native host atomics, which PCIe links mostly lack).
 * 1, 0, or -1 where this build cannot tell (no CUDA runtime, or no GPU). */
static int gpumem__share_atomic_both(const void *p) {
#if defined(__CUDACC__)
    int dev = 0, concurrent = 0;
    if (!gpumem__share_gpu_present()) return -1;
    if (gpumem__memory_type(p) != cudaMemoryTypeManaged || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, dev) != cudaSuccess)
        return 0;
    return concurrent != 0;
#else
    (void)p;
    return -1;
#endif
}

gpumem_status gpumem_share_queue_init(gpumem_share *s, void *mem, size_t bytes, uint32_t cells, uint64_t timeout_ns) {
    gpumem_share_queue *q = (gpumem_share_queue *)mem;
    uint32_t o;
    if (!s || !mem) return GPUMEM_ENULL;
    if (!gpumem_share_queue_bytes(cells) || bytes < gpumem_share_queue_bytes(cells) || ((uintptr_t)mem & 7u))
        return GPUMEM_EINVAL;
    if (s->queue) return GPUMEM_EBUSY;
    if (!s->caches[GPUMEM_SHARE_HOST] || gpumem__share_both_reach(mem) == 0 || gpumem__share_atomic_both(s) == 0)
        return GPUMEM_EINVAL;
    for (o = GPUMEM_SHARE_GPU0; o < s->n_owners; o++) {
        const gpumem_cache *c = s->caches[o];
        /* The server writes the owner's slots, and their PRP lists for NVMe
         * lines past two pages. */
        if (c && (c->tier || gpumem__cache_host_readable(c->pool.data) == 0 ||
                  (c->pool.prp_lists && gpumem__cache_host_readable(c->pool.prp_lists) == 0)))
            return GPUMEM_EINVAL;
    }
    memset(mem, 0, gpumem_share_queue_bytes(cells));
    q->n_cells = cells;
    /* Each GPU owner its own cells, a power of two of them (at least one:
     * 8 cells or more, 8 GPU owners at most). */
    for (q->owner_cells = cells; q->owner_cells > 1 && q->owner_cells * (s->n_owners - GPUMEM_SHARE_GPU0) > cells;)
        q->owner_cells /= 2;
    q->timeout_ns = timeout_ns ? timeout_ns : GPUMEM_SHARE_POST_TIMEOUT_NS;
    q->cells = (gpumem__share_cell *)(q + 1);
    /* Zeroed above: every post FREE and every answer NONE, generation 0. */
    s->queue = q; /* before any thread can miss (attach before the kernels start) */
    return GPUMEM_OK;
}

/* A GPU owner whose cache is full of its own written copies (each pinned
 * until merged): merge them, while its kernels run - through the host
 * owner's pairs, into a scratch line, the pins left owed for its threads to
 * drop (gpumem_share_get does, then takes its slot). A line being written
 * now is left. O(the owner's slots): a rare path. */
static gpumem_status gpumem__share_make_room(gpumem_share *s, uint32_t o) {
    const gpumem__share_pick own = {1, 0, 0, 0};
    const gpumem_status st = gpumem__share_merge_picked(s, o, s->caches[GPUMEM_SHARE_HOST], 0, &own);
    return st == GPUMEM_EAGAIN ? GPUMEM_OK : st; /* a line being written stays: the rest made room */
}

/* For owner o's acquire (gpumem__share_acquire_merge): merge each line of
 * [first, first + n) whose copy o wrote and which lacks released writes -
 * the lines of the range or o's slots, whichever are fewer. From the
 * server (a GPU thread's acquire, while its kernels may run): through the
 * host owner's pairs, at_boundary 0, the GPU owners' pins left owed; from
 * the owner's own host call, through its pairs, at its boundary. The first
 * failure is returned (EIO before any other); EAGAIN: a writer held a copy
 * of a line (the server never waits for a GPU thread). */
gpumem_status gpumem__share_merge_stale(gpumem_share *s, uint32_t o, uint64_t first, uint64_t n, gpumem_cache *io,
                                        uint32_t at_boundary) {
    gpumem__share_pick stale;
    stale.mine_only = 0, stale.stale = 1, stale.first = first, stale.n = n;
    return gpumem__share_merge_picked(s, o, io, at_boundary, &stale);
}

/* Answer one request, checked first: a GPU thread wrote it. */
static gpumem_status gpumem__share_serve_one(gpumem_share *s, const gpumem__share_cell *cell) {
    gpumem_cache *c = gpumem__share_cache(s, cell->owner);
    if (cell->kind == GPUMEM__SQ_FILL && cell->owner >= GPUMEM_SHARE_GPU0 && c && cell->line < s->n_lines &&
        cell->slot < c->n_slots)
        return gpumem__share_fill_here(s, c, cell->line, cell->slot, 1);
    if (cell->kind == GPUMEM__SQ_HOST_ACQUIRE && cell->owner == GPUMEM_SHARE_HOST &&
        gpumem__share_check(s, GPUMEM_SHARE_HOST, cell->line, cell->n) == GPUMEM_OK)
        return gpumem__share_acquire_all(s, GPUMEM_SHARE_HOST, cell->line, cell->n);
    if (cell->kind == GPUMEM__SQ_MAKE_ROOM && cell->owner >= GPUMEM_SHARE_GPU0 && c)
        return gpumem__share_make_room(s, cell->owner);
    if (cell->kind == GPUMEM__SQ_MERGE && cell->owner >= GPUMEM_SHARE_GPU0 && c &&
        gpumem__share_check(s, cell->owner, cell->line, cell->n) == GPUMEM_OK)
        return gpumem__share_merge_stale(s, cell->owner, cell->line, cell->n, s->caches[GPUMEM_SHARE_HOST], 0);
    gpumem__share_count(s, GPUMEM__SS_VIOLATIONS, 1);
    return GPUMEM_EINVAL;
}

/* One look at every cell, from cell `from` on: each posted request is
 * taken, served and answered. Returns how many were. */
static uint32_t gpumem__share_serve_pass(gpumem_share *s, uint32_t from) {
    gpumem_share_queue *q = s->queue;
    uint32_t i, served = 0;
    for (i = 0; i < q->n_cells; i++) {
        gpumem__share_cell *cell = &q->cells[(from + i) & (q->n_cells - 1)];
        const uint32_t seen = gpumem_atomic_load_u32(&cell->post, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
        if (GPUMEM__SQ_STATE(seen) != GPUMEM__SQ_POSTED) {
            gpumem__share_catch_up(cell, seen);
            continue;
        }
        if (!gpumem__share_take(cell, seen)) continue;
        cell->status = (int32_t)gpumem__share_serve_one(s, cell);
        /* Release at system scope: the status, and the slot's bytes the fill
         * wrote, reach the GPU thread before DONE does. */
        gpumem_atomic_store_u32(&cell->answer, GPUMEM__SQ_GEN(seen) | GPUMEM__SQ_DONE, GPUMEM_ORDER_RELEASE,
                                GPUMEM__SDEV);
        gpumem__share_count(s, GPUMEM__SS_SERVED, 1);
        served++;
    }
    return served;
}

typedef struct gpumem__share_server_thread {
    struct gpumem_share_server *server;
    pthread_t thread;
    uint32_t first_cell; /* where its passes start: the threads spread over the ring */
} gpumem__share_server_thread;

struct gpumem_share_server {
    gpumem_share *share;
    uint32_t stop, n_threads;
    gpumem__share_server_thread threads[64];
};

static void *gpumem__share_server_main(void *arg) {
    gpumem__share_server_thread *me = (gpumem__share_server_thread *)arg;
    gpumem_share_server *srv = me->server;
    gpumem_backoff idle = gpumem_backoff_start();
    gpumem__share_serving = 1;
    while (!gpumem_atomic_load_u32(&srv->stop, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM)) {
        if (gpumem__share_serve_pass(srv->share, me->first_cell)) {
            idle = gpumem_backoff_start();
            continue;
        }
        gpumem__share_pause(&idle); /* nothing posted: spin a while, then sleep between looks */
    }
    return NULL;
}

static void gpumem__share_server_join(gpumem_share_server *srv) {
    uint32_t i;
    gpumem_atomic_store_u32(&srv->stop, 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    for (i = 0; i < srv->n_threads; i++) pthread_join(srv->threads[i].thread, NULL);
}

gpumem_status gpumem_share_server_start(gpumem_share *s, uint32_t threads, gpumem_share_server **out) {
    gpumem_share_server *srv;
    uint32_t i;
    if (!s || !out) return GPUMEM_ENULL;
    *out = 0;
    if (threads == 0) threads = GPUMEM_SHARE_SERVER_THREADS;
    if (threads > 64) return GPUMEM_EINVAL;
    if (!s->queue) return GPUMEM_ESTATE;
    if (!(srv = (gpumem_share_server *)calloc(1, sizeof *srv))) return GPUMEM_ENOMEM;
    srv->share = s;
    for (i = 0; i < threads; i++) {
        gpumem__share_server_thread *t = &srv->threads[i];
        t->server = srv;
        t->first_cell = (uint32_t)((uint64_t)i * s->queue->n_cells / threads);
        if (pthread_create(&t->thread, NULL, gpumem__share_server_main, t) != 0) {
            gpumem__share_server_join(srv);
            free(srv);
            return GPUMEM_ENOMEM;
        }
        srv->n_threads = i + 1;
    }
    gpumem_atomic_fetch_add_u32(&s->queue->servers, 1, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    *out = srv;
    return GPUMEM_OK;
}

gpumem_status gpumem_share_server_stop(gpumem_share_server *srv) {
    if (!srv) return GPUMEM_ENULL;
    gpumem__share_server_join(srv);
    gpumem_atomic_fetch_sub_u32(&srv->share->queue->servers, 1, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    free(srv);
    return GPUMEM_OK;
}
#endif /* GPUMEM_IMPLEMENTATION */
#endif /* GPUMEM_NO_HOST_SHIM */

#endif /* GPUMEM_SHARE_H */
