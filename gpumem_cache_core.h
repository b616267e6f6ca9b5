/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_cache_core.h - the layout of the gpumem cache and the I/O of one
 * slot: what the cache (gpumem_cache.h) and the two data paths it calls
 * into (gpumem_tier_path.h, gpumem_share_path.h) all need. NOT FOR DIRECT
 * INCLUSION: include gpumem_cache.h (or gpumem_tier.h, gpumem_share.h).
 *
 * The names with two underscores here (the slot table's accessors, the
 * slot I/O, the statistics shards) are private to the cache, and used by
 * the tier's and the share's data paths by design: those paths fill and
 * empty the cache's slots, and must do it with the cache's own I/O and
 * locks, not a copy of them. No other header uses them.
 *
 * Why a layer at all: the cache calls the tier and the share at its miss,
 * eviction and flush (direct calls: no function pointer on the device, and
 * the cached element read within its 48 registers), so their data paths
 * must be defined in every file that uses the cache, before the cache's
 * miss path, and without a header including one above it
 * (docs/headers.md). They need the cache's layout; the cache needs them.
 * This header is the part both need, so the order is: this layout, the
 * tier's data path, the share's data path, the cache.
 */
#ifndef GPUMEM_CACHE_CORE_H
#define GPUMEM_CACHE_CORE_H

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
    uint32_t line_bytes;   /* power of two, GPUMEM_CACHE_MIN_LINE .. GPUMEM_CACHE_MAX_LINE (0: 4096) */
    uint32_t n_slots;      /* lines the cache holds, >= 1 */
    uint32_t policy;       /* a slot policy: GPUMEM_POLICY_BRRIP, _CLOCK, _FIFO (= GPUMEM_CACHE_ROUND_ROBIN)
                              or _SRRIP (0, GPUMEM_POLICY_DEFAULT: GPUMEM_POLICY_DEFAULT_KIND, BRRIP) */
    uint32_t full_sweeps;  /* sweeps of a full cache before GPUMEM_EAGAIN (0: default) */
    uint32_t prefetch_budget; /* gpumem_cache_prefetch fills in flight at once (0: n_slots / 8, at least 1) */
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

#define GPUMEM_CACHE_DEFAULT_LINE 4096u

/* Zero means default: the description with every field that has a default
 * and is 0 given it (line_bytes, policy, full_sweeps, prefetch_budget), which is what
 * gpumem_cache_init and gpumem_cache_create use. A way to see the values a
 * description resolves to (a NULL one resolves as all zero). Fields with
 * no default (n_lines, n_slots, the backing, the memory) stay as given. */
GPUMEM_API gpumem_cache_desc gpumem_cache_desc_resolved(const gpumem_cache_desc *in) {
    gpumem_cache_desc d;
    memset(&d, 0, sizeof d);
    if (in) d = *in;
    if (!d.line_bytes) d.line_bytes = GPUMEM_CACHE_DEFAULT_LINE;
    if (d.policy == GPUMEM_POLICY_DEFAULT) d.policy = GPUMEM_POLICY_DEFAULT_KIND;
    if (!d.full_sweeps) d.full_sweeps = GPUMEM_CACHE_DEFAULT_SWEEPS;
    /* n_slots / 8: a prefetcher keeps some pairs' slots and some free
     * slots for demand misses. With no n_slots yet (gpumem_cache_desc_default)
     * it stays 0 and is resolved when n_slots is known. */
    if (!d.prefetch_budget && d.n_slots) d.prefetch_budget = d.n_slots / 8 ? d.n_slots / 8 : 1;
    return d;
}

/* A zeroed description with its defaults filled in (what a zeroed one
 * resolves to): set n_lines, n_slots and the backing. */
GPUMEM_API gpumem_cache_desc gpumem_cache_desc_default(void) { return gpumem_cache_desc_resolved((gpumem_cache_desc *)0); }

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
    uint64_t prefetches;  /* lines read ahead by gpumem_cache_prefetch (also in fills and reads) */
    uint64_t prefetch_declined; /* prefetches that gave way: over budget, or no slot free of sooner lines */
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
    GPUMEM__ST_VIOLATIONS, GPUMEM__ST_PREFETCHES, GPUMEM__ST_PREFETCH_DECLINED
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
    uint32_t prefetch_budget;
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
    gpumem__nvme_word prefetching; /* prefetch fills in flight (at most prefetch_budget) */
    /* GPUMEM_POLICY_HINTED_RRIP's clock and trust (gpumem_policy.h): hints and
     * sweeps change them, never a hit, so they share a line with no hit word */
    gpumem_policy_slot_hints slot_hints;
    gpumem__cache_shard stats[GPUMEM_CACHE_STAT_SHARDS];
    /* Host threads waiting for a busy line or a free slot park here; every
     * fill, eviction and failed claim notifies. */
    gpumem_event event;
} gpumem_cache;

