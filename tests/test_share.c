/* Criterion tests of gpumem_share.h: host thread groups stand for the
 * devices, 2, 3 and 8 owners (caches) over memory, one software controller
 * and two. Producer -> consumer after acquire never reads a stale byte;
 * owners writing disjoint bytes of the same lines concurrently all land in
 * storage after release, merge and flush (checked against a model of every
 * write); random mixes with eviction lose nothing; peer reads are counted
 * and never come from a stale copy; a fetch moves contiguous lines in one
 * transfer, so sequential reads through peers take no more transfers than
 * storage alone; release costs what was written; each bad input gets its
 * status. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_CACHE_CHECK 1
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_tier.h"
#include "share_rig.h"
#include "share_workload.h"

TestSuite(share, .timeout = 120);

typedef struct shape {
    uint32_t n_owners, n_ctrls;
} shape;

ParameterizedTestParameters(share, producer_consumer) {
    static shape s[] = {{3, 0}, {3, 1}, {3, 2}, {4, 1}, {9, 0}, {9, 1}, {9, 2}};
    return cr_make_param_array(shape, s, sizeof s / sizeof s[0]);
}

/* Each round one owner writes every line (a pattern of the round), releases
 * and signals; every other owner acquires and reads every line at once. The
 * caches hold all the data, so consumers keep copies of earlier rounds that
 * only acquire drops. */
ParameterizedTest(shape *sh, share, producer_consumer) {
    share_run run;
    cr_assert_eq(share_producer_consumer(sh->n_owners, sh->n_ctrls, 12, &run), 0, "%s", run.why);
    cr_assert_gt(run.stats.invalidated, 0, "no stale copy was ever dropped: the test tests nothing");
    cr_assert_eq(run.stats.violations, 0);
}

ParameterizedTestParameters(share, disjoint_writers) {
    static shape s[] = {{3, 0}, {4, 0}, {3, 1}, {3, 2}, {9, 1}};
    return cr_make_param_array(shape, s, sizeof s / sizeof s[0]);
}

/* Owners (two threads each) write disjoint bytes of the same lines at once
 * (false sharing), releasing and merging as they go; after release, merge
 * and flush of every owner, storage holds every write of the model. */
ParameterizedTest(shape *sh, share, disjoint_writers) {
    share_run run;
    cr_assert_eq(share_mix(sh->n_owners, sh->n_ctrls, 0, 2, 2000, &run), 0, "%s", run.why);
    cr_assert_gt(run.stats.merged_copies, run.stats.merges, "no line was merged from two writers");
    cr_assert_gt(run.stats.bases, 0);
    cr_assert_eq(run.stats.violations, 0);
}

ParameterizedTestParameters(share, random_mix) {
    static shape s[] = {{3, 0}, {3, 2}, {9, 1}};
    return cr_make_param_array(shape, s, sizeof s / sizeof s[0]);
}

/* Reads checked by content, writes, release, acquire, flush at random, with
 * caches of 8 slots for 64 lines (eviction all the time): nothing lost. */
ParameterizedTest(shape *sh, share, random_mix) {
    share_run run;
    cr_assert_eq(share_mix(sh->n_owners, sh->n_ctrls, 1, 2, 2000, &run), 0, "%s", run.why);
    cr_assert_eq(run.stats.violations, 0);
}

/* ---- one step at a time -------------------------------------------------------- */

static unsigned char read0(share_rig *r, uint32_t o, uint32_t l) {
    unsigned char *p, v;
    cr_assert_eq(gpumem_share_get(r->share, o, l, 0, (void **)&p), GPUMEM_OK);
    v = p[0];
    cr_assert_eq(gpumem_share_put(r->share, o, l, 0), GPUMEM_OK);
    return v;
}

static void write0(share_rig *r, uint32_t o, uint32_t l, uint32_t b, unsigned char v) {
    unsigned char *p;
    cr_assert_eq(gpumem_share_get(r->share, o, l, 1, (void **)&p), GPUMEM_OK);
    p[b] = v;
    cr_assert_eq(gpumem_share_put(r->share, o, l, 1), GPUMEM_OK);
}

