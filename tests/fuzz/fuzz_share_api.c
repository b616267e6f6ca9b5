/* fuzz_share_api: the share's public API (gpumem_share.h) as a state
 * machine, driven by the input: one host thread, no server (so no
 * gpumem_share_thread_as_gpu: its posts need one), over memory storage
 * (tests/share_rig.h): 2 or 3 caches of 4 slots over 8 lines of 512
 * bytes. Owner 1 is the host owner; owners 2 and 3 are GPU owners by
 * number, called from the host (a GPU owner's release then acquires for
 * the host, and its acquire releases the host first).
 *
 * Each op byte (with the bytes after it) picks an owner (a real one, or 0,
 * n_owners, 40, 255), a line (or 8, 9, 2^40), and an action: get for read
 * or write (the reference kept), write a byte through a held write
 * reference (else get, write, put), read the line through a held reference
 * (else get, read, put), put for read or write (with or without a get
 * held: misuse, double puts), release or acquire of a range (empty, whole,
 * past the end), merge of a range, flush.
 *
 * Byte b of each line is written only by owner 1 + b % caches, each write
 * one more than its last (so the value says which write it was, and no
 * two owners race on a byte). Properties, for every input:
 *   - no crash, hang or undefined behaviour; nothing leaked;
 *     (two calls are not made: a release while the owner holds a write
 *     reference in the range, against its documented precondition, and a
 *     get of a line another owner holds a write reference on, which waits
 *     for that writer by design - another thread's, never this one);
 *   - every call returns one of its documented statuses; a bad owner is
 *     EINVAL and a line or range past the end ERANGE, exactly;
 *   - a put of what the caller does not hold (no get, a double put, a read
 *     put for a write get or back) is not OK (ESTATE), and loses nothing:
 *     the real references still put OK, and every later check holds;
 *   - reads (lazy release consistency): an owner sees its own newest
 *     write; after A released and then B acquired, B reads at least what
 *     A had written at that release, and never a value A did not write;
 *     (the host's release made by a GPU owner's acquire is not modelled:
 *     the check is only weaker for it);
 *   - at the end, every reference put, every owner releasing everything
 *     and flushed: destroy returns OK and storage holds the newest value
 *     of every byte written. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include "tests/fuzz/fuzz.h"
static void fuzz_quiet(const char *fmt, ...) { (void)fmt; }
#define GPUMEM_LOG(...) fuzz_quiet(__VA_ARGS__)
#include "tests/share_rig.h"

#define LINES 8u
#define SLOTS 4u
#define MAXO 4u /* storage + 3 caches */
#define MAX_HELD 8u

static share_rig rig;
static uint32_t n_owners, n_caches;
/* the model: newest value of each byte (written by its one owner); what
 * each owner must see at least (set by its acquires) */
static unsigned char cur[LINES][SHARE_RIG_LINE];
static unsigned char released[LINES][SHARE_RIG_LINE]; /* its owner's value at its last release */
static unsigned char seen_min[MAXO][LINES][SHARE_RIG_LINE];
static struct held {
    uint32_t o, line;
    int write;
    unsigned char *p;
} held[MAX_HELD];
static uint32_t n_held;

static uint32_t writer_of(uint32_t b) { return 1 + b % n_caches; }
static int owner_ok(uint32_t o) { return o >= 1 && o < n_owners; }

static uint32_t pick_owner(unsigned v) {
    switch (v % 8) {
    case 0: return 0;
    case 1: return n_owners;
    case 2: return 40;
    case 3: return 255;
    default: return 1 + v / 8 % n_caches; /* v / 8: the op byte's choice */
    }
}
static uint64_t pick_line(unsigned v) {
    switch (v % 16) {
    case 8: return LINES;
    case 9: return LINES + 1;
    case 10: return 1ull << 40;
    default: return v % 8;
    }
}

static int find_held(uint32_t o, uint64_t line, int write) {
    uint32_t i;
    for (i = 0; i < n_held; i++)
        if (held[i].o == o && held[i].line == line && (write < 0 || held[i].write == write)) return (int)i;
    return -1;
}
static void drop_held(int i) { held[i] = held[--n_held]; }

