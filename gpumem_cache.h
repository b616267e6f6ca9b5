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
 *   gpumem_cache_ref_drop(&r);                 // releases the line it keeps
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
 * slots found in use are pinned so it names another victim. A candidate is taken only if
 * its line has count 0 and is not busy, checked before and again in the
 * fetch_or(BUSY) that claims it: a thread that acquired the line in between
 * either raised the count (the evictor backs off) or sees BUSY and waits, and
 * is then the one that fills the line again. A dirty victim is written back
 * before the slot is reused; if the write fails, the line stays cached and
 * dirty and the acquire that needed the slot returns GPUMEM_EIO (no data is
 * dropped).
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
 * accesses claimed their places; gpumem_policy_trace_write saves it for
 * bench/policy_sim.
 *
 * Statistics: counted per SM on the device (GPUMEM_CACHE_STAT_SHARDS shards,
 * summed by gpumem_cache_get_stats), or not at all with GPUMEM_NO_STATS.
 *
 * Configuration: GPUMEM_CACHE_CHECK (default 0) adds a check on every hit
 * that the slot still holds the line, counted in stats.violations.
 * GPUMEM_CACHE_TIER (default 1) compiles in the host tier's hooks
 * (defined at the end of this header; the tier's API is gpumem_tier.h). 0 compiles them out
 * for kernels that never use a host tier: their calls may cost registers
 * even when no tier is attached (sm_90, bench/registers/kernels.cu: 48
 * registers per thread for one element read through acquire_coalesced, 47
 * without them; bench/results/registers-sm_90.md). A cache with a tier
 * attached is then refused (GPUMEM_ESTATE), never silently bypassed; every
 * file that uses such a cache needs the hooks.
 */
#ifndef GPUMEM_CACHE_H
#define GPUMEM_CACHE_H

#include "gpumem_nvme.h"
#include "gpumem_policy.h"
#include <string.h>

#ifndef GPUMEM_CACHE_CHECK
#define GPUMEM_CACHE_CHECK 0
#endif
#ifndef GPUMEM_CACHE_TIER
#define GPUMEM_CACHE_TIER 1
#endif
/* A host tier is attached and its hooks are compiled in (a constant 0
 * otherwise, so the calls and their registers go away). */
#define GPUMEM__HAS_TIER(c) (GPUMEM_CACHE_TIER && (c)->tier)
#ifndef GPUMEM_CACHE_SHARE
#define GPUMEM_CACHE_SHARE 1
#endif
/* The cache is one owner of a share (gpumem_share.h) and the share's fill
 * hook is compiled in. */
#define GPUMEM__HAS_SHARE(c) (GPUMEM_CACHE_SHARE && (c)->share)
/* The miss path looks in the host tier itself: a tier is attached and no
 * share is. Under a share, lines coming up from the tier go through the
 * share's fill hook instead, which checks them as it checks any source. */
#define GPUMEM__TIER_ALONE(c) (GPUMEM__HAS_TIER(c) && !GPUMEM__HAS_SHARE(c))

#define GPUMEM_CACHE_VALID 0x80000000u
#define GPUMEM_CACHE_BUSY 0x40000000u
#define GPUMEM_CACHE_DIRTY 0x20000000u
#define GPUMEM_CACHE_COUNT_MASK 0x1FFFFFFFu
#define GPUMEM_CACHE_COUNT_LIMIT 0x10000000u /* 2^28: acquire refuses above */
#define GPUMEM_CACHE_MAX_GROUP 1024u         /* largest count one acquire may add */
#define GPUMEM_CACHE_EMPTY UINT64_MAX        /* tag of a slot holding no line */
#define GPUMEM_CACHE_MIN_LINE 512u
#define GPUMEM_CACHE_MAX_LINE (2u << 20)     /* one 4 KiB PRP list page per slot suffices */
#define GPUMEM_CACHE_DEFAULT_SWEEPS 256u
#ifndef GPUMEM_CACHE_STAT_SHARDS
/* Statistics counters are kept in this many shards, each on lines of its
 * own, and summed when read: a GPU thread counts in its SM's shard (SM id
 * modulo the count: at most two SMs of an H100 share one), a host thread in
 * the line's, so that hits on different SMs never meet on one hot word.
 * GPUMEM_NO_STATS compiles the counting out. */
#define GPUMEM_CACHE_STAT_SHARDS 128u
#endif

/* Replacement: any slot policy of gpumem_policy.h (CLOCK, FIFO, SRRIP, BRRIP). */
enum { GPUMEM_CACHE_CLOCK = GPUMEM_POLICY_CLOCK, GPUMEM_CACHE_ROUND_ROBIN = GPUMEM_POLICY_FIFO };
enum { GPUMEM_CACHE_BACKING_MEMORY = 1, GPUMEM_CACHE_BACKING_NVME = 2 };    /* backing kind */
enum { GPUMEM_CACHE_STRIPE = 0, GPUMEM_CACHE_REPLICATE = 1 };               /* NVMe layout */

/* What is behind the cache. */
typedef struct gpumem_cache_backing {
    uint32_t kind;            /* GPUMEM_CACHE_BACKING_* */
    uint32_t layout;          /* NVMe: GPUMEM_CACHE_STRIPE or GPUMEM_CACHE_REPLICATE */
    unsigned char *mem;       /* memory: n_lines * line_bytes bytes */
    gpumem_nvme_qp **pairs;   /* NVMe: n_ctrls * pairs_per_ctrl pairs, controller by controller.
                                 gpumem_cache_init copies this array into the cache's metadata
                                 (it may be a local array of the caller); it reads the array
                                 where init runs, and dereferences the pairs themselves only
                                 where it knows the host can read them (gpumem_cache_init). */
    uint32_t n_ctrls;
    uint32_t pairs_per_ctrl;
    uint64_t first_lba;       /* where the data starts on each controller */
    gpumem_nvme_ns ns;        /* the namespace every controller serves (block size, MDTS,
                                 capacity): the shape is checked against it; the pairs are
                                 checked against it where they can be read (gpumem_cache_init) */
} gpumem_cache_backing;

GPUMEM_API gpumem_cache_backing gpumem_cache_backing_memory(void *mem) {
    gpumem_cache_backing b;
    memset(&b, 0, sizeof b);
    b.kind = GPUMEM_CACHE_BACKING_MEMORY;
    b.mem = (unsigned char *)mem;
    return b;
}

GPUMEM_API gpumem_cache_backing gpumem_cache_backing_nvme(gpumem_nvme_qp **pairs, uint32_t n_ctrls,
                                                          uint32_t pairs_per_ctrl, const gpumem_nvme_ns *ns,
                                                          uint64_t first_lba, uint32_t layout) {
    gpumem_cache_backing b;
    memset(&b, 0, sizeof b);
    if (ns) b.ns = *ns;
    b.kind = GPUMEM_CACHE_BACKING_NVME;
    b.layout = layout;
    b.pairs = pairs;
    b.n_ctrls = n_ctrls;
    b.pairs_per_ctrl = pairs_per_ctrl;
    b.first_lba = first_lba;
    return b;
}

/* Everything gpumem_cache_init needs. gpumem_cache_create fills in the
 * memory fields itself. */
typedef struct gpumem_cache_desc {
    uint64_t n_lines;      /* lines of the data behind the cache */
    uint32_t line_bytes;   /* power of two, GPUMEM_CACHE_MIN_LINE .. GPUMEM_CACHE_MAX_LINE */
    uint32_t n_slots;      /* lines the cache holds, >= 1 */
    uint32_t policy;       /* a slot policy: GPUMEM_POLICY_BRRIP (default), _CLOCK, _FIFO
                              (= GPUMEM_CACHE_ROUND_ROBIN) or _SRRIP */
    uint32_t full_sweeps;  /* sweeps of a full cache before GPUMEM_EAGAIN (0: default) */
    gpumem_cache_backing backing;
    gpumem_policy_trace *trace; /* NULL, or every acquire is recorded there (kept, not copied) */
    gpumem_policy *seq_policy;  /* NULL, or a sequential policy of any kind (LRU, HPE, ...) set up by
                                   gpumem_policy_init for n_slots slots, used instead of `policy`
                                   (kept, not copied; in memory the cache's threads can reach) */
    /* memory the caller places (gpumem_cache_init only) */
    void *meta;            /* gpumem_cache_meta_bytes() bytes, 8-byte aligned */
    size_t meta_bytes;
    void *data;            /* n_slots * line_bytes bytes, the slots themselves */
    uint64_t data_iova;    /* I/O address of data, contiguous (0: its virtual address) */
    uint64_t *prp_lists;   /* NVMe with lines > 8 KiB: gpumem_cache_prp_bytes() bytes */
    uint64_t prp_lists_iova; /* their I/O address, page aligned (0: virtual address) */
} gpumem_cache_desc;

GPUMEM_API gpumem_cache_desc gpumem_cache_desc_default(void) {
    gpumem_cache_desc d;
    memset(&d, 0, sizeof d);
    d.line_bytes = 4096;
    /* BRRIP: in bench/policy_sim it had fewer misses than CLOCK in 18 of
     * the 24 cases (12 workloads at 50% and 75% of the footprint), as many in
     * 4 and 0.1% more on uniform random; in the graph example the cache read
     * 9-14% fewer lines for BFS, CC within 2% (bench/results/policy-*). */
    d.policy = GPUMEM_POLICY_BRRIP;
    return d;
}

/* Per line of the data: 8 bytes, so 1 TiB of 4 KiB lines needs 2 GiB. */
typedef struct gpumem__cache_line {
    uint32_t state; /* VALID | BUSY | DIRTY | count */
    uint32_t slot;  /* where it is, while VALID */
} gpumem__cache_line;

typedef struct gpumem__cache_slot {
    uint32_t lock;  /* 0 free, 1 held: taken to change the tag */
    uint32_t ref;   /* the policy's word: CLOCK reference bit, RRIP prediction value */
    uint64_t tag;   /* line held, or GPUMEM_CACHE_EMPTY */
} gpumem__cache_slot;

/* Counters a user can read (summed over shards by gpumem_cache_get_stats). */
typedef struct gpumem_cache_stats {
    uint64_t hits;        /* acquires that found the line valid (each lane of a group counts) */
    uint64_t misses;      /* acquires that waited for a fill, their own or another's */
    uint64_t fills;       /* lines read from the backing */
    uint64_t evictions;   /* valid lines dropped to reuse their slot */
    uint64_t invalidations; /* clean lines dropped by gpumem_cache_invalidate */
    uint64_t writebacks;  /* dirty lines written to the backing (eviction or flush) */
    uint64_t reads;       /* read commands (or copies) issued to the backing */
    uint64_t writes;      /* write commands issued (a replicated write-back counts n_ctrls) */
    uint64_t bytes_read;  /* bytes read from the backing */
    uint64_t io_errors;   /* backing reads or writes that failed */
    uint64_t full;        /* acquires refused with GPUMEM_EAGAIN: every slot in use */
    uint64_t violations;  /* broken invariants seen (always 0 unless there is a bug) */
} gpumem_cache_stats;

#define GPUMEM__CACHE_N_STATS (sizeof(gpumem_cache_stats) / sizeof(uint64_t))

typedef struct gpumem__cache_shard {
    uint64_t v[GPUMEM__CACHE_N_STATS];
    uint64_t pad_[(GPUMEM_PAD_BYTES - (GPUMEM__CACHE_N_STATS * 8) % GPUMEM_PAD_BYTES) / 8];
} gpumem__cache_shard;

enum { /* indices into a shard, in gpumem_cache_stats order */
    GPUMEM__ST_HITS, GPUMEM__ST_MISSES, GPUMEM__ST_FILLS, GPUMEM__ST_EVICTIONS, GPUMEM__ST_INVALIDATIONS,
    GPUMEM__ST_WRITEBACKS,
    GPUMEM__ST_READS, GPUMEM__ST_WRITES, GPUMEM__ST_BYTES_READ, GPUMEM__ST_IO_ERRORS, GPUMEM__ST_FULL,
    GPUMEM__ST_VIOLATIONS
};

/* Line-sized slots and where the controller finds them: the cache's, and
 * the host tier's (gpumem_tier.h). I/O is addressed as (pool, slot), so that
 * the slot's addresses are worked out where the command is built, not kept
 * live by the caller through the search and the routing before it
 * (registers, on the device). */
typedef struct gpumem__slot_pool {
    unsigned char *data;     /* the slots, line_bytes apart */
    uint64_t data_iova;      /* their I/O address, contiguous */
    uint64_t *prp_lists;     /* a PRP-list page per slot, or NULL (lines of two pages or less) */
    uint64_t prp_lists_iova; /* their I/O address */
} gpumem__slot_pool;

typedef struct gpumem_cache {
    /* set at init, read-only afterwards */
    gpumem__cache_line *lines;
    gpumem__cache_slot *slots;
    gpumem__slot_pool pool;   /* the slots' data */
    gpumem_cache_backing backing;
    uint64_t n_lines;
    uint32_t n_slots;
    uint32_t line_bytes;
    uint32_t line_shift;
    uint32_t policy;
    uint32_t full_sweeps;
    uint32_t blocks_per_line; /* NVMe: logical blocks per line */
    void *owned_;             /* gpumem_cache_create's allocation, NULL after init */
    gpumem_policy_trace *trace;
    gpumem_policy *seq;       /* a sequential policy, or NULL (slot policy) */
    struct gpumem_tier *tier; /* the host tier below, or NULL (set by gpumem_tier_init) */
    struct gpumem_share *share; /* the share this cache is an owner of, or NULL (gpumem_share.h) */
    /* hot words */
    gpumem__nvme_word hand;   /* replacement hand */
    gpumem__nvme_word fills;  /* fills so far (BRRIP's bimodal throttle) */
    gpumem__nvme_word seq_lock; /* serialises calls into seq */
    gpumem__nvme_word cold;   /* next never-used slot */
    gpumem__cache_shard stats[GPUMEM_CACHE_STAT_SHARDS];
    /* Host threads waiting for a busy line or a free slot park here; every
     * fill, eviction and failed claim notifies. */
    gpumem_event event;
} gpumem_cache;

/* ---- the host tier's hooks ----------------------------------------------- */

/* A cache may have a host-memory tier below it, exclusive with it
 * (gpumem_tier.h; gpumem_tier_init attaches it). The cache calls the tier at
 * four points: every acquire (GMT's virtual time), a miss (host memory is
 * looked at before storage), an eviction (keep the line, move it to host
 * memory, or bypass: decided in the search for a slot, carried out after
 * it) and a flush (both tiers are written back). Direct calls,
 * not function pointers, so device code pays no indirect call: they are
 * declared here and defined at the end of this header ("The host tier's
 * data path"), so that the cache needs no header above it. With no tier attached (tier NULL) none is made, and the cache
 * behaves exactly as without one. */
struct gpumem_tier;

/* The tier's hooks are off the hit path (a miss, an eviction, a flush): on
 * the device they are called, not inlined, so that they do not add to the
 * registers of every kernel that acquires a line. */
#if defined(__CUDACC__)
#define GPUMEM__TIER_HOOK static __noinline__ __host__ __device__
#else
#define GPUMEM__TIER_HOOK static inline
#endif

/* A line found (and claimed) in the host tier, to be copied into its GPU
 * slot. The warp of a coalesced acquire copies it cooperatively (GMT's
 * zero-copy warp transfer), then gpumem__cache_fill_finish publishes it. */
typedef struct gpumem__tier_copy {
    const unsigned char *src; /* the host slot */
    unsigned char *dst;       /* the cache slot */
    uint32_t bytes;
    uint32_t hslot;           /* host slot, freed once copied */
    uint32_t dirty;           /* the host copy was dirty: so is the line */
    uint32_t pending;         /* 1: the copy is the caller's to make */
    uint32_t slot;            /* the cache slot */
    uint32_t write;           /* the acquire writes */
} gpumem__tier_copy;

/* What the tier did with an evicted line: nothing (the cache writes a dirty
 * line back and drops it), moved it to host memory, or needs a write to
 * storage first (a dirty host line it displaces to make room: *io). (Whether
 * to keep a candidate instead is gpumem__tier_place's GPUMEM_PLACE_KEEP.) */
enum { GPUMEM__TIER_BYPASS = 0, GPUMEM__TIER_MOVED = 1, GPUMEM__TIER_WRITE_FIRST = 2 };
/* That write: `line`, in slot k of the host tier's pool. The cache makes it
 * (a step of its miss path, gpumem__miss_step) and hands the status to
 * gpumem__tier_evict_resume, so that the hook's call does no I/O: on the
 * device a call's registers add to those live around it, and an NVMe
 * command under the hook made it the costliest point of every kernel that
 * acquires a line. The miss path's next I/O takes the same form. */
typedef struct gpumem__tier_io {
    const gpumem__slot_pool *pool;
    uint64_t line;
    uint32_t k;
} gpumem__tier_io;
/* Candidates GMT-Reuse may keep (predicted short reuse) in one search for a
 * slot before it must evict: the paper gives no bound, and without one a cache of lines
 * all predicted short would never free a slot (the simulator uses the same). */
#define GPUMEM_TIER_MAX_SKIPS 16u

#if GPUMEM_CACHE_TIER
GPUMEM__TIER_HOOK void gpumem__tier_on_access(struct gpumem_tier *t, uint64_t line);
GPUMEM__TIER_HOOK int gpumem__tier_lookup(struct gpumem_tier *t, uint64_t line, gpumem__tier_copy *cp);
GPUMEM__TIER_HOOK void gpumem__tier_undo_lookup(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp,
                                         int in_host);
GPUMEM__TIER_HOOK void gpumem__tier_fetch_done(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp);
GPUMEM__TIER_HOOK uint32_t gpumem__tier_place(struct gpumem_tier *t, uint64_t line, uint32_t skips_left);
GPUMEM__TIER_HOOK uint32_t gpumem__tier_evict(struct gpumem_tier *t, uint32_t slot, uint32_t where,
                                              gpumem__tier_io *io);
GPUMEM__TIER_HOOK uint32_t gpumem__tier_evict_resume(struct gpumem_tier *t, uint32_t slot, const gpumem__tier_io *io,
                                                     gpumem_status written);
GPUMEM__TIER_HOOK gpumem_status gpumem__tier_writeback(struct gpumem_tier *t, uint64_t *written);
/* Copy share `rank` of `n` of a line (n threads copy it together). */
GPUMEM_API void gpumem_tier_copy_share(unsigned char *dst, const unsigned char *src, uint32_t bytes, uint32_t rank,
                                       uint32_t n);
#else /* compiled out: never called (GPUMEM__HAS_TIER is a constant 0) */
GPUMEM_API void gpumem__tier_on_access(struct gpumem_tier *t, uint64_t line) { (void)t, (void)line; }
GPUMEM_API int gpumem__tier_lookup(struct gpumem_tier *t, uint64_t line, gpumem__tier_copy *cp) {
    return (void)t, (void)line, (void)cp, 0;
}
GPUMEM_API void gpumem__tier_undo_lookup(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp,
                                         int in_host) {
    (void)t, (void)line, (void)cp, (void)in_host;
}
GPUMEM_API void gpumem__tier_fetch_done(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp) {
    (void)t, (void)line, (void)cp;
}
GPUMEM_API uint32_t gpumem__tier_place(struct gpumem_tier *t, uint64_t line, uint32_t skips_left) {
    return (void)t, (void)line, (void)skips_left, GPUMEM_PLACE_BYPASS;
}
GPUMEM_API uint32_t gpumem__tier_evict(struct gpumem_tier *t, uint32_t slot, uint32_t where, gpumem__tier_io *io) {
    return (void)t, (void)slot, (void)where, (void)io, GPUMEM__TIER_BYPASS;
}
GPUMEM_API uint32_t gpumem__tier_evict_resume(struct gpumem_tier *t, uint32_t slot, const gpumem__tier_io *io,
                                              gpumem_status written) {
    return (void)t, (void)slot, (void)io, (void)written, GPUMEM__TIER_BYPASS;
}
GPUMEM_API gpumem_status gpumem__tier_writeback(struct gpumem_tier *t, uint64_t *written) {
    return (void)t, (void)written, GPUMEM_OK;
}
GPUMEM_API void gpumem_tier_copy_share(unsigned char *dst, const unsigned char *src, uint32_t bytes, uint32_t rank,
                                       uint32_t n) {
    (void)dst, (void)src, (void)bytes, (void)rank, (void)n;
}
#endif

/* ---- the share's hook ------------------------------------------------------
 *
 * A cache that is one owner of a share (gpumem_share.h: several caches over
 * one storage, GAIA's lazy release consistency) reads every missed line
 * through the share instead of straight from the backing: the share picks
 * the source (a peer owner's valid copy, or storage after merging what other
 * owners released) and records the copy's version, under the line's lock;
 * on the device it posts the miss to a host thread that does that (the
 * share's miss queue). One direct call at the miss path's one I/O site, defined at the end of
 * this header ("The share's data path") for the same reasons as the tier's
 * hooks; with no share attached it is never made. GPUMEM_CACHE_SHARE=0
 * compiles it out, and a cache attached to a share is then refused
 * (GPUMEM_ESTATE). */
struct gpumem_share;
#if GPUMEM_CACHE_SHARE
GPUMEM__TIER_HOOK gpumem_status gpumem__share_fill(struct gpumem_share *s, gpumem_cache *c, uint64_t line,
                                                   uint32_t k);
#else
GPUMEM_API gpumem_status gpumem__share_fill(struct gpumem_share *s, gpumem_cache *c, uint64_t line, uint32_t k) {
    return (void)s, (void)c, (void)line, (void)k, GPUMEM_ESTATE;
}
#endif

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

/* ---- internals ------------------------------------------------------------ */

#define GPUMEM__CDEV GPUMEM_SCOPE_DEVICE

/* Count n in statistic `which`: in the calling SM's shard on the device, in
 * the shard of `key` (a line) on the host. Relaxed: counts publish nothing. */
GPUMEM_API void gpumem__cache_count(gpumem_cache *c, uint64_t key, uint32_t which, uint64_t n) {
#if defined(GPUMEM_NO_STATS)
    (void)c, (void)key, (void)which, (void)n;
#else
#if GPUMEM_ON_DEVICE
    key = gpumem_sm_id();
#endif
    gpumem_atomic_fetch_add_u64(&c->stats[key % GPUMEM_CACHE_STAT_SHARDS].v[which], n, GPUMEM_ORDER_RELAXED,
                                GPUMEM__CDEV);
#endif
}

GPUMEM_API uint32_t *gpumem__line_state(gpumem_cache *c, uint64_t line) { return &c->lines[line].state; }

/* Slot k of a pool (line_bytes apart, as every pool of this cache). */
GPUMEM_API unsigned char *gpumem__pool_data(const gpumem_cache *c, const gpumem__slot_pool *pool, uint32_t k) {
    return pool->data + ((size_t)k << c->line_shift);
}

GPUMEM_API unsigned char *gpumem__slot_data(const gpumem_cache *c, uint32_t slot) {
    return gpumem__pool_data(c, &c->pool, slot);
}

/* Commands one I/O of the cache takes: a write to replicated NVMe goes to
 * every controller, anything else is one command (or one copy). */
GPUMEM_API uint32_t gpumem__cache_io_cmds(const gpumem_cache *c, int write) {
    const gpumem_cache_backing *b = &c->backing;
    return b->kind == GPUMEM_CACHE_BACKING_NVME && write && b->layout == GPUMEM_CACHE_REPLICATE ? b->n_ctrls : 1;
}

/* Command `nth` (of gpumem__cache_io_cmds) of moving a line between slot k
 * of `pool` and the backing (write = 0: read into the slot); the slot's own
 * PRP-list page serves lines past two pages. A failed command counts an I/O
 * error, a read done counts its bytes; an I/O stops at its first failed
 * command (gpumem__cache_io_pool), so each I/O counts at most one of
 * either. The caller owns the slot for the duration, so no two I/Os ever
 * use one slot or PRP list at once. Everything the command needs - the
 * slot's addresses from (pool, k), the controller, the pair, the LBA - is
 * worked out here, per command, rather than passed in or kept from the
 * previous command: on the device, every value live through a command's
 * waits adds to the registers of every kernel that can miss (the cache's
 * miss path issues one command per trip around its one I/O site,
 * gpumem__cache_fill). */
GPUMEM_API gpumem_status gpumem__cache_io_cmd(gpumem_cache *c, int write, uint64_t line,
                                              const gpumem__slot_pool *pool, uint32_t k, uint32_t nth) {
    const gpumem_cache_backing *b = &c->backing;
    gpumem_status st;
    if (b->kind == GPUMEM_CACHE_BACKING_MEMORY) {
        unsigned char *home = b->mem + ((size_t)line << c->line_shift);
        /* One thread moves the line (the device would copy a run-time size
         * byte by byte with memcpy): 16-byte units, four in flight, where
         * the two addresses agree. */
        if (write) gpumem_copy_lanes(home, gpumem__pool_data(c, pool, k), c->line_bytes, 0, 1);
        else gpumem_copy_lanes(gpumem__pool_data(c, pool, k), home, c->line_bytes, 0, 1);
        gpumem__cache_count(c, line, write ? GPUMEM__ST_WRITES : GPUMEM__ST_READS, 1);
        st = GPUMEM_OK;
    } else {
        /* One division: line = stripe * n_ctrls + home, home the controller
         * of a read or a striped write; a replicated write's nth command goes
         * to controller nth. The routing comes before the PRPs, so that they
         * are not live through the division (a call, on the device). */
        const uint64_t stripe = line / b->n_ctrls;
        const uint32_t ctrl = gpumem__cache_io_cmds(c, write) > 1 ? nth : (uint32_t)(line - stripe * b->n_ctrls);
        /* Threads of one SM share a pair on the GPU (as in BaM); on the host,
         * consecutive lines go to different pairs. */
        const uint32_t pick = (uint32_t)stripe + gpumem_sm_id();
        gpumem_nvme_qp *qp = b->pairs[(size_t)ctrl * b->pairs_per_ctrl + pick % b->pairs_per_ctrl];
        const uint64_t lba = b->first_lba + (b->layout == GPUMEM_CACHE_STRIPE ? stripe : line) * c->blocks_per_line;
        uint64_t prp1, prp2;
        /* The list is written again for each command of a replicated write:
         * the same entries, and the command before has completed. */
        st = gpumem_nvme_prp_setup(pool->data_iova + ((uint64_t)k << c->line_shift), c->line_bytes,
                                   pool->prp_lists ? pool->prp_lists + (size_t)k * (GPUMEM_NVME_PAGE_BYTES / 8) : 0,
                                   pool->prp_lists_iova + (uint64_t)k * GPUMEM_NVME_PAGE_BYTES,
                                   GPUMEM_NVME_PAGE_BYTES / 8, &prp1, &prp2);
        if (st != GPUMEM_OK) return st; /* before any command, uncounted */
        /* A pair whose namespace has another block size than the cache's
         * would move blocks_per_line blocks of the wrong size: refused, and
         * counted as a violation, before anything is sent (issue 30; for
         * pairs init could not read: gpumem__cache_check_pairs). */
        if (qp->ns.lba_shift != b->ns.lba_shift) {
            gpumem__cache_count(c, line, GPUMEM__ST_VIOLATIONS, 1);
            st = GPUMEM_EINVAL;
        } else
            st = gpumem_nvme_qp_rw(qp, write ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ, lba, c->blocks_per_line, prp1,
                               prp2, (gpumem_nvme_cpl *)0);
        gpumem__cache_count(c, line, write ? GPUMEM__ST_WRITES : GPUMEM__ST_READS, 1);
    }
    if (st != GPUMEM_OK) gpumem__cache_count(c, line, GPUMEM__ST_IO_ERRORS, 1);
    else if (!write) gpumem__cache_count(c, line, GPUMEM__ST_BYTES_READ, c->line_bytes);
    return st;
}

/* The whole I/O: its commands in turn, up to the first that fails. The
 * host tier uses it for its own slots (gpumem_tier.h). */
GPUMEM_API gpumem_status gpumem__cache_io_pool(gpumem_cache *c, int write, uint64_t line,
                                               const gpumem__slot_pool *pool, uint32_t k) {
    gpumem_status st = GPUMEM_OK;
    uint32_t nth;
    for (nth = 0; nth < gpumem__cache_io_cmds(c, write) && st == GPUMEM_OK; nth++)
        st = gpumem__cache_io_cmd(c, write, line, pool, k, nth);
    return st;
}

/* The same for the cache's slot `slot`. The caller owns the slot: BUSY on
 * the line it holds (fill) or the slot lock with BUSY on its line
 * (write-back). */
GPUMEM_API gpumem_status gpumem__cache_io(gpumem_cache *c, int write, uint64_t line, uint32_t slot) {
    return gpumem__cache_io_pool(c, write, line, &c->pool, slot);
}

GPUMEM_API int gpumem__slot_trylock(gpumem_cache *c, uint32_t k) {
    uint32_t unlocked = 0;
    return gpumem_atomic_cas_u32(&c->slots[k].lock, &unlocked, 1, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
}

GPUMEM_API void gpumem__slot_unlock(gpumem_cache *c, uint32_t k) {
    gpumem_atomic_store_u32(&c->slots[k].lock, 0, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
}

/* Tags are read and written only under the slot lock (and by the line's
 * filler while it holds BUSY); atomics keep the race detector quiet. */
GPUMEM_API uint64_t gpumem__slot_tag(gpumem_cache *c, uint32_t k) {
    return gpumem_atomic_load_u64(&c->slots[k].tag, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
}

GPUMEM_API void gpumem__slot_set_tag(gpumem_cache *c, uint32_t k, uint64_t tag) {
    gpumem_atomic_store_u64(&c->slots[k].tag, tag, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
}

/* The state word of the line slot k holds, for a caller that holds the
 * slot's lock (so the tag stays put): looked up where used, rather than
 * kept through I/O (registers, on the device). */
GPUMEM_API uint32_t *gpumem__slot_line_state(gpumem_cache *c, uint32_t k) {
    return gpumem__line_state(c, gpumem__slot_tag(c, k));
}

/* Lock slot k, waiting for it (holders keep it briefly), and return its tag. */
GPUMEM_API uint64_t gpumem__slot_lock(gpumem_cache *c, uint32_t k) {
    GPUMEM_WAIT_UNTIL(&c->event, gpumem__slot_trylock(c, k));
    return gpumem__slot_tag(c, k);
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
GPUMEM_API int gpumem__seq_trylock(gpumem_cache *c) {
    uint32_t unlocked = 0;
    /* Test and test-and-set: look before the compare-and-swap. Every hit
     * tries this lock, and a CAS takes the line for writing even when it
     * fails, so under contention failed CASes from many threads would keep
     * moving the line while its holder needs it to unlock. A relaxed load
     * shares the line and fails for free; it orders nothing (the CAS's
     * acquire does, when it wins). */
    if (gpumem_atomic_load_u32(&c->seq_lock.v, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) != 0) return 0;
    return gpumem_atomic_cas_u32(&c->seq_lock.v, &unlocked, 1, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
}

GPUMEM_API void gpumem__seq_lock(gpumem_cache *c) { GPUMEM_WAIT_UNTIL(&c->event, gpumem__seq_trylock(c)); }

GPUMEM_API void gpumem__seq_unlock(gpumem_cache *c) {
    gpumem_atomic_store_u32(&c->seq_lock.v, 0, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
    gpumem_event_notify(&c->event);
}

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

/* The next slot to consider, or n_slots to skip this turn. A sequential
 * policy names its victim among the slots not pinned in seq->pin (the ones
 * found in use lately, see gpumem__policy_refused); when every slot is
 * pinned the pins are forgotten and it names one anyway. */
GPUMEM_API uint32_t gpumem__policy_candidate(gpumem_cache *c) {
    uint32_t k;
    if (!c->seq) {
        k = gpumem_policy_slot_next(&c->hand.v, c->n_slots);
        return gpumem_policy_slot_consider(c->policy, &c->slots[k].ref) ? k : c->n_slots;
    }
    gpumem__seq_lock(c);
    k = gpumem_policy_victim(c->seq, c->seq->pin);
    if (k == GPUMEM_POLICY_NONE && c->seq->n_pin) {
        gpumem__pzero(c->seq->pin, c->n_slots);
        c->seq->n_pin = 0;
        k = gpumem_policy_victim(c->seq, c->seq->pin);
    }
    gpumem__seq_unlock(c);
    return k == GPUMEM_POLICY_NONE ? c->n_slots : k;
}

/* The candidate k could not be taken: its line is in use (or another thread
 * has the slot). A sequential policy gets it pinned, so its next victim is
 * another slot, without a change to its order. The pins are a hint that ages
 * out: once half the slots are pinned they are all cleared (amortised O(1)),
 * so a line released since is a candidate again. */
GPUMEM_API void gpumem__policy_refused(gpumem_cache *c, uint32_t k) {
    if (!c->seq) return;
    gpumem__seq_lock(c);
    if (!c->seq->pin[k]) {
        c->seq->pin[k] = 1;
        if (++c->seq->n_pin > c->n_slots / 2) {
            gpumem__pzero(c->seq->pin, c->n_slots);
            c->seq->n_pin = 0;
        }
    }
    gpumem__seq_unlock(c);
}

/* Candidates looked at in one sweep: every slot at least once (a sequential
 * policy moves each refused candidate away, so n_slots steps see them all;
 * twice that for slack). */
GPUMEM_API uint32_t gpumem__policy_sweep_len(const gpumem_cache *c) {
    return c->seq ? 2 * c->n_slots : gpumem_policy_slot_sweep_len(c->policy, c->n_slots);
}

/* Slot k now holds `line` (the caller holds the slot's lock). */
GPUMEM_API void gpumem__policy_fill(gpumem_cache *c, uint32_t k, uint64_t line) {
    if (!c->seq) {
        gpumem_policy_slot_fill(c->policy, &c->slots[k].ref, &c->fills.v);
        return;
    }
    gpumem__seq_lock(c);
    if (c->slots[k].ref) gpumem_policy_on_evict(c->seq, k, c->seq->line_of[k]);
    gpumem_policy_on_fill(c->seq, k, line);
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

/* Claim slot k: lock it, and if it holds a line, claim that line (BUSY)
 * provided nobody uses it. *skips (NULL: none) is how many more candidates
 * the host tier's placement may keep in this search; *where is its
 * placement for the victim (GPUMEM_PLACE_*, BYPASS without a tier). On
 * CLAIM_OK the slot is locked and its line, if any, claimed with count 0:
 * the miss's steps finish. */
GPUMEM_API int gpumem__slot_claim(gpumem_cache *c, uint32_t k, uint32_t *skips, uint32_t *where) {
    uint64_t victim;
    if (!gpumem__slot_trylock(c, k)) return GPUMEM__CLAIM_NO;
    *where = GPUMEM_PLACE_BYPASS;
    victim = gpumem__slot_tag(c, k);
    if (victim != GPUMEM_CACHE_EMPTY) {
        uint32_t *vs = gpumem__line_state(c, victim);
        uint32_t s = gpumem_atomic_load_u32(vs, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV), prev;
        /* First check: cheap, and keeps us from setting BUSY on lines in use. */
        if ((s & (GPUMEM_CACHE_BUSY | GPUMEM_CACHE_COUNT_MASK)) != 0 || !(s & GPUMEM_CACHE_VALID)) {
            gpumem__slot_unlock(c, k);
            return GPUMEM__CLAIM_NO;
        }
        /* Second check, in the claim itself. Acquire: if the count is 0 here,
         * every holder's release (fetch_sub, release order) came before, so
         * their writes to the slot are visible to the write-back. */
        prev = gpumem_atomic_fetch_or_u32(vs, GPUMEM_CACHE_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
        if (prev & GPUMEM_CACHE_BUSY) { /* someone else's claim: leave it alone */
            gpumem__slot_unlock(c, k);
            return GPUMEM__CLAIM_NO;
        }
        if (prev & GPUMEM_CACHE_COUNT_MASK) { /* acquired since the first check */
            gpumem__line_end_claim(c, vs, ~GPUMEM_CACHE_BUSY);
            gpumem__slot_unlock(c, k);
            return GPUMEM__CLAIM_NO;
        }
        if (GPUMEM_CACHE_CHECK &&
            gpumem_atomic_load_u32(&c->lines[victim].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) != k)
            gpumem__cache_count(c, victim, GPUMEM__ST_VIOLATIONS, 1);
        /* The placement decides while the line is ours and nobody can use it. */
        if (GPUMEM__HAS_TIER(c) &&
            (*where = gpumem__tier_place(c->tier, victim, skips ? *skips : 0)) == GPUMEM_PLACE_KEEP) {
            /* predicted short reuse: a second chance, look further */
            (*skips)--;
            gpumem__line_end_claim(c, vs, ~GPUMEM_CACHE_BUSY);
            gpumem__slot_unlock(c, k);
            gpumem__policy_touch(c, k, victim);
            return GPUMEM__CLAIM_NO;
        }
    }
    return GPUMEM__CLAIM_OK;
}

/* One sweep for a slot: cold slots first, then the policy's hand. Returns
 * OK with *slot claimed (see gpumem__slot_claim), EAGAIN if no candidate
 * was free. *skips: the host tier's keeps left to this search. */
GPUMEM_API gpumem_status gpumem__cache_sweep(gpumem_cache *c, uint32_t *slot, uint32_t *skips, uint32_t *where) {
    uint32_t i, n = gpumem__policy_sweep_len(c);
    /* Step 0 is a cold slot (if any are left), steps 1..n the policy's
     * candidates: one claim site for both (its code is inlined). */
    for (i = 0; i <= n; i++) {
        uint32_t k = c->n_slots;
        if (i > 0) k = gpumem__policy_candidate(c);
        else if (gpumem_atomic_load_u32(&c->cold.v, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) < c->n_slots)
            /* The hand may have taken this cold slot already: then it is not
             * empty and slot_claim treats it as any other candidate. */
            k = gpumem_atomic_fetch_add_u32(&c->cold.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
        if (k >= c->n_slots) continue;
        if (gpumem__slot_claim(c, k, skips, where) == GPUMEM__CLAIM_OK) {
            *slot = k;
            return GPUMEM_OK;
        }
        if (i > 0) gpumem__policy_refused(c, k);
    }
    return GPUMEM_EAGAIN;
}

/* Find a slot, waiting up to full_sweeps sweeps, and claim it (see
 * gpumem__slot_claim; the miss's steps evict its line). The host tier may
 * keep GPUMEM_TIER_MAX_SKIPS candidates in the whole search (not per sweep:
 * a sweep of a small cache could keep every slot, every time). *where: the
 * host tier's placement of the claimed slot's line. The search's counters
 * are dead once a slot is claimed: the eviction's I/O runs without them. */
GPUMEM_API gpumem_status gpumem__cache_find_slot(gpumem_cache *c, uint32_t *slot, uint32_t *where) {
    gpumem_status st = GPUMEM_EAGAIN;
    uint32_t sweeps = 0, skips = GPUMEM_TIER_MAX_SKIPS;
    *where = GPUMEM_PLACE_BYPASS;
    GPUMEM_WAIT_UNTIL(&c->event, (st = gpumem__cache_sweep(c, slot, &skips, where)) != GPUMEM_EAGAIN ||
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
        if (gpumem__slot_tag(c, k) != GPUMEM_CACHE_EMPTY) {
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
            return gpumem__miss_io(m, 1, gpumem__slot_tag(c, k), &c->pool, k, GPUMEM__MISS_WRITTEN);
        m->step = GPUMEM__MISS_EVICTED;
    }
    if (m->step == GPUMEM__MISS_WRITTEN) {
        m->step = GPUMEM__MISS_EVICTED;
        if (io_st != GPUMEM_OK) {
            /* Keep the only up-to-date copy: still valid, still dirty. */
            gpumem__line_end_claim(c, gpumem__slot_line_state(c, k), ~GPUMEM_CACHE_BUSY);
            gpumem__slot_unlock(c, k);
            m->status = GPUMEM_EIO;
            m->step = GPUMEM__MISS_UNDO;
        } else {
            gpumem__cache_count(c, gpumem__slot_tag(c, k), GPUMEM__ST_WRITEBACKS, 1);
        }
    }
    if (m->step == GPUMEM__MISS_EVICTED) {
        /* Clear VALID, BUSY and DIRTY, keep the count of threads that
         * arrived since (they wait on BUSY and will refill the line).
         * Release: our reads of the slot for the write-back are done before
         * anyone can claim the line again. */
        gpumem__line_end_claim(c, gpumem__slot_line_state(c, k), GPUMEM_CACHE_COUNT_MASK);
        gpumem__cache_count(c, gpumem__slot_tag(c, k), GPUMEM__ST_EVICTIONS, 1);
        m->step = GPUMEM__MISS_TAKE;
    }
    if (m->step == GPUMEM__MISS_TAKE) {
        gpumem__slot_set_tag(c, k, m->line);
        gpumem__policy_fill(c, k, m->line);
        gpumem__slot_unlock(c, k);
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
                gpumem_tier_copy_share(job->dst, job->src, job->bytes, 0, 1);
                gpumem__tier_fetch_done(c->tier, m->line, job);
                m->step = GPUMEM__MISS_PUBLISH;
            }
        }
    }
    if (m->step == GPUMEM__MISS_READ) {
        m->step = GPUMEM__MISS_PUBLISH;
        if (io_st != GPUMEM_OK) { /* give the slot back empty */
            gpumem__slot_lock(c, k);
            gpumem__slot_set_tag(c, k, GPUMEM_CACHE_EMPTY);
            gpumem__slot_unlock(c, k);
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
    if (m->status == GPUMEM_EAGAIN) gpumem__cache_count(c, m->line, GPUMEM__ST_FULL, 1);
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
 * and the caller's reference is withdrawn. */
GPUMEM_API gpumem_status gpumem__cache_fill(gpumem_cache *c, uint64_t line, uint32_t count, int write,
                                            void **data, gpumem__tier_copy *cp) {
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
    st = gpumem__cache_find_slot(c, &k, &where);
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
            if (GPUMEM_CACHE_CHECK && gpumem__slot_tag(c, k) != line)
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
                return gpumem__cache_fill(c, line, count, write, data, cp);
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
        gpumem_tier_copy_share((unsigned char *)(uintptr_t)p, (const unsigned char *)(uintptr_t)src, bytes,
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
        uint32_t *w, prev;
        line = gpumem__slot_lock(c, k);
        if (line == GPUMEM_CACHE_EMPTY ||
            !(gpumem_atomic_load_u32(gpumem__line_state(c, line), GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) &
              GPUMEM_CACHE_DIRTY)) {
            gpumem__slot_unlock(c, k);
            continue;
        }
        w = gpumem__line_state(c, line);
        /* BUSY on a valid line, while we hold the slot lock that eviction,
         * write-back and invalidation need, can only be an acquirer's brief
         * claim that it undoes at once: wait it out. BUSY on an invalid line
         * is a fill in progress; it is dirty only when the host tier
         * (gpumem_tier.h) hands up a dirty line: that counts as held. */
        while ((prev = gpumem_atomic_fetch_or_u32(w, GPUMEM_CACHE_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV)) &
                   GPUMEM_CACHE_BUSY &&
               prev & GPUMEM_CACHE_VALID)
            GPUMEM_WAIT_UNTIL(&c->event,
                              !(gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) & GPUMEM_CACHE_BUSY));
        if (prev & GPUMEM_CACHE_BUSY) { /* a fill: dirty only when it comes from the host tier */
            if (result == GPUMEM_OK) result = GPUMEM_EAGAIN;
            gpumem__slot_unlock(c, k);
            continue;
        }
        if (prev & GPUMEM_CACHE_COUNT_MASK) { /* held: leave it dirty */
            if (result == GPUMEM_OK) result = GPUMEM_EAGAIN;
            gpumem__line_end_claim(c, w, ~GPUMEM_CACHE_BUSY);
        } else if (gpumem__cache_io(c, 1, line, k) == GPUMEM_OK) {
            /* Nobody holds it and BUSY keeps newcomers waiting, so no write
             * can slip in between the copy and the clean mark. */
            n++;
            gpumem__cache_count(c, line, GPUMEM__ST_WRITEBACKS, 1);
            gpumem__line_end_claim(c, w, ~(GPUMEM_CACHE_BUSY | GPUMEM_CACHE_DIRTY));
        } else {
            result = GPUMEM_EIO;
            gpumem__line_end_claim(c, w, ~GPUMEM_CACHE_BUSY);
        }
        gpumem__slot_unlock(c, k);
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
        uint32_t *w, prev;
        line = gpumem__slot_lock(c, k);
        if (line != GPUMEM_CACHE_EMPTY) {
            w = gpumem__line_state(c, line);
            prev = gpumem_atomic_fetch_or_u32(w, GPUMEM_CACHE_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV);
            if (!(prev & GPUMEM_CACHE_BUSY)) {
                if ((prev & (GPUMEM_CACHE_DIRTY | GPUMEM_CACHE_COUNT_MASK)) == 0 && (prev & GPUMEM_CACHE_VALID)) {
                    gpumem__line_end_claim(c, w, GPUMEM_CACHE_COUNT_MASK);
                    gpumem__slot_set_tag(c, k, GPUMEM_CACHE_EMPTY);
                    gpumem__cache_count(c, line, GPUMEM__ST_INVALIDATIONS, 1);
                    n++;
                } else {
                    gpumem__line_end_claim(c, w, ~GPUMEM_CACHE_BUSY);
                }
            }
        }
        gpumem__slot_unlock(c, k);
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
GPUMEM_API gpumem_status gpumem_cache_init(gpumem_cache *c, const gpumem_cache_desc *d) {
    uint32_t bpl = 0, k;
    uint64_t i, data_iova, prp_iova;
    gpumem_status st;
    if (!c || !d || !d->meta || !d->data) return GPUMEM_ENULL;
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
    c->trace = d->trace;
    c->seq = d->seq_policy;
    c->full_sweeps = d->full_sweeps ? d->full_sweeps : GPUMEM_CACHE_DEFAULT_SWEEPS;
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
    gpumem_cache_ref r;
    r.array = a;
    r.line = GPUMEM_CACHE_EMPTY;
    r.base = 0;
    r.dirty = 0;
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
    r->line = GPUMEM_CACHE_EMPTY;
    r->base = 0;
    r->dirty = 0;
    return st;
}

/* Address of element i in the cache, valid until the reference moves to
 * another line or is dropped. The held line is released before the next is
 * acquired, so a thread never holds two lines here. */
GPUMEM_API gpumem_status gpumem_cache_ref_at(gpumem_cache_ref *r, uint64_t i, int write, void **elem) {
    const gpumem_cache_array *a;
    uint64_t byte, line;
    if (!r || !elem || !r->array) return GPUMEM_ENULL;
    a = r->array;
    if (!a->valid) return GPUMEM_EINVAL;
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
    *elem = r->base + (byte & (a->cache->line_bytes - 1));
    return GPUMEM_OK;
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

gpumem_status gpumem_cache_create(const gpumem_cache_desc *d, gpumem_cache **out) {
    gpumem__slot_block b;
    gpumem_cache_desc e;
    uint32_t bpl;
    gpumem_status st;
    if (!d || !out) return GPUMEM_ENULL;
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

/* ======================================================================== */
/* The host tier's data path: the hooks the cache calls                     */
/* ======================================================================== */
/*
 * The tier's state and the hooks declared above ("the host tier's hooks"),
 * defined here so that every file that uses the cache has them, whatever
 * it includes and in whatever order, with direct calls (no function
 * pointers on the device) and without this header including one above it.
 * gpumem_tier.h, which includes this header, is the tier's control: its
 * description, init and create, training, statistics, detach. The DESIGN
 * of the tier (exclusive tiers, host words, the three-tier read path, who
 * owns what when) is at the top of gpumem_tier.h.
 */
#if GPUMEM_CACHE_TIER
enum { GPUMEM_TIER_GMT_REUSE = 0, GPUMEM_TIER_ORDER = 1, GPUMEM_TIER_NEVER_HOST = 2, GPUMEM_TIER_PLACEMENTS = 3 };

#define GPUMEM_TIER_IN 0x80000000u
#define GPUMEM_TIER_BUSY 0x40000000u
#define GPUMEM_TIER_DIRTY 0x20000000u
#define GPUMEM_TIER_SLOT_MASK 0x1FFFFFFFu
#define GPUMEM_TIER_MAX_SLOTS GPUMEM_TIER_SLOT_MASK
#define GPUMEM_TIER_NO_SAMPLE UINT64_MAX
/* GMT-Reuse: accesses sampled for the model by default (the paper collects
 * "hundreds of thousands" of samples; the simulator fits over 4M accesses). */
#define GPUMEM_TIER_DEFAULT_TRAIN (1ull << 20)

enum { /* counter indices */
    GPUMEM__TS_HOST_HITS, GPUMEM__TS_HOST_MISSES, GPUMEM__TS_MOVES, GPUMEM__TS_DIRTY_MOVES, GPUMEM__TS_BYPASSES,
    GPUMEM__TS_KEEPS, GPUMEM__TS_HOST_EVICTIONS, GPUMEM__TS_WRITEBACKS, GPUMEM__TS_IO_ERRORS,
    GPUMEM__TS_VIOLATIONS, GPUMEM__TS_N
};

typedef struct gpumem_tier {
    /* set at init, read-only afterwards */
    gpumem_cache *cache;
    uint32_t *home;            /* per line: IN | BUSY | DIRTY | host slot */
    gpumem__cache_slot *slots; /* per host slot: lock, policy word, tag */
    uint64_t *free_map;        /* bit per host slot: empty and not taken */
    gpumem__slot_pool pool;    /* the host slots' data */
    uint64_t n_lines;
    uint32_t n_slots, placement, policy;
    uint64_t *samples;         /* the first accesses' lines, for training (NO_SAMPLE: not yet written) */
    uint64_t sample_cap;
    void *owned_;              /* gpumem_tier_create's allocation */
    /* GMT-Reuse's predictor and its trainer's state (behind gmt_lock; rd: the trainer's) */
    gpumem_policy_gmt gmt;
    gpumem_policy_rd rd;
    uint64_t trained;          /* samples consumed by the trainer */
    uint64_t fitted;           /* (VTD, RD) pairs in the fit (a copy of rd.samples, under gmt_lock) */
    uint64_t model_updates;
    uint64_t predicted[4], placed[5];
    /* hot words */
    gpumem__nvme_word gmt_lock;
    gpumem__nvme_word hand;    /* host replacement hand */
    gpumem__nvme_word free_hand; /* the free_map word the next search starts at */
    gpumem__nvme_word n_free;  /* empty host slots not reserved */
    gpumem__nvme_word fills;   /* the policy's fill counter */
    uint64_t vt;               /* virtual time */
    uint64_t pad_[GPUMEM_PAD_BYTES / 8 - 1];
    uint64_t stats[GPUMEM__TS_N];
    gpumem_event event;        /* host waiters for a BUSY host word or a slot lock */
} gpumem_tier;

#define GPUMEM__TDEV GPUMEM_SCOPE_DEVICE

GPUMEM_API size_t gpumem__tier_align8(size_t n) { return (n + 7u) & ~(size_t)7u; }

GPUMEM_API size_t gpumem__tier_map_words(uint32_t n_slots) { return ((size_t)n_slots + 63u) / 64u; }

/* The lowest set bit of x != 0. */
GPUMEM_API uint32_t gpumem__tier_ctz64(uint64_t x) {
#if GPUMEM_ON_DEVICE
    return (uint32_t)__ffsll((long long)x) - 1u;
#else
    return (uint32_t)__builtin_ctzll(x);
#endif
}
/* ---- internals ------------------------------------------------------------- */

GPUMEM_API void gpumem__tier_count(gpumem_tier *t, uint32_t which, uint64_t n) {
    gpumem_atomic_fetch_add_u64(&t->stats[which], n, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
}

GPUMEM_API unsigned char *gpumem__tier_slot_data(const gpumem_tier *t, uint32_t k) {
    return gpumem__pool_data(t->cache, &t->pool, k);
}

/* Share `rank` of `n` of a line copy: 16-byte words, lane-strided, so the n
 * threads of a group touch consecutive words at once (coalesced over PCIe
 * on the device). Line sizes are powers of two >= 512, so the words divide
 * the line; buffers are line aligned within their pools. */
GPUMEM_API void gpumem_tier_copy_share(unsigned char *dst, const unsigned char *src, uint32_t bytes, uint32_t rank,
                                       uint32_t n) {
#if GPUMEM_ON_DEVICE
    const uint4 *s = (const uint4 *)src;
    uint4 *d = (uint4 *)dst;
    uint32_t i;
    if (n == 1) {
        /* One thread copies the whole line (an eviction's move to host
         * memory, inside the tier's hooks): unrolled only twice. The
         * compiler's own unrolling kept more 16-byte words in flight, and
         * made gpumem__tier_evict the costliest call of every kernel that
         * acquires a line (issue 12; bench/results/registers-*.md).
         * A group's shares keep the full unroll: they run where little
         * else is live. */
#pragma unroll 2
        for (i = 0; i < bytes / 16; i++) d[i] = s[i];
        return;
    }
    for (i = rank; i < bytes / 16; i += n) d[i] = s[i];
#else
    if (rank == 0 && n == 1) memcpy(dst, src, bytes);
    else {
        uint32_t i, chunk = 16;
        for (i = rank * chunk; i < bytes; i += n * chunk) memcpy(dst + i, src + i, chunk);
    }
#endif
}

GPUMEM_API int gpumem__tier_slot_trylock(gpumem_tier *t, uint32_t k) {
    uint32_t unlocked = 0;
    return gpumem_atomic_cas_u32(&t->slots[k].lock, &unlocked, 1, GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV);
}

GPUMEM_API void gpumem__tier_slot_unlock(gpumem_tier *t, uint32_t k) {
    gpumem_atomic_store_u32(&t->slots[k].lock, 0, GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
    gpumem_event_notify(&t->event);
}

GPUMEM_API uint64_t gpumem__tier_tag(gpumem_tier *t, uint32_t k) {
    return gpumem_atomic_load_u64(&t->slots[k].tag, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
}

GPUMEM_API void gpumem__tier_set_tag(gpumem_tier *t, uint32_t k, uint64_t tag) {
    gpumem_atomic_store_u64(&t->slots[k].tag, tag, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
}

/* Publish a line's host word (or clear it). Release: the host slot's data,
 * written before, is visible to whoever acquires the word. */
GPUMEM_API void gpumem__tier_set_home(gpumem_tier *t, uint64_t line, uint32_t w) {
    gpumem_atomic_store_u32(&t->home[line], w, GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
    gpumem_event_notify(&t->event);
}

/* Claim a present, idle host word for a move or a write-back (CAS to BUSY).
 * Acquire: the host slot's data is the one its publisher wrote. Returns the
 * word as it was, or 0 when it was absent or busy. */
GPUMEM_API uint32_t gpumem__tier_claim(gpumem_tier *t, uint64_t line) {
    uint32_t s = gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    if (!(s & GPUMEM_TIER_IN) || (s & GPUMEM_TIER_BUSY)) return 0;
    return gpumem_atomic_cas_u32(&t->home[line], &s, s | GPUMEM_TIER_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) ? s
                                                                                                               : 0;
}

GPUMEM_API int gpumem__tier_trylock_gmt(gpumem_tier *t) {
    uint32_t unlocked = 0;
    return gpumem_atomic_cas_u32(&t->gmt_lock.v, &unlocked, 1, GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV);
}

GPUMEM_API void gpumem__tier_lock_gmt(gpumem_tier *t) { GPUMEM_WAIT_UNTIL(&t->event, gpumem__tier_trylock_gmt(t)); }

GPUMEM_API void gpumem__tier_unlock_gmt(gpumem_tier *t) {
    gpumem_atomic_store_u32(&t->gmt_lock.v, 0, GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
    gpumem_event_notify(&t->event);
}

/* Count a host line's write to storage that ended with status st. */
GPUMEM_API gpumem_status gpumem__tier_written(gpumem_tier *t, gpumem_status st) {
    gpumem__tier_count(t, st == GPUMEM_OK ? GPUMEM__TS_WRITEBACKS : GPUMEM__TS_IO_ERRORS, 1);
    return st;
}

/* Write the line in host slot k (claimed BUSY by the caller) to storage,
 * through the cache's backing. */
GPUMEM_API gpumem_status gpumem__tier_write(gpumem_tier *t, uint64_t line, uint32_t k) {
    return gpumem__tier_written(t, gpumem__cache_io_pool(t->cache, 1, line, &t->pool, k));
}

/* Finish displacing the line of host slot k (locked; its line claimed
 * BUSY), once it is written to storage if it was dirty (`written`: that
 * write's status; OK for a clean line). The line and its word are read
 * again here (the slot lock and BUSY keep both as they were). EIO: the write
 * failed, the line stays (dirty) and the slot is unlocked. */
GPUMEM_API gpumem_status gpumem__tier_displace_done(gpumem_tier *t, uint32_t k, gpumem_status written) {
    const uint64_t victim = gpumem__tier_tag(t, k);
    if (written != GPUMEM_OK) {
        /* keep the only up-to-date copy: its word as it was before our claim */
        gpumem__tier_set_home(
            t, victim, gpumem_atomic_load_u32(&t->home[victim], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV) & ~GPUMEM_TIER_BUSY);
        gpumem__tier_slot_unlock(t, k);
        return GPUMEM_EIO;
    }
    /* Written (or clean): storage is up to date before the word says "not here". */
    gpumem__tier_set_home(t, victim, 0);
    gpumem__tier_set_tag(t, k, GPUMEM_CACHE_EMPTY);
    gpumem__tier_count(t, GPUMEM__TS_HOST_EVICTIONS, 1);
    return GPUMEM_OK;
}

/* An empty host slot, locked, for a line coming down: a free one if any
 * (reserved through n_free), else - only if `displace` - the replacement
 * policy's victim. A clean victim is displaced here; a dirty one must be
 * written to storage first: *write_first is then set, the slot is locked
 * and its line claimed, and the caller writes it and calls
 * gpumem__tier_displace_done (the search itself does no I/O). EAGAIN: none
 * (full and not displacing, or every candidate moving). */
GPUMEM_API gpumem_status gpumem__tier_alloc(gpumem_tier *t, int displace, uint32_t *out, int *write_first) {
    uint32_t i, n = t->n_slots, f = gpumem_atomic_load_u32(&t->n_free.v, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    *write_first = 0;
    while (f > 0 && !gpumem_atomic_cas_u32(&t->n_free.v, &f, f - 1, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV)) {
    }
    if (f > 0) { /* one set bit is ours: every reserver takes one, and bits are set before the count */
        const uint32_t words = (uint32_t)gpumem__tier_map_words(n);
        for (;;) {
            uint32_t j = gpumem_policy_slot_next(&t->free_hand.v, words);
            uint64_t w = gpumem_atomic_load_u64(&t->free_map[j], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
            while (w) {
                const uint64_t bit = 1ull << gpumem__tier_ctz64(w);
                /* Acquire: the freer's EMPTY tag is visible. */
                if (gpumem_atomic_fetch_and_u64(&t->free_map[j], ~bit, GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) & bit) {
                    uint32_t k = j * 64u + gpumem__tier_ctz64(bit);
                    /* A displacer's hand may hold the lock for a moment. */
                    GPUMEM_WAIT_UNTIL(&t->event, gpumem__tier_slot_trylock(t, k));
                    if (gpumem__tier_tag(t, k) != GPUMEM_CACHE_EMPTY) gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
                    *out = k;
                    return GPUMEM_OK;
                }
                w = gpumem_atomic_load_u64(&t->free_map[j], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
            }
        }
    }
    if (!displace) return GPUMEM_EAGAIN;
    for (i = 0; i < gpumem_policy_slot_sweep_len(t->policy, n); i++) {
        uint32_t k = gpumem_policy_slot_next(&t->hand.v, n), s;
        uint64_t victim;
        if (!gpumem__tier_slot_trylock(t, k)) continue;
        victim = gpumem__tier_tag(t, k);
        /* Empty slots are the reservers'; lines being moved up or written are busy. */
        if (victim == GPUMEM_CACHE_EMPTY || !gpumem_policy_slot_consider(t->policy, &t->slots[k].ref) ||
            (s = gpumem__tier_claim(t, victim)) == 0) {
            gpumem__tier_slot_unlock(t, k);
            continue;
        }
        if ((s & GPUMEM_TIER_SLOT_MASK) != k) gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
        *out = k;
        *write_first = (s & GPUMEM_TIER_DIRTY) != 0;
        return *write_first ? GPUMEM_OK : gpumem__tier_displace_done(t, k, GPUMEM_OK);
    }
    return GPUMEM_EAGAIN;
}

/* GMT-Reuse's decision for an eviction candidate, with its figures. */
GPUMEM_API uint32_t gpumem__tier_decide(gpumem_tier *t, uint64_t line, uint32_t skips_left) {
    uint32_t where;
    if (t->placement == GPUMEM_TIER_NEVER_HOST) return GPUMEM_PLACE_BYPASS;
    if (t->placement == GPUMEM_TIER_ORDER) return GPUMEM_PLACE_HOST;
    gpumem__tier_lock_gmt(t);
    t->predicted[gpumem_policy_gmt_predict(&t->gmt, line)]++;
    where = gpumem_policy_gmt_place(&t->gmt, line,
                                    gpumem_atomic_load_u64(&t->vt, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV), skips_left);
    t->placed[where]++;
    gpumem__tier_unlock_gmt(t);
    return where;
}

/* ---- the cache's hooks (declared in gpumem_cache.h) --------------------------- */

/* Every acquire: one tick of virtual time; the first ones are samples. */
GPUMEM__TIER_HOOK void gpumem__tier_on_access(struct gpumem_tier *t, uint64_t line) {
    uint64_t vt;
    if (t->placement != GPUMEM_TIER_GMT_REUSE) return;
    vt = gpumem_atomic_fetch_add_u64(&t->vt, 1, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    /* Release: the trainer reads the sample only once it is written. */
    if (vt < t->sample_cap) gpumem_atomic_store_u64(&t->samples[vt], line, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
}

/* A GPU-cache miss on `line` (its filler holds the line's BUSY): if the
 * line is in host memory, claim its host copy (1, *cp filled in but for the
 * GPU slot), else 0: read storage. */
GPUMEM__TIER_HOOK int gpumem__tier_lookup(struct gpumem_tier *t, uint64_t line, gpumem__tier_copy *cp) {
    uint32_t s;
    cp->pending = 0;
    /* Learn where it should have gone - when the predictor is free at once:
     * under contention it learns from a sample of the misses (as the cache's
     * sequential policies see a sample of the hits), and no miss queues
     * behind another's learning. */
    if (t->placement == GPUMEM_TIER_GMT_REUSE && gpumem__tier_trylock_gmt(t)) {
        gpumem_policy_gmt_on_fetch(&t->gmt, line, gpumem_atomic_load_u64(&t->vt, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV));
        gpumem__tier_unlock_gmt(t);
    }
    for (;;) {
        s = gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV);
        if (!(s & GPUMEM_TIER_IN)) { /* storage is up to date (a displacement wrote it before clearing) */
            gpumem__tier_count(t, GPUMEM__TS_HOST_MISSES, 1);
            return 0;
        }
        if (!(s & GPUMEM_TIER_BUSY) && (s = gpumem__tier_claim(t, line)) != 0) break;
        /* Being displaced (written to storage) or written back: wait it out. */
        GPUMEM_WAIT_UNTIL(&t->event, !(gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) &
                                       GPUMEM_TIER_BUSY));
    }
    cp->hslot = s & GPUMEM_TIER_SLOT_MASK;
    cp->src = gpumem__tier_slot_data(t, cp->hslot);
    cp->bytes = t->cache->line_bytes;
    cp->dirty = (s & GPUMEM_TIER_DIRTY) != 0;
    gpumem__tier_count(t, GPUMEM__TS_HOST_HITS, 1);
    return 1;
}

/* No GPU slot for it after all (a full cache): give the host copy back, and
 * take back the lookup's count (the fill it counted did not happen). */
GPUMEM__TIER_HOOK void gpumem__tier_undo_lookup(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp,
                                         int in_host) {
    if (in_host) gpumem__tier_set_home(t, line, GPUMEM_TIER_IN | (cp->dirty ? GPUMEM_TIER_DIRTY : 0) | cp->hslot);
    gpumem__tier_count(t, in_host ? GPUMEM__TS_HOST_HITS : GPUMEM__TS_HOST_MISSES, (uint64_t)0 - 1);
}

/* The line is copied up: mark it dirty in the cache first (a flush then sees
 * it there), then free its host slot. */
GPUMEM__TIER_HOOK void gpumem__tier_fetch_done(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp) {
    uint32_t k = cp->hslot;
    if (cp->dirty)
        gpumem_atomic_fetch_or_u32(gpumem__line_state(t->cache, line), GPUMEM_CACHE_DIRTY, GPUMEM_ORDER_RELAXED,
                                   GPUMEM__CDEV);
    GPUMEM_WAIT_UNTIL(&t->event, gpumem__tier_slot_trylock(t, k));
    if (gpumem__tier_tag(t, k) != line) gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
    gpumem__tier_set_tag(t, k, GPUMEM_CACHE_EMPTY);
    gpumem_atomic_store_u32(&t->slots[k].ref, 0, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    gpumem__tier_set_home(t, line, 0);
    gpumem__tier_slot_unlock(t, k);
    /* The bit after the tag is EMPTY (release), the count after the bit. */
    gpumem_atomic_fetch_or_u64(&t->free_map[k / 64u], 1ull << (k % 64u), GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
    gpumem_atomic_fetch_add_u32(&t->n_free.v, 1, GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
}

/* A GPU eviction candidate `line`, owned by the evictor: where should it
 * go (GPUMEM_PLACE_*)? KEEP (predicted short reuse, at most skips_left
 * more in this search) is counted here; the others are carried out by
 * gpumem__tier_evict once the cache's search for a slot has ended. */
GPUMEM__TIER_HOOK uint32_t gpumem__tier_place(struct gpumem_tier *t, uint64_t line, uint32_t skips_left) {
    const uint32_t where = gpumem__tier_decide(t, line, skips_left);
    if (where == GPUMEM_PLACE_KEEP) gpumem__tier_count(t, GPUMEM__TS_KEEPS, 1);
    return where;
}

/* Move the line evicted from GPU slot `slot` (its tag; the evictor owns it:
 * slot lock, BUSY) into host slot k (locked, empty). The line and its DIRTY
 * bit are read here, from the slot and the line's word, which that
 * ownership keeps as they were. */
GPUMEM_API uint32_t gpumem__tier_move(gpumem_tier *t, uint32_t slot, uint32_t k) {
    const uint64_t line = gpumem__slot_tag(t->cache, slot);
    const int dirty = (gpumem_atomic_load_u32(gpumem__line_state(t->cache, line), GPUMEM_ORDER_RELAXED,
                                              GPUMEM__CDEV) &
                       GPUMEM_CACHE_DIRTY) != 0;
    gpumem_tier_copy_share(gpumem__tier_slot_data(t, k), gpumem__slot_data(t->cache, slot), t->cache->line_bytes, 0,
                           1);
    gpumem__tier_set_tag(t, k, line);
    gpumem_policy_slot_fill(t->policy, &t->slots[k].ref, &t->fills.v);
    gpumem__tier_set_home(t, line, GPUMEM_TIER_IN | (dirty ? GPUMEM_TIER_DIRTY : 0) | k);
    gpumem__tier_slot_unlock(t, k);
    gpumem__tier_count(t, GPUMEM__TS_MOVES, 1);
    if (dirty) gpumem__tier_count(t, GPUMEM__TS_DIRTY_MOVES, 1);
    return GPUMEM__TIER_MOVED;
}

/* Carry out placement `where` (gpumem__tier_place's, not KEEP) of the line
 * evicted from GPU slot `slot`, owned by the evictor: move it to host
 * memory, or leave it to the cache (bypass). When the host slot found for
 * it holds a dirty line to displace, that line must reach storage first:
 * GPUMEM__TIER_WRITE_FIRST, *io says what to write, and the cache calls
 * gpumem__tier_evict_resume with the write's status. */
GPUMEM__TIER_HOOK uint32_t gpumem__tier_evict(struct gpumem_tier *t, uint32_t slot, uint32_t where,
                                              gpumem__tier_io *io) {
    uint32_t k = 0;
    int write_first = 0;
    if (where == GPUMEM_PLACE_BYPASS) {
        gpumem__tier_count(t, GPUMEM__TS_BYPASSES, 1);
        return GPUMEM__TIER_BYPASS;
    }
    /* Exclusive tiers: a line in a GPU slot has no host copy. */
    if (gpumem_atomic_load_u32(&t->home[gpumem__slot_tag(t->cache, slot)], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV) != 0) {
        gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
        return GPUMEM__TIER_BYPASS;
    }
    if (gpumem__tier_alloc(t, where == GPUMEM_PLACE_HOST, &k, &write_first) != GPUMEM_OK) {
        gpumem__tier_count(t, GPUMEM__TS_BYPASSES, 1); /* full: GMT-Reuse's "discard when full" */
        return GPUMEM__TIER_BYPASS;
    }
    if (write_first) {
        io->pool = &t->pool;
        io->line = gpumem__tier_tag(t, k);
        io->k = k;
        return GPUMEM__TIER_WRITE_FIRST;
    }
    return gpumem__tier_move(t, slot, k);
}

/* The displaced line of *io has been written (`written`: the status): free
 * its host slot and move the evicted line in, or, if the write failed, keep
 * the displaced line (dirty) and bypass. */
GPUMEM__TIER_HOOK uint32_t gpumem__tier_evict_resume(struct gpumem_tier *t, uint32_t slot, const gpumem__tier_io *io,
                                                     gpumem_status written) {
    if (gpumem__tier_displace_done(t, io->k, gpumem__tier_written(t, written)) != GPUMEM_OK) {
        gpumem__tier_count(t, GPUMEM__TS_BYPASSES, 1); /* the displaced line's write failed */
        return GPUMEM__TIER_BYPASS;
    }
    return gpumem__tier_move(t, slot, io->k);
}

/* Write every dirty host line to storage and mark it clean. A line being
 * moved up meanwhile is left to the cache (EAGAIN if it is dirty: it is
 * being filled). *written counts lines written. */
GPUMEM__TIER_HOOK gpumem_status gpumem__tier_writeback(struct gpumem_tier *t, uint64_t *written) {
    uint32_t k;
    uint64_t n = 0;
    gpumem_status result = GPUMEM_OK;
    for (k = 0; k < t->n_slots; k++) {
        uint64_t line;
        uint32_t s;
        GPUMEM_WAIT_UNTIL(&t->event, gpumem__tier_slot_trylock(t, k));
        line = gpumem__tier_tag(t, k);
        if (line == GPUMEM_CACHE_EMPTY ||
            !(gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV) & GPUMEM_TIER_DIRTY)) {
            gpumem__tier_slot_unlock(t, k);
            continue;
        }
        if ((s = gpumem__tier_claim(t, line)) == 0) { /* moving up (its filler waits for this lock) */
            if (result == GPUMEM_OK) result = GPUMEM_EAGAIN;
        } else if (gpumem__tier_write(t, line, k) == GPUMEM_OK) {
            n++;
            gpumem__tier_set_home(t, line, s & ~GPUMEM_TIER_DIRTY);
        } else {
            result = GPUMEM_EIO;
            gpumem__tier_set_home(t, line, s);
        }
        gpumem__tier_slot_unlock(t, k);
    }
    if (written) *written = n;
    return result;
}
#endif /* GPUMEM_CACHE_TIER */

/* ======================================================================== */
/* The share's data path: its state and the fill hook the cache calls      */
/* ======================================================================== */
/*
 * A share (gpumem_share.h: its USAGE and DESIGN) is several caches - owners
 * - over one storage, kept consistent by GAIA's lazy release consistency.
 * What a cache's miss needs of it is here, at the end of the cache's header
 * for the reasons the tier's data path is (direct calls, any include order,
 * no header including one above it): the share's state, the per-line
 * records, the line locks, the merge of one line and the fill hook.
 * gpumem_share.h, which includes this header, is the share's control:
 * create and destroy, the accesses that write, release, acquire, merge,
 * flush and statistics.
 */
#if GPUMEM_CACHE_SHARE
/* Owners: storage (never a cache), the host, GPU 0..7. */
#define GPUMEM_SHARE_MAX_OWNERS 10u
enum { GPUMEM_SHARE_STORAGE = 0, GPUMEM_SHARE_HOST = 1, GPUMEM_SHARE_GPU0 = 2 };
#ifndef GPUMEM_SHARE_LOCKS
#define GPUMEM_SHARE_LOCKS 4096u /* line locks, line l uses l mod this */
#endif
#define GPUMEM__SHARE_NONE 0xFFFFFFFFu

/* What the share knows of one line, kept only while some owner has a copy
 * of it (or owes it a version bump): GAIA's time-stamp version table for
 * one page. Read and written under the line's lock only. */
typedef struct gpumem__share_entry {
    uint64_t line;     /* the line, or GPUMEM_CACHE_EMPTY for a free entry */
    uint32_t holders;  /* owners (bits) whose cache holds a copy, in slot[o] */
    uint32_t cdirty;   /* consistency-dirty: written since the owner's last release */
    uint32_t dirty;    /* written since the last merge: the copy is pinned (a reference the
                          share holds), storage lacks its writes, only a merge writes it */
    uint32_t based;    /* owners whose copy has a pristine base (base[o]) */
    uint32_t owed;     /* GPU owners whose copy a host thread merged while their kernels may run:
                          the pin stays, for the owner to drop (gpumem__share_settle) */
    uint32_t listed;   /* owners whose list (written[o]) holds the line: a release to make
                          (cdirty) or a pin to drop (owed); the entry lives while listed */
    uint32_t slot[GPUMEM_SHARE_MAX_OWNERS];
    uint32_t writers[GPUMEM_SHARE_MAX_OWNERS]; /* threads of owner o holding the line to write */
    uint32_t base[GPUMEM_SHARE_MAX_OWNERS];    /* base buffer of o's copy */
    uint32_t rel[GPUMEM_SHARE_MAX_OWNERS];     /* releases of this line by owner o */
    uint32_t gen;                              /* merges of this line so far */
    uint32_t copy_gen[GPUMEM_SHARE_MAX_OWNERS]; /* gen when o's copy was read: a copy older
                          than the last merge lacks its unreleased writes, so is no source */
    uint32_t vv[GPUMEM_SHARE_MAX_OWNERS][GPUMEM_SHARE_MAX_OWNERS]; /* vv[o]: version vector of o's
                          copy; vv[0] that of storage's content */
} gpumem__share_entry;

enum { /* counter indices (gpumem_share_stats order) */
    GPUMEM__SS_STORAGE_READS, GPUMEM__SS_PEER_READS, GPUMEM__SS_MERGES, GPUMEM__SS_MERGED_COPIES,
    GPUMEM__SS_ON_DEMAND_MERGES, GPUMEM__SS_BASES, GPUMEM__SS_BASES_ELIDED, GPUMEM__SS_BUMPS,
    GPUMEM__SS_INVALIDATED, GPUMEM__SS_KEPT_CONCURRENT, GPUMEM__SS_VIOLATIONS, GPUMEM__SS_STORAGE_TRANSFERS,
    GPUMEM__SS_PEER_TRANSFERS, GPUMEM__SS_TIER_HITS, GPUMEM__SS_TIER_STALE, GPUMEM__SS_SERVED,
    GPUMEM__SS_POST_TIMEOUTS, GPUMEM__SS_OWED_PINS, GPUMEM__SS_N
};

/* ---- the miss queue: GPU threads' misses, served by a host thread ----------
 *
 * A GPU thread never runs a fill itself (the fill's body - locks, a merge,
 * a peer copy - would cost every kernel that can miss 45 more registers, and
 * GAIA serves every fault on the CPU too). It posts the request in a cell of
 * this ring, in memory both sides reach (pinned host memory mapped into the
 * GPU, or managed memory), and waits; a host thread (gpumem_share_server_start,
 * gpumem_share.h) runs the fill and answers.
 *
 * No word is read-modify-written by both the host and a GPU: on pinned host
 * memory such an atomic is not atomic unless the link has native host
 * atomics (cudaDevAttrHostNativeAtomicSupported, 0 on most PCIe machines),
 * while plain loads and stores are. So each cell has two words, each with
 * one writing side, both holding a generation (high bits) and a state:
 *   post, the posters' (compare-and-swapped only by the threads of one GPU
 *   owner - each owner has its own cells - and read by the host):
 *     FREE -> CLAIMED (a poster's CAS) -> POSTED (its release store, after
 *     the request) -> FREE with the next generation (after the answer), or
 *     -> WITHDRAWN (a poster giving up) -> FREE with the next generation;
 *   answer, the servers' (compare-and-swapped only by host threads, read by
 *   the GPU): TAKEN (a server's CAS: one server per request) -> DONE (its
 *   release store, after the status and the slot's bytes) or SKIPPED (it
 *   found the request withdrawn, and did nothing).
 * A poster gives up (its timeout, or no server running) by storing
 * WITHDRAWN, a sequentially consistent fence, then reading answer; a
 * server takes by its CAS to TAKEN, the same fence, then reading post
 * again. With both fences, at least one of the two sees the other's write
 * (Dekker): the server serves only if post still says POSTED for that
 * generation, and the poster leaves only if answer does not say TAKEN -
 * otherwise it waits for DONE or SKIPPED. So a request is served at most
 * once, and never after its poster left (into a slot the cache gave back).
 *
 * answer's generation only moves forward: a server takes a request only
 * from an answer of an older generation (or its own NONE), and its SKIPPED
 * is a CAS from its own TAKEN. A server's look at post may be old by the
 * time it looks at answer - the request answered, its cell freed and
 * posted again, taken by another server - and a take that did not check
 * would put the older generation back over the newer TAKEN; a third server
 * would then see an older answer and serve the newer request a second time
 * (a second fill over a slot its GPU thread had written since). A server
 * passing a cell with nothing posted also moves an answer far behind post
 * up (requests withdrawn untaken never move it): gpumem__share_catch_up. */
enum { GPUMEM__SQ_FREE, GPUMEM__SQ_CLAIMED, GPUMEM__SQ_POSTED, GPUMEM__SQ_WITHDRAWN };         /* post */
enum { GPUMEM__SQ_NONE, GPUMEM__SQ_TAKEN, GPUMEM__SQ_DONE, GPUMEM__SQ_SKIPPED };               /* answer */
enum { GPUMEM__SQ_FILL = 1, GPUMEM__SQ_HOST_ACQUIRE = 2, GPUMEM__SQ_MAKE_ROOM = 3 };
#define GPUMEM__SQ_STATE(w) ((w) & 7u)
#define GPUMEM__SQ_GEN(w) ((w) & ~7u)
#define GPUMEM__SQ_NEXT_GEN 8u
/* Generation g came before h (modulo 2^32: a server's look is never 2^28
 * requests old, and answer is kept less than 2^28 requests behind post:
 * gpumem__share_catch_up). */
#define GPUMEM__SQ_BEFORE(g, h) ((int32_t)((g) - (h)) < 0)
#define GPUMEM__SQ_CATCH_UP (1u << 24) /* answer this far behind post (2^21 requests) is caught up */

typedef struct gpumem__share_cell {
    uint32_t post;        /* the posters' word (above) */
    uint32_t answer;      /* the servers' word (above) */
    uint32_t kind;        /* GPUMEM__SQ_FILL, _HOST_ACQUIRE or _MAKE_ROOM (gpumem_share.h) */
    uint32_t owner, slot; /* FILL: the GPU owner and the slot its cache claimed */
    int32_t status;       /* the server's answer */
    uint64_t line, n;     /* FILL: the line; HOST_ACQUIRE: lines [line, line + n) */
} gpumem__share_cell;

typedef struct gpumem_share_queue {
    uint32_t n_cells;     /* a power of two */
    uint32_t owner_cells; /* cells each GPU owner has, a power of two: GPU owner g's are
                             [g * owner_cells, (g + 1) * owner_cells) */
    uint32_t servers;     /* server pools running; none: a post is refused at once */
    uint64_t timeout_ns;  /* how long a post waits for a free cell, and to be taken */
    gpumem__share_cell *cells;
} gpumem_share_queue;

typedef struct gpumem_share {
    /* set at create, read-only afterwards */
    uint64_t n_lines;
    uint32_t line_bytes, n_owners;
    gpumem_cache *caches[GPUMEM_SHARE_MAX_OWNERS]; /* NULL: storage, or no such owner */
    uint32_t *dir;                 /* per line: entry index + 1, or 0 (none) */
    gpumem__share_entry *entries;
    uint32_t n_entries;
    uint32_t *free_entries;        /* a stack, under pool_lock */
    unsigned char *bases;          /* n_bases line-sized buffers */
    uint32_t n_bases;
    uint32_t *free_bases;          /* a stack, under pool_lock */
    uint64_t *slot_line[GPUMEM_SHARE_MAX_OWNERS]; /* per owner, per slot: the line the share put there */
    uint64_t *written[GPUMEM_SHARE_MAX_OWNERS];   /* per owner: lines listed (cdirty or owed; list_lock) */
    uint64_t *draining[GPUMEM_SHARE_MAX_OWNERS];  /* the list a release works through */
    /* For owners with a host tier below their cache (NULL where none has
     * one). A copy moved down to the tier leaves the share's sight, so
     * whether it may come back up is decided by counts: merges[l] counts the
     * merges of line l (the only writes of a shared line to storage), and
     * filled[o][l] is merges[l] + 1 as of owner o's last fill of l (0: none).
     * Both under the line's lock. */
    uint32_t *merges;
    uint32_t *filled[GPUMEM_SHARE_MAX_OWNERS];
    uint32_t n_written[GPUMEM_SHARE_MAX_OWNERS];
    void *owned_;
    /* hot words */
    uint32_t n_free_entries, n_free_bases;
    uint32_t merge_epoch;          /* merges so far: storage read before a change is stale */
    gpumem__nvme_word pool_lock;
    gpumem__nvme_word list_lock[GPUMEM_SHARE_MAX_OWNERS];
    gpumem__nvme_word release_lock[GPUMEM_SHARE_MAX_OWNERS];
    uint32_t locks[GPUMEM_SHARE_LOCKS];
    uint64_t stats[GPUMEM__SS_N];
    gpumem_event event;            /* host waiters for a lock */
    gpumem_share_queue *queue;     /* GPU owners' misses go here (NULL: refused on the device) */
} gpumem_share;

/* System scope: with a server attached, a host thread fills for GPU threads
 * while they run, so every word of the share (locks, entries, pools,
 * counters, the queue) is shared by the host and the GPUs at once. The
 * caches' own words stay at device scope: a host thread never touches a GPU
 * owner's cache words while its kernels may run (see gpumem__share_fill). */
#define GPUMEM__SDEV GPUMEM_SCOPE_SYSTEM

/* Lines gpumem_share_fetch has chosen to move together - read from storage
 * in one transfer (data), or to copy from one peer (from) - for the fills
 * it then makes on its own thread: the fill hook takes each line from here
 * rather than moving it alone. Thread-local: only the fetching thread's
 * fills see it (a host-only path; the device never fetches). */
typedef struct gpumem__share_stage {
    const gpumem_share *share;
    uint32_t owner, from;       /* from: 0 storage (data holds the lines), else the peer chosen */
    uint64_t first, n;
    const unsigned char *data;  /* line first + i at data + i * line_bytes (from storage) */
    uint32_t epoch;             /* merge_epoch before the read: a merge since makes data stale */
} gpumem__share_stage;
#ifdef __cplusplus
#define GPUMEM__THREAD_LOCAL thread_local
#else
#define GPUMEM__THREAD_LOCAL _Thread_local
#endif
static GPUMEM__THREAD_LOCAL const gpumem__share_stage *gpumem__share_staged;

/* Whether this thread posts its misses in GPU owners' caches (and a GPU
 * owner's release, its host part) to the miss queue: every GPU thread, and
 * a host thread standing for one (gpumem_share_thread_as_gpu: the CPU tests
 * run the GPU's path with it). */
static GPUMEM__THREAD_LOCAL int gpumem__share_as_gpu;
static GPUMEM__THREAD_LOCAL int gpumem__share_serving; /* a server thread (gpumem_share_server_start) */
GPUMEM_API int gpumem__share_posts(void) {
#if GPUMEM_ON_DEVICE
    return 1;
#else
    return gpumem__share_as_gpu;
#endif
}

GPUMEM_API void gpumem__share_count(gpumem_share *s, uint32_t which, uint64_t n) {
    gpumem_atomic_fetch_add_u64(&s->stats[which], n, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
}

/* Spin locks (held briefly, or across one line's I/O): acquire on taking,
 * release on giving back, so what one holder wrote under the lock is seen
 * by the next. */
GPUMEM_API int gpumem__share_trylock(uint32_t *w) {
    uint32_t unlocked = 0;
    if (gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV) != 0) return 0;
    return gpumem_atomic_cas_u32(w, &unlocked, 1, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV);
}
GPUMEM_API void gpumem__share_lock(gpumem_share *s, uint32_t *w) {
    GPUMEM_WAIT_UNTIL(&s->event, gpumem__share_trylock(w));
}
GPUMEM_API void gpumem__share_unlock(gpumem_share *s, uint32_t *w) {
    gpumem_atomic_store_u32(w, 0, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    gpumem_event_notify(&s->event);
}
GPUMEM_API uint32_t *gpumem__share_line_lock(gpumem_share *s, uint64_t line) {
    return &s->locks[line % GPUMEM_SHARE_LOCKS];
}

/* ---- posting to the miss queue ------------------------------------------------ */

#ifndef GPUMEM_SHARE_SERVER_SLEEP_NS
#define GPUMEM_SHARE_SERVER_SLEEP_NS 20000L /* a polling host thread looks again after 20 us */
#endif

/* One round of a wait nobody can wake: the device backs off (nanosleep,
 * growing); a host thread - a poster standing for a GPU thread, an idle
 * server, a fill waiting for a writer - spins briefly, then sleeps
 * GPUMEM_SHARE_SERVER_SLEEP_NS a round (a GPU thread cannot wake it, and
 * the server does not notify). */
GPUMEM_API void gpumem__share_pause(gpumem_backoff *b) {
#if GPUMEM_ON_DEVICE
    gpumem_backoff_pause(b);
#else
    if (!gpumem_backoff_pause(b)) gpumem__host_sleep_ns(GPUMEM_SHARE_SERVER_SLEEP_NS);
#endif
}

/* Claim a free cell of GPU owner o (post: FREE -> CLAIMED, same
 * generation) among its own - so that no two GPUs ever compare-and-swap one
 * word, which is not atomic across devices on host memory either - looking
 * from a place that spreads posters over them; NULL once the deadline
 * passes. Device scope on the device: only this owner's threads, on this
 * GPU, write post. */
GPUMEM_API gpumem__share_cell *gpumem__share_claim_cell(gpumem_share_queue *q, uint32_t o, uint32_t spread,
                                                       uint64_t deadline, uint32_t *gen) {
    gpumem_backoff wait = gpumem_backoff_start();
    const uint32_t count = q->owner_cells, first = (o - GPUMEM_SHARE_GPU0) * count;
    uint32_t i;
    for (;;) {
        for (i = 0; i < count; i++) {
            gpumem__share_cell *cell = &q->cells[first + ((spread + i) & (count - 1))];
            uint32_t w = gpumem_atomic_load_u32(&cell->post, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
            /* Acquire: the cell's last poster freed it with a release after
             * reading its answer, so that read comes before the writes of
             * this request. The claim publishes nothing; POSTED does. */
            if (GPUMEM__SQ_STATE(w) == GPUMEM__SQ_FREE &&
                gpumem_atomic_cas_u32(&cell->post, &w, GPUMEM__SQ_GEN(w) | GPUMEM__SQ_CLAIMED, GPUMEM_ORDER_ACQUIRE,
                                      GPUMEM_SCOPE_DEVICE)) {
                *gen = GPUMEM__SQ_GEN(w);
                return cell;
            }
        }
        if (gpumem_deadline_passed(deadline)) return (gpumem__share_cell *)0;
        gpumem__share_pause(&wait);
    }
}

/* Give a cell back: the next generation, free. Release: this poster's read
 * of the answer comes before the next poster's writes. */
GPUMEM_API void gpumem__share_free_cell(gpumem__share_cell *cell, uint32_t gen) {
    gpumem_atomic_store_u32(&cell->post, (gen + GPUMEM__SQ_NEXT_GEN) | GPUMEM__SQ_FREE, GPUMEM_ORDER_RELEASE,
                            GPUMEM__SDEV);
}

/* Post one request, in a cell of GPU owner `poster`, and wait for its
 * answer: the status, or ETIMEDOUT if it was withdrawn (the deadline
 * passed, or no server runs) - then it is never served. */
GPUMEM_API gpumem_status gpumem__share_post_once(gpumem_share *s, gpumem_share_queue *q, uint32_t kind,
                                                 uint32_t poster, uint32_t owner, uint64_t line, uint64_t n,
                                                 uint32_t slot, uint64_t deadline) {
    gpumem_backoff wait = gpumem_backoff_start();
    uint32_t gen = 0, a;
    int withdrawing = 0;
    gpumem__share_cell *cell = gpumem__share_claim_cell(q, poster, (uint32_t)line * 0x9E3779B9u + gpumem_sm_id(), deadline, &gen);
    if (!cell) { /* every cell of this owner busy until the deadline */
        gpumem__share_count(s, GPUMEM__SS_POST_TIMEOUTS, 1);
        return GPUMEM_ETIMEDOUT;
    }
    cell->kind = kind;
    cell->owner = owner;
    cell->slot = slot;
    cell->line = line;
    cell->n = n;
    /* Release at system scope: the request's fields reach the host before
     * the state that says they are there. */
    gpumem_atomic_store_u32(&cell->post, gen | GPUMEM__SQ_POSTED, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    for (;;) {
        /* Acquire: DONE makes the status, and the slot's data the host wrote
         * before it, visible to this thread. Only this generation's answer
         * counts: an older one is a finished request's. */
        a = gpumem_atomic_load_u32(&cell->answer, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV);
        if (a == (gen | GPUMEM__SQ_DONE)) {
            gpumem_status st = (gpumem_status)cell->status;
            gpumem__share_free_cell(cell, gen);
            return st;
        }
        if (a == (gen | GPUMEM__SQ_SKIPPED)) break; /* the server saw it withdrawn */
        if (!withdrawing && a != (gen | GPUMEM__SQ_TAKEN) &&
            (gpumem_deadline_passed(deadline) ||
             !gpumem_atomic_load_u32(&q->servers, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV))) {
            /* Withdraw: WITHDRAWN, the fence, then look at the answer (the
             * server does the mirror image: see the protocol above). */
            gpumem_atomic_store_u32(&cell->post, gen | GPUMEM__SQ_WITHDRAWN, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
            gpumem_atomic_fence(GPUMEM_ORDER_SEQ_CST, GPUMEM__SDEV);
            a = gpumem_atomic_load_u32(&cell->answer, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV);
            if (GPUMEM__SQ_GEN(a) != gen || GPUMEM__SQ_STATE(a) == GPUMEM__SQ_NONE) break; /* not taken: never will be */
            withdrawing = 1; /* taken: it ends DONE (served) or SKIPPED (the server saw WITHDRAWN) */
            continue;
        }
        gpumem__share_pause(&wait);
    }
    gpumem__share_free_cell(cell, gen);
    gpumem__share_count(s, GPUMEM__SS_POST_TIMEOUTS, 1);
    return GPUMEM_ETIMEDOUT;
}

/* Post a request for GPU owner `poster`'s thread and wait for the host's
 * answer (the status it returns).
 * ESTATE at once when no queue is attached or no server runs; ETIMEDOUT
 * when no cell came free, or no server took the request, within the
 * queue's timeout (it is then never served). A fill answered EAGAIN (a
 * writer held the line, so a merge could not be made) is posted again after
 * a pause, until the same timeout (then ETIMEDOUT); any other request's
 * EAGAIN is returned at once (a host acquire finding a host thread's stale
 * copy held). */
GPUMEM_API gpumem_status gpumem__share_post(gpumem_share *s, uint32_t kind, uint32_t poster, uint32_t owner,
                                            uint64_t line, uint64_t n, uint32_t slot) {
    gpumem_share_queue *q = s->queue;
    gpumem_backoff again = gpumem_backoff_start();
    uint64_t deadline;
    gpumem_status st;
    if (!q || !gpumem_atomic_load_u32(&q->servers, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV)) return GPUMEM_ESTATE;
    deadline = gpumem_deadline_ns(q->timeout_ns);
    for (;;) {
        st = gpumem__share_post_once(s, q, kind, poster, owner, line, n, slot, deadline);
        if (st != GPUMEM_EAGAIN || kind != GPUMEM__SQ_FILL) return st;
        gpumem__share_pause(&again); /* a writer holds the line: let it put it down */
        /* Held up the whole timeout: ETIMEDOUT, not EAGAIN, which the
         * cache would count as a full cache and gpumem_share_get would
         * answer by making room. */
        if (gpumem_deadline_passed(deadline)) return GPUMEM_ETIMEDOUT;
    }
}

/* The line the share last put in owner o's slot k (EMPTY: none). Written
 * under the line's lock by the slot's filler; read without it by acquire's
 * scan, hence atomics. */
GPUMEM_API uint64_t gpumem__share_slot_line(gpumem_share *s, uint32_t o, uint32_t k) {
    return gpumem_atomic_load_u64(&s->slot_line[o][k], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
}
GPUMEM_API void gpumem__share_set_slot_line(gpumem_share *s, uint32_t o, uint32_t k, uint64_t line) {
    gpumem_atomic_store_u64(&s->slot_line[o][k], line, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
}

/* The owner a cache is, or GPUMEM__SHARE_NONE. */
GPUMEM_API uint32_t gpumem__share_owner(const gpumem_share *s, const gpumem_cache *c) {
    uint32_t o;
    for (o = 1; o < s->n_owners; o++)
        if (s->caches[o] == c) return o;
    return GPUMEM__SHARE_NONE;
}

/* ---- version vectors: fixed length n_owners, trivially small ------------ */

GPUMEM_API int gpumem_share_vv_leq(const uint32_t *a, const uint32_t *b, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i++)
        if (a[i] > b[i]) return 0;
    return 1;
}
GPUMEM_API void gpumem_share_vv_max_into(uint32_t *a, const uint32_t *b, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i++)
        if (b[i] > a[i]) a[i] = b[i];
}
/* Neither is below the other: concurrent writes, a merge is needed. */
GPUMEM_API int gpumem_share_vv_concurrent(const uint32_t *a, const uint32_t *b, uint32_t n) {
    return !gpumem_share_vv_leq(a, b, n) && !gpumem_share_vv_leq(b, a, n);
}

/* The newest released state of the line: storage's vector, every copy's,
 * and every owner's own release count, element by element. */
GPUMEM_API void gpumem__share_home(const gpumem_share *s, const gpumem__share_entry *e, uint32_t *home) {
    uint32_t o;
    for (o = 0; o < s->n_owners; o++) home[o] = e->rel[o] > e->vv[0][o] ? e->rel[o] : e->vv[0][o];
    for (o = 1; o < s->n_owners; o++)
        if (e->holders & (1u << o)) gpumem_share_vv_max_into(home, e->vv[o], s->n_owners);
}

/* ---- entries and bases ------------------------------------------------------ */

/* The line's entry (the caller holds the line's lock), or NULL. */
GPUMEM_API gpumem__share_entry *gpumem__share_find(gpumem_share *s, uint64_t line) {
    uint32_t i = gpumem_atomic_load_u32(&s->dir[line], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    return i ? &s->entries[i - 1] : (gpumem__share_entry *)0;
}

/* Take the line's lock and return its entry (NULL: none); *lk is the lock,
 * for gpumem__share_unlock. */
GPUMEM_API gpumem__share_entry *gpumem__share_lock_entry(gpumem_share *s, uint64_t line, uint32_t **lk) {
    *lk = gpumem__share_line_lock(s, line);
    gpumem__share_lock(s, *lk);
    return gpumem__share_find(s, line);
}

/* The line's entry, made if there is none (NULL: none left). */
GPUMEM_API gpumem__share_entry *gpumem__share_get_entry(gpumem_share *s, uint64_t line) {
    gpumem__share_entry *e = gpumem__share_find(s, line);
    uint32_t i = GPUMEM__SHARE_NONE;
    if (e) return e;
    gpumem__share_lock(s, &s->pool_lock.v);
    if (s->n_free_entries) i = s->free_entries[--s->n_free_entries];
    gpumem__share_unlock(s, &s->pool_lock.v);
    if (i == GPUMEM__SHARE_NONE) return (gpumem__share_entry *)0;
    e = &s->entries[i];
    memset(e, 0, sizeof *e);
    e->line = line;
    gpumem_atomic_store_u32(&s->dir[line], i + 1, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    return e;
}

/* Free the entry if nothing is left to know: no copy, no pending bump. */
GPUMEM_API void gpumem__share_maybe_free(gpumem_share *s, gpumem__share_entry *e) {
    if (e->holders || e->cdirty || e->dirty || e->owed || e->listed) return;
    gpumem_atomic_store_u32(&s->dir[e->line], 0, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    e->line = GPUMEM_CACHE_EMPTY;
    gpumem__share_lock(s, &s->pool_lock.v);
    s->free_entries[s->n_free_entries++] = (uint32_t)(e - s->entries);
    gpumem__share_unlock(s, &s->pool_lock.v);
}

GPUMEM_API unsigned char *gpumem__share_base(gpumem_share *s, uint32_t b) {
    return s->bases + (size_t)b * s->line_bytes;
}

GPUMEM_API uint32_t gpumem__share_take_base(gpumem_share *s) {
    uint32_t b = GPUMEM__SHARE_NONE;
    gpumem__share_lock(s, &s->pool_lock.v);
    if (s->n_free_bases) b = s->free_bases[--s->n_free_bases];
    gpumem__share_unlock(s, &s->pool_lock.v);
    return b;
}

GPUMEM_API void gpumem__share_drop_base(gpumem_share *s, gpumem__share_entry *e, uint32_t o) {
    if (!(e->based & (1u << o))) return;
    e->based &= ~(1u << o);
    gpumem__share_lock(s, &s->pool_lock.v);
    s->free_bases[s->n_free_bases++] = e->base[o];
    gpumem__share_unlock(s, &s->pool_lock.v);
}

/* The data of owner o's copy (o holds it). */
GPUMEM_API unsigned char *gpumem__share_copy(gpumem_share *s, const gpumem__share_entry *e, uint32_t o) {
    return gpumem__slot_data(s->caches[o], e->slot[o]);
}

/* A server thread runs while every GPU owner's kernels may: it must never
 * touch a GPU owner's cache words (the rule below). Checked where the share
 * touches a cache's words for another thread - its pins - and counted as a
 * violation, so that the CPU tests, whose every run asserts none, would see
 * a path that broke it. */
GPUMEM_API void gpumem__share_check_touch(gpumem_cache *c) {
#if GPUMEM_ON_DEVICE
    (void)c;
#else
    uint32_t o;
    if (!gpumem__share_serving || !c->share) return;
    o = gpumem__share_owner(c->share, c);
    if (o >= GPUMEM_SHARE_GPU0 && o != GPUMEM__SHARE_NONE) gpumem__share_count(c->share, GPUMEM__SS_VIOLATIONS, 1);
#endif
}

/* Pin a valid copy against eviction and write-back: one more reference,
 * taken only while the line is valid and not claimed (the claim checks the
 * count after setting BUSY, so one of the two always sees the other).
 * Returns 0 if the copy is gone or going. */
GPUMEM_API int gpumem__share_pin(gpumem_cache *c, uint64_t line, uint32_t slot) {
    uint32_t *w = gpumem__line_state(c, line), v;
    gpumem__share_check_touch(c);
    v = gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
    for (;;) {
        if ((v & (GPUMEM_CACHE_VALID | GPUMEM_CACHE_BUSY)) != GPUMEM_CACHE_VALID ||
            (v & GPUMEM_CACHE_COUNT_MASK) >= GPUMEM_CACHE_COUNT_LIMIT)
            return 0;
        if (gpumem_atomic_cas_u32(w, &v, v + 1, GPUMEM_ORDER_ACQUIRE, GPUMEM__CDEV)) break;
    }
    if (gpumem_atomic_load_u32(&c->lines[line].slot, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV) != slot) {
        gpumem_atomic_fetch_sub_u32(w, 1, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
        return 0;
    }
    return 1;
}

GPUMEM_API void gpumem__share_unpin(gpumem_cache *c, uint64_t line) {
    gpumem__share_check_touch(c);
    gpumem_atomic_fetch_sub_u32(gpumem__line_state(c, line), 1, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
    gpumem_event_notify(&c->event);
}

/* Whether a host thread may touch owner o's cache words now: the host
 * owner's always (only host threads do), a GPU owner's only at that owner's
 * kernel boundary (`at_boundary`: the call is the owner's own - its acquire,
 * release, merge or flush). Its words are device-scope atomics that its
 * running kernels use: a host RMW on them would not be atomic with theirs.
 * The device only ever touches its own owner's words. */
GPUMEM_API int gpumem__share_may_touch(uint32_t o, uint32_t at_boundary) {
    return o < GPUMEM_SHARE_GPU0 || o == at_boundary;
}

/* Put the line on owner o's list, once (the caller holds the line's lock):
 * what the owner's next release, acquire or flush walks - its writes to
 * release (cdirty) and the pins a merge left it (owed) - so that those cost
 * O(lines the owner wrote), never O(lines resident). Every listed line has
 * an entry (it lives while listed), so a list holds n_entries at most. */
GPUMEM_API void gpumem__share_list(gpumem_share *s, gpumem__share_entry *e, uint32_t o) {
    if (e->listed & (1u << o)) return;
    e->listed |= 1u << o;
    gpumem__share_lock(s, &s->list_lock[o].v);
    s->written[o][s->n_written[o]++] = e->line;
    gpumem__share_unlock(s, &s->list_lock[o].v);
}

/* Owner o drops the pins a merge left it (the caller holds the line's lock;
 * o's own call: its words are its own to touch). */
GPUMEM_API void gpumem__share_settle(gpumem_share *s, gpumem__share_entry *e, uint32_t o) {
    if (!(e->owed & (1u << o))) return;
    e->owed &= ~(1u << o);
    gpumem__share_unpin(s->caches[o], e->line);
}

/* ---- the merge of one line --------------------------------------------------- */

/* Write every copy written since the last merge into storage (the caller
 * holds the line's lock): read storage into `scratch` (slot k of `pool`, the
 * I/O made by cache c), lay each copy written without a base over it whole
 * (a copy is without a base only if its owner was the only holder, up to
 * date, when it first wrote: at most one such copy, and storage has not
 * moved since, so its unwritten bytes are storage's), then each based copy's
 * changed bytes (copy vs base) in owner order, so on overlapping bytes the
 * highest owner's write wins, the same on every run; write it back. Then
 * storage's vector takes every merged copy's, the copies are unpinned (a
 * GPU owner's only at_boundary, else the pin is owed: gpumem__share_may_touch)
 * and their bases dropped: the next write takes a base again, from the copy
 * as it is then. EAGAIN while an owner holds a written copy to write (its
 * bytes may be changing; nothing is written then); EIO: storage failed,
 * everything stays as it was. */
GPUMEM_API gpumem_status gpumem__share_merge_line(gpumem_share *s, gpumem__share_entry *e, gpumem_cache *c,
                                                  const gpumem__slot_pool *pool, uint32_t k, uint32_t at_boundary) {
    unsigned char *scratch = gpumem__pool_data(c, pool, k);
    uint32_t o, pass, i;
    gpumem_status st;
    if (!e->dirty) return GPUMEM_OK;
    for (o = 1; o < s->n_owners; o++)
        if ((e->dirty & (1u << o)) && e->writers[o]) return GPUMEM_EAGAIN;
    if ((st = gpumem__cache_io_pool(c, 0, e->line, pool, k)) != GPUMEM_OK) return st;
    for (pass = 0; pass < 2; pass++)
        for (o = 1; o < s->n_owners; o++) {
            const unsigned char *copy, *base;
            if (!(e->dirty & (1u << o)) || (pass == 0) != !(e->based & (1u << o))) continue;
            copy = gpumem__share_copy(s, e, o);
            if (pass == 0) {
                memcpy(scratch, copy, s->line_bytes);
                continue;
            }
            base = gpumem__share_base(s, e->base[o]);
            /* Eight bytes compared at a time (lines are whole 512-byte
             * blocks); only a word that differs is merged byte by byte. */
            for (i = 0; i < s->line_bytes; i += 8) {
                uint64_t now, was;
                uint32_t b;
                memcpy(&now, copy + i, 8);
                memcpy(&was, base + i, 8);
                if (now == was) continue;
                for (b = i; b < i + 8; b++)
                    if (copy[b] != base[b]) scratch[b] = copy[b];
            }
        }
    if ((st = gpumem__cache_io_pool(c, 1, e->line, pool, k)) != GPUMEM_OK) return st;
    for (o = 1; o < s->n_owners; o++) {
        if (!(e->dirty & (1u << o))) continue;
        gpumem_share_vv_max_into(e->vv[0], e->vv[o], s->n_owners);
        gpumem__share_drop_base(s, e, o);
        /* A GPU owner whose kernels may be running keeps its pin, owed: it
         * drops it itself (gpumem__share_settle: its next write of the line
         * reuses it; its acquire, release, merge or flush drops it). */
        if (gpumem__share_may_touch(o, at_boundary)) {
            gpumem__share_unpin(s->caches[o], e->line);
        } else {
            e->owed |= 1u << o;
            gpumem__share_list(s, e, o); /* its next release, acquire or flush drops it */
            gpumem__share_count(s, GPUMEM__SS_OWED_PINS, 1);
        }
        gpumem__share_count(s, GPUMEM__SS_MERGED_COPIES, 1);
    }
    e->dirty = 0;
    e->gen++;
    if (s->merges) s->merges[e->line]++; /* host tiers' copies filled before are stale now */
    /* After the write: a fetch that read storage before this saw the epoch
     * before it, and its fills drop what it read (gpumem__share_fill). */
    gpumem_atomic_fetch_add_u32(&s->merge_epoch, 1, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    gpumem__share_count(s, GPUMEM__SS_MERGES, 1);
    return GPUMEM_OK;
}

/* Some other owner released writes that storage does not have yet. */
GPUMEM_API int gpumem__share_released_elsewhere(const gpumem_share *s, const gpumem__share_entry *e, uint32_t o) {
    uint32_t p;
    for (p = 1; p < s->n_owners; p++)
        if (p != o && (e->dirty & (1u << p)) && e->rel[p] > e->vv[0][p]) return 1;
    return 0;
}

/* ---- the fill hook ------------------------------------------------------------ */

/* Forget owner o's record of the line in its slot k, which the cache is
 * refilling (the old line was evicted or invalidated clean: a written copy
 * is pinned until merged, so it cannot have been). */
GPUMEM_API void gpumem__share_forget_slot(gpumem_share *s, uint32_t o, uint32_t k) {
    const uint64_t old = gpumem__share_slot_line(s, o, k);
    uint32_t *lk;
    gpumem__share_entry *e;
    if (old == GPUMEM_CACHE_EMPTY) return;
    e = gpumem__share_lock_entry(s, old, &lk);
    if (e && (e->holders & (1u << o)) && e->slot[o] == k) {
        if (e->dirty & (1u << o)) gpumem__share_count(s, GPUMEM__SS_VIOLATIONS, 1); /* pinned: cannot be */
        e->holders &= ~(1u << o);
        gpumem__share_maybe_free(s, e);
    }
    gpumem__share_set_slot_line(s, o, k, GPUMEM_CACHE_EMPTY);
    gpumem__share_unlock(s, lk);
}

/* Whether peer p's copy can be read from: valid in its cache, written by
 * nobody since the last merge (so no writer is changing it: writers
 * register under the line's lock, which the caller holds), read since that
 * merge (so it has every write storage has, released or not), and holding
 * everything released (home: gpumem__share_home). A stale copy never is. */
GPUMEM_API int gpumem__share_is_source(const gpumem_share *s, const gpumem__share_entry *e, uint32_t p,
                                       const uint32_t *home) {
    return (e->holders & (1u << p)) && !(e->dirty & (1u << p)) && e->copy_gen[p] == e->gen &&
           gpumem_share_vv_leq(home, e->vv[p], s->n_owners);
}

/* A peer's copy to read from for owner o, preferring `want` (0: any);
 * returns its owner, or 0 for none. The host owner's copy is pinned for the
 * copy (gpumem__share_unpin after it). A GPU owner's is not: its cache words
 * are not the host's to touch while its kernels run, and none is needed.
 * The share's record says the copy is in slot[p], valid, and read or filled
 * under this line's lock; the slot's bytes change only in a fill of that
 * slot, which first forgets the old line under the old line's lock
 * (gpumem__share_forget_slot), or in a fill of this line, under this
 * line's lock; and a writer of the copy registers under this lock too. So
 * while the caller holds the lock, the bytes in slot[p] are the copy's,
 * even if p's cache has dropped the line meanwhile (the bytes stay until
 * the slot is filled again). */
GPUMEM_API uint32_t gpumem__share_peer(gpumem_share *s, gpumem__share_entry *e, uint32_t o, uint32_t want) {
    uint32_t home[GPUMEM_SHARE_MAX_OWNERS], p, i;
    gpumem__share_home(s, e, home);
    for (i = 0; i < s->n_owners; i++) {
        p = i == 0 ? want : i; /* `want` first, then every owner in turn */
        if (p == 0 || p == o || (i != 0 && p == want) || !gpumem__share_is_source(s, e, p, home)) continue;
        if (!gpumem__share_may_touch(p, 0) || gpumem__share_pin(s->caches[p], e->line, e->slot[p])) return p;
    }
    return 0;
}

/* If owner o's host tier holds `line`, claim its copy there (*cp, and
 * *claimed: the tier is exclusive with the cache, so the fill frees it
 * whatever it does) and say whether it may be taken (the caller holds the
 * line's lock): 1 when the line was not merged since o's last fill of it.
 * A fill's copy is storage's content (read from storage, or from a peer
 * read since the last merge, which is the same bytes), and only a merge
 * writes a shared line to storage. So the copy is storage's content now:
 * taking it is a storage read (it gets storage's version vector), and
 * every release that storage lacks makes the fill merge before this, which
 * makes the copy stale. 0 when it is not there, or stale (counted). A dirty
 * copy cannot be there: the share's copies are clean (one is counted as a
 * violation and dropped). */
GPUMEM_API int gpumem__share_tier_claim(gpumem_share *s, gpumem_cache *c, uint32_t o, uint64_t line,
                                        gpumem__tier_copy *cp, int *claimed) {
    const uint32_t *filled = s->filled[o];
    *claimed = 0;
    if (!c->tier || !gpumem__tier_lookup(c->tier, line, cp)) return 0;
    *claimed = 1;
    if (cp->dirty) {
        gpumem__share_count(s, GPUMEM__SS_VIOLATIONS, 1);
        cp->dirty = 0; /* a write made around the share: not kept */
    }
    if (filled && s->merges && filled[line] != 0 && filled[line] == s->merges[line] + 1) return 1;
    gpumem__share_count(s, GPUMEM__SS_TIER_STALE, 1);
    return 0;
}

#if !GPUMEM_ON_DEVICE
/* Owner c's miss on `line` into its slot k (the cache holds the line BUSY
 * and the slot), on a host thread: if another owner released writes storage
 * lacks, merge them into storage first (GAIA's merge at fault time: slot k
 * is the scratch); then take the line from the owner's host tier if its
 * copy there is still good, else copy it from a peer's valid copy if there
 * is one, else read storage; record the copy and its version vector.
 * Everything under the line's lock, so no merge writes storage while the
 * line is read and no writer starts on a source while it is copied.
 * `served`: for a GPU thread, by the miss queue's server, while the owner's
 * kernels run: the I/O goes through the host owner's cache (its pairs are
 * host threads'; the slot's bus address is the owner's, so the data still
 * lands in the owner's slot), the owner's tier is not looked in (a queue
 * refuses GPU owners with one: its words are device-scope), and a merge a
 * writer holds up is answered EAGAIN at once (the server never waits for a
 * GPU thread: that writer may be waiting on the server). */
static inline gpumem_status gpumem__share_fill_here(gpumem_share *s, gpumem_cache *c, uint64_t line, uint32_t k,
                                                    int served) {
    const uint32_t o = gpumem__share_owner(s, c);
    const gpumem__share_stage *sg = served ? 0 : gpumem__share_staged;
    gpumem_cache *io = served ? s->caches[GPUMEM_SHARE_HOST] : c;
    uint32_t *lk = gpumem__share_line_lock(s, line), p;
    gpumem__share_entry *e;
    gpumem_status st = GPUMEM_OK;
    gpumem_backoff wait = gpumem_backoff_start();
    int tier_claimed = 0;
    gpumem__tier_copy cp;
    if (o == GPUMEM__SHARE_NONE || !io) return GPUMEM_ESTATE;
    if (gpumem__share_slot_line(s, o, k) != line) gpumem__share_forget_slot(s, o, k);
    for (;;) {
        gpumem__share_lock(s, lk);
        if (!(e = gpumem__share_get_entry(s, line))) {
            gpumem__share_unlock(s, lk);
            return GPUMEM_ENOMEM;
        }
        if (!gpumem__share_released_elsewhere(s, e, o)) break;
        st = gpumem__share_merge_line(s, e, io, &c->pool, k, 0);
        if (st == GPUMEM_OK) {
            gpumem__share_count(s, GPUMEM__SS_ON_DEMAND_MERGES, 1);
            break;
        }
        gpumem__share_unlock(s, lk);
        if (st != GPUMEM_EAGAIN || served) return st;
        gpumem__share_pause(&wait); /* a writer holds a released copy: let it put the line down */
    }
    /* A line of a run gpumem_share_fetch moves together, on this thread:
     * its source was chosen for the run, and its transfer counted there. */
    if (sg && (sg->share != s || sg->owner != o || line - sg->first >= sg->n)) sg = 0;
    if (!served && gpumem__share_tier_claim(s, c, o, line, &cp, &tier_claimed)) {
        memcpy(gpumem__slot_data(c, k), cp.src, s->line_bytes);
        memcpy(e->vv[o], e->vv[0], sizeof e->vv[o]); /* as storage read now (see the claim) */
        gpumem__share_count(s, GPUMEM__SS_TIER_HITS, 1);
    } else if (sg && !sg->from &&
        gpumem_atomic_load_u32(&s->merge_epoch, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV) == sg->epoch) {
        /* Storage has not changed since the run was read: its bytes are storage's. */
        memcpy(gpumem__slot_data(c, k), sg->data + (size_t)(line - sg->first) * s->line_bytes, s->line_bytes);
        memcpy(e->vv[o], e->vv[0], sizeof e->vv[o]);
        gpumem__share_count(s, GPUMEM__SS_STORAGE_READS, 1);
    } else if ((p = gpumem__share_peer(s, e, o, sg ? sg->from : 0)) != 0) {
        gpumem_copy_lanes(gpumem__slot_data(c, k), gpumem__share_copy(s, e, p), s->line_bytes, 0, 1);
        if (gpumem__share_may_touch(p, 0)) gpumem__share_unpin(s->caches[p], line); /* pinned by _peer */
        memcpy(e->vv[o], e->vv[p], sizeof e->vv[o]);
        gpumem__share_count(s, GPUMEM__SS_PEER_READS, 1);
        if (!sg || sg->from != p) gpumem__share_count(s, GPUMEM__SS_PEER_TRANSFERS, 1);
    } else if ((st = gpumem__cache_io_pool(io, 0, line, &c->pool, k)) == GPUMEM_OK) {
        memcpy(e->vv[o], e->vv[0], sizeof e->vv[o]);
        gpumem__share_count(s, GPUMEM__SS_STORAGE_READS, 1);
        gpumem__share_count(s, GPUMEM__SS_STORAGE_TRANSFERS, gpumem__cache_io_cmds(io, 0));
    }
    if (tier_claimed) gpumem__tier_fetch_done(c->tier, line, &cp); /* taken or stale: the tier slot is free */
    if (st == GPUMEM_OK) {
        e->holders |= 1u << o;
        e->copy_gen[o] = e->gen;
        e->slot[o] = k;
        gpumem__share_set_slot_line(s, o, k, line);
        if (s->filled[o]) s->filled[o][line] = s->merges[line] + 1;
    } else {
        gpumem__share_maybe_free(s, e);
    }
    gpumem__share_unlock(s, lk);
    return st;
}
#endif

/* The hook: owner c's miss on `line` into its slot k. A GPU thread posts it
 * to the miss queue and waits for the host's answer: the fill's body stays
 * off the device, where ptxas would count its registers in every kernel
 * that can miss (it took the cached element read from 48 to 93). A host
 * thread fills here, unless it stands for a GPU thread (the CPU tests). */
GPUMEM__TIER_HOOK gpumem_status gpumem__share_fill(gpumem_share *s, gpumem_cache *c, uint64_t line, uint32_t k) {
    const uint32_t o = gpumem__share_owner(s, c);
    if (o == GPUMEM__SHARE_NONE) return GPUMEM_ESTATE;
    if (o >= GPUMEM_SHARE_GPU0 && gpumem__share_posts()) return gpumem__share_post(s, GPUMEM__SQ_FILL, o, o, line, 0, k);
#if GPUMEM_ON_DEVICE
    return GPUMEM_ESTATE; /* the host owner's cache, on the device: not a GPU's */
#else
    return gpumem__share_fill_here(s, c, line, k, 0);
#endif
}
#endif /* GPUMEM_CACHE_SHARE */

#endif /* GPUMEM_CACHE_H */