Test(share, peer_reads_counted_never_stale) {
    share_rig r;
    gpumem_share_stats s;
    uint32_t l;
    cr_assert_eq(share_rig_make(&r, 4, 0, 16, 16), GPUMEM_OK);
    for (l = 0; l < 8; l++) cr_assert_eq(read0(&r, 1, l), 0);
    for (l = 0; l < 8; l++) cr_assert_eq(read0(&r, 2, l), 0); /* from owner 1's copies */
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.storage_reads, 8);
    cr_assert_eq(s.peer_reads, 8);
    write0(&r, 1, 0, 0, 0x55);
    cr_assert_eq(gpumem_share_release(r.share, 1, 0, 16), GPUMEM_OK);
    /* Owner 3 misses line 0: owner 2's copy is stale, owner 1's is being
     * merged: storage after the merge. */
    cr_assert_eq(gpumem_share_acquire(r.share, 3, 0, 16), GPUMEM_OK);
    cr_assert_eq(read0(&r, 3, 0), 0x55);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.peer_reads, 8, "a stale copy was a source");
    cr_assert_eq(s.on_demand_merges, 1);
    cr_assert_eq(s.storage_reads, 9);
    cr_assert_eq(read0(&r, 2, 0), 0, "owner 2 has not acquired: its copy is its own business");
    cr_assert_eq(gpumem_share_acquire(r.share, 2, 0, 16), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 0), 0x55);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.invalidated, 1);
    cr_assert_eq(s.peer_reads, 9, "owner 3's fresh copy was not used");
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* ---- fetch: the source and the size chosen together ------------------------------ */

ParameterizedTestParameters(share, fetch_sequential_not_more_transfers) {
    static uint32_t ctrls[] = {0, 1, 2};
    return cr_make_param_array(uint32_t, ctrls, sizeof ctrls / sizeof ctrls[0]);
}

enum { FETCH_LINES = 256 };

/* Every line's first two bytes say which it is. */
static void fetch_tag_storage(share_rig *r) {
    uint32_t l;
    for (l = 0; l < FETCH_LINES; l++) {
        share_rig_stored_at(r, l)[0] = (unsigned char)l;
        share_rig_stored_at(r, l)[1] = (unsigned char)(l >> 8);
    }
}

static void fetch_check_lines(share_rig *r, uint32_t o) {
    uint32_t l;
    for (l = 0; l < FETCH_LINES; l++) {
        unsigned char *p;
        cr_assert_eq(gpumem_share_get(r->share, o, l, 0, (void **)&p), GPUMEM_OK);
        cr_assert_eq((uint32_t)(p[0] | (p[1] << 8)), l, "owner %u line %u holds line %u", o, l, p[0] | (p[1] << 8));
        cr_assert_eq(gpumem_share_put(r->share, o, l, 0), GPUMEM_OK);
    }
}

/* Transfers (storage commands + peer copies) owner 2 needs to read every
 * line in order, after the host (owner 1) read the lines `host_has` says;
 * fetch: through gpumem_share_fetch, else one get per line (the miss path). */