/* The tier's and the share's hooks are off the hit path (a miss, an
 * eviction, a flush): on the device they are called, not inlined, so that
 * they do not add to the registers of every kernel that acquires a line.
 * Marked unused: a file that includes a data path without the cache (the
 * header checks compile each header alone) does not call them. */
#if defined(__CUDACC__)
#define GPUMEM__CACHE_HOOK static __noinline__ __host__ __device__ __attribute__((unused))
#else
#define GPUMEM__CACHE_HOOK static inline
#endif

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

/* A pin: a reference that no thread holds, which keeps a copy from eviction
 * and write-back as a thread's does. Used by design only by the share
 * (gpumem_share_path.h, gpumem_share.h), which pins every written copy until
 * it is merged and a peer's copy while it reads from it. `held`: the caller
 * holds a reference of its own, so the copy stays valid and the pin is one
 * more (it cannot fail). Otherwise it is taken only while the copy is valid,
 * not claimed and still in `slot` (the claim checks the count after setting
 * BUSY, so one of the two always sees the other); 0 if it is gone or going. */
GPUMEM_API int gpumem__line_pin(gpumem_cache *c, uint64_t line, uint32_t slot, int held) {
    uint32_t *w = gpumem__line_state(c, line), v;
    if (held) {
        gpumem_atomic_fetch_add_u32(w, 1, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
        return 1;
    }
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

/* Drop a pin. Release: the pinner's writes to the copy come before any
 * eviction that finds the count at zero. The wake-up is for a host thread
 * waiting for room (a full cache of pinned copies). */
GPUMEM_API void gpumem__line_unpin(gpumem_cache *c, uint64_t line) {
    gpumem_atomic_fetch_sub_u32(gpumem__line_state(c, line), 1, GPUMEM_ORDER_RELEASE, GPUMEM__CDEV);
    gpumem_event_notify(&c->event);
}

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

/* ---- a slot table: the cache's, and the host tier's (gpumem_tier_path.h) ----
 *
 * Each slot's lock word guards its tag (the line it holds). Device scope:
 * one table is used by the threads of one GPU, or by host threads. Its
 * waiters park on the table owner's event, so every unlock passes it
 * (gpumem__spin_unlock: a holder across a write-back wakes its waiters). */
/* A sweep tries one slot at a time: no look first (look_first 0). */
GPUMEM_API int gpumem__slot_trylock(gpumem__cache_slot *slots, uint32_t k) {
    return gpumem__spin_trylock(&slots[k].lock, GPUMEM__CDEV, 0);
}

GPUMEM_API void gpumem__slot_unlock(gpumem__cache_slot *slots, uint32_t k, gpumem_event *ev) {
    gpumem__spin_unlock(&slots[k].lock, GPUMEM__CDEV, ev);
}

/* Tags are read and written only under the slot lock (and by the line's
 * filler while it holds BUSY); atomics keep the race detector quiet. */
GPUMEM_API uint64_t gpumem__slot_tag(gpumem__cache_slot *slots, uint32_t k) {
    return gpumem_atomic_load_u64(&slots[k].tag, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
}

GPUMEM_API void gpumem__slot_set_tag(gpumem__cache_slot *slots, uint32_t k, uint64_t tag) {
    gpumem_atomic_store_u64(&slots[k].tag, tag, GPUMEM_ORDER_RELAXED, GPUMEM__CDEV);
}

/* Lock slot k, waiting for it (holders keep it briefly, or across one
 * line's I/O), and return its tag. */
GPUMEM_API uint64_t gpumem__slot_lock(gpumem__cache_slot *slots, uint32_t k, gpumem_event *ev) {
    gpumem__spin_lock(&slots[k].lock, GPUMEM__CDEV, 0, ev);
    return gpumem__slot_tag(slots, k);
}

/* The state word of the line slot k holds, for a caller that holds the
 * slot's lock (so the tag stays put): looked up where used, rather than
 * kept through I/O (registers, on the device). */
GPUMEM_API uint32_t *gpumem__slot_line_state(gpumem_cache *c, uint32_t k) {
    return gpumem__line_state(c, gpumem__slot_tag(c->slots, k));
}


#endif /* GPUMEM_CACHE_CORE_H */
