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
    cr_assert_eq(share_producer_consumer(sh->n_owners, sh->n_ctrls, 12, 0, &run), 0, "%s", run.why);
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
    cr_assert_eq(share_mix(sh->n_owners, sh->n_ctrls, 0, 0, 2, 2000, &run), 0, "%s", run.why);
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
    cr_assert_eq(share_mix(sh->n_owners, sh->n_ctrls, 1, 0, 2, 2000, &run), 0, "%s", run.why);
    cr_assert_eq(run.stats.violations, 0);
}

/* ---- a host tier under each owner's cache ------------------------------------- */

ParameterizedTestParameters(share, tier_producer_consumer) {
    static shape s[] = {{3, 0}, {3, 1}, {4, 2}, {9, 1}};
    return cr_make_param_array(shape, s, sizeof s / sizeof s[0]);
}

/* Producer -> consumer with caches of 8 slots for 64 lines, each over a
 * host tier: the consumers' copies of earlier rounds wait in their tiers,
 * out of acquire's sight, and a miss must never take one back. */
ParameterizedTest(shape *sh, share, tier_producer_consumer) {
    share_run run;
    cr_assert_eq(share_producer_consumer(sh->n_owners, sh->n_ctrls, 12, 1, &run), 0, "%s", run.why);
    cr_assert_gt(run.stats.tier_stale, 0, "no tier copy was ever stale: the test tests nothing");
    cr_assert_eq(run.stats.violations, 0);
}

ParameterizedTestParameters(share, tier_random_mix) {
    static shape s[] = {{3, 0}, {3, 2}, {9, 1}};
    return cr_make_param_array(shape, s, sizeof s / sizeof s[0]);
}

/* The random mix with every eviction moved to the owner's host tier and
 * brought back up by its misses: after every owner's release and flush,
 * storage holds every write. */
