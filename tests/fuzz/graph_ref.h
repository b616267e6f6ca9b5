/* tests/fuzz/graph_ref.h - reference readers for the graph fuzz harnesses:
 * the formats as docs/graph.md and examples/graph_formats.h describe them,
 * written again from that description, small and slow, sharing no code
 * with the converter. Each returns the graph as a set of undirected edges
 * (what the converted CSR must hold) or where the first error is. */
#ifndef GPUMEM_TESTS_FUZZ_GRAPH_REF_H
#define GPUMEM_TESTS_FUZZ_GRAPH_REF_H
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { REF_OK = 0, REF_BAD = 1, REF_UNSURE = 2 }; /* UNSURE: the description does not settle it */

typedef struct ref_graph {
    uint64_t n;          /* vertices */
    uint64_t *keys;      /* (u << 32 | v) for every direction of every edge, loops left out */
    size_t n_keys, cap;
    uint64_t bad_at;     /* REF_BAD: the line (text) or byte (binary) the error names */
    uint64_t *ids;       /* SNAP: the distinct file ids in order */
    size_t n_ids, ids_cap;
} ref_graph;

static inline void ref_free(ref_graph *g) {
    free(g->keys);
    free(g->ids);
    memset(g, 0, sizeof *g);
}

static inline void ref_push(uint64_t **a, size_t *n, size_t *cap, uint64_t v) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *a = (uint64_t *)realloc(*a, *cap * sizeof **a);
        if (!*a) abort();
    }
    (*a)[(*n)++] = v;
}

static inline void ref_edge(ref_graph *g, uint64_t u, uint64_t v) {
    if (u == v) return; /* self-loops removed */
    ref_push(&g->keys, &g->n_keys, &g->cap, u << 32 | v);
    ref_push(&g->keys, &g->n_keys, &g->cap, v << 32 | u);
}

static inline int ref_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted, repeats removed: the CSR's entries in order. */
static inline void ref_finish(ref_graph *g) {
    size_t i, o = 0;
    if (g->n_keys > 1) qsort(g->keys, g->n_keys, sizeof *g->keys, ref_cmp_u64);
    for (i = 0; i < g->n_keys; i++)
        if (o == 0 || g->keys[i] != g->keys[o - 1]) g->keys[o++] = g->keys[i];
    g->n_keys = o;
}

/* ---- text ---------------------------------------------------------------- */

/* A line's words, split at spaces and tabs (the text formats' separators). */
#define REF_WORDS 8
typedef struct ref_words {
    const char *w[REF_WORDS];
    size_t len[REF_WORDS];
    int n; /* more than REF_WORDS: REF_WORDS + 1 */
} ref_words;

static inline void ref_split(const char *s, size_t n, ref_words *out) {
    size_t i = 0;
    out->n = 0;
    while (i < n) {
        size_t j;
        while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
        if (i == n) break;
        for (j = i; j < n && s[j] != ' ' && s[j] != '\t'; j++) {}
        if (out->n == REF_WORDS) {
            out->n++;
            return;
        }
        out->w[out->n] = s + i;
        out->len[out->n++] = j - i;
        i = j;
    }
}