static uint64_t fetch_transfers(uint32_t n_ctrls, int (*host_has)(uint32_t), int fetch, gpumem_share_stats *st) {
    share_rig r;
    gpumem_share_stats before;
    uint32_t l;
    cr_assert_eq(share_rig_make(&r, 3, n_ctrls, FETCH_LINES, FETCH_LINES), GPUMEM_OK);
    fetch_tag_storage(&r);
    for (l = 0; l < FETCH_LINES; l++)
        if (host_has(l)) read0(&r, 1, l);
    gpumem_share_get_stats(r.share, &before);
    if (fetch) cr_assert_eq(gpumem_share_fetch(r.share, 2, 0, FETCH_LINES), GPUMEM_OK);
    fetch_check_lines(&r, 2); /* by content; after a fetch, every line a hit */
    gpumem_share_get_stats(r.share, st);
    st->storage_transfers -= before.storage_transfers;
    st->peer_transfers -= before.peer_transfers;
    st->peer_reads -= before.peer_reads;
    st->storage_reads -= before.storage_reads;
    cr_assert_eq(st->violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
    return st->storage_transfers + st->peer_transfers;
}

static int has_none(uint32_t l) { return (void)l, 0; }
static int has_even(uint32_t l) { return l % 2 == 0; }
static int has_first_half(uint32_t l) { return l < FETCH_LINES / 2; }

/* GAIA's 10x lesson: with a valid peer copy of every other line, choosing
 * a source per line moves the data in as many transfers as lines; a fetch
 * takes the storage runs whole, and is never above storage alone. A peer
 * holding a long run serves it in one transfer per run. */
ParameterizedTest(uint32_t *n_ctrls, share, fetch_sequential_not_more_transfers) {
    gpumem_share_stats st;
    const uint64_t storage = fetch_transfers(*n_ctrls, has_none, 1, &st);
    const uint64_t per_run = (FETCH_LINES + GPUMEM_SHARE_FETCH_LINES - 1) / GPUMEM_SHARE_FETCH_LINES;
    uint64_t t;
    cr_assert_eq(st.storage_reads, FETCH_LINES);
    cr_assert_eq(storage, per_run * (*n_ctrls > 1 ? *n_ctrls : 1), "storage alone: %llu transfers",
                 (unsigned long long)storage);
    t = fetch_transfers(*n_ctrls, has_even, 1, &st);
    cr_assert_leq(t, storage, "peers at every other line: %llu transfers, storage alone %llu",
                  (unsigned long long)t, (unsigned long long)storage);
    t = fetch_transfers(*n_ctrls, has_even, 0, &st);
    cr_assert_eq(t, FETCH_LINES, "the miss path moves a line at a time: %llu", (unsigned long long)t);
    cr_assert_eq(st.peer_reads, FETCH_LINES / 2);
    t = fetch_transfers(*n_ctrls, has_first_half, 1, &st);
    cr_assert_eq(st.peer_reads, FETCH_LINES / 2, "the first half from the host's copies");
    cr_assert_eq(st.peer_transfers, FETCH_LINES / 2 / GPUMEM_SHARE_FETCH_LINES);
    cr_assert_leq(t, storage);
}

/* A fetch plans from the copies as they are, and its fills check again: a
 * copy made stale by a release is never a source, and storage read before
 * a merge is not used after it. */
Test(share, fetch_never_stale) {
    share_rig r;
    gpumem_share_stats st;
    uint32_t l;
    cr_assert_eq(share_rig_make(&r, 4, 0, FETCH_LINES, FETCH_LINES), GPUMEM_OK);
    fetch_tag_storage(&r);
    for (l = 0; l < 64; l++) read0(&r, 1, l);   /* the host holds lines 0..63 */
    read0(&r, 3, 10);
    write0(&r, 3, 10, 0, 0xEE);                  /* GPU 1 writes line 10 and releases it */
    cr_assert_eq(gpumem_share_release(r.share, 3, 0, FETCH_LINES), GPUMEM_OK);
    cr_assert_eq(gpumem_share_fetch(r.share, 2, 0, 64), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 10), 0xEE, "line 10 came from a stale copy or from storage before the merge");
    for (l = 0; l < 64; l++)
        if (l != 10) cr_assert_eq(read0(&r, 2, l), (unsigned char)l);
    gpumem_share_get_stats(r.share, &st);
    cr_assert_eq(st.on_demand_merges, 1);
    cr_assert_eq(st.peer_reads, 1 + 63, "GPU 1 read line 10 from the host, then the fetch the other 63: %llu", (unsigned long long)st.peer_reads);
    cr_assert_eq(st.violations, 0);
    cr_assert_eq(gpumem_share_fetch(r.share, 9, 0, 1), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_fetch(r.share, 2, 1, FETCH_LINES), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_share_fetch(NULL, 2, 0, 1), GPUMEM_ENULL);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

Test(share, elisions_and_merge_rebases) {
    share_rig r;
    gpumem_share_stats s;
    cr_assert_eq(share_rig_make(&r, 3, 0, 16, 16), GPUMEM_OK);
    write0(&r, 1, 0, 0, 1); /* only holder, up to date: no base */
    read0(&r, 2, 1);        /* a read takes none */
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bases, 0);
    cr_assert_eq(s.bases_elided, 1);
    write0(&r, 1, 1, 0, 2); /* owner 2 holds line 1 too: a base */
    write0(&r, 2, 1, 1, 3);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bases, 2);
    cr_assert_eq(gpumem_share_merge(r.share, 1, 0, 16), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 0, 0), 1);
    cr_assert_eq(share_rig_stored(&r, 1, 0), 2);
    cr_assert_eq(share_rig_stored(&r, 1, 1), 3);
    /* After the merge the base is taken again: owner 2 writes byte 2 only;
     * its byte 1 (3, merged) and owner 1's byte 0 (2, merged) stay. */
    write0(&r, 2, 1, 2, 4);
    cr_assert_eq(gpumem_share_flush(r.share, 2), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 1, 0), 2, "an old diff was applied again, or the base was not re-taken");
    cr_assert_eq(share_rig_stored(&r, 1, 1), 3);
    cr_assert_eq(share_rig_stored(&r, 1, 2), 4);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bases, 3);
    cr_assert_eq(s.merges, 3);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* Same bytes written by two owners: the highest owner id wins, every run. */
