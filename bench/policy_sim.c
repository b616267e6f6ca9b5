/* bench/policy_sim.c - trace-driven simulator of gpumem_policy.h's policies
 * next to Belady's OPT.
 *
 *   policy_sim gen KIND FILE [SIZE]      write a synthetic trace (binary format);
 *                                        KIND: stream loop hotspot srad pathfinder
 *                                        backprop uniform zipf bfs phases; SIZE scales it
 *   policy_sim run TRACE [options]       simulate; TRACE binary (gpumem_policy.h) or text: a
 *                                        line number a line (trace_parse_id), lines ending in
 *                                        \n or \r\n; a NUL byte or a lone \r is refused
 *       --policies P,P,..|all   policies (clock fifo srrip brrip hinted-rrip lru lfu cp hpe tournament
 *                               hinted; hinted and hinted-rrip replay the trace's hint records, the
 *                               others ignore them)
 *       --fracs F,F,..          capacities as fractions of the footprint (default 0.5,0.75)
 *       --lines N,N,..          capacities in lines instead
 *       --two-tier F            also GMT's two tiers: a host tier of F x footprint lines
 *                               behind CLOCK, placements tier-order, random and reuse
 *       --prefetch readahead|fdp  prefetch on every demand miss (one-tier runs)
 *       --prefetch hints        the trace's "soon" records read their lines ahead (as
 *                               gpumem_cache_prefetch: never in place of a line hinted
 *                               for that epoch or sooner); every policy, one-tier runs
 *       --hint-fallback P       the hinted policy's fallback (default brrip)
 *       --hint-slack N          epochs a use may miss its hint by and prove it right (default 0)
 *       --oracle Q              hinted and hinted-rrip get the true next uses instead of the trace's
 *                               hints, the epoch advancing every Q accesses (1: hinted is Belady's OPT)
 *       --name NAME --tsv FILE  append result rows to FILE, labelled NAME
 *   policy_sim table DIR        every workload, every policy, 50% and 75% of the
 *                               footprint, two tiers, prefetch: DIR/policy-sim.tsv
 *
 * The trace is read three times, never held: (1) line numbers to dense ids
 * in a temporary file, (2) backwards, each access's next use (for OPT) in a
 * second one, (3) forwards through every simulation at once. Memory is per
 * distinct line (id map, per-line state of each simulation, FDP's regions)
 * and per slot, never per line number: a trace naming line 2^62 costs what
 * one naming line 2 does. Every failure says why (exit 2: the trace or the
 * options; exit 1: memory or a temporary file) and frees what it took.
 */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <errno.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "bench/policy_sim.h"
#include "bench/policy_traces.h"

#ifndef CHUNK /* accesses a pass holds at once; tests/fuzz/fuzz_trace.c makes it small, to cross chunks often */
#define CHUNK (1u << 20)
#endif
#define STEP 65536u
#define MAX_SIMS 128
#define TRAIN_WINDOW (1ull << 22) /* GMT: exact RDs over the first 4M accesses */
#define TRAIN_BATCH 10000         /* GMT: refit after every 10,000 samples (paper) */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- reading traces ------------------------------------------------------------ */

/* A hint record, at the access it comes before (gpumem_policy.h's trace
 * format): op PSIM_HINT, PSIM_SOON, PSIM_DEMOTE, PSIM_EPOCH or PSIM_WEIGHT. */
typedef struct hint_rec {
    uint64_t at;    /* accesses before it */
    uint64_t line;  /* the raw line; pass 1 makes it the dense id */
    uint64_t value; /* the hint's epoch, the new epoch, or the weight */
    uint32_t op;
} hint_rec;

typedef struct trace_in {
    FILE *f;
    int binary;    /* 0 text, 1 GPMTRC01, 2 GPMTRC02 (hint records) */
    const char *path;
    uint64_t line; /* text: lines read so far; binary: records (8-byte words) read so far */
    int bad;       /* a malformed access was met and reported: the run stops, exit 2 */
    uint64_t accesses; /* accesses read so far */
    hint_rec *ev;      /* hint records of the accesses read since the caller last emptied it */
    size_t ev_n, ev_cap;
    int ev_full;       /* no memory for them: the run stops, exit 1 */
    uint64_t wbuf[512]; /* GPMTRC02: words read ahead */
    size_t wn, wi;
    uint64_t bytes;    /* GPMTRC02: bytes read after the header */
} trace_in;

static int trace_open(trace_in *t, const char *path) {
    char magic[8];
    memset(t, 0, sizeof *t);
    t->path = path;
    t->f = fopen(path, "rb");
    if (!t->f) return -1;
    if (fread(magic, 1, 8, t->f) == 8) {
        if (memcmp(magic, GPUMEM_POLICY_TRACE_MAGIC, 8) == 0) t->binary = 1;
        else if (memcmp(magic, GPUMEM_POLICY_TRACE_MAGIC_HINTS, 8) == 0) t->binary = 2;
    }
    if (!t->binary) rewind(t->f);
    return 0;
}

static void trace_event(trace_in *t, uint32_t op, uint64_t line, uint64_t value, uint64_t at) {
    if (t->ev_n == t->ev_cap) {
        size_t cap = t->ev_cap ? 2 * t->ev_cap : 1024;
        hint_rec *grown = (hint_rec *)realloc(t->ev, cap * sizeof *grown);
        if (!grown) {
            t->ev_full = 1;
            return;
        }
        t->ev = grown, t->ev_cap = cap;
    }
    t->ev[t->ev_n].at = at;
    t->ev[t->ev_n].line = line;
    t->ev[t->ev_n].value = value;
    t->ev[t->ev_n++].op = op;
}

/* A number in decimal or 0x-hex below `limit`; *s moves past it. 0, or -1
 * with `why`. */
