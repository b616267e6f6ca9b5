/* fuzz_cache_hints: the cache's public API with hints and prefetch
 * (gpumem_cache.h) as a state machine, driven by the input: one host
 * thread over memory storage, 8 lines of 512 bytes in 4 slots, under
 * BRRIP (takes no hints), the slot kind HINTED_RRIP or the sequential
 * HINTED policy (the first byte), with a prefetch budget of 1 to 4.
 *
 * Each op byte (with the bytes after it) picks an action and a line (one
 * of the 8, or 8, 9, 2^40) and an epoch (near the clock, behind it, far
 * ahead, UINT64_MAX): acquire for read or write (the reference kept, up
 * to 8), write a byte through a held write reference, read a held line
 * whole, release a held reference, release a line not held (misuse),
 * hint, demote, move the clock, prefetch, the array forms of hint and
 * prefetch over any element range (empty, whole, past the end), flush,
 * write back, invalidate, weigh a line (the epoch as its weight).
 *
 * Properties, for every input:
 *   - no crash, hang or undefined behaviour; nothing leaked;
 *   - every call returns one of its documented statuses; a line past the
 *     end is ERANGE and an array range past the end ERANGE, exactly; a
 *     prefetch for epoch UINT64_MAX is EOVERFLOW, and so is a weight of
 *     2^63 or more; a hint to BRRIP is ESTATE, a weight to any policy but
 *     the sequential hinted one; a release of a line nobody holds is ESTATE and changes
 *     nothing;
 *   - hints and prefetches are advice: every acquire and every read of a
 *     held line returns the newest bytes written (the model), whatever was
 *     hinted, demoted or read ahead;
 *   - at the end, every reference released: a flush is OK, the storage
 *     holds every byte's newest value, the quiescent structure check finds
 *     nothing, no prefetch is counted in flight, and the counters show no
 *     invariant violation but the misused releases. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include "tests/fuzz/fuzz.h"
#include "gpumem_cache.h"

#define LINES 8u
#define SLOTS 4u
#define LINE 512u
#define MAX_HELD 8u

static unsigned char storage[LINES * LINE];
static unsigned char cur[LINES][LINE]; /* the model: the newest value of every byte */
static struct held {
    uint64_t line;
    int write;
    unsigned char *p;
} held[MAX_HELD];
static uint32_t n_held;

static uint64_t pick_line(fuzz_bytes *b) {
    static const uint64_t odd[] = {LINES, LINES + 1, 1ull << 40};
    unsigned v = fuzz_u8(b);
    return v < 224 ? v % LINES : odd[v % 3];
}

/* An epoch near the clock (-1 .. +3), far ahead, or UINT64_MAX. */
static uint64_t pick_epoch(fuzz_bytes *b, uint64_t clock) {
    unsigned v = fuzz_u8(b);
    if (v == 255) return UINT64_MAX;
    if (v >= 250) return clock + 1000000;
    if (v % 5 == 0) return clock ? clock - 1 : 0;
    return clock + v % 5 - 1;
}

static int line_held(uint64_t line) {
    uint32_t i;
    for (i = 0; i < n_held; i++)
        if (held[i].line == line) return 1;
    return 0;
}

/* A call on `line`: past the end it must have been ERANGE, and then it
 * returns 1 (nothing more to check). */
static int past_end(gpumem_status s, uint64_t line, const char *what) {
    if (line < LINES) return 0;
    FUZZ_CHECK(s == GPUMEM_ERANGE, "%s of line %llu, past the end: %s", what, (unsigned long long)line,
               gpumem_status_str(s));
    return 1;
}

/* Whether s is what a hint (op 6), demote (7) or prefetch (9) of a line
 * inside the data may return: a hint to BRRIP is ESTATE, a demote OK; a
 * prefetch for UINT64_MAX is EOVERFLOW, one behind the clock may be
 * ERANGE, else it reads ahead or gives way. */
static int line_status_ok(unsigned op, gpumem_status s, uint32_t kind, uint64_t when, uint64_t clock) {
    if (op == 7) return s == (kind == GPUMEM_POLICY_BRRIP ? GPUMEM_ESTATE : GPUMEM_OK);
    if (op == 9)
        return when == UINT64_MAX ? s == GPUMEM_EOVERFLOW
                                  : s == GPUMEM_OK || s == GPUMEM_EAGAIN || (s == GPUMEM_ERANGE && when < clock);
    return kind == GPUMEM_POLICY_BRRIP ? s == GPUMEM_ESTATE
                                       : s == GPUMEM_OK || s == GPUMEM_ERANGE || s == GPUMEM_EOVERFLOW;
}

