/* fuzz_trace: the policy simulator's trace reader and run (bench/policy_sim.c,
 * compiled in here with its main renamed) on any file, against a reference
 * reader of the two trace formats written here from their description.
 *
 * Input: a byte choosing the run's options (policies, the hinted one among
 * them, capacities, prefetch readahead, fdp or hints, two tiers), then the trace
 * file. A binary trace is "GPMTRC01" and 8-byte records (bit 63 the write
 * flag), or "GPMTRC02": records with bit 62 clear are accesses (line in
 * bits 0..61), with it set hint records of kind bits 56..61 (0 nothing,
 * 1 hint, 2 demote, 3 epoch, 4 soon, 5 weight; all but 0 and 2 take a
 * second word, an epoch or weight below 2^63). A text trace is a line
 * number a line, decimal or 0x-hex below 2^63, then optionally "w", or a
 * hint record ("h LINE EPOCH", "s LINE EPOCH", "d LINE", "e EPOCH", "w LINE
 * WEIGHT"; LINE below 2^56, EPOCH and WEIGHT below 2^63),
 * then optionally a '#' comment; blank and '#' lines are skipped; a line
 * ends in "\n" or "\r\n", holds no NUL and at most 254 characters.
 *
 * Properties, for every input:
 *   - the simulator refuses (exit 2) exactly what the reference refuses,
 *     and its message names the file and the line (text) or byte (binary)
 *     the reference finds first, and what was expected;
 *   - what it accepts it counts as the reference does (accesses, distinct
 *     lines), whatever the options;
 *   - it never fails for want of memory (exit 1): memory is per distinct
 *     line, never per line number, so line 2^63 - 1 costs what line 1 does;
 *   - nothing it took is left allocated (LeakSanitizer, after each input). */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdio.h>

#include "tests/fuzz/fuzz.h"

/* The simulator's output goes to memory, where the harness reads it. */
static FILE *fuzz_out, *fuzz_err;
#undef stdout
#undef stderr
#define stdout fuzz_out
#define stderr fuzz_err
#define printf(...) fprintf(fuzz_out, __VA_ARGS__)
#define main policy_sim_main
/* Chunks of 64 accesses: a trace of a few hundred crosses several, in
 * each pass (the backward next-use pass reads its chunks in reverse),
 * and each run allocates kilobytes instead of 20 MiB. */
#define CHUNK 64u
#include "bench/policy_sim.c"
#undef main
#undef printf
#undef stdout
#undef stderr

/* ---- the reference reader ---------------------------------------------------- */

typedef struct ref_trace {
    int bad;               /* 1: refused */
    uint64_t at;           /* refused at this line (text) or byte (binary); 0: empty */
    uint64_t accesses, distinct;
} ref_trace;

static int ref_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* One text line's access (s[0..n), its end removed): 1 with the number, 0
 * for a blank or comment line, -1 malformed. */