static int trace_parse_num(const char **sp, uint64_t limit, uint64_t *out, const char **why, const char *what) {
    const char *s = *sp;
    uint64_t v = 0;
    int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X'), digits = 0;
    if (hex) s += 2;
    for (;; s++, digits++) {
        unsigned d;
        if (*s >= '0' && *s <= '9') d = (unsigned)(*s - '0');
        else if (hex && *s >= 'a' && *s <= 'f') d = (unsigned)(*s - 'a' + 10);
        else if (hex && *s >= 'A' && *s <= 'F') d = (unsigned)(*s - 'A' + 10);
        else break;
        if (v > (limit - 1 - d) / (hex ? 16u : 10u)) {
            *why = what;
            return -1;
        }
        v = v * (hex ? 16u : 10u) + d;
    }
    if (digits == 0) {
        *why = hex ? "hex digits after 0x" : what; /* what was wanted here: a line number, an epoch, a weight */
        return -1;
    }
    *out = v;
    *sp = s;
    return 0;
}

/* A text access: a line number in decimal or 0x-hex below 2^63 (bit 63 is
 * the binary format's write flag, so a larger number could not be written
 * as a binary trace: refused, as the documentation says), optionally "w",
 * optionally a '#' comment. Returns 0 and the number, or -1 with `why`. */
static int trace_parse_id(const char *s, uint64_t *out, const char **why) {
    if (trace_parse_num(&s, GPUMEM_POLICY_TRACE_WRITE, out, why,
                        "a line number in decimal or 0x-hex below 2^63 (bit 63: the write flag)") != 0)
        return -1;
    s += strspn(s, " \t");
    if (*s == 'w') s += 1 + strspn(s + 1, " \t");
    if (*s != '#' && *s != 0) { /* the line comes without its end (trace_text_line) */
        *why = "only \"w\" or a '#' comment after the line number";
        return -1;
    }
    return 0;
}

/* A text hint record (gpumem_policy.h): "h LINE EPOCH" or "s LINE EPOCH"
 * (will be used at EPOCH; soon), "d LINE" (done with), "e EPOCH" (the
 * clock), "w LINE WEIGHT", then optionally a '#' comment; LINE below 2^56,
 * EPOCH and WEIGHT below 2^63, as in the binary format. 0, or -1 with `why`. */
static int trace_parse_hint(const char *s, uint32_t *op, uint64_t *line, uint64_t *value, const char **why) {
    char c = *s++;
    *line = *value = 0;
    *op = c == 'e' ? PSIM_EPOCH : c == 'd' ? PSIM_DEMOTE : c == 's' ? PSIM_SOON : c == 'w' ? PSIM_WEIGHT : PSIM_HINT;
    s += strspn(s, " \t");
    if (c != 'e' && trace_parse_num(&s, GPUMEM_POLICY_TRACE_HINT_LINES, line, why,
                                    "a hinted line number below 2^56") != 0)
        return -1;
    s += strspn(s, " \t");
    if (c != 'd' && trace_parse_num(&s, GPUMEM_POLICY_TRACE_WRITE, value, why,
                                    c == 'w' ? "a weight below 2^63" : "an epoch below 2^63") != 0)
        return -1;
    s += strspn(s, " \t");
    if (*s != '#' && *s != 0) {
        *why = c == 'd'   ? "only a '#' comment after \"d LINE\""
               : c == 'e' ? "only a '#' comment after \"e EPOCH\""
               : c == 'w' ? "only a '#' comment after \"w LINE WEIGHT\""
                          : "only a '#' comment after \"h LINE EPOCH\"";
        return -1;
    }
    return 0;
}

#define TRACE_LINE_MAX 254 /* characters of a text line, its end not counted */

/* A malformed text line: the message (file, line, what was expected and
 * found), and the run stops (exit 2). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int trace_bad(trace_in *t, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "policy_sim: %s:%llu: ", t->path, (unsigned long long)t->line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    t->bad = 1;
    return -1;
}

/* The next text line, without its end ("\n" or "\r\n"), NUL terminated
 * in buf (TRACE_LINE_MAX + 1 bytes); 1, 0 at the end of the file, -1 after
 * a message. Read a byte at a time, not with fgets: fgets cannot say how
 * long a line holding a NUL is, so a NUL used to end the line unseen (and
 * the rest was accepted), and one early in a long line hid its length, so
 * its remainder was counted as the next line. A text trace holds no NUL
 * and no carriage return but the one before a newline. */
static int trace_text_line(trace_in *t, char *buf) {
    size_t n = 0;
    int c;
    if ((c = getc_unlocked(t->f)) == EOF) {
        if (ferror(t->f)) {
            t->line++;
            return trace_bad(t, "expected a line, found a read error: %s", strerror(errno));
        }
        return 0;
    }
    t->line++;
    for (; c != EOF && c != '\n'; c = getc_unlocked(t->f)) {
        if (c == 0) return trace_bad(t, "expected a line of text, found a NUL byte at column %zu", n + 1);
        if (c == '\r') {
            if ((c = getc_unlocked(t->f)) == '\n') break;
            return trace_bad(t, "expected a line end (\"\\n\" or \"\\r\\n\"), found a carriage return not followed by a "
                                "newline at column %zu", n + 1);
        }
        if (n == TRACE_LINE_MAX)
            return trace_bad(t, "expected a line of at most %d characters, found a longer one", TRACE_LINE_MAX);
        buf[n++] = (char)c;
    }
    if (c == EOF && ferror(t->f)) return trace_bad(t, "expected a line, found a read error: %s", strerror(errno));
    buf[n] = 0;
    return 1;
}

/* GPMTRC02: the next 8-byte word; 1, 0 at the end, -1 after a message (a
 * partial last word, a read error). */
static int trace_word(trace_in *t, uint64_t *w) {
    if (t->wi == t->wn) { /* the words before a partial last one are read first: errors come in file order */
        size_t got = t->bytes % 8 ? 0 : fread(t->wbuf, 1, sizeof t->wbuf, t->f);
        t->bytes += got;
        t->wn = got / 8, t->wi = 0;
        if (t->wn == 0 && (t->bytes % 8 || ferror(t->f))) {
            fprintf(stderr, "policy_sim: %s: byte %llu: expected whole 8-byte records after the 8-byte header, found "
                            "%llu trailing bytes\n", t->path, (unsigned long long)(8 + t->bytes / 8 * 8),
                    (unsigned long long)(t->bytes % 8));
            t->bad = 1;
            return -1;
        }
        if (t->wn == 0) return 0;
    }
    *w = t->wbuf[t->wi++];
    t->line++;
    return 1;
}