/* Expected status of an owner/line check. */
static gpumem_status want_arg(uint32_t o, uint64_t line) {
    if (!owner_ok(o)) return GPUMEM_EINVAL;
    if (line >= LINES) return GPUMEM_ERANGE;
    return GPUMEM_OK;
}
static gpumem_status want_range(uint32_t o, uint64_t first, uint64_t n) {
    if (!owner_ok(o)) return GPUMEM_EINVAL;
    if (first > LINES || n > LINES - first) return GPUMEM_ERANGE;
    return GPUMEM_OK;
}

/* Check a read of line l by owner o against the model. */
static void check_read(uint32_t o, uint32_t l, const unsigned char *p) {
    uint32_t b;
    for (b = 0; b < SHARE_RIG_LINE; b++) {
        uint32_t w = writer_of(b);
        if (w == o)
            FUZZ_CHECK(p[b] == cur[l][b], "owner %u line %u byte %u: reads %u, its own newest write is %u", o, l, b,
                       p[b], cur[l][b]);
        else
            FUZZ_CHECK(p[b] >= seen_min[o][l][b] && p[b] <= cur[l][b],
                       "owner %u line %u byte %u (owner %u's): reads %u, must be in [%u (released, then acquired), "
                       "%u (newest)]",
                       o, l, b, w, p[b], seen_min[o][l][b], cur[l][b]);
    }
}

/* Whether an owner other than o holds a write reference on line: then o's
 * get may wait for that writer to put the line down (a fill merging a
 * released copy waits for its writer, gpumem__share_fill_here: by design,
 * another thread's), which one thread standing for all of them never
 * does. Such a get is not made. */
static int other_writer(uint32_t o, uint64_t line) {
    uint32_t i;
    for (i = 0; i < n_held; i++)
        if (held[i].o != o && held[i].line == line && held[i].write) return 1;
    return 0;
}
/* Whether o holds a write reference in [first, first + n): release's
 * precondition (no writer of the owner's in the range) would not hold. */
static int writing_in(uint32_t o, uint64_t first, uint64_t n) {
    uint32_t i;
    for (i = 0; i < n_held; i++)
        if (held[i].o == o && held[i].write && held[i].line >= first && held[i].line - first < n) return 1;
    return 0;
}

static gpumem_status do_get(uint32_t o, uint64_t line, int write, unsigned char **p) {
    gpumem_status st, want = want_arg(o, line);
    if (want == GPUMEM_OK && other_writer(o, line)) return GPUMEM_EAGAIN; /* not made */
    st = gpumem_share_get(rig.share, o, line, write, (void **)p);
    if (want != GPUMEM_OK) {
        FUZZ_CHECK(st == want, "get(%u, %llu) = %d, want %d", o, (unsigned long long)line, st, want);
        return st;
    }
    FUZZ_CHECK(st == GPUMEM_OK || st == GPUMEM_EAGAIN || st == GPUMEM_ENOMEM, "get(%u, %llu, %d) = %d", o,
               (unsigned long long)line, write, st);
    if (st == GPUMEM_OK) check_read(o, (uint32_t)line, *p);
    return st;
}

static void do_put(uint32_t o, uint64_t line, int write) {
    int i = owner_ok(o) && line < LINES ? find_held(o, line, write) : -1;
    gpumem_status st = gpumem_share_put(rig.share, o, line, write), want = want_arg(o, line);
    if (want != GPUMEM_OK) FUZZ_CHECK(st == want, "put(%u, %llu) = %d, want %d", o, (unsigned long long)line, st, want);
    else if (i >= 0) {
        FUZZ_CHECK(st == GPUMEM_OK, "put(%u, %llu, %d) of a held reference = %d", o, (unsigned long long)line, write, st);
        drop_held(i);
    } else {
        FUZZ_CHECK(st == GPUMEM_ESTATE, "put(%u, %llu, %d) of nothing held = %d, want ESTATE", o,
                   (unsigned long long)line, write, st);
    }
}