Test(share, any_write_wins_in_owner_order) {
    share_rig r;
    cr_assert_eq(share_rig_make(&r, 4, 1, 8, 8), GPUMEM_OK);
    read0(&r, 1, 3);
    read0(&r, 2, 3);
    read0(&r, 3, 3);
    write0(&r, 3, 3, 9, 0x33);
    write0(&r, 1, 3, 9, 0x11);
    write0(&r, 2, 3, 9, 0x22);
    write0(&r, 1, 3, 10, 0x11);
    cr_assert_eq(gpumem_share_merge(r.share, 2, 0, 8), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 3, 9), 0x33);
    cr_assert_eq(share_rig_stored(&r, 3, 10), 0x11);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* Release walks what was written: one bump per written line, however many
 * lines are resident. */
Test(share, release_costs_lines_written) {
    share_rig r;
    gpumem_share_stats s;
    uint32_t l;
    cr_assert_eq(share_rig_make(&r, 3, 0, 256, 256), GPUMEM_OK);
    for (l = 0; l < 256; l++) read0(&r, 1, l);
    write0(&r, 1, 7, 0, 1);
    write0(&r, 1, 9, 0, 1);
    write0(&r, 1, 9, 1, 1);
    cr_assert_eq(gpumem_share_release(r.share, 1, 0, 8), GPUMEM_OK); /* line 9 is outside */
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bumps, 1);
    cr_assert_eq(gpumem_share_release(r.share, 1, 0, 256), GPUMEM_OK);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bumps, 2, "line 9 bumped %llu times in all", (unsigned long long)s.bumps);
    cr_assert_eq(gpumem_share_release(r.share, 1, 0, 256), GPUMEM_OK);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bumps, 2, "a release with nothing written bumped");
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A write-back (the merge, here) clears the write-back dirty state but not
 * the consistency-dirty bit: the release after it still bumps, and a reader
 * holding the old copy still drops it at acquire. */
Test(share, merge_keeps_the_pending_bump) {
    share_rig r;
    gpumem_share_stats s;
    cr_assert_eq(share_rig_make(&r, 3, 0, 8, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 4), 0);
    write0(&r, 1, 4, 0, 7);
    cr_assert_eq(gpumem_share_flush(r.share, 1), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 4, 0), 7);
    cr_assert_eq(gpumem_share_release(r.share, 1, 0, 8), GPUMEM_OK);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bumps, 1, "the flush lost the version bump");
    cr_assert_eq(gpumem_share_acquire(r.share, 2, 0, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 4), 7);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A share in the caller's memory (as CUDA managed memory would be): too
 * small or misaligned is refused; it works as a created one; destroy
 * detaches and frees nothing. */