/* GPMTRC02 (gpumem_policy.h): accesses and hint records. */
static size_t trace_read_hinted(trace_in *t, uint64_t *out, size_t max) {
    size_t n = 0;
    uint64_t w, value = 0;
    int got;
    while (n < max && (got = trace_word(t, &w)) > 0) {
        uint32_t op = (uint32_t)(w >> GPUMEM_POLICY_TRACE_OP_SHIFT) & 63u;
        uint64_t at = 8 + (t->line - 1) * 8;
        if (!(w & GPUMEM_POLICY_TRACE_CONTROL)) {
            out[n++] = w & (GPUMEM_POLICY_TRACE_CONTROL - 1);
            continue;
        }
        if (op > GPUMEM_POLICY_TRACE_WEIGHT) {
            fprintf(stderr, "policy_sim: %s: byte %llu: expected a hint record of kind 0..%u, found kind %u\n", t->path,
                    (unsigned long long)at, GPUMEM_POLICY_TRACE_WEIGHT, op);
            t->bad = 1;
            return 0;
        }
        if (op != GPUMEM_POLICY_TRACE_NOP && op != GPUMEM_POLICY_TRACE_DEMOTE) {
            const char *what = op == GPUMEM_POLICY_TRACE_WEIGHT ? "weight" : "epoch";
            if ((got = trace_word(t, &value)) <= 0) {
                if (got == 0) {
                    fprintf(stderr, "policy_sim: %s: byte %llu: expected the %s word of the hint record at "
                                    "byte %llu, found the end\n", t->path, (unsigned long long)(at + 8), what,
                            (unsigned long long)at);
                    t->bad = 1;
                }
                return 0;
            }
            if (value >= GPUMEM_POLICY_TRACE_WRITE) {
                fprintf(stderr, "policy_sim: %s: byte %llu: expected %s %s below 2^63, found %llu\n", t->path,
                        (unsigned long long)(at + 8), op == GPUMEM_POLICY_TRACE_WEIGHT ? "a" : "an", what,
                        (unsigned long long)value);
                t->bad = 1;
                return 0;
            }
        }
        if (op == GPUMEM_POLICY_TRACE_NOP) continue;
        trace_event(t, op == GPUMEM_POLICY_TRACE_EPOCH    ? PSIM_EPOCH
                       : op == GPUMEM_POLICY_TRACE_DEMOTE ? PSIM_DEMOTE
                       : op == GPUMEM_POLICY_TRACE_SOON   ? PSIM_SOON
                       : op == GPUMEM_POLICY_TRACE_WEIGHT ? PSIM_WEIGHT
                                                          : PSIM_HINT,
                    w & (GPUMEM_POLICY_TRACE_HINT_LINES - 1), value, t->accesses + n);
    }
    t->accesses += n;
    return t->bad ? 0 : n;
}

/* Up to max accesses (line numbers, write bit dropped), hint records to
 * t->ev; 0 at the end, or on a malformed record, which is reported (file,
 * line or byte offset, what was expected and found) and sets t->bad. */
static size_t trace_read(trace_in *t, uint64_t *out, size_t max) {
    size_t n = 0, i;
    if (t->binary == 2) return trace_read_hinted(t, out, max);
    if (t->binary) {
        long at;
        n = fread(out, 8, max, t->f);
        for (i = 0; i < n; i++) out[i] &= ~GPUMEM_POLICY_TRACE_WRITE;
        t->line += n;
        t->accesses += n;
        /* At the end, fread has dropped a partial last record: the file
         * position says whether there was one. */
        if (n < max && (at = ftell(t->f)) >= 0 && (uint64_t)at != 8 + t->line * 8) {
            fprintf(stderr, "policy_sim: %s: byte %llu: expected whole 8-byte records after the 8-byte header, found "
                            "%llu trailing bytes\n", t->path, (unsigned long long)(8 + t->line * 8),
                    (unsigned long long)((uint64_t)at - 8 - t->line * 8));
            t->bad = 1;
            return 0;
        }
        return n;
    }
    while (n < max) {
        char line[TRACE_LINE_MAX + 1], *start;
        const char *why;
        int got = trace_text_line(t, line);
        if (got < 0) return 0;
        if (got == 0) break;
        start = line + strspn(line, " \t");
        if (*start == '#' || *start == 0) continue;
        if (strchr("hsdew", *start) && (start[1] == ' ' || start[1] == '\t')) {
            uint32_t op;
            uint64_t hl, hv;
            if (trace_parse_hint(start, &op, &hl, &hv, &why) != 0) {
                trace_bad(t, "expected %s, found \"%s\"", why, start);
                return 0;
            }
            trace_event(t, op, hl, hv, t->accesses + n);
            continue;
        }
        if (trace_parse_id(start, &out[n], &why) != 0) {
            trace_bad(t, "expected %s, found \"%s\"", why, start);
            return 0;
        }
        n++;
    }
    t->accesses += n;
    return n;
}

/* ---- the run --------------------------------------------------------------------- */

typedef struct run_opts {
    uint32_t kinds[GPUMEM_POLICY_KINDS], n_kinds;
    double fracs[16];
    uint64_t lines[16];
    uint32_t n_caps, caps_are_lines;
    double t2_frac;
    uint32_t prefetch;
    uint32_t hint_fallback, hint_slack; /* the hinted policy's (0: its defaults) */
    uint64_t oracle; /* > 0: hinted gets the true next uses, an epoch every `oracle` accesses, not the trace's */
    const char *name, *tsv;
} run_opts;

typedef struct sim_slot {
    psim s;
    uint32_t kind, cap_i;
    double secs;
} sim_slot;