/* A number at s[*i..n) below `limit`, decimal or 0x-hex: 0, or -1. */
static int ref_num(const char *s, size_t n, size_t *i, uint64_t limit, uint64_t *out) {
    uint64_t v = 0, base = 10;
    int digits = 0;
    if (n - *i >= 2 && s[*i] == '0' && (s[*i + 1] == 'x' || s[*i + 1] == 'X')) base = 16, *i += 2;
    for (; *i < n; (*i)++, digits++) {
        int c = (unsigned char)s[*i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else break;
        if (v > (limit - 1 - (uint64_t)d) / base) return -1; /* limit or more */
        v = v * base + (uint64_t)d;
    }
    *out = v;
    return digits ? 0 : -1;
}

static void ref_blanks(const char *s, size_t n, size_t *i) {
    while (*i < n && (s[*i] == ' ' || s[*i] == '\t')) (*i)++;
}

/* One text line's access (s[0..n), its end removed): 1 with the number, 2
 * for a hint record, 0 for a blank or comment line, -1 malformed. */
static int ref_line(const char *s, size_t n, uint64_t *out) {
    size_t i = 0;
    uint64_t v = 0;
    ref_blanks(s, n, &i);
    if (i == n || s[i] == '#') return 0;
    if (n - i >= 2 && strchr("hsdew", s[i]) && (s[i + 1] == ' ' || s[i + 1] == '\t')) {
        char c = s[i];
        i += 1;
        ref_blanks(s, n, &i);
        if (c != 'e' && ref_num(s, n, &i, 1ull << 56, &v) != 0) return -1;
        ref_blanks(s, n, &i);
        if (c != 'd' && ref_num(s, n, &i, 1ull << 63, &v) != 0) return -1;
        ref_blanks(s, n, &i);
        return i < n && s[i] != '#' ? -1 : 2;
    }
    if (ref_num(s, n, &i, 1ull << 63, &v) != 0) return -1;
    ref_blanks(s, n, &i);
    if (i < n && s[i] == 'w') {
        i++;
        while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    }
    if (i < n && s[i] != '#') return -1;
    *out = v;
    return 1;
}

/* Word k of a binary trace's records (little-endian). */
static uint64_t ref_word(const uint8_t *p, size_t k) {
    uint64_t v = 0;
    int b;
    for (b = 7; b >= 0; b--) v = v << 8 | p[8 + 8 * k + (size_t)b];
    return v;
}

static void ref_read(const uint8_t *p, size_t size, ref_trace *r, uint64_t **lines, size_t *n) {
    size_t cap = 0, at = 0;
    uint64_t line = 0;
    memset(r, 0, sizeof *r);
    *lines = NULL;
    *n = 0;
#define PUSH(x)                                                              \
    do {                                                                     \
        if (*n == cap) {                                                     \
            cap = cap ? 2 * cap : 256;                                       \
            if (!(*lines = (uint64_t *)realloc(*lines, cap * 8))) abort();   \
        }                                                                    \
        (*lines)[(*n)++] = (x);                                              \
    } while (0)
    if (size >= 8 && !memcmp(p, "GPMTRC02", 8)) {
        size_t k, words = (size - 8) / 8;
        for (k = 0; k < words; k++) {
            uint64_t v = ref_word(p, k), op = v >> 56 & 63;
            if (!(v >> 62 & 1)) {
                PUSH(v & ((1ull << 62) - 1));
                continue;
            }
            if (op > 5) { /* a kind that does not exist */
                r->bad = 1;
                r->at = 8 + 8 * k;
                break;
            }
            if (op != 0 && op != 2) { /* its epoch or weight word */
                if (++k == words || ref_word(p, k) >> 63) {
                    r->bad = 1;
                    r->at = 8 + 8 * k;
                    break;
                }
            }
        }
        if (!r->bad && (size - 8) % 8) {
            r->bad = 1;
            r->at = 8 + words * 8;
        }
        if (r->bad) {
            free(*lines);
            *lines = NULL;
            *n = 0;
            return;
        }
    } else if (size >= 8 && !memcmp(p, "GPMTRC01", 8)) {
        size_t k;
        if ((size - 8) % 8) {
            r->bad = 1;
            r->at = 8 + (size - 8) / 8 * 8;
            return;
        }
        for (k = 8; k < size; k += 8) {
            uint64_t v = 0;
            int b;
            for (b = 7; b >= 0; b--) v = v << 8 | p[k + (size_t)b];
            PUSH(v & ~(1ull << 63));
        }
    } else
        while (at < size) {
            const char *s = (const char *)p + at, *nl = (const char *)memchr(s, '\n', size - at);
            size_t len = nl ? (size_t)(nl - s) : size - at, i;
            uint64_t v;
            int got;
            at += len + (nl != NULL);
            line++;
            if (len && s[len - 1] == '\r' && nl) len--; /* "\r\n" ends a line; a "\r" at the very end does not */
            for (i = 0; i < len; i++)
                if (s[i] == 0 || s[i] == '\r') break;
            if (i < len || len > 254 || (got = ref_line(s, len, &v)) < 0) {
                r->bad = 1;
                r->at = line;
                return;
            }
            if (got == 1) PUSH(v);
        }
#undef PUSH
    if (*n == 0) {
        r->bad = 1;
        r->at = 0;
        return;
    }
    r->accesses = *n;
    qsort(*lines, *n, 8, ref_cmp);
    {
        size_t i;
        for (i = 0; i < *n; i++) r->distinct += i == 0 || (*lines)[i] != (*lines)[i - 1];
    }
}

/* ---- the harness ---------------------------------------------------------------- */

static char dir[200];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[300], want[400], *out = NULL, *err = NULL;
    size_t out_n = 0, err_n = 0, n_lines;
    unsigned sel = size ? data[0] : 0;
    uint64_t *lines;
    run_opts o;
    ref_trace ref;
    int rc, binary;
    if (!dir[0]) {
        fuzz_tmpdir(dir, sizeof dir, "trace");
    }
    if (size) data++, size--;
    snprintf(path, sizeof path, "%s/trace", dir);
    FUZZ_CHECK(fuzz_write_file(path, data, size) == 0, "writing the trace");
    memset(&o, 0, sizeof o);
    o.kinds[0] = GPUMEM_POLICY_CLOCK;
    o.kinds[1] = sel & 8 ? GPUMEM_POLICY_HPE : GPUMEM_POLICY_LRU;
    o.kinds[2] = GPUMEM_POLICY_HINTED; /* replays the hint records */
    o.n_kinds = 3;
    o.hint_slack = sel & 0x20 ? 1 : 0;
    if (sel & 4) o.fracs[0] = 0.5, o.fracs[1] = 1.0, o.n_caps = 2; /* capacities from the footprint */
    else o.lines[0] = 1 + (sel >> 6), o.n_caps = 1, o.caps_are_lines = 1;
    o.prefetch = sel & 3; /* none, readahead, fdp (3: fdp too, with two tiers) */
    if (o.prefetch == 3) o.prefetch = PSIM_FDP, o.t2_frac = 0.5;
    /* the soon records read ahead: with capacities from the footprint, bit 6 (else part of the line count) */
    if (o.prefetch == PSIM_READAHEAD && (sel & 4) && (sel & 0x40)) o.prefetch = PSIM_HINTS;
    if (sel & 0x10) o.t2_frac = 0.25;
    FUZZ_CHECK((fuzz_out = open_memstream(&out, &out_n)) && (fuzz_err = open_memstream(&err, &err_n)), "memstream");
    rc = run(path, &o);
    fclose(fuzz_out);
    fclose(fuzz_err);
    ref_read(data, size, &ref, &lines, &n_lines);
    binary = size >= 8 && (!memcmp(data, "GPMTRC01", 8) || !memcmp(data, "GPMTRC02", 8));
    FUZZ_CHECK(rc != 1, "exit 1 (memory or a temporary file): %s", err);
    if (ref.bad) {
        FUZZ_CHECK(rc == 2, "accepted (exit %d) what the reference refuses at %s %llu:\n%s", rc,
                   binary ? "byte" : "line", (unsigned long long)ref.at, out);
        if (ref.at == 0) snprintf(want, sizeof want, "policy_sim: %s: expected at least one access", path);
        else if (binary) snprintf(want, sizeof want, "policy_sim: %s: byte %llu: expected", path, (unsigned long long)ref.at);
        else snprintf(want, sizeof want, "policy_sim: %s:%llu: expected", path, (unsigned long long)ref.at);
        FUZZ_CHECK(!strncmp(err, want, strlen(want)), "the message should start \"%s\": %s", want, err);
        FUZZ_CHECK(out_n == 0, "output before a refusal: %s", out);
    } else {
        FUZZ_CHECK(rc == 0, "refused (exit %d) what the reference reads (%llu accesses): %s", rc,
                   (unsigned long long)ref.accesses, err);
        snprintf(want, sizeof want, "# %s: %llu accesses, %llu distinct lines;", path,
                 (unsigned long long)ref.accesses, (unsigned long long)ref.distinct);
        FUZZ_CHECK(strstr(out, want) != NULL, "expected \"%s\" in:\n%s", want, out);
    }
    free(lines);
    free(out);
    free(err);
    unlink(path);
    return 0;
}