static void do_release(uint32_t o, uint64_t first, uint64_t n) {
    gpumem_status st = gpumem_share_release(rig.share, o, first, n), want = want_range(o, first, n);
    uint64_t l;
    uint32_t b;
    /* A GPU owner's release (owner >= GPUMEM_SHARE_GPU0, called here by a
     * host thread) is made, then followed by the host owner's acquire,
     * whose EAGAIN (the host holds a stale copy) it returns. */
    if (want == GPUMEM_OK && o >= GPUMEM_SHARE_GPU0 && st == GPUMEM_EAGAIN) want = st;
    FUZZ_CHECK(st == want, "release(%u, %llu, %llu) = %d, want %d", o, (unsigned long long)first,
               (unsigned long long)n, st, want);
    if (st != GPUMEM_OK && st != GPUMEM_EAGAIN) return;
    for (l = first; l < first + n; l++)
        for (b = 0; b < SHARE_RIG_LINE; b++)
            if (writer_of(b) == o) released[l][b] = cur[l][b];
    if (st == GPUMEM_OK && o >= GPUMEM_SHARE_GPU0) /* the host acquired it */
        for (l = first; l < first + n; l++) memcpy(seen_min[GPUMEM_SHARE_HOST][l], released[l], SHARE_RIG_LINE);
}