ParameterizedTest(shape *sh, share, tier_random_mix) {
    share_run run;
    cr_assert_eq(share_mix(sh->n_owners, sh->n_ctrls, 1, 1, 2, 2000, &run), 0, "%s", run.why);
    cr_assert_gt(run.stats.tier_hits, 0, "no line came back up from a tier");
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

static uint64_t tier_moves(share_rig *r, uint32_t o) {
    gpumem_tier_stats t;
    cr_assert_eq(gpumem_tier_get_stats(r->tiers[o], &t), GPUMEM_OK);
    return t.moves;
}

/* Caches of 2 slots over host tiers: a line evicted to the tier comes back
 * up through the share - taken while storage has not changed since its
 * fill, dropped (and the line read afresh) once a merge, on demand after
 * a release or by a flush, has written it. */
Test(share, tier_hits_never_stale) {
    share_rig r;
    gpumem_share_stats s;
    uint32_t l;
    cr_assert_eq(share_rig_make_tiered(&r, 3, 0, 16, 2, 16), GPUMEM_OK);
    for (l = 0; l < 4; l++) cr_assert_eq(read0(&r, 1, l), 0); /* lines 0 and 1 go down */
    cr_assert_eq(tier_moves(&r, 1), 2);
    cr_assert_eq(read0(&r, 1, 0), 0);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.tier_hits, 1, "line 0 was not taken from the tier");
    cr_assert_eq(s.storage_reads, 4);
    /* Line 1 waits in owner 1's tier while owner 2 writes and releases it. */
    write0(&r, 2, 1, 0, 0x42);
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_acquire(r.share, 1, 0, 16), GPUMEM_OK);
    cr_assert_eq(read0(&r, 1, 1), 0x42, "owner 1 took its stale copy back from its tier");
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.tier_stale, 1);
    cr_assert_eq(s.tier_hits, 1);
    cr_assert_eq(s.on_demand_merges, 1);
    /* A merge alone (a flush, nothing released) also changes the line: owner
     * 1's copy of line 3 in the tier is not taken back after it. */
    cr_assert_eq(read0(&r, 1, 3), 0);
    cr_assert_eq(read0(&r, 1, 2), 0);
    cr_assert_eq(read0(&r, 1, 0), 0); /* line 3 goes down again */
    write0(&r, 2, 3, 5, 0x99);
    cr_assert_eq(gpumem_share_flush(r.share, 2), GPUMEM_OK);
    cr_assert_eq(read0(&r, 1, 3), 0);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.tier_stale, 2, "a copy from before the merge came back: %llu stale", (unsigned long long)s.tier_stale);
    cr_assert_eq(s.violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A written line merged and then evicted to the tier keeps its pending
 * version bump (consistency-dirty) and its reader's acquire still drops
 * the old copy; the tier's copy is not taken after the release. */
Test(share, tier_eviction_keeps_the_pending_bump) {
    share_rig r;
    gpumem_share_stats s;
    uint32_t l;
    cr_assert_eq(share_rig_make_tiered(&r, 3, 1, 8, 2, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 4), 0);
    write0(&r, 1, 4, 0, 7);
    cr_assert_eq(gpumem_share_flush(r.share, 1), GPUMEM_OK); /* merged: clean, unpinned */
    for (l = 5; l < 8; l++) read0(&r, 1, l);                   /* line 4 goes down to the tier */
    cr_assert_geq(tier_moves(&r, 1), 1);
    cr_assert_eq(gpumem_share_release(r.share, 1, 0, 8), GPUMEM_OK);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.bumps, 1, "the eviction to the tier lost the version bump");
    cr_assert_eq(gpumem_share_acquire(r.share, 2, 0, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 4), 7);
    cr_assert_eq(read0(&r, 1, 4), 7);
    gpumem_share_get_stats(r.share, &s);
    cr_assert_eq(s.violations, 0);
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
    /* a host tier: attached after the share, refused; one holding a dirty
     * line the share never saw, refused (EBUSY) */
    {
        gpumem_tier *t;
        gpumem_tier_desc td = gpumem_tier_desc_default(r.caches[1], 4);
        td.placement = GPUMEM_TIER_ORDER;
        cr_assert_eq(gpumem_tier_create(&td, &t), GPUMEM_ESTATE);
        td.cache = lone;
        cr_assert_eq(gpumem_tier_create(&td, &t), GPUMEM_OK);
        for (uint32_t l = 0; l < 8; l++) { /* lines 0..3 written, then moved down by reads of 4..7 */
            cr_assert_eq(gpumem_cache_acquire(lone, l, 1, l < 4, &p), GPUMEM_OK);
            cr_assert_eq(gpumem_cache_release(lone, l, 1), GPUMEM_OK);
        }
        cr_assert_eq(gpumem_cache_find_in_use(lone, 0, 1), 8, "the cache itself holds nothing dirty");
        d = gpumem_share_desc_default(2);
        d.caches[1] = lone;
        cr_assert_eq(gpumem_share_create(&d, &other), GPUMEM_EBUSY, "a dirty line in the tier was taken over");
        cr_assert_eq(gpumem_cache_flush(lone, NULL), GPUMEM_OK);
        cr_assert_eq(gpumem_share_create(&d, &other), GPUMEM_OK);
        cr_assert_eq(gpumem_share_destroy(other), GPUMEM_OK);
        cr_assert_eq(gpumem_tier_destroy(t), GPUMEM_OK);
    }
    /* a cache a share owns cannot be destroyed under it */
    cr_assert_eq(gpumem_cache_destroy(r.caches[1]), GPUMEM_EBUSY);
    cr_assert_eq(gpumem_cache_destroy(lone), GPUMEM_OK);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* ---- GPU threads' misses: the miss queue and its server ------------------------------
 *
 * A host thread stands for a GPU thread with gpumem_share_thread_as_gpu(1):
 * its misses in GPU owners' caches (owners 2..) and its GPU releases' host
 * part go through the queue, the same code a GPU thread runs. */

/* References on owner o's copy of line l (a thread's, or the share's pin). */
static uint32_t refs(share_rig *r, uint32_t o, uint32_t l) {
    return gpumem_atomic_load_u32(gpumem__line_state(r->caches[o], l), GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_DEVICE) &
           GPUMEM_CACHE_COUNT_MASK;
}

static gpumem_share_stats stats_of(share_rig *r) {
    gpumem_share_stats s;
    cr_assert_eq(gpumem_share_get_stats(r->share, &s), GPUMEM_OK);
    return s;
}

Test(share, queue_bad_input) {
    share_rig r, r2;
    gpumem_share_server *srv;
    gpumem_share_desc d;
    gpumem_share *lone_share;
    const size_t bytes = gpumem_share_queue_bytes(16);
    unsigned char *m = (unsigned char *)aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    void *p;
    cr_assert_eq(gpumem_share_queue_bytes(0), 0);
    cr_assert_eq(gpumem_share_queue_bytes(7), 0);
    cr_assert_eq(gpumem_share_queue_bytes(12), 0, "not a power of two");
    cr_assert_eq(gpumem_share_queue_bytes(131072), 0);
    cr_assert_gt(bytes, 0);
    cr_assert_eq(share_rig_make(&r, 4, 0, 16, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_queue_init(NULL, m, bytes, 16, 0), GPUMEM_ENULL);
    cr_assert_eq(gpumem_share_queue_init(r.share, NULL, bytes, 16, 0), GPUMEM_ENULL);
    cr_assert_eq(gpumem_share_queue_init(r.share, m, bytes, 12, 0), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_queue_init(r.share, m, bytes - 1, 16, 0), GPUMEM_EINVAL, "too small");
    cr_assert_eq(gpumem_share_queue_init(r.share, m + 4, bytes, 16, 0), GPUMEM_EINVAL, "misaligned");
    cr_assert_eq(gpumem_share_server_start(r.share, 1, &srv), GPUMEM_ESTATE, "no queue attached");
    cr_assert_null(srv);
    cr_assert_eq(gpumem_share_server_start(NULL, 1, &srv), GPUMEM_ENULL);
    cr_assert_eq(gpumem_share_server_stop(NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_share_queue_init(r.share, m, bytes, 16, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_share_queue_init(r.share, m, bytes, 16, 0), GPUMEM_EBUSY, "a second queue");
    cr_assert_eq(gpumem_share_server_start(r.share, 65, &srv), GPUMEM_EINVAL, "65 threads");
    cr_assert_eq(gpumem_share_server_start(r.share, 2, &srv), GPUMEM_OK);
    cr_assert_eq(gpumem_share_destroy(r.share), GPUMEM_EBUSY, "a server runs");
    cr_assert_eq(read0(&r, 1, 0), 0, "the refused destroy broke nothing");
    /* Requests a GPU thread wrote wrong: answered EINVAL and counted, never served. */
    cr_assert_eq(gpumem__share_post(r.share, GPUMEM__SQ_FILL, 2, GPUMEM_SHARE_HOST, 0, 0, 0), GPUMEM_EINVAL,
                 "a fill for the host owner");
    cr_assert_eq(gpumem__share_post(r.share, GPUMEM__SQ_FILL, 2, 2, 16, 0, 0), GPUMEM_EINVAL, "a line past the end");
    cr_assert_eq(gpumem__share_post(r.share, GPUMEM__SQ_FILL, 2, 2, 0, 0, 16), GPUMEM_EINVAL, "a slot past the end");
    cr_assert_eq(gpumem__share_post(r.share, GPUMEM__SQ_FILL, 3, 11, 0, 0, 0), GPUMEM_EINVAL, "no such owner");
    cr_assert_eq(gpumem__share_post(r.share, GPUMEM__SQ_HOST_ACQUIRE, 2, GPUMEM_SHARE_HOST, 8, 9, 0), GPUMEM_EINVAL,
                 "a range past the end");
    cr_assert_eq(gpumem__share_post(r.share, 7, 3, 2, 0, 0, 0), GPUMEM_EINVAL, "no such request");
    cr_assert_eq(stats_of(&r).violations, 6);
    cr_assert_eq(stats_of(&r).served, 6);
    cr_assert_eq(gpumem_cache_find_in_use(r.caches[2], 0, 1), 16, "a refused fill left a line claimed");
    cr_assert_eq(gpumem_share_server_stop(srv), GPUMEM_OK);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
    /* No host owner: the server's I/O would have no host pairs. */
    cr_assert_eq(share_rig_make(&r2, 4, 0, 16, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_destroy(r2.share), GPUMEM_OK);
    r2.share = NULL;
    d = gpumem_share_desc_default(4);
    d.caches[2] = r2.caches[2];
    d.caches[3] = r2.caches[3];
    cr_assert_eq(gpumem_share_create(&d, &lone_share), GPUMEM_OK);
    cr_assert_eq(gpumem_share_queue_init(lone_share, m, bytes, 16, 0), GPUMEM_EINVAL, "no host owner");
    cr_assert_eq(gpumem_share_destroy(lone_share), GPUMEM_OK);
    cr_assert_eq(share_rig_free(&r2), GPUMEM_OK);
    /* A GPU owner with a host tier: its words are the device's. */
    cr_assert_eq(share_rig_make_tiered(&r2, 3, 0, 16, 8, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_queue_init(r2.share, m, bytes, 16, 0), GPUMEM_EINVAL, "a GPU owner with a tier");
    cr_assert_eq(gpumem_share_get(r2.share, 1, 0, 0, &p), GPUMEM_OK, "the share still works");
    cr_assert_eq(gpumem_share_put(r2.share, 1, 0, 0), GPUMEM_OK);
    cr_assert_eq(share_rig_free(&r2), GPUMEM_OK);
    free(m);
}

/* Without a queue, or without a server, a GPU thread's miss is refused at
 * once (ESTATE) and leaves nothing claimed; with a server it is served. */
Test(share, queue_gpu_miss_refused_without_server) {
    share_rig r;
    const size_t bytes = gpumem_share_queue_bytes(16);
    void *p;
    cr_assert_eq(share_rig_make(&r, 3, 1, 16, 16), GPUMEM_OK);
    write0(&r, 1, 4, 0, 0x21);
    cr_assert_eq(gpumem_share_flush(r.share, 1), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    cr_assert_eq(gpumem_share_get(r.share, 2, 4, 0, &p), GPUMEM_ESTATE, "no queue");
    cr_assert_not_null(r.queue_mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63));
    cr_assert_eq(gpumem_share_queue_init(r.share, r.queue_mem, bytes, 16, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_share_get(r.share, 2, 4, 0, &p), GPUMEM_ESTATE, "no server");
    cr_assert_eq(gpumem_cache_find_in_use(r.caches[2], 0, 1), 16, "a refused miss left a line claimed");
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_ESTATE, "the host's acquire has nobody to make it");
    cr_assert_eq(gpumem_share_server_start(r.share, 1, &r.server), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 4), 0x21, "served: a GPU owner's miss, through the host owner's pairs");
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(stats_of(&r).served, 2);
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A server that never takes a request (one that hangs): the GPU thread
 * takes its request back after the queue's timeout and gets ETIMEDOUT, with
 * nothing claimed; a full queue too. Then a real server serves it. */
Test(share, queue_timeout_when_not_taken) {
    share_rig r;
    const size_t bytes = gpumem_share_queue_bytes(8);
    gpumem_share_queue *q;
    uint32_t i, saved[8];
    void *p;
    cr_assert_eq(share_rig_make(&r, 3, 0, 16, 16), GPUMEM_OK);
    cr_assert_not_null(r.queue_mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63));
    cr_assert_eq(gpumem_share_queue_init(r.share, r.queue_mem, bytes, 8, 50000000ull), GPUMEM_OK);
    q = r.share->queue;
    q->servers = 1; /* says a server runs; none does */
    gpumem_share_thread_as_gpu(1);
    cr_assert_eq(gpumem_share_get(r.share, 2, 3, 0, &p), GPUMEM_ETIMEDOUT);
    cr_assert_eq(stats_of(&r).post_timeouts, 1);
    cr_assert_eq(gpumem_cache_find_in_use(r.caches[2], 0, 1), 16, "a timed-out miss left a line claimed");
    for (i = 0; i < q->n_cells; i++) {
        cr_assert_eq(GPUMEM__SQ_STATE(q->cells[i].post), GPUMEM__SQ_FREE, "cell %u not given back", i);
        saved[i] = q->cells[i].post;
        q->cells[i].post = GPUMEM__SQ_GEN(saved[i]) | GPUMEM__SQ_POSTED; /* every cell busy */
    }
    cr_assert_eq(gpumem_share_get(r.share, 2, 3, 0, &p), GPUMEM_ETIMEDOUT, "a full queue");
    cr_assert_eq(stats_of(&r).post_timeouts, 2);
    for (i = 0; i < q->n_cells; i++) q->cells[i].post = saved[i];
    q->servers = 0;
    cr_assert_eq(gpumem_share_server_start(r.share, 1, &r.server), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 3), 0);
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(stats_of(&r).served, 1, "a taken-back request was served");
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

ParameterizedTestParameters(share, queue_served_producer_consumer) {
    static shape s[] = {{3, 0}, {3, 1}, {4, 2}, {9, 1}};
    return cr_make_param_array(shape, s, sizeof s / sizeof s[0]);
}

/* The producer -> consumer rounds with every GPU owner's miss served by the
 * queue's server, and each GPU producer's release making the host's
 * acquire through it. */
ParameterizedTest(shape *sh, share, queue_served_producer_consumer) {
    share_run run;
    cr_assert_eq(share_producer_consumer(sh->n_owners, sh->n_ctrls, 8, SHARE_WL_SERVED, &run), 0, "%s", run.why);
    cr_assert_gt(run.stats.served, 0, "nothing went through the queue: the test tests nothing");
    cr_assert_gt(run.stats.invalidated, 0);
    cr_assert_eq(run.stats.post_timeouts, 0);
    cr_assert_eq(run.stats.violations, 0);
}

ParameterizedTestParameters(share, queue_served_mix) {
    /* owners + 1, controllers, random (1) or false sharing (0), flags */
    static uint32_t s[][4] = {{3, 0, 1, SHARE_WL_SERVED},
                              {3, 1, 0, SHARE_WL_SERVED},
                              {9, 0, 0, SHARE_WL_SERVED},
                              {4, 0, 1, SHARE_WL_SERVED},
                              {4, 1, 1, SHARE_WL_SERVED},
                              {4, 2, 1, SHARE_WL_SERVED},
                              {3, 0, 1, SHARE_WL_SERVED | SHARE_WL_SHORT_TIMEOUT},
                              {4, 1, 1, SHARE_WL_SERVED | SHARE_WL_SHORT_TIMEOUT}};
    return cr_make_param_array(uint32_t[4], s, sizeof s / sizeof s[0]);
}

/* Random mixes (reads checked, eviction, acquire, release; flushes and
 * merges by the host's threads only) and false sharing with the GPU owners'
 * misses served by four server threads: nothing lost after every flush.
 * With a short timeout, requests are withdrawn all the time (some as a
 * server takes them): the content checks would see one served late. Over
 * software controllers (slower fills, so servers' looks go stale) these
 * mixes lost a write once in 15 to 100 runs while a request could be served
 * twice (queue_take_never_goes_back); make share-soak runs them 40 times. */
ParameterizedTest(uint32_t (*sh)[4], share, queue_served_mix) {
    share_run run;
    cr_assert_eq(share_mix((*sh)[0], (*sh)[1], (*sh)[2], (int)(*sh)[3], 2, 2000, &run), 0, "%s", run.why);
    cr_assert_gt(run.stats.served, 0);
    if (!(*sh)[2]) cr_assert_gt(run.stats.merged_copies, run.stats.merges, "no line merged from two writers");
    if (!((*sh)[3] & SHARE_WL_SHORT_TIMEOUT)) cr_assert_eq(run.stats.post_timeouts, 0);
    cr_assert_eq(run.stats.violations, 0);
}

/* GAIA's piggybacked host sync, with the GPU's release made by a GPU
 * thread: the host's stale copies are dropped by the server, so host code
 * that never calls acquire reads the GPU's writes; the host's misses merge
 * them, leaving the GPU owner's pins owed (its cache words are not the
 * host's to touch while its kernels run) until its own acquire drops them. */
Test(share, queue_host_sync_and_owed_pins) {
    share_rig r;
    uint32_t l;
    cr_assert_eq(share_rig_make(&r, 3, 1, 16, 16), GPUMEM_OK);
    cr_assert_eq(share_rig_serve(&r, 16, 0), GPUMEM_OK);
    for (l = 0; l < 8; l++) cr_assert_eq(read0(&r, 1, l), 0); /* the host holds copies */
    gpumem_share_thread_as_gpu(1);
    for (l = 0; l < 8; l++) write0(&r, 2, l, 0, (unsigned char)(0x40 + l));
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(stats_of(&r).invalidated, 8, "the host's copies were not dropped");
    for (l = 0; l < 8; l++) cr_assert_eq(read0(&r, 1, l), 0x40 + l, "line %u stale on the host", l);
    cr_assert_eq(stats_of(&r).on_demand_merges, 8);
    cr_assert_eq(stats_of(&r).owed_pins, 8);
    for (l = 0; l < 8; l++) cr_assert_eq(refs(&r, 2, l), 1, "line %u: the owed pin is gone", l);
    /* The GPU owner's next write of line 0 takes its owed pin over. */
    gpumem_share_thread_as_gpu(1);
    write0(&r, 2, 0, 1, 0x99);
    cr_assert_eq(refs(&r, 2, 0), 1, "two pins on one copy");
    cr_assert_eq(gpumem_share_acquire(r.share, 2, 0, 16), GPUMEM_OK);
    gpumem_share_thread_as_gpu(0);
    for (l = 1; l < 8; l++) cr_assert_eq(refs(&r, 2, l), 0, "line %u: acquire left the owed pin", l);
    cr_assert_eq(refs(&r, 2, 0), 1, "line 0 is written again: pinned until merged");
    cr_assert_eq(stats_of(&r).served, 8 + 1 + 0, "8 misses of the GPU owner, 1 host acquire");
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(gpumem_share_server_stop(r.server), GPUMEM_OK);
    r.server = NULL;
    cr_assert_eq(gpumem_share_destroy(r.share), GPUMEM_OK);
    r.share = NULL;
    cr_assert_eq(share_rig_stored(&r, 0, 1), 0x99, "not flushed at destroy");
    cr_assert_eq(share_rig_stored(&r, 7, 0), 0x47, "not flushed at destroy");
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A served miss reads a GPU peer's valid copy (counted, by content); a
 * stale one is never a source. */
Test(share, queue_served_peer_reads) {
    share_rig r;
    uint32_t l;
    cr_assert_eq(share_rig_make(&r, 4, 0, 16, 16), GPUMEM_OK);
    cr_assert_eq(share_rig_serve(&r, 16, 0), GPUMEM_OK);
    write0(&r, 1, 2, 0, 0x31);
    cr_assert_eq(gpumem_share_flush(r.share, 1), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    for (l = 0; l < 4; l++) cr_assert_eq(read0(&r, 2, l), l == 2 ? 0x31 : 0);
    /* The host's written copy of line 2 is no source (it was read before the
     * merge), and it holds no other line: GPU 0 read storage. */
    cr_assert_eq(stats_of(&r).peer_reads, 0);
    for (l = 0; l < 4; l++) cr_assert_eq(read0(&r, 3, l), l == 2 ? 0x31 : 0);
    cr_assert_eq(stats_of(&r).peer_reads, 4, "GPU 1's misses did not read GPU 0's copies");
    for (l = 0; l < 4; l++) cr_assert_eq(refs(&r, 2, l), 0);
    write0(&r, 2, 1, 0, 0x52);
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_acquire(r.share, 3, 0, 16), GPUMEM_OK);
    cr_assert_eq(read0(&r, 3, 1), 0x52, "GPU 1 read a stale copy");
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(stats_of(&r).on_demand_merges, 1);
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

typedef struct held_reader {
    share_rig *r;
    unsigned char byte0;
    gpumem_status st;
} held_reader;

static void *read_line0_as_gpu1(void *arg) {
    held_reader *h = (held_reader *)arg;
    unsigned char *p;
    gpumem_share_thread_as_gpu(1);
    h->st = gpumem_share_get(h->r->share, 3, 0, 0, (void **)&p);
    if (h->st == GPUMEM_OK) {
        h->byte0 = p[0];
        gpumem_share_put(h->r->share, 3, 0, 0);
    }
    return NULL;
}

/* A served miss whose merge a writer holds up is answered EAGAIN at once
 * and posted again: the server keeps serving other misses meanwhile, and
 * the miss completes once the writer puts the line down. */
Test(share, queue_server_never_waits_for_a_writer) {
    share_rig r;
    held_reader h = {&r, 0, GPUMEM_EIO};
    pthread_t th;
    unsigned char *p;
    uint64_t before;
    uint32_t tries;
    cr_assert_eq(share_rig_make(&r, 5, 0, 16, 16), GPUMEM_OK);
    cr_assert_eq(share_rig_serve(&r, 16, 0), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    write0(&r, 2, 0, 0, 0x11);
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
    cr_assert_eq(gpumem_share_get(r.share, 2, 0, 1, (void **)&p), GPUMEM_OK); /* held, to write */
    before = stats_of(&r).served;
    cr_assert_eq(pthread_create(&th, NULL, read_line0_as_gpu1, &h), 0);
    for (tries = 0; tries < 5000 && stats_of(&r).served < before + 3; tries++) share_rig_sleep_ns(1000000);
    cr_assert_geq(stats_of(&r).served, before + 3, "GPU 1's miss was not answered EAGAIN and posted again");
    cr_assert_eq(read0(&r, 4, 5), 0, "the server stopped serving while a writer held a line");
    p[1] = 0x22;
    cr_assert_eq(gpumem_share_put(r.share, 2, 0, 1), GPUMEM_OK);
    pthread_join(th, NULL);
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(h.st, GPUMEM_OK, "%s", gpumem_status_str(h.st));
    cr_assert_eq(h.byte0, 0x11);
    cr_assert_eq(stats_of(&r).on_demand_merges, 1);
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A served miss whose merge a writer holds past the queue's timeout (20 ms
 * here) ends ETIMEDOUT: a held line, not a full cache - the cache counts no
 * full acquire, and gpumem_share_get asks the server to make no room. Once
 * the writer puts the line down, the miss is served, by content. */
Test(share, queue_miss_held_past_timeout) {
    share_rig r;
    unsigned char *p, *q;
    gpumem_cache_stats cs;
    uint64_t served;
    cr_assert_eq(share_rig_make(&r, 4, 0, 16, 16), GPUMEM_OK);
    cr_assert_eq(share_rig_serve(&r, 16, 20000000ull), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    /* The calls that must succeed retry ETIMEDOUT (share_rig_get/_release):
     * on a loaded machine the server may not run within 20 ms. */
    cr_assert_eq(share_rig_get(&r, 2, 0, 1, &p), GPUMEM_OK);
    p[0] = 0x11;
    cr_assert_eq(gpumem_share_put(r.share, 2, 0, 1), GPUMEM_OK);
    cr_assert_eq(share_rig_release(&r, 2, 0, 16), GPUMEM_OK);
    cr_assert_eq(share_rig_get(&r, 2, 0, 1, &p), GPUMEM_OK); /* held, to write */
    served = stats_of(&r).served;
    cr_assert_eq(gpumem_share_get(r.share, 3, 0, 0, (void **)&q), GPUMEM_ETIMEDOUT);
    cr_assert_gt(stats_of(&r).served, served, "the miss was never posted");
    cr_assert_eq(gpumem_cache_get_stats(r.caches[3], &cs), GPUMEM_OK);
    cr_assert_eq(cs.full, 0, "a held line counted as a full cache");
    cr_assert_eq(gpumem_cache_find_in_use(r.caches[3], 0, 1), 16, "the timed-out miss left its line claimed");
    p[1] = 0x22;
    cr_assert_eq(gpumem_share_put(r.share, 2, 0, 1), GPUMEM_OK);
    cr_assert_eq(share_rig_get(&r, 3, 0, 0, &q), GPUMEM_OK, "served once the writer put the line down");
    cr_assert_eq(q[0], 0x11);
    cr_assert_eq(gpumem_share_put(r.share, 3, 0, 0), GPUMEM_OK);
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A GPU producer that only releases (a GPU thread can neither flush nor
 * merge), with four slots and sixteen lines: the host's reads merge its
 * copies and leave their pins owed, and its later writes find the cache
 * full of them - its write drops them itself and goes on. Then it writes
 * more lines than it has slots with no release between: its write asks the
 * server to make room (merge its copies), drops the pins and goes on. Every
 * write lands, by content. */
Test(share, queue_gpu_producer_without_flush) {
    share_rig r;
    uint32_t round, l;
    cr_assert_eq(share_rig_make(&r, 3, 1, 16, 4), GPUMEM_OK);
    cr_assert_eq(share_rig_serve(&r, 16, 0), GPUMEM_OK);
    for (round = 0; round < 4; round++) {
        gpumem_share_thread_as_gpu(1);
        for (l = 4 * round; l < 4 * round + 4; l++) write0(&r, 2, l, 0, (unsigned char)(0x60 + l));
        cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
        gpumem_share_thread_as_gpu(0);
        for (l = 4 * round; l < 4 * round + 4; l++) cr_assert_eq(read0(&r, 1, l), 0x60 + l, "round %u line %u", round, l);
    }
    cr_assert_geq(stats_of(&r).owed_pins, 12, "the host's merges left no pin owed: the test tests nothing");
    gpumem_share_thread_as_gpu(1);
    for (l = 0; l < 16; l++) write0(&r, 2, l, 1, (unsigned char)(0x80 + l)); /* no release between */
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
    gpumem_share_thread_as_gpu(0);
    for (l = 0; l < 16; l++) {
        unsigned char *p;
        cr_assert_eq(share_rig_get(&r, 1, l, 0, &p), GPUMEM_OK);
        cr_assert_eq(p[0], 0x60 + l, "line %u byte 0", l);
        cr_assert_eq(p[1], 0x80 + l, "line %u byte 1", l);
        cr_assert_eq(gpumem_share_put(r.share, 1, l, 0), GPUMEM_OK);
    }
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(stats_of(&r).post_timeouts, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A GPU owner's release whose host part (the host's acquire) finds a host
 * thread holding a stale copy: EAGAIN, answered once - not posted again
 * until the timeout - and the release itself made; once the host puts the
 * line down, the release again makes the host's acquire. */
Test(share, queue_host_acquire_eagain_at_once) {
    share_rig r;
    unsigned char *held;
    uint64_t served;
    cr_assert_eq(share_rig_make(&r, 3, 0, 16, 16), GPUMEM_OK);
    cr_assert_eq(share_rig_serve(&r, 16, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_share_get(r.share, 1, 0, 0, (void **)&held), GPUMEM_OK); /* held by the host */
    gpumem_share_thread_as_gpu(1);
    write0(&r, 2, 0, 0, 0x5A);
    served = stats_of(&r).served;
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_EAGAIN);
    cr_assert_eq(stats_of(&r).served, served + 1, "the host's acquire was posted %llu times",
                 (unsigned long long)(stats_of(&r).served - served));
    cr_assert_eq(stats_of(&r).post_timeouts, 0);
    cr_assert_eq(stats_of(&r).bumps, 1, "the release itself was not made");
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(held[0], 0, "the held copy changed under its holder");
    cr_assert_eq(gpumem_share_put(r.share, 1, 0, 0), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 16), GPUMEM_OK);
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(read0(&r, 1, 0), 0x5A, "the host read a stale copy without acquiring");
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

typedef struct posted_miss {
    share_rig *r;
    gpumem_status st;
    int done;
} posted_miss;

static void *miss_line3_as_gpu0(void *arg) {
    posted_miss *m = (posted_miss *)arg;
    void *p;
    gpumem_share_thread_as_gpu(1);
    m->st = gpumem_share_get(m->r->share, 2, 3, 0, &p);
    if (m->st == GPUMEM_OK) gpumem_share_put(m->r->share, 2, 3, 0);
    __atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* The poster's side of the withdrawal, played against a server that the
 * test is: once a server has taken the request (answer TAKEN), the poster
 * never leaves on its timeout - it waits for the answer; a SKIPPED answer
 * (the server saw it withdrawn) ends it ETIMEDOUT with nothing claimed. */
Test(share, queue_taken_request_is_awaited) {
    share_rig r;
    posted_miss m = {&r, GPUMEM_OK, 0};
    pthread_t th;
    gpumem_share_queue *q;
    gpumem__share_cell *cell = NULL;
    uint32_t i, tries, gen;
    cr_assert_eq(share_rig_make(&r, 3, 0, 16, 16), GPUMEM_OK);
    cr_assert_not_null(r.queue_mem = aligned_alloc(64, (gpumem_share_queue_bytes(8) + 63) & ~(size_t)63));
    cr_assert_eq(gpumem_share_queue_init(r.share, r.queue_mem, gpumem_share_queue_bytes(8), 8, 20000000ull), GPUMEM_OK);
    q = r.share->queue;
    q->servers = 1; /* the test is the server */
    cr_assert_eq(pthread_create(&th, NULL, miss_line3_as_gpu0, &m), 0);
    for (tries = 0; tries < 5000 && !cell; tries++) {
        for (i = 0; i < q->n_cells; i++)
            if (GPUMEM__SQ_STATE(__atomic_load_n(&q->cells[i].post, __ATOMIC_ACQUIRE)) == GPUMEM__SQ_POSTED)
                cell = &q->cells[i];
        if (!cell) share_rig_sleep_ns(1000000);
    }
    cr_assert_not_null(cell, "the miss was never posted");
    gen = GPUMEM__SQ_GEN(cell->post);
    __atomic_store_n(&cell->answer, gen | GPUMEM__SQ_TAKEN, __ATOMIC_SEQ_CST); /* taken */
    share_rig_sleep_ns(100000000); /* five timeouts */
    cr_assert_eq(__atomic_load_n(&m.done, __ATOMIC_ACQUIRE), 0, "the poster left a taken request");
    __atomic_store_n(&cell->answer, gen | GPUMEM__SQ_SKIPPED, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    cr_assert_eq(m.st, GPUMEM_ETIMEDOUT, "%s", gpumem_status_str(m.st));
    cr_assert_eq(GPUMEM__SQ_STATE(cell->post), GPUMEM__SQ_FREE, "the cell was not given back");
    cr_assert_eq(gpumem_cache_find_in_use(r.caches[2], 0, 1), 16, "the withdrawn miss left its line claimed");
    q->servers = 0;
    cr_assert_eq(gpumem_share_server_start(r.share, 1, &r.server), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    cr_assert_eq(read0(&r, 2, 3), 0, "served after all");
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

#if !GPUMEM_ON_DEVICE /* the server's take is host code: nvcc's device pass does not see it */
/* A server's take of a request, against every state its look at post can
 * be out of date with (the test plays the other servers and the poster):
 * it takes only from an older answer, and never writes an older
 * generation over a newer one. Before this rule a server whose look was a
 * request old put its generation back over another server's TAKEN, and a
 * third server then served the newer request twice: a second fill over a
 * slot its GPU thread had written since (a served random mix lost a write
 * about once in 15 to 100 runs). */
Test(share, queue_take_never_goes_back) {
    share_rig r;
    gpumem__share_cell *cell;
    const uint32_t g = 40, P = GPUMEM__SQ_POSTED;
    cr_assert_eq(share_rig_make(&r, 3, 0, 16, 16), GPUMEM_OK);
    cr_assert_not_null(r.queue_mem = aligned_alloc(64, (gpumem_share_queue_bytes(8) + 63) & ~(size_t)63));
    cr_assert_eq(gpumem_share_queue_init(r.share, r.queue_mem, gpumem_share_queue_bytes(8), 8, 0), GPUMEM_OK);
    cell = &r.share->queue->cells[0];
    /* A fresh queue: generation 0, answer NONE. */
    cell->post = 0 | P;
    cr_assert_eq(gpumem__share_take(cell, 0 | P), 1);
    cr_assert_eq(cell->answer, 0 | GPUMEM__SQ_TAKEN);
    /* Taken by another server already. */
    cell->post = g | P;
    cell->answer = g | GPUMEM__SQ_TAKEN;
    cr_assert_eq(gpumem__share_take(cell, g | P), 0);
    cr_assert_eq(cell->answer, g | GPUMEM__SQ_TAKEN);
    /* The look is old: answered, posted again and taken by another server. */
    cell->post = (g + 8) | P;
    cell->answer = (g + 8) | GPUMEM__SQ_TAKEN;
    cr_assert_eq(gpumem__share_take(cell, g | P), 0);
    cr_assert_eq(cell->answer, (g + 8) | GPUMEM__SQ_TAKEN, "an older generation written over a newer TAKEN");
    cell->answer = (g + 8) | GPUMEM__SQ_DONE; /* answered too */
    cr_assert_eq(gpumem__share_take(cell, g | P), 0);
    cr_assert_eq(cell->answer, (g + 8) | GPUMEM__SQ_DONE);
    /* The look is old, the newer request not taken yet: the stale take
     * gives its answer back SKIPPED, and the newer one is still taken. */
    cell->answer = (g - 8) | GPUMEM__SQ_DONE;
    cr_assert_eq(gpumem__share_take(cell, g | P), 0);
    cr_assert_eq(cell->answer, g | GPUMEM__SQ_SKIPPED);
    cr_assert_eq(gpumem__share_take(cell, (g + 8) | P), 1);
    cr_assert_eq(cell->answer, (g + 8) | GPUMEM__SQ_TAKEN);
    /* Withdrawn before the take: SKIPPED, for the waiting poster. */
    cell->post = (g + 16) | GPUMEM__SQ_WITHDRAWN;
    cell->answer = (g + 8) | GPUMEM__SQ_DONE;
    cr_assert_eq(gpumem__share_take(cell, (g + 16) | P), 0);
    cr_assert_eq(cell->answer, (g + 16) | GPUMEM__SQ_SKIPPED);
    /* Generations wrap: the order is modular. */
    cell->post = 0xFFFFFFF8u | P;
    cell->answer = 0xFFFFFFF0u | GPUMEM__SQ_DONE;
    cr_assert_eq(gpumem__share_take(cell, 0xFFFFFFF8u | P), 1);
    cell->post = 0 | P;
    cell->answer = 0 | GPUMEM__SQ_TAKEN; /* a newer one, past the wrap */
    cr_assert_eq(gpumem__share_take(cell, 0xFFFFFFF8u | P), 0);
    cr_assert_eq(cell->answer, 0 | GPUMEM__SQ_TAKEN);
    /* Only a posted request is taken. */
    cell->post = (g + 24) | GPUMEM__SQ_CLAIMED;
    cr_assert_eq(gpumem__share_take(cell, (g + 24) | GPUMEM__SQ_CLAIMED), 0);
    /* answer moves only at a take: 2^28 requests withdrawn untaken in a row
     * would put it "after" post. A server passing the cell with nothing
     * posted catches a far-behind answer up; a near one stays. */
    cell->post = (g + 32) | GPUMEM__SQ_FREE;
    cell->answer = g | GPUMEM__SQ_DONE;
    gpumem__share_catch_up(cell, cell->post);
    cr_assert_eq(cell->answer, g | GPUMEM__SQ_DONE, "an answer a few requests behind is left");
    cell->post = 0x40000000u | GPUMEM__SQ_FREE;
    cell->answer = 0 | GPUMEM__SQ_DONE;
    gpumem__share_catch_up(cell, cell->post);
    cr_assert_eq(cell->answer, (0x40000000u - 8) | GPUMEM__SQ_SKIPPED);
    cell->post = 0x90000000u | P; /* 2^28 + 2^25 requests after the old answer */
    cr_assert_eq(gpumem__share_take(cell, cell->post), 1, "a cell whose answer fell behind is never taken");
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}
#endif

/* ---- the contract, hole by hole (issue 42) ------------------------------------------
 *
 * Each reproduced a hole an independent probe found; the failure each showed
 * on the code before its fix is in the commit that fixed it. */

static inline unsigned char readb(share_rig *r, uint32_t o, uint32_t l, uint32_t b) {
    unsigned char *p, v;
    cr_assert_eq(gpumem_share_get(r->share, o, l, 0, (void **)&p), GPUMEM_OK);
    v = p[b];
    cr_assert_eq(gpumem_share_put(r->share, o, l, 0), GPUMEM_OK);
    return v;
}

/* Visibility after release -> acquire holds for a copy the acquirer wrote
 * itself (concurrently, to other bytes): its acquire brings the released
 * bytes in (a merge) and keeps its own. The host too, through the acquire
 * a GPU owner's release makes for it; a later merge changes nothing. */
Test(share, acquire_brings_writes_into_a_copy_the_owner_wrote) {
    share_rig r;
    cr_assert_eq(share_rig_make(&r, 5, 0, 8, 8), GPUMEM_OK);
    cr_assert_eq(readb(&r, 2, 2, 100), 0);
    cr_assert_eq(readb(&r, 3, 2, 100), 0);
    write0(&r, 3, 2, 0, 0x33);
    write0(&r, 2, 2, 100, 0x77);
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 8), GPUMEM_OK);
    cr_assert_eq(gpumem_share_acquire(r.share, 3, 0, 8), GPUMEM_OK);
    cr_assert_eq(readb(&r, 3, 2, 100), 0x77, "owner 3 read its own stale copy after release -> acquire");
    cr_assert_eq(readb(&r, 3, 2, 0), 0x33, "owner 3 lost its own write");
    /* The host: its copy written, a GPU owner's release acquires for it. */
    cr_assert_eq(readb(&r, 1, 5, 100), 0);
    cr_assert_eq(readb(&r, 4, 5, 100), 0);
    write0(&r, 1, 5, 0, 0x11);
    write0(&r, 4, 5, 100, 0x44);
    cr_assert_eq(gpumem_share_release(r.share, 4, 0, 8), GPUMEM_OK);
    cr_assert_eq(readb(&r, 1, 5, 100), 0x44, "the host read its stale copy after the GPU owner's release");
    cr_assert_eq(gpumem_share_merge(r.share, 1, 0, 8), GPUMEM_OK);
    cr_assert_eq(readb(&r, 1, 5, 100), 0x44, "stale after a merge");
    cr_assert_eq(readb(&r, 1, 5, 0), 0x11);
    for (uint32_t o = 1; o < 5; o++) cr_assert_eq(gpumem_share_flush(r.share, o), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 2, 0), 0x33);
    cr_assert_eq(share_rig_stored(&r, 2, 100), 0x77);
    cr_assert_eq(share_rig_stored(&r, 5, 0), 0x11);
    cr_assert_eq(share_rig_stored(&r, 5, 100), 0x44);
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* The same with the GPU owners' threads standing for GPU threads: the
 * acquire's merge is the server's (the pins it leaves owed, the acquire
 * drops its own), and the host's acquire inside a GPU release too. */
Test(share, queue_acquire_brings_writes_into_a_written_copy) {
    share_rig r;
    cr_assert_eq(share_rig_make(&r, 5, 1, 8, 8), GPUMEM_OK);
    cr_assert_eq(share_rig_serve(&r, 16, 0), GPUMEM_OK);
    cr_assert_eq(readb(&r, 1, 5, 100), 0);
    gpumem_share_thread_as_gpu(1);
    cr_assert_eq(readb(&r, 2, 2, 100), 0);
    cr_assert_eq(readb(&r, 3, 2, 100), 0);
    cr_assert_eq(readb(&r, 4, 5, 100), 0);
    write0(&r, 3, 2, 0, 0x33);
    write0(&r, 2, 2, 100, 0x77);
    gpumem_share_thread_as_gpu(0);
    write0(&r, 1, 5, 0, 0x11);
    gpumem_share_thread_as_gpu(1);
    write0(&r, 4, 5, 100, 0x44);
    cr_assert_eq(share_rig_release(&r, 2, 0, 8), GPUMEM_OK);
    cr_assert_eq(gpumem_share_acquire(r.share, 3, 0, 8), GPUMEM_OK);
    cr_assert_eq(readb(&r, 3, 2, 100), 0x77, "owner 3 read its own stale copy after release -> acquire");
    cr_assert_eq(readb(&r, 3, 2, 0), 0x33, "owner 3 lost its own write");
    cr_assert_eq(share_rig_release(&r, 4, 0, 8), GPUMEM_OK); /* the server acquires for the host */
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(readb(&r, 1, 5, 100), 0x44, "the host read its stale copy after the GPU owner's release");
    cr_assert_eq(readb(&r, 1, 5, 0), 0x11);
    cr_assert_eq(stats_of(&r).violations, 0, "the server touched a GPU owner's cache words");
    cr_assert_eq(gpumem_share_server_stop(r.server), GPUMEM_OK);
    r.server = NULL;
    cr_assert_eq(gpumem_share_destroy(r.share), GPUMEM_OK);
    r.share = NULL;
    cr_assert_eq(share_rig_stored(&r, 2, 0), 0x33);
    cr_assert_eq(share_rig_stored(&r, 2, 100), 0x77);
    cr_assert_eq(share_rig_stored(&r, 5, 0), 0x11);
    cr_assert_eq(share_rig_stored(&r, 5, 100), 0x44);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A write that happened after another (release -> acquire between them) is
 * the one storage keeps, whatever the owners' ids. */
Test(share, merge_keeps_the_later_write) {
    share_rig r;
    cr_assert_eq(share_rig_make(&r, 5, 0, 8, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 4), 0);
    cr_assert_eq(read0(&r, 3, 4), 0);
    write0(&r, 2, 4, 0, 1);
    write0(&r, 3, 4, 0, 2); /* a race with owner 2's 1: either may win */
    cr_assert_eq(gpumem_share_release(r.share, 3, 0, 8), GPUMEM_OK);
    cr_assert_eq(gpumem_share_acquire(r.share, 2, 0, 8), GPUMEM_OK);
    write0(&r, 2, 4, 0, 3); /* after owner 3's 2: must win over it */
    cr_assert_eq(gpumem_share_release(r.share, 2, 0, 8), GPUMEM_OK);
    cr_assert_eq(gpumem_share_acquire(r.share, 4, 0, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 4, 4), 3, "owner 4 read %u after release -> acquire of the 3", read0(&r, 4, 4));
    for (uint32_t o = 1; o < 5; o++) cr_assert_eq(gpumem_share_flush(r.share, o), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 4, 0), 3, "storage holds %u, not the later write 3", share_rig_stored(&r, 4, 0));
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A GPU owner's miss that never ran its fill (no server: ESTATE; withdrawn:
 * ETIMEDOUT) after its cache had evicted a victim for it: the share's record
 * of the victim is stale, and acquire must see that the copy is gone, not
 * answer EAGAIN for ever. */
Test(share, acquire_after_a_failed_served_miss) {
    share_rig r;
    const uint32_t slots[GPUMEM_SHARE_MAX_OWNERS] = {0, 16, 4};
    const size_t bytes = gpumem_share_queue_bytes(16);
    uint32_t l, tries;
    gpumem_status st;
    void *p;
    cr_assert_eq(share_rig_make_slots(&r, 3, 0, 16, slots, 0), GPUMEM_OK);
    cr_assert_not_null(r.queue_mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63));
    cr_assert_eq(gpumem_share_queue_init(r.share, r.queue_mem, bytes, 16, 50000000ull), GPUMEM_OK);
    cr_assert_eq(gpumem_share_server_start(r.share, 1, &r.server), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    for (l = 0; l < 4; l++) cr_assert_eq(read0(&r, 2, l), 0);
    cr_assert_eq(gpumem_share_server_stop(r.server), GPUMEM_OK);
    r.server = NULL;
    cr_assert_eq(gpumem_share_get(r.share, 2, 4, 0, &p), GPUMEM_ESTATE);
    r.share->queue->servers = 1; /* says a server runs; none does: withdrawn */
    cr_assert_eq(gpumem_share_get(r.share, 2, 5, 0, &p), GPUMEM_ETIMEDOUT);
    r.share->queue->servers = 0;
    gpumem_share_thread_as_gpu(0);
    for (l = 0; l < 4; l++) write0(&r, 1, l, 0, (unsigned char)(0x60 + l));
    cr_assert_eq(gpumem_share_release(r.share, 1, 0, 16), GPUMEM_OK);
    gpumem_share_thread_as_gpu(1);
    for (tries = 0; (st = gpumem_share_acquire(r.share, 2, 0, 16)) == GPUMEM_EAGAIN && tries < 1000; tries++) continue;
    cr_assert_eq(st, GPUMEM_OK, "acquire answered %s %u times with nothing held", gpumem_status_str(st), tries);
    cr_assert_eq(gpumem_share_acquire(r.share, 2, 0, 4), GPUMEM_OK);
    cr_assert_eq(gpumem_share_server_start(r.share, 1, &r.server), GPUMEM_OK);
    for (l = 0; l < 4; l++) cr_assert_eq(read0(&r, 2, l), 0x60 + l, "line %u stale", l);
    gpumem_share_thread_as_gpu(0);
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* Caches over different storages make no share (EINVAL): two controllers,
 * one controller at two offsets, the stripe's order swapped, stripe against
 * replicate, two controllers against one. Another pair of the same
 * controller is the same storage. */
Test(share, create_refuses_different_storages) {
    gpumem_swctl *ctl[2];
    gpumem_nvme_qp *qp[2][4];
    gpumem_cache *c[8];
    gpumem_nvme_ns ns;
    uint32_t j, i, n = 0;
    for (j = 0; j < 2; j++) {
        gpumem_swctl_config cfg = gpumem_swctl_config_default();
        cfg.lba_bytes = 512;
        cfg.n_blocks = 64;
        cr_assert_eq(gpumem_swctl_create(&cfg, &ctl[j]), GPUMEM_OK);
        for (i = 0; i < 4; i++) cr_assert_eq(gpumem_swctl_add_qp(ctl[j], 64, &qp[j][i]), GPUMEM_OK);
        cr_assert_eq(gpumem_swctl_start(ctl[j]), GPUMEM_OK);
    }
    ns = gpumem_swctl_ns(ctl[0]);
#define MK(first_lba, layout, n_ctrls, ...)                                                              \
    do {                                                                                                 \
        gpumem_nvme_qp *pp[] = {__VA_ARGS__};                                                            \
        gpumem_cache_desc d = gpumem_cache_desc_default();                                               \
        d.n_lines = 8;                                                                                   \
        d.line_bytes = SHARE_RIG_LINE;                                                                   \
        d.n_slots = 4;                                                                                   \
        d.backing = gpumem_cache_backing_nvme(pp, n_ctrls, 1, &ns, first_lba, layout);                   \
        cr_assert_eq(gpumem_cache_create(&d, &c[n]), GPUMEM_OK);                                         \
        n++;                                                                                             \
    } while (0)
    MK(0, GPUMEM_CACHE_STRIPE, 1, qp[0][0]);           /* 0: controller A */
    MK(0, GPUMEM_CACHE_STRIPE, 1, qp[1][0]);           /* 1: controller B */
    MK(16, GPUMEM_CACHE_STRIPE, 1, qp[0][1]);          /* 2: A at LBA 16 */
    MK(0, GPUMEM_CACHE_STRIPE, 2, qp[0][2], qp[1][1]); /* 3: A, B striped */
    MK(0, GPUMEM_CACHE_STRIPE, 2, qp[1][2], qp[0][3]); /* 4: B, A striped */
    MK(0, GPUMEM_CACHE_REPLICATE, 2, qp[0][2], qp[1][1]); /* 5: A, B replicated */
    MK(0, GPUMEM_CACHE_STRIPE, 1, qp[0][3]);           /* 6: A, another pair */
#undef MK
    {
        static const uint32_t bad[][2] = {{0, 1}, {0, 2}, {3, 4}, {3, 5}, {3, 0}};
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            gpumem_share_desc d = gpumem_share_desc_default(3);
            gpumem_share *s = NULL;
            d.caches[1] = c[bad[i][0]];
            d.caches[2] = c[bad[i][1]];
            cr_assert_eq(gpumem_share_create(&d, &s), GPUMEM_EINVAL, "caches %u and %u: different storages shared",
                         bad[i][0], bad[i][1]);
            cr_assert_null(c[bad[i][0]]->share);
        }
    }
    {
        gpumem_share_desc d = gpumem_share_desc_default(3);
        gpumem_share *s = NULL;
        d.caches[1] = c[0];
        d.caches[2] = c[6];
        cr_assert_eq(gpumem_share_create(&d, &s), GPUMEM_OK, "two pairs of one controller");
        cr_assert_eq(gpumem_share_destroy(s), GPUMEM_OK);
    }
    for (i = 0; i < n; i++) cr_assert_eq(gpumem_cache_destroy(c[i]), GPUMEM_OK);
    for (j = 0; j < 2; j++) gpumem_swctl_destroy(ctl[j]);
}

/* Two owners write the same bytes 16..19 in a race; owner 3 writes the
 * byte 16 already holds, then its own 17..19. The rule is per byte: each
 * byte some copy changed (copy against its base) takes the highest id's
 * change; a byte written with the value it held is no change. So the race
 * can end mixed - a0 b1 b2 b3 - as the contract says. */
Test(share, same_bytes_race_is_decided_per_byte) {
    share_rig r;
    static const unsigned char a[4] = {0xa0, 0xa1, 0xa2, 0xa3}, b[4] = {0, 0xb1, 0xb2, 0xb3};
    unsigned char *p;
    uint32_t i;
    cr_assert_eq(share_rig_make(&r, 5, 0, 8, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 2, 1), 0);
    cr_assert_eq(read0(&r, 3, 1), 0);
    cr_assert_eq(gpumem_share_get(r.share, 2, 1, 1, (void **)&p), GPUMEM_OK);
    memcpy(p + 16, a, 4);
    cr_assert_eq(gpumem_share_put(r.share, 2, 1, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_share_get(r.share, 3, 1, 1, (void **)&p), GPUMEM_OK);
    memcpy(p + 16, b, 4);
    cr_assert_eq(gpumem_share_put(r.share, 3, 1, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_share_merge(r.share, 1, 0, 8), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 1, 16), 0xa0, "byte 16: owner 3 changed nothing there, owner 2's a0 stays");
    for (i = 1; i < 4; i++) cr_assert_eq(share_rig_stored(&r, 1, 16 + i), b[i], "byte %u: the highest id's change", 16 + i);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

/* A put the caller has nothing to give back for - no get, a read put twice,
 * a read put for a write get - is refused (ESTATE) and takes nothing from
 * the share: the written line is not evicted unmerged, flush and destroy
 * succeed, storage has the write. */
Test(share, put_misuse_refused_nothing_lost) {
    share_rig r;
    void *p;
    uint32_t l;
    cr_assert_eq(share_rig_make(&r, 3, 0, 16, 8), GPUMEM_OK);
    cr_assert_eq(read0(&r, 1, 1), 0); /* a second holder: the write takes a base */
    write0(&r, 2, 1, 0, 9);
    cr_assert_eq(gpumem_share_put(r.share, 2, 1, 0), GPUMEM_ESTATE, "a read put without a get");
    cr_assert_eq(gpumem_share_put(r.share, 2, 1, 1), GPUMEM_ESTATE, "a write put without a get");
    cr_assert_eq(gpumem_share_get(r.share, 2, 1, 0, &p), GPUMEM_OK);
    cr_assert_eq(gpumem_share_put(r.share, 2, 1, 0), GPUMEM_OK);
    cr_assert_eq(gpumem_share_put(r.share, 2, 1, 0), GPUMEM_ESTATE, "a read put twice");
    cr_assert_eq(gpumem_share_put(r.share, 2, 9, 0), GPUMEM_ESTATE, "a put of a line not resident");
    for (l = 2; l < 16; l++) cr_assert_eq(read0(&r, 2, l), 0); /* evicts whatever is not pinned */
    cr_assert_eq(readb(&r, 2, 1, 0), 9, "the written copy was evicted unmerged");
    /* A read put for a write get. */
    cr_assert_eq(gpumem_share_get(r.share, 2, 3, 1, &p), GPUMEM_OK);
    ((unsigned char *)p)[0] = 5;
    cr_assert_eq(gpumem_share_put(r.share, 2, 3, 0), GPUMEM_ESTATE, "a read put for a write get");
    cr_assert_eq(gpumem_share_put(r.share, 2, 3, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_share_flush(r.share, 2), GPUMEM_OK);
    cr_assert_eq(share_rig_stored(&r, 1, 0), 9);
    cr_assert_eq(share_rig_stored(&r, 3, 0), 5);
    cr_assert_eq(stats_of(&r).violations, 0);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK, "destroy after misuse");
}

/* Owner ids are checked before they are used (no shift by 32 or more), and
 * a cache given past n_owners is refused. */
Test(share, owner_ids_checked_first) {
    share_rig r;
    gpumem_share_desc d;
    gpumem_share *s = NULL;
    void *p;
    cr_assert_eq(share_rig_make(&r, 3, 0, 8, 8), GPUMEM_OK);
    cr_assert_eq(gpumem_share_get(r.share, 40, 0, 0, &p), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_get(r.share, 40, 0, 1, &p), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_put(r.share, 40, 0, 1), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_release(r.share, 40, 0, 1), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_acquire(r.share, 40, 0, 1), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_merge(r.share, 40, 0, 1), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_flush(r.share, 40), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_share_fetch(r.share, 40, 0, 1), GPUMEM_EINVAL);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
    cr_assert_eq(share_rig_make(&r, 4, 0, 8, 8), GPUMEM_OK);
    cr_assert_eq(gpumem_share_destroy(r.share), GPUMEM_OK);
    r.share = NULL;
    d = gpumem_share_desc_default(3);
    d.caches[1] = r.caches[1];
    d.caches[2] = r.caches[2];
    d.caches[3] = r.caches[3]; /* past n_owners */
    cr_assert_eq(gpumem_share_create(&d, &s), GPUMEM_EINVAL, "a cache past n_owners was ignored");
    cr_assert_null(r.caches[1]->share);
    cr_assert_eq(share_rig_free(&r), GPUMEM_OK);
}

ParameterizedTestParameters(share, reference_model) {
    /* owners + 1, controllers, flags */
    static uint32_t s[][3] = {{3, 0, 0}, {4, 1, 0}, {5, 0, SHARE_WL_TIER}, {4, 2, SHARE_WL_SERVED},
                              {10, 0, 0}, {10, 1, SHARE_WL_SERVED}, {6, 1, SHARE_WL_TIER}};
    return cr_make_param_array(uint32_t[3], s, sizeof s / sizeof s[0]);
}

/* Random operations over 2-9 owners checked against a happens-before model
 * of lazy release consistency (share_model, tests/share_workload.h): every
 * read only what the model allows, storage after flushing every owner what
 * it must. make share-soak runs it longer, over more seeds. */
ParameterizedTest(uint32_t (*sh)[3], share, reference_model) {
    share_run run;
    for (uint64_t seed = 1; seed <= 3; seed++)
        cr_assert_eq(share_model((*sh)[0], (*sh)[1], (int)(*sh)[2], seed, 1500, &run), 0, "seed %llu: %s",
                     (unsigned long long)seed, run.why);
}