static int parse_list(const char *s, double *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = strtod(s, &end);
        if (end == s) return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Every policy kind, in order (not GPUMEM_POLICY_DEFAULT, which is one of them). */
static uint32_t all_kinds(uint32_t *kinds) {
    uint32_t k, n = 0;
    for (k = GPUMEM_POLICY_FIRST; k < GPUMEM_POLICY_KINDS; k++) kinds[n++] = k;
    return n;
}

static int kind_of(const char *name) {
    uint32_t k;
    for (k = GPUMEM_POLICY_FIRST; k < GPUMEM_POLICY_KINDS; k++)
        if (!strcmp(name, gpumem_policy_name(k))) return (int)k;
    return -1;
}

static const char *placement_name(uint32_t p) {
    return p == PSIM_TIER_ORDER ? "tier-order" : p == PSIM_RANDOM ? "random" : p == PSIM_REUSE ? "gmt-reuse" : "-";
}

/* Read one chunk of the next-use file that matches ids[from, from + n):
 * it was written backwards. */
static int read_next_chunk(FILE *nf, uint64_t total, uint64_t from, size_t n, uint64_t *out) {
    size_t i;
    uint64_t t;
    if (fseek(nf, (long)((total - from - n) * 8), SEEK_SET) != 0 || fread(out, 8, n, nf) != n) return -1;
    for (i = 0; i < n / 2; i++) t = out[i], out[i] = out[n - 1 - i], out[n - 1 - i] = t;
    return 0;
}

/* A failure that is not the trace's (memory, a temporary file): said, and
 * the run ends with exit 1. */
static int run_fail(const char *path, const char *what) {
    fprintf(stderr, "policy_sim: %s: %s\n", path, what);
    return 1;
}

/* The dense id of raw line `key` (new ones in order of first appearance),
 * its raw number and touched flag kept per id; NONE without memory. */
static uint32_t dense_id(psim_map *map, uint64_t key, uint64_t **raw_of, uint64_t *raw_cap, uint8_t **touched) {
    uint32_t id = psim_map_id(map, key);
    if (id == PSIM_NONE) return id;
    if (id >= *raw_cap) {
        uint64_t cap = *raw_cap ? *raw_cap * 2 : 1 << 16, *grown = (uint64_t *)realloc(*raw_of, cap * 8);
        uint8_t *t;
        if (grown) *raw_of = grown;
        if (!grown || !(t = (uint8_t *)realloc(*touched, cap))) return PSIM_NONE;
        memset(t + *raw_cap, 0, cap - *raw_cap);
        *touched = t, *raw_cap = cap;
    }
    (*raw_of)[id] = key;
    return id;
}

/* The hint records that come before accesses [from, from + m): read from
 * `evf` into *evs (grown); *n_ev of them, *next_ev the one read ahead. */
static int read_events(FILE *evf, uint64_t *left, uint64_t end, hint_rec **evs, size_t *cap, size_t *n_ev) {
    *n_ev = 0;
    while (*left > 0) {
        hint_rec h;
        long at = ftell(evf);
        if (fread(&h, sizeof h, 1, evf) != 1) return -1;
        if (h.at >= end) { /* the next chunk's */
            if (fseek(evf, at, SEEK_SET) != 0) return -1;
            break;
        }
        if (*n_ev == *cap) {
            size_t c = *cap ? 2 * *cap : 1024;
            hint_rec *g = (hint_rec *)realloc(*evs, c * sizeof *g);
            if (!g) return -1;
            *evs = g, *cap = c;
        }
        (*evs)[(*n_ev)++] = h;
        --*left;
    }
    return 0;
}

static int run(const char *path, const run_opts *o) {
    trace_in in;
    psim_map map = {0}, regions = {0};
    uint64_t *raw = (uint64_t *)malloc(CHUNK * 8), *next = (uint64_t *)malloc(CHUNK * 8), n = 0, raw_max = 0;
    uint64_t *raw_of = NULL, raw_cap = 0, fdp_lines = 0;
    uint32_t *ids = (uint32_t *)malloc(CHUNK * 4), n_ids = 0, c, k, i, n_opt = 0;
    FILE *idf = tmpfile(), *nf = tmpfile(), *evf = tmpfile(), *tsv = NULL;
    uint8_t *touched = NULL; /* per id: accessed (a hint may name a line the trace never touches) */
    uint32_t footprint = 0;
    uint64_t n_events = 0;
    hint_rec *evs = NULL;
    size_t evs_cap = 0;
    sim_slot *sims = (sim_slot *)calloc(MAX_SIMS, sizeof(sim_slot));
    psim_opt opt[16];
    uint64_t caps[16], *seen = NULL;
    uint32_t n_sims = 0, lru_of[16];
    psim_rd rd;
    int have_rd = 0, rc = 1;
    double t0 = now_s(), t_prep;
    size_t got;
    /* Every way out below goes through `out`, which frees what was taken:
     * a refused trace used to return from the middle with all of it held. */
    memset(&in, 0, sizeof in);
    if (!raw || !next || !ids || !idf || !nf || !evf || !sims) {
        rc = run_fail(path, "no memory or temporary files for the run");
        goto out;
    }
    if (trace_open(&in, path) != 0) {
        rc = run_fail(path, "cannot read the trace");
        goto out;
    }
    /* 1. dense ids (of the hints' lines too, their records to a third file) */
    for (;;) {
        size_t e;
        got = trace_read(&in, raw, CHUNK);
        for (i = 0; i < got; i++) {
            uint32_t id = dense_id(&map, raw[i], &raw_of, &raw_cap, &touched);
            if (id == PSIM_NONE) {
                rc = run_fail(path, "no memory for the map of distinct lines");
                goto out;
            }
            footprint += !touched[id];
            touched[id] = 1;
            if (raw[i] > raw_max) raw_max = raw[i];
            ids[i] = id;
        }
        for (e = 0; e < in.ev_n; e++) {
            hint_rec *h = &in.ev[e];
            if (h->op != PSIM_EPOCH && (h->line = dense_id(&map, h->line, &raw_of, &raw_cap, &touched)) == PSIM_NONE) {
                rc = run_fail(path, "no memory for the map of distinct lines");
                goto out;
            }
        }
        if (in.ev_full || fwrite(ids, 4, got, idf) != got || fwrite(in.ev, sizeof *in.ev, in.ev_n, evf) != in.ev_n) {
            rc = run_fail(path, in.ev_full ? "no memory for the hint records" : "writing a temporary file");
            goto out;
        }
        n_events += in.ev_n;
        in.ev_n = 0;
        n += got;
        if (got == 0) break;
    }
    n_ids = (uint32_t)map.n;
    if (in.bad) {
        rc = 2;
        goto out;
    }
    if (n == 0) {
        fprintf(stderr, "policy_sim: %s: expected at least one access, found none\n", path);
        rc = 2;
        goto out;
    }
    for (c = 0; c < o->n_caps; c++) {
        caps[c] = o->caps_are_lines ? o->lines[c] : (uint64_t)(o->fracs[c] * footprint + 0.5);
        if (caps[c] < 1 || caps[c] > UINT32_MAX) {
            fprintf(stderr, "policy_sim: %s: capacity %u is %llu lines (%u distinct lines in the trace); expected "
                            "1 .. 2^32 - 1\n", path, c + 1, (unsigned long long)caps[c], footprint);
            rc = 2;
            goto out;
        }
    }
    /* FDP keeps a byte per region of 2^PSIM_FDP_SHIFT lines. Indexed by the
     * trace's line numbers that is a byte per 32 lines up to the largest:
     * 256 MiB per simulation at line 2^33, and a malloc of 2^57 bytes (exit
     * 1) at 2^62. So the regions the trace touches are numbered densely, in
     * order of first appearance; FDP sees the same regions, in the same
     * order of events, and gives the same results. */
    if (o->prefetch == PSIM_FDP) {
        for (i = 0; i < n_ids; i++)
            if (psim_map_id(&regions, raw_of[i] >> PSIM_FDP_SHIFT) == PSIM_NONE) {
                rc = run_fail(path, "no memory for the map of prefetch regions");
                goto out;
            }
        fdp_lines = regions.n << PSIM_FDP_SHIFT;
    }
    /* 2. next uses, backwards */
    if (!(seen = (uint64_t *)malloc((size_t)n_ids * 8 + 8))) {
        rc = run_fail(path, "no memory for the next-use pass");
        goto out;
    }
    for (i = 0; i < n_ids; i++) seen[i] = PSIM_NEVER;
    {
        uint64_t end = n;
        while (end > 0) {
            size_t m = end > CHUNK ? CHUNK : (size_t)end, j;
            if (fseek(idf, (long)((end - m) * 4), SEEK_SET) != 0 || fread(ids, 4, m, idf) != m) {
                rc = run_fail(path, "reading the dense ids back from a temporary file");
                goto out;
            }
            for (j = m; j-- > 0;) {
                uint64_t t = end - m + j;
                next[m - 1 - j] = seen[ids[j]];
                seen[ids[j]] = t;
            }
            if (fwrite(next, 8, m, nf) != m) {
                rc = run_fail(path, "writing the next uses to a temporary file");
                goto out;
            }
            end -= m;
        }
    }
    fflush(nf);
    t_prep = now_s() - t0;
    /* 3. the simulations */
    for (c = 0; c < o->n_caps; c++) {
        if (psim_opt_init(&opt[c], (uint32_t)caps[c], n_ids) != 0) {
            rc = run_fail(path, "no memory for OPT");
            goto out;
        }
        n_opt = c + 1;
        lru_of[c] = PSIM_NONE;
        for (k = 0; k < o->n_kinds + 1; k++) {
            uint32_t kind = k < o->n_kinds ? o->kinds[k] : GPUMEM_POLICY_LRU;
            gpumem_policy_desc d = gpumem_policy_desc_default(kind, (uint32_t)caps[c]);
            if (o->hint_fallback) d.hint_fallback = o->hint_fallback;
            d.hint_slack = o->hint_slack;
            /* the pending table: every line's hints for a trace of up to 16x the capacity, 64 a slot beyond */
            d.hint_lines = (uint32_t)(n_ids < 16 * caps[c] ? 4ull * n_ids
                                      : 64 * caps[c] < UINT32_MAX ? 64 * caps[c] : UINT32_MAX);
            if (k == o->n_kinds && lru_of[c] != PSIM_NONE) break; /* LRU asked for already */
            if (n_sims == MAX_SIMS) break;
            if (psim_init(&sims[n_sims].s, &d, n_ids, PSIM_ONE_TIER, 0, o->prefetch, fdp_lines) != 0) {
                rc = run_fail(path, "no memory for a simulation");
                goto out;
            }
            sims[n_sims].s.raw_of = raw_of;
            sims[n_sims].s.raw_map = &map;
            sims[n_sims].s.fdp_regions = o->prefetch == PSIM_FDP ? &regions : NULL;
            sims[n_sims].kind = kind;
            sims[n_sims].cap_i = c;
            if (kind == GPUMEM_POLICY_LRU) lru_of[c] = n_sims;
            n_sims++;
        }
        if (o->t2_frac > 0) {
            uint32_t t2 = (uint32_t)(o->t2_frac * footprint + 0.5), p;
            for (p = PSIM_TIER_ORDER; p <= PSIM_REUSE && n_sims < MAX_SIMS; p++) {
                gpumem_policy_desc d = gpumem_policy_desc_default(GPUMEM_POLICY_CLOCK, (uint32_t)caps[c]);
                if (psim_init(&sims[n_sims].s, &d, n_ids, p, t2 ? t2 : 1, PSIM_NO_PREFETCH, 0) != 0) {
                    rc = run_fail(path, "no memory for a two-tier simulation");
                    goto out;
                }
                sims[n_sims].s.raw_of = raw_of;
                sims[n_sims].s.raw_map = &map;
                sims[n_sims].kind = GPUMEM_POLICY_CLOCK;
                sims[n_sims].cap_i = c;
                n_sims++;
            }
            if (!have_rd) {
                if (psim_rd_init(&rd, n_ids, n < TRAIN_WINDOW ? n : TRAIN_WINDOW) != 0) {
                    rc = run_fail(path, "no memory for the reuse-distance model");
                    goto out;
                }
                have_rd = 1;
            }
        }
    }
    {
        uint64_t from = 0, ev_left = n_events;
        double topt = 0;
        size_t n_ev = 0, ev_at = 0;
        rewind(idf);
        rewind(evf);
        while (from < n) {
            size_t m = n - from > CHUNK ? CHUNK : (size_t)(n - from), j;
            if (fread(ids, 4, m, idf) != m || read_next_chunk(nf, n, from, m, next) != 0 ||
                read_events(evf, &ev_left, from + m, &evs, &evs_cap, &n_ev) != 0) {
                rc = run_fail(path, "reading the temporary files back");
                goto out;
            }
            for (j = 0; j < m; j += STEP) { /* in steps, so GMT's model arrives as it would online */
                size_t e = m - j > STEP ? j + STEP : m, x;
                if (have_rd && rd.rd.t < rd.rd.window) { /* GMT's CPU side: samples, a refit per batch */
                    uint64_t before = rd.rd.samples / TRAIN_BATCH;
                    double mm, bb;
                    for (x = j; x < e; x++) psim_rd_access(&rd, ids[x]);
                    if (rd.rd.samples / TRAIN_BATCH != before && gpumem_policy_ols_solve(&rd.rd.ols, &mm, &bb))
                        for (k = 0; k < n_sims; k++)
                            if (sims[k].s.placement == PSIM_REUSE) gpumem_policy_gmt_set_model(&sims[k].s.gmt, mm, bb);
                }
                for (k = 0; k < n_sims; k++) {
                    double t1 = now_s();
                    psim *s = &sims[k].s;
                    int hinted = psim_hinted(s);
                    if (hinted && o->oracle) { /* hints from the future */
                        for (x = j; x < e; x++) {
                            uint64_t t = from + x;
                            psim_hint_event(s, PSIM_EPOCH, 0, t / o->oracle);
                            psim_access(s, ids[x]);
                            if (next[x] == PSIM_NEVER) psim_hint_event(s, PSIM_DEMOTE, ids[x], 0);
                            else psim_hint_event(s, PSIM_HINT, ids[x], next[x] / o->oracle);
                        }
                    } else if (hinted || s->prefetch == PSIM_HINTS) { /* the hint records between the accesses */
                        size_t v = ev_at;
                        for (x = j; x < e; x++) {
                            for (; v < n_ev && evs[v].at <= from + x; v++)
                                psim_hint_event(s, evs[v].op, (uint32_t)evs[v].line, evs[v].value);
                            psim_access(s, ids[x]);
                        }
                    } else {
                        for (x = j; x < e; x++) psim_access(s, ids[x]);
                    }
                    sims[k].secs += now_s() - t1;
                }
                while (ev_at < n_ev && evs[ev_at].at < from + e) ev_at++;
            }
            {
                double t1 = now_s();
                for (c = 0; c < o->n_caps; c++)
                    for (j = 0; j < m; j++) psim_opt_access(&opt[c], ids[j], next[j]);
                topt += now_s() - t1;
            }
            from += m;
            ev_at = 0;
        }
        printf("# %s: %llu accesses, %u distinct lines; prepare %.2f s; OPT %.1f M accesses/s per capacity\n",
               o->name ? o->name : path, (unsigned long long)n, footprint, t_prep,
               topt > 0 ? (double)n * o->n_caps / topt / 1e6 : 0.0);
    }
    if (o->tsv) tsv = fopen(o->tsv, "a");
    printf("%-12s %8s %5s %-11s %-10s %12s %7s %7s %7s %10s %10s %10s %10s %8s\n", "workload", "lines", "frac", "policy",
           "placement", "misses", "hit%", "/OPT", "/LRU", "t1_hits", "host_rd", "ssd_rd", "model_ms", "Macc/s");
    for (k = 0; k < n_sims; k++) {
        psim *s = &sims[k].s;
        uint32_t ci = sims[k].cap_i;
        double frac = (double)caps[ci] / footprint, lru = (double)sims[lru_of[ci]].s.misses;
        double r_opt = (double)s->misses / (double)opt[ci].misses, r_lru = (double)s->misses / lru;
        const char *pl = placement_name(s->placement);
        const char *pol = o->prefetch == PSIM_READAHEAD && !s->placement ? "+readahead"
                          : o->prefetch == PSIM_FDP && !s->placement   ? "+fdp"
                          /* --oracle's hinted runs take the true next uses, no soon records */
                          : o->prefetch == PSIM_HINTS && !s->placement && !(o->oracle && psim_hinted(s)) ? "+soon"
                                                                        : "";
        char pname[32];
        snprintf(pname, sizeof pname, "%s%s", gpumem_policy_name(sims[k].kind), pol);
        printf("%-12s %8llu %5.2f %-11s %-10s %12llu %7.2f %7.3f %7.3f %10llu %10llu %10llu %10.1f %8.1f\n",
               o->name ? o->name : "trace", (unsigned long long)caps[ci], frac, pname, pl,
               (unsigned long long)s->misses, 100.0 * (double)s->hits / (double)n, r_opt, r_lru,
               (unsigned long long)s->hits, (unsigned long long)s->t2_hits, (unsigned long long)s->ssd_reads,
               psim_time_us(s) / 1000.0, (double)n / sims[k].secs / 1e6);
        if (tsv)
            fprintf(tsv, "%s\t%llu\t%.2f\t%s\t%s\t%llu\t%.4f\t%.4f\t%.4f\t%llu\t%llu\t%llu\t%.1f\t%llu\t%llu\t%llu\t%.1f\n",
                    o->name ? o->name : "trace", (unsigned long long)caps[ci], frac, pname, pl,
                    (unsigned long long)s->misses, (double)s->hits / (double)n, r_opt, r_lru,
                    (unsigned long long)s->hits, (unsigned long long)s->t2_hits, (unsigned long long)s->ssd_reads,
                    psim_time_us(s) / 1000.0, (unsigned long long)opt[ci].misses, (unsigned long long)n,
                    (unsigned long long)s->prefetch_reads, (double)n / sims[k].secs / 1e6);
    }
    for (k = 0; k < n_sims; k++) /* what the soon records read ahead */
        if (sims[k].s.prefetch == PSIM_HINTS)
            printf("# %s+soon at %llu lines: %llu lines read ahead, %llu of them used before eviction, %llu declined "
                   "(the victim hinted for that epoch or sooner)\n", gpumem_policy_name(sims[k].kind),
                   (unsigned long long)caps[sims[k].cap_i], (unsigned long long)sims[k].s.prefetch_reads,
                   (unsigned long long)sims[k].s.prefetch_used, (unsigned long long)sims[k].s.prefetch_declined);
    for (k = 0; k < n_sims; k++) { /* what the hints proved, who chose */
        const gpumem__phint *h = &sims[k].s.pol.hint;
        if (sims[k].s.pol.d.kind != GPUMEM_POLICY_HINTED) continue;
        printf("# hinted at %llu lines: %llu hint records, %llu refused; %llu proven right, %llu wrong, trust %u "
               "of %u at the end; victims %llu by hint, %llu by the fallback (%s)\n", (unsigned long long)caps[sims[k].cap_i],
               (unsigned long long)n_events, (unsigned long long)sims[k].s.hints_refused, (unsigned long long)h->right,
               (unsigned long long)h->wrong, h->trust, GPUMEM_POLICY_TRUST_MAX, (unsigned long long)h->hinted_victims,
               (unsigned long long)h->fallback_victims, gpumem_policy_name(sims[k].s.pol.d.hint_fallback));
        if (h->weight_victims || h->fallback_out)
            printf("# hinted at %llu lines: %llu victims the lightest; weighted lines evicted back within a cache's fills:"
                   " %llu of %llu by weight, %llu of %llu by the fallback (recent); weights %s at the end\n",
                   (unsigned long long)caps[sims[k].cap_i], (unsigned long long)h->weight_victims,
                   (unsigned long long)h->weight_back, (unsigned long long)h->weight_out,
                   (unsigned long long)h->fallback_back, (unsigned long long)h->fallback_out,
                   gpumem__weights_trusted(h) ? "trusted" : "not trusted");
    }
    for (c = 0; c < o->n_caps; c++)
        printf("%-12s %8llu %5.2f %-11s %-10s %12llu %7.2f %7.3f %7.3f\n", o->name ? o->name : "trace",
               (unsigned long long)caps[c], (double)caps[c] / footprint, "opt", "-", (unsigned long long)opt[c].misses,
               100.0 * (double)(n - opt[c].misses) / (double)n, 1.0,
               (double)opt[c].misses / (double)sims[lru_of[c]].s.misses);
    rc = 0;
out:
    if (tsv) fclose(tsv);
    if (in.f) fclose(in.f);
    free(in.ev);
    free(evs);
    free(touched);
    if (evf) fclose(evf);
    for (k = 0; sims && k < n_sims; k++) psim_free(&sims[k].s);
    for (c = 0; c < n_opt; c++) psim_opt_free(&opt[c]);
    if (have_rd) psim_rd_free(&rd);
    free(seen);
    free(sims);
    free(raw);
    free(next);
    free(ids);
    free(raw_of);
    psim_map_free(&map);
    psim_map_free(&regions);
    if (idf) fclose(idf);
    if (nf) fclose(nf);
    return rc;
}


/* ---- generating ---------------------------------------------------------------- */

/* The last four are real: recorded by the cache hook from examples/graph.c's
 * BFS, CC, PageRank and GNN (the feature cache, 4 batches of look-ahead)
 * with their hints (make policy-sim records them first); skipped when missing. */
static const char *const workloads[] = {"stream", "loop",   "hotspot",   "srad",     "pathfinder",
                                        "backprop", "uniform", "zipf",     "bfs",      "phases",
                                        "graph-bfs", "graph-cc", "graph-pagerank", "graph-gnn"};
#define N_WORKLOADS (sizeof workloads / sizeof workloads[0])

/* SIZE 1 is the table's default: footprints of 8K-70K lines, 1-6M accesses. */
static int gen(const char *kind, const char *path, double size) {
    ptrace_out o;
    int rc = 0;
    uint64_t f = (uint64_t)(16384 * size);
    memset(&o, 0, sizeof o);
    o.f = fopen(path, "wb");
    if (!o.f) return 1;
    fwrite(GPUMEM_POLICY_TRACE_MAGIC, 1, 8, o.f);
    if (!strcmp(kind, "stream")) pt_stream(&o, f * 4, 4);
    else if (!strcmp(kind, "loop")) pt_loop(&o, f, 8);
    else if (!strcmp(kind, "hotspot")) pt_hotspot(&o, f / 32, 8, 8);
    else if (!strcmp(kind, "srad")) pt_srad(&o, f / 48, 8, 6);
    else if (!strcmp(kind, "pathfinder")) pt_pathfinder(&o, f / 8, 8, 6);
    else if (!strcmp(kind, "backprop")) pt_backprop(&o, f / 36, 2);
    else if (!strcmp(kind, "uniform")) pt_uniform(&o, f, f * 32, 1);
    else if (!strcmp(kind, "zipf")) rc = pt_zipf(&o, f, f * 32, 0.99, 2);
    else if (!strcmp(kind, "bfs")) rc = pt_bfs(&o, size >= 1 ? 17 : 12, 4, GRAPH_SEED);
    else if (!strcmp(kind, "phases")) rc = pt_phases(&o, f, 3);
    else rc = -1;
    pt_flush(&o);
    if (fclose(o.f) != 0) rc = -1;
    if (rc) fprintf(stderr, "policy_sim: cannot generate %s\n", kind);
    return rc ? 1 : 0;
}

static int table(const char *dir) {
    char tsv[512], trace[512];
    run_opts o;
    size_t w;
    FILE *f;
    snprintf(tsv, sizeof tsv, "%s/policy-sim.tsv", dir);
    f = fopen(tsv, "w");
    if (!f) return 1;
    fprintf(f, "workload\tlines\tfrac\tpolicy\tplacement\tmisses\thit_rate\tratio_opt\tratio_lru\tt1_hits\thost_reads\t"
               "ssd_reads\tmodel_ms\topt_misses\taccesses\tprefetch_reads\tmacc_per_s\n");
    fclose(f);
    for (w = 0; w < N_WORKLOADS; w++) {
        memset(&o, 0, sizeof o);
        snprintf(trace, sizeof trace, "build/traces/%s.trace", workloads[w]);
        if (!strncmp(workloads[w], "graph-", 6) && access(trace, R_OK) != 0) continue;
        if (access(trace, R_OK) != 0 && gen(workloads[w], trace, 1.0) != 0) return 1;
        o.n_kinds = all_kinds(o.kinds);
        o.fracs[0] = 0.5, o.fracs[1] = 0.75, o.n_caps = 2;
        o.name = workloads[w];
        o.tsv = tsv;
        /* the slack graph.c's cache had: GNN's batches, or the chunks 16 threads
         * (the Makefile's recording) finish apart */
        if (!strncmp(workloads[w], "graph-", 6))
            o.hint_slack = !strcmp(workloads[w], "graph-gnn") ? GRAPH_HINT_SLACK : graph_hint_slack(16);
        if (run(trace, &o) != 0) return 1;
        /* Two tiers at GMT's proportions (host tier 4x the GPU's): 20% of the
         * footprint in tier 1, 80% more in tier 2 would hold everything, so
         * tier 2 gets 40%: some lines must come from the SSD. */
        o.n_kinds = 0;
        o.fracs[0] = 0.2, o.n_caps = 1;
        o.t2_frac = 0.4;
        if (run(trace, &o) != 0) return 1;
        /* Prefetch, one tier, 50%, under CLOCK. */
        o.t2_frac = 0;
        o.kinds[0] = GPUMEM_POLICY_CLOCK, o.n_kinds = 1;
        o.fracs[0] = 0.5;
        o.prefetch = PSIM_READAHEAD;
        if (run(trace, &o) != 0) return 1;
        o.prefetch = PSIM_FDP;
        if (run(trace, &o) != 0) return 1;
    }
    printf("policy_sim: rows in %s\n", tsv);
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: policy_sim gen KIND FILE [SIZE] | run TRACE [--policies P,..|all] [--fracs F,..] "
                    "[--lines N,..] [--two-tier F] [--prefetch readahead|fdp|hints] [--hint-fallback P] "
                    "[--hint-slack N] [--oracle Q] [--name N] [--tsv FILE] | table DIR\n");
    return 2;
}