static void check_line(const unsigned char *p, uint64_t line, const char *what) {
    FUZZ_CHECK(memcmp(p, cur[line], LINE) == 0, "%s of line %llu: not the newest bytes", what,
               (unsigned long long)line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const uint32_t kinds[] = {GPUMEM_POLICY_BRRIP, GPUMEM_POLICY_HINTED_RRIP, GPUMEM_POLICY_HINTED};
    fuzz_bytes b = {data, size, 0};
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_policy_desc pd;
    gpumem_policy seq;
    void *seq_mem = NULL;
    gpumem_cache *c = NULL;
    gpumem_cache_array a;
    gpumem_cache_stats st;
    uint32_t kind = kinds[fuzz_u8(&b) % 3], i, ops = 0;
    uint64_t misuses = 0; /* releases of lines not held: each counted as a violation, by design */
    uint64_t clock = 0, w;
    gpumem_status s;
    for (w = 0; w < LINES * LINE; w++) storage[w] = (unsigned char)(w * 7 + w / LINE);
    memcpy(cur, storage, sizeof storage);
    n_held = 0;
    d.n_lines = LINES;
    d.n_slots = SLOTS;
    d.line_bytes = LINE;
    d.full_sweeps = 1;
    d.prefetch_budget = 1 + fuzz_u8(&b) % 4;
    d.backing = gpumem_cache_backing_memory(storage);
    if (kind == GPUMEM_POLICY_HINTED) {
        pd = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, SLOTS);
        seq_mem = malloc(gpumem_policy_bytes(&pd));
        FUZZ_CHECK(seq_mem && gpumem_policy_init(&seq, &pd, seq_mem) == GPUMEM_OK, "policy setup");
        d.seq_policy = &seq;
    } else {
        d.policy = kind;
    }
    FUZZ_CHECK(gpumem_cache_create(&d, &c) == GPUMEM_OK, "cache setup");
    a = gpumem_cache_array_make(c, 8, 0, LINES * LINE / 8);
    while (fuzz_more(&b) && ops++ < 4096) {
        unsigned op = fuzz_u8(&b) % 15;
        uint64_t line = pick_line(&b), when = pick_epoch(&b, clock), first, count;
        void *p = NULL;
        switch (op) {
        case 0: /* acquire, for read or write */
        case 1:
            if (n_held == MAX_HELD) break;
            s = gpumem_cache_acquire(c, line, 1, op == 1, &p);
            if (past_end(s, line, "acquire")) break;
            FUZZ_CHECK(s == GPUMEM_OK || s == GPUMEM_EAGAIN, "acquire: %s", gpumem_status_str(s));
            if (s == GPUMEM_EAGAIN) {
                uint32_t lines_held = 0, j, k;
                for (j = 0; j < LINES; j++) lines_held += line_held(j);
                for (k = 0; k < n_held; k++) FUZZ_CHECK(held[k].line != line, "EAGAIN for a line held");
                FUZZ_CHECK(lines_held >= SLOTS, "EAGAIN with %u of %u slots held", lines_held, SLOTS);
                break;
            }
            check_line((unsigned char *)p, line, "acquire");
            held[n_held++] = (struct held){line, op == 1, (unsigned char *)p};
            break;
        case 2: /* write a byte through a held write reference */
            for (i = 0; i < n_held && !held[i].write; i++) {
            }
            if (i < n_held) {
                unsigned at = fuzz_u16(&b) % LINE;
                /* every held reference to a line shares its slot: keep them all one */
                cur[held[i].line][at]++;
                held[i].p[at] = cur[held[i].line][at];
            }
            break;
        case 3: /* read a held line whole */
            if (n_held) check_line(held[line % n_held].p, held[line % n_held].line, "read");
            break;
        case 4: /* release a held reference */
            if (n_held) {
                i = (uint32_t)(line % n_held);
                s = gpumem_cache_release(c, held[i].line, 1);
                FUZZ_CHECK(s == GPUMEM_OK, "release of a held line: %s", gpumem_status_str(s));
                held[i] = held[--n_held];
            }
            break;
        case 5: /* release a line nobody holds (misuse) */
            if (line < LINES && line_held(line)) break;
            s = gpumem_cache_release(c, line, 1);
            if (past_end(s, line, "release")) break;
            FUZZ_CHECK(s == GPUMEM_ESTATE, "release of line %llu, not held: %s", (unsigned long long)line,
                       gpumem_status_str(s));
            misuses++;
            break;
        case 6: /* hint, demote or prefetch of a line */
        case 7:
        case 9:
            s = op == 6 ? gpumem_cache_hint(c, line, when)
                : op == 7 ? gpumem_cache_demote(c, line)
                          : gpumem_cache_prefetch(c, line, when);
            if (past_end(s, line, op == 6 ? "hint" : op == 7 ? "demote" : "prefetch")) break;
            FUZZ_CHECK(line_status_ok(op, s, kind, when, clock), "op %u on line %llu for %llu (clock %llu): %s", op,
                       (unsigned long long)line, (unsigned long long)when, (unsigned long long)clock,
                       gpumem_status_str(s));
            break;
        case 8: /* move the clock */
            s = gpumem_cache_epoch(c, when);
            if (when == UINT64_MAX)
                FUZZ_CHECK(s == GPUMEM_EOVERFLOW || s == GPUMEM_ESTATE, "epoch UINT64_MAX: %s", gpumem_status_str(s));
            else FUZZ_CHECK(s == GPUMEM_OK || s == GPUMEM_ESTATE, "epoch: %s", gpumem_status_str(s));
            if (s == GPUMEM_OK && when > clock) clock = when;
            break;
        case 10: /* array hint or prefetch over any range */
        case 11:
            first = fuzz_u16(&b) % (a.n + 2);
            count = fuzz_u16(&b) % (a.n + 2);
            s = op == 10 ? gpumem_cache_array_hint(&a, first, count, when)
                         : gpumem_cache_array_prefetch(&a, first, count, when);
            if (first + count > a.n)
                FUZZ_CHECK(s == GPUMEM_ERANGE, "array range %llu + %llu past %llu: %s", (unsigned long long)first,
                           (unsigned long long)count, (unsigned long long)a.n, gpumem_status_str(s));
            else
                FUZZ_CHECK(s == GPUMEM_OK || s == GPUMEM_ERANGE || s == GPUMEM_EOVERFLOW || s == GPUMEM_ESTATE ||
                               (op == 11 && s == GPUMEM_EAGAIN),
                           "array %s: %s", op == 10 ? "hint" : "prefetch", gpumem_status_str(s));
            break;
        case 12: /* flush, or write back */
            s = line & 1 ? gpumem_cache_flush(c, NULL) : gpumem_cache_writeback(c, 0, SLOTS, NULL);
            FUZZ_CHECK(s == GPUMEM_OK || s == GPUMEM_EAGAIN, "flush: %s", gpumem_status_str(s));
            break;
        case 13: /* invalidate */
            s = gpumem_cache_invalidate(c, 0, SLOTS, NULL);
            FUZZ_CHECK(s == GPUMEM_OK || s == GPUMEM_EAGAIN, "invalidate: %s", gpumem_status_str(s));
            break;
        case 14: /* weigh a line: the sequential hinted policy's alone */
            s = gpumem_cache_weight(c, line, when);
            if (when >> 63) FUZZ_CHECK(s == GPUMEM_EOVERFLOW, "weight %llu: %s", (unsigned long long)when,
                                       gpumem_status_str(s));
            else if (!past_end(s, line, "weight"))
                FUZZ_CHECK(s == (kind == GPUMEM_POLICY_HINTED ? GPUMEM_OK : GPUMEM_ESTATE), "weight of line %llu: %s",
                           (unsigned long long)line, gpumem_status_str(s));
            break;
        }
    }
    while (n_held) {
        n_held--;
        FUZZ_CHECK(gpumem_cache_release(c, held[n_held].line, 1) == GPUMEM_OK, "release at the end");
    }
    s = gpumem_cache_flush(c, NULL);
    FUZZ_CHECK(s == GPUMEM_OK, "flush with nothing held: %s", gpumem_status_str(s));
    FUZZ_CHECK(memcmp(storage, cur, sizeof storage) == 0, "storage after the flush: not the newest bytes");
    FUZZ_CHECK(gpumem_cache_check_quiescent(c) == 0, "structure problems at the end");
    FUZZ_CHECK(c->prefetching.v == 0, "%u prefetches counted in flight", c->prefetching.v);
    gpumem_cache_get_stats(c, &st);
    FUZZ_CHECK(st.violations == misuses, "%llu invariant violations, %llu misused releases",
               (unsigned long long)st.violations, (unsigned long long)misuses);
    gpumem_cache_destroy(c);
    free(seq_mem);
    return 0;
}