static gpumem_status do_acquire(uint32_t o, uint64_t first, uint64_t n) {
    gpumem_status st = gpumem_share_acquire(rig.share, o, first, n), want = want_range(o, first, n);
    uint64_t l;
    if (want != GPUMEM_OK) {
        FUZZ_CHECK(st == want, "acquire(%u, %llu, %llu) = %d, want %d", o, (unsigned long long)first,
                   (unsigned long long)n, st, want);
        return st;
    }
    FUZZ_CHECK(st == GPUMEM_OK || st == GPUMEM_EAGAIN, "acquire(%u, %llu, %llu) = %d", o, (unsigned long long)first,
               (unsigned long long)n, st);
    if (st == GPUMEM_OK)
        for (l = first; l < first + n; l++) memcpy(seen_min[o][l], released[l], SHARE_RIG_LINE);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes in = {data, size, 0};
    uint32_t ops = 0, o, l, b;
    gpumem_status st;

    (void)share_rig_serve; /* share_rig.h's helpers this harness does not use */
    (void)share_rig_get;
    (void)share_rig_release;
    n_caches = 2 + fuzz_u8(&in) % 2;
    n_owners = n_caches + 1;
    FUZZ_CHECK(share_rig_make(&rig, n_owners, 0, LINES, SLOTS) == GPUMEM_OK, "the rig");
    memset(cur, 0, sizeof cur);
    memset(released, 0, sizeof released);
    memset(seen_min, 0, sizeof seen_min);
    n_held = 0;

    while (fuzz_more(&in) && ops++ < 512) {
        unsigned op = fuzz_u8(&in), a = fuzz_u8(&in);
        unsigned flag = op / 10 & 1; /* read or write, release or acquire */
        uint32_t oo = pick_owner(a % 8 + 8 * (op / 20));
        uint64_t line = pick_line(a >> 3);
        unsigned char *p;
        int i;
        switch (op % 10) {
        case 0: /* get, held */
        case 1:
            if (n_held == MAX_HELD) break;
            if (do_get(oo, line, (int)(op % 10), &p) == GPUMEM_OK)
                held[n_held++] = (struct held){oo, (uint32_t)line, (int)(op % 10), p};
            break;
        case 2: /* write one of the owner's bytes */
        case 3: {
            unsigned bb = fuzz_u16(&in) % SHARE_RIG_LINE;
            int own;
            if (!owner_ok(oo) || line >= LINES) {
                do_get(oo, line, 1, &p);
                break;
            }
            bb = bb - bb % n_caches + (oo - 1); /* a byte of oo's */
            if (bb >= SHARE_RIG_LINE || cur[line][bb] == 255) break;
            i = find_held(oo, line, 1);
            own = i < 0;
            if (own) {
                if (do_get(oo, line, 1, &p) != GPUMEM_OK) break;
            } else {
                p = held[i].p;
            }
            p[bb] = ++cur[line][bb];
            if (own) FUZZ_CHECK(gpumem_share_put(rig.share, oo, line, 1) == GPUMEM_OK, "put after a write");
            break;
        }
        case 4: /* read the line */
            i = owner_ok(oo) && line < LINES ? find_held(oo, line, -1) : -1;
            if (i >= 0) check_read(oo, (uint32_t)line, held[i].p);
            else if (do_get(oo, line, 0, &p) == GPUMEM_OK)
                FUZZ_CHECK(gpumem_share_put(rig.share, oo, line, 0) == GPUMEM_OK, "put after a read");
            break;
        case 5: do_put(oo, line, (int)flag); break;
        case 6: { /* release or acquire of a range */
            unsigned r = fuzz_u8(&in);
            uint64_t first = r % 4 == 3 ? line : r / 4 % 10, n = r % 4 == 0 ? 0 : r % 4 == 1 ? LINES - (first < LINES ? first : LINES) : r / 40 % 10;
            if (flag) do_acquire(oo, first, n);
            else if (!writing_in(oo, first, n)) do_release(oo, first, n);
            break;
        }
        case 7: { /* merge */
            unsigned r = fuzz_u8(&in);
            uint64_t first = r % 10, n = r / 10 % 10;
            gpumem_status want = want_range(oo, first, n);
            st = gpumem_share_merge(rig.share, oo, first, n);
            if (want != GPUMEM_OK) FUZZ_CHECK(st == want, "merge(%u, %llu, %llu) = %d, want %d", oo,
                                              (unsigned long long)first, (unsigned long long)n, st, want);
            else FUZZ_CHECK(st == GPUMEM_OK || st == GPUMEM_EAGAIN, "merge(%u, %llu, %llu) = %d", oo,
                            (unsigned long long)first, (unsigned long long)n, st);
            break;
        }
        case 8: /* flush */
            st = gpumem_share_flush(rig.share, oo);
            if (!owner_ok(oo)) FUZZ_CHECK(st == GPUMEM_EINVAL, "flush(%u) = %d, want EINVAL", oo, st);
            else FUZZ_CHECK(st == GPUMEM_OK || st == GPUMEM_EAGAIN, "flush(%u) = %d", oo, st);
            break;
        default: /* destroy while something is held: EBUSY, nothing lost */
            if (n_held) FUZZ_CHECK(gpumem_share_destroy(rig.share) == GPUMEM_EBUSY, "destroy while held");
            break;
        }
    }
    /* The end: put everything, release everything, see it, flush, destroy. */
    while (n_held) do_put(held[n_held - 1].o, held[n_held - 1].line, held[n_held - 1].write);
    for (o = 1; o < n_owners; o++) do_release(o, 0, LINES);
    for (o = 1; o < n_owners; o++) /* written copies are pinned until merged: 4 slots, 8 lines */
        FUZZ_CHECK((st = gpumem_share_flush(rig.share, o)) == GPUMEM_OK, "flush(%u), nothing held = %d", o, st);
    for (o = 1; o < n_owners; o++) {
        FUZZ_CHECK(do_acquire(o, 0, LINES) == GPUMEM_OK, "acquire of everything, nothing held");
        for (l = 0; l < LINES; l++) {
            unsigned char *p;
            FUZZ_CHECK((st = do_get(o, l, 0, &p)) == GPUMEM_OK, "a read at the end: %d", st);
            FUZZ_CHECK(gpumem_share_put(rig.share, o, l, 0) == GPUMEM_OK, "put at the end");
        }
    }
    for (o = 1; o < n_owners; o++)
        FUZZ_CHECK((st = gpumem_share_flush(rig.share, o)) == GPUMEM_OK, "flush(%u) at the end = %d", o, st);
    FUZZ_CHECK((st = gpumem_share_destroy(rig.share)) == GPUMEM_OK, "destroy with nothing held = %d", st);
    for (l = 0; l < LINES; l++)
        for (b = 0; b < SHARE_RIG_LINE; b++)
            FUZZ_CHECK(share_rig_stored(&rig, l, b) == cur[l][b], "storage line %u byte %u = %u, newest released %u",
                       l, b, share_rig_stored(&rig, l, b), cur[l][b]);
    rig.share = NULL; /* destroyed */
    share_rig_free(&rig);
    return 0;
}