Test(share, init_in_caller_memory) {
    share_rig r;
    gpumem_share_desc d = gpumem_share_desc_default(3);
    gpumem_share *s;
    size_t bytes;
    uint64_t *mem;
    cr_assert_eq(share_rig_make(&r, 3, 0, 16, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_destroy(r.share), GPUMEM_OK); /* the rig's caches, free again */
    r.share = NULL;
    d.caches[1] = r.caches[1];
    d.caches[2] = r.caches[2];
    bytes = gpumem_share_bytes(&d);
    cr_assert_gt(bytes, 0);
    cr_assert_eq(gpumem_share_bytes(NULL), 0);
    mem = (uint64_t *)malloc(bytes + 8);
    cr_assert_eq(gpumem_share_init(&d, mem, bytes - 1, &s), GPUMEM_EINVAL, "too small");
    cr_assert_eq(gpumem_share_init(&d, (unsigned char *)mem + 4, bytes, &s), GPUMEM_EINVAL, "misaligned");
    cr_assert_null(r.caches[1]->share, "a refused init took a cache");
    cr_assert_eq(gpumem_share_init(&d, mem, bytes, &s), GPUMEM_OK);
    r.share = s;
    write0(&r, 2, 3, 0, 0x77);
    cr_assert_eq(gpumem_share_release(s, 2, 0, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_acquire(s, 1, 0, 16), GPUMEM_OK);
    cr_assert_eq(read0(&r, 1, 3), 0x77);
    cr_assert_eq(gpumem_share_destroy(s), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 3, 0), 0x77, "flushed at destroy");
    cr_assert_null(r.caches[1]->share);
    r.share = NULL;
    free(mem); /* ours: destroy did not free it (ASan would say) */
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

Test(share, bad_input) {
    share_rig r, r2;
    gpumem_share_desc d;
    gpumem_share *other;
    gpumem_cache *lone;
    gpumem_cache_desc cd = gpumem_cache_desc_default();
    unsigned char mem[8 * SHARE_RIG_LINE];
    void *p;
    cr_assert_eq(share_rig_make(&r, 3, 0, 8, 8), GPUMEM_OK);
    /* owner out of range: storage, past the last, and in range but without a cache */
    cr_assert_eq(gpumem_share_acquire(r.share, 0, 0, 8), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_release(r.share, 3, 0, 8), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_get(r.share, 10, 0, 0, &p), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_merge(r.share, 99, 0, 8), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_flush(r.share, 3), GPUMEM_EINVAL);
    /* a range past the end */
    cr_assert_eq(gpumem_share_acquire(r.share, 1, 0, 9), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_share_release(r.share, 1, 8, 1), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_share_release(r.share, 1, UINT64_MAX, 2), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_share_get(r.share, 1, 8, 1, &p), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_share_release(r.share, 1, 8, 0), GPUMEM_OK, "an empty range at the end");
    /* a cache not attached to a share */
    memset(mem, 0, sizeof mem);
    cd.n_lines = 8;
    cd.line_bytes = SHARE_RIG_LINE;
    cd.n_slots = 4;
    cd.backing = gpumem_cache_backing_memory(mem);
    cr_assert_eq(gpumem_cache_create(&cd, &lone), GPUMEM_OK);
    cr_assert_eq(gpumem_share_cache_acquire(lone, 0, 8), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_share_cache_release(lone, 0, 8), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_share_cache_acquire(r.caches[1], 0, 8), GPUMEM_OK, "an attached one works");
    /* two shares over one cache */
    d = gpumem_share_desc_default(3);
    d.caches[1] = lone;
    d.caches[2] = r.caches[2];
    cr_assert_eq(gpumem_share_create(&d, &other), GPUMEM_ESTATE);
    cr_assert_null(other);
    cr_assert_eq(r.caches[2]->share, r.share, "the refused share took the cache");
    cr_assert_null(lone->share);
    /* one cache twice, storage given a cache, shapes that differ, too many owners */
    d.caches[2] = lone;
    cr_assert_eq(gpumem_share_create(&d, &other), GPUMEM_EINVAL);
    d = gpumem_share_desc_default(2);
    d.caches[0] = lone;
    cr_assert_eq(gpumem_share_create(&d, &other), GPUMEM_EINVAL);
    d = gpumem_share_desc_default(GPUMEM_SHARE_MAX_OWNERS + 1);
    cr_assert_eq(gpumem_share_create(&d, &other), GPUMEM_EINVAL);
    cr_assert_eq(share_rig_make(&r2, 2, 0, 16, 4), GPUMEM_OK);
    cr_assert_eq(share_rig_free(&r2), GPUMEM_OK); /* detached, destroyed: caches back alone */
    /* a put without a get */
    cr_assert_eq(gpumem_share_get(r.share, 1, 2, 0, &p), GPUMEM_OK);
    cr_assert_eq(gpumem_share_put(r.share, 1, 2, 1), GPUMEM_ESTATE, "a write put for a read get");
    cr_assert_eq(gpumem_share_put(r.share, 1, 2, 0), GPUMEM_OK);
    /* a cache with a host tier */
    {
        gpumem_tier *t;
        gpumem_tier_desc td = gpumem_tier_desc_default(lone, 4);
        cr_assert_eq(gpumem_tier_create(&td, &t), GPUMEM_OK);
        d = gpumem_share_desc_default(2);
        d.caches[1] = lone;
        cr_assert_eq(gpumem_share_create(&d, &other), GPUMEM_ESTATE);
        cr_assert_eq(gpumem_tier_destroy(t), GPUMEM_OK);
    }
    /* a cache a share owns cannot be destroyed under it */
    cr_assert_eq(gpumem_cache_destroy(r.caches[1]), GPUMEM_EBUSY);
    cr_assert_eq(gpumem_cache_destroy(lone), GPUMEM_OK);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}