/* A vertex id: decimal digits only, below 2^64. */
static inline int ref_id(const char *w, size_t n, uint64_t *out) {
    uint64_t v = 0;
    size_t i;
    if (n == 0) return 0;
    for (i = 0; i < n; i++) {
        unsigned d;
        if (w[i] < '0' || w[i] > '9') return 0;
        d = (unsigned)(w[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* A weight or value: a number as the C library reads one (strtod, or
 * strtoll for Matrix Market's integer field), the whole word, starting at
 * its first byte (the library would skip a vertical tab or form feed
 * first: those are not separators, and a word starting with one is no
 * number). */
static inline int ref_number(const char *w, size_t n, int integer) {
    char buf[128], *end;
    if (n >= sizeof buf) return -1; /* not settled here: leave it */
    if (n && isspace((unsigned char)w[0])) return 0;
    memcpy(buf, w, n);
    buf[n] = 0;
    if (integer) (void)strtoll(buf, &end, 10);
    else (void)strtod(buf, &end);
    return end != buf && *end == 0;
}

enum { REF_EL, REF_WEL, REF_SNAP, REF_MTX };

/* The text formats: lines end at '\n' (one '\r' before it is part of the
 * end); a line holding a NUL is an error; blank lines and comments ('#' or
 * '%' for the GAP lists, '#' for SNAP, '%' for Matrix Market) are skipped. */
static inline int ref_read_text(int fmt, const char *p, size_t size, ref_graph *g) {
    size_t at = 0;
    uint64_t line = 0, entries = 0, rows = 0, cols = 0, nnz = 0, max_plus1 = 0, edges = 0;
    int header = fmt != REF_MTX, banner = fmt != REF_MTX, pattern = 0, integer = 0, symmetric = 0;
    memset(g, 0, sizeof *g);
    if (size == 0) {
        g->bad_at = 1;
        return REF_BAD;
    }
    while (at < size) {
        const char *s = p + at, *nl = (const char *)memchr(s, '\n', size - at);
        size_t len = nl ? (size_t)(nl - s) : size - at, i;
        ref_words w;
        at += len + (nl != NULL);
        line++;
        if (len && s[len - 1] == '\r') len--;
        if (memchr(s, 0, len)) goto bad;
        if (!banner) { /* "%%MatrixMarket matrix coordinate FIELD SYMMETRY", words case-insensitive */
            char word[4][32];
            int k;
            /* the keyword starts the line and white space follows it */
            if (len < 15 || memcmp(s, "%%MatrixMarket", 14) != 0 || !isspace((unsigned char)s[14])) goto bad;
            for (i = 14, k = 0; k < 4; k++) {
                size_t j, m;
                while (i < len && isspace((unsigned char)s[i])) i++;
                for (j = i; j < len && !isspace((unsigned char)s[j]); j++) {}
                m = j - i;
                if (m == 0) goto bad;
                if (m > 31) return REF_UNSURE; /* sscanf's %31s would split it */
                for (j = 0; j < m; j++) word[k][j] = (char)tolower((unsigned char)s[i + j]);
                word[k][m] = 0;
                i += m;
            }
            if (strcmp(word[0], "matrix") || strcmp(word[1], "coordinate")) goto bad;
            pattern = !strcmp(word[2], "pattern");
            integer = !strcmp(word[2], "integer");
            if (!pattern && !integer && strcmp(word[2], "real")) goto bad;
            symmetric = !strcmp(word[3], "symmetric");
            if (!symmetric && strcmp(word[3], "general")) goto bad;
            banner = 1;
            continue;
        }
        ref_split(s, len, &w);
        if (w.n == 0) continue;
        if (w.w[0][0] == '#' && fmt != REF_MTX) continue;
        if (w.w[0][0] == '%' && (fmt == REF_MTX || fmt == REF_EL || fmt == REF_WEL)) continue;
        if (!header) { /* rows columns entries */
            if (w.n != 3 || !ref_id(w.w[0], w.len[0], &rows) || !ref_id(w.w[1], w.len[1], &cols) ||
                !ref_id(w.w[2], w.len[2], &nnz) || rows == 0 || cols == 0 || (rows > cols ? rows : cols) > 0x7FFFFFFFull)
                goto bad;
            g->n = rows > cols ? rows : cols;
            header = 1;
            continue;
        }
        {
            int want = 2 + (fmt == REF_WEL || (fmt == REF_MTX && !pattern)), ok;
            uint64_t a, b;
            if (w.n != want || !ref_id(w.w[0], w.len[0], &a) || !ref_id(w.w[1], w.len[1], &b)) goto bad;
            if (want == 3) {
                ok = ref_number(w.w[2], w.len[2], fmt == REF_MTX && integer);
                if (ok < 0) return REF_UNSURE;
                if (!ok) goto bad;
            }
            edges++;
            if (fmt == REF_MTX) {
                if (++entries > nnz || a < 1 || a > rows || b < 1 || b > cols) goto bad;
                ref_edge(g, a - 1, b - 1);
            } else if (fmt == REF_SNAP) {
                ref_push(&g->ids, &g->n_ids, &g->ids_cap, a);
                ref_push(&g->ids, &g->n_ids, &g->ids_cap, b);
                ref_push(&g->keys, &g->n_keys, &g->cap, a); /* file ids for now, remapped below */
                ref_push(&g->keys, &g->n_keys, &g->cap, b);
            } else {
                if (a >= 0x7FFFFFFFull || b >= 0x7FFFFFFFull) goto bad;
                if (a + 1 > max_plus1) max_plus1 = a + 1;
                if (b + 1 > max_plus1) max_plus1 = b + 1;
                ref_edge(g, a, b);
            }
        }
    }
    line++; /* what is missing is "at" the line after the last */
    if (!banner || !header || (fmt == REF_MTX && entries != nnz) || (fmt != REF_MTX && edges == 0)) goto bad;
    if (fmt == REF_SNAP) { /* dense ids in the order of the file ids */
        uint64_t *pairs = g->keys;
        size_t n_pairs = g->n_keys, k, o = 0;
        if (g->n_ids > 1) qsort(g->ids, g->n_ids, sizeof *g->ids, ref_cmp_u64);
        for (k = 0; k < g->n_ids; k++)
            if (o == 0 || g->ids[k] != g->ids[o - 1]) g->ids[o++] = g->ids[k];
        g->n_ids = o;
        g->n = o;
        g->keys = NULL;
        g->n_keys = g->cap = 0;
        for (k = 0; k + 1 < n_pairs; k += 2) {
            uint64_t *u = (uint64_t *)bsearch(&pairs[k], g->ids, g->n_ids, sizeof *g->ids, ref_cmp_u64);
            uint64_t *v = (uint64_t *)bsearch(&pairs[k + 1], g->ids, g->n_ids, sizeof *g->ids, ref_cmp_u64);
            ref_edge(g, (uint64_t)(u - g->ids), (uint64_t)(v - g->ids));
        }
        free(pairs);
    }
    if (fmt == REF_EL || fmt == REF_WEL) g->n = max_plus1;
    ref_finish(g);
    return REF_OK;
bad:
    g->bad_at = line;
    return REF_BAD;
}

/* ---- GAP's serialized CSR --------------------------------------------------- */

static inline int64_t ref_i64(const unsigned char *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = v << 8 | p[i];
    return (int64_t)v;
}

/* .sg (width 4) or .wsg (8: id, weight): bool directed, int64 m, int64 n,
 * int64 offsets[n + 1], neighbours; the inverse arrays when directed, only
 * counted in the size. Checked in the order a reader meets them: the
 * header's fields, the size, then offset v and the neighbours it closes. */
static inline int ref_read_sg(int width, const unsigned char *p, size_t size, ref_graph *g) {
    int64_t m, n, prev = 0;
    uint64_t want, v, e = 0;
    memset(g, 0, sizeof *g);
    if (size < 17) {
        g->bad_at = size;
        return REF_BAD;
    }
    if (p[0] > 1) return g->bad_at = 0, REF_BAD;
    m = ref_i64(p + 1);
    n = ref_i64(p + 9);
    if (n <= 0 || n > 0x7FFFFFFF) return g->bad_at = 9, REF_BAD;
    if (m < 0 || m > (int64_t)1 << 40) return g->bad_at = 1, REF_BAD;
    want = (uint64_t)(n + 1) * 8 + (uint64_t)m * (uint64_t)width;
    want = 17 + (p[0] ? 2 * want : want);
    if (size != want) return g->bad_at = size < want ? size : want, REF_BAD;
    g->n = (uint64_t)n;
    for (v = 0; v <= (uint64_t)n; v++) {
        uint64_t at = 17 + 8 * v;
        int64_t o = ref_i64(p + at);
        if (v == 0 ? o != 0 : o < prev || o > m || (v == (uint64_t)n && o != m)) return g->bad_at = at, REF_BAD;
        for (; v > 0 && (int64_t)e < o; e++) {
            uint64_t nat = 17 + (uint64_t)(n + 1) * 8 + e * (uint64_t)width;
            int32_t w = (int32_t)(uint32_t)(p[nat] | p[nat + 1] << 8 | p[nat + 2] << 16 | (uint32_t)p[nat + 3] << 24);
            if (w < 0 || w >= n) return g->bad_at = nat, REF_BAD;
            ref_edge(g, v - 1, (uint64_t)w);
        }
        prev = o;
    }
    ref_finish(g);
    return REF_OK;
}

#endif