int main(int argc, char **argv) {
    run_opts o;
    int i;
    if (argc < 3) return usage();
    if (!strcmp(argv[1], "gen")) return argc < 4 ? usage() : gen(argv[2], argv[3], argc > 4 ? atof(argv[4]) : 1.0);
    if (!strcmp(argv[1], "table")) return table(argv[2]);
    if (strcmp(argv[1], "run")) return usage();
    memset(&o, 0, sizeof o);
    o.fracs[0] = 0.5, o.fracs[1] = 0.75, o.n_caps = 2;
    for (i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--policies")) {
            char buf[256], *tok;
            o.n_kinds = 0;
            if (!strcmp(v, "all")) {
                o.n_kinds = all_kinds(o.kinds);
                continue;
            }
            snprintf(buf, sizeof buf, "%s", v);
            for (tok = strtok(buf, ","); tok && o.n_kinds < GPUMEM_POLICY_KINDS; tok = strtok(NULL, ",")) {
                int k = kind_of(tok);
                if (k < 0) return usage();
                o.kinds[o.n_kinds++] = (uint32_t)k;
            }
        } else if (!strcmp(a, "--fracs")) {
            int n = parse_list(v, o.fracs, 16), j;
            if (n <= 0) return usage();
            for (j = 0; j < n; j++)
                if (!(o.fracs[j] > 0 && o.fracs[j] <= 1e6)) {
                    fprintf(stderr, "policy_sim: --fracs: expected fractions of the footprint above 0, found %s\n", v);
                    return 2;
                }
            o.n_caps = (uint32_t)n, o.caps_are_lines = 0;
        } else if (!strcmp(a, "--lines")) {
            double l[16];
            int n = parse_list(v, l, 16), j;
            if (n <= 0) return usage();
            for (j = 0; j < n; j++) {
                if (!(l[j] >= 1 && l[j] < 4294967296.0) || l[j] != (double)(uint64_t)l[j]) {
                    fprintf(stderr, "policy_sim: --lines: expected whole capacities of 1 .. 2^32 - 1 lines, found %s\n",
                            v);
                    return 2;
                }
                o.lines[j] = (uint64_t)l[j];
            }
            o.n_caps = (uint32_t)n, o.caps_are_lines = 1;
        } else if (!strcmp(a, "--two-tier")) o.t2_frac = atof(v);
        else if (!strcmp(a, "--prefetch")) {
            if (!strcmp(v, "readahead")) o.prefetch = PSIM_READAHEAD;
            else if (!strcmp(v, "fdp")) o.prefetch = PSIM_FDP;
            else if (!strcmp(v, "hints")) o.prefetch = PSIM_HINTS;
            else {
                fprintf(stderr, "policy_sim: --prefetch: expected readahead, fdp or hints, found %s\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--hint-fallback")) {
            int k = kind_of(v);
            if (k < 0 || k == GPUMEM_POLICY_HINTED) {
                fprintf(stderr, "policy_sim: --hint-fallback: expected a policy other than hinted, found %s\n", v);
                return 2;
            }
            o.hint_fallback = (uint32_t)k;
        } else if (!strcmp(a, "--hint-slack") || !strcmp(a, "--oracle")) {
            int slack = !strcmp(a, "--hint-slack");
            double x[1];
            if (parse_list(v, x, 1) != 1 || !(x[0] >= !slack && x[0] < 4294967296.0) ||
                x[0] != (double)(uint64_t)x[0]) {
                fprintf(stderr, "policy_sim: %s: expected %s, found %s\n", a,
                        slack ? "a whole number of epochs below 2^32"
                              : "a whole number of accesses an epoch, 1 .. 2^32 - 1",
                        v);
                return 2;
            }
            if (slack) o.hint_slack = (uint32_t)x[0];
            else o.oracle = (uint64_t)x[0];
        } else if (!strcmp(a, "--name")) o.name = v;
        else if (!strcmp(a, "--tsv")) o.tsv = v;
        else return usage();
    }
    if (o.n_kinds == 0 && o.t2_frac <= 0)
        o.n_kinds = all_kinds(o.kinds);
    return run(argv[2], &o);
}
