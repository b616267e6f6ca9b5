/* examples/graph_formats.h - the graph files people have, converted into the
 * CSR layout of examples/graph.h with bounded memory.
 *
 * USAGE
 *   graph_import im;
 *   graph_import_init(&im, "web.txt", "build/web.graph", GRAPH_FMT_AUTO);
 *   im.mem_bytes = 256u << 20;        // the edge sort's memory (default 256 MiB)
 *   im.tmp_dir = "build";             // where sorted runs spill (unlinked at once)
 *   if (graph_import_run(&im, err, sizeof err) != GPUMEM_OK) puts(err);   // nothing written
 *   graph_import_print_summary(&im, stdout);
 *   graph_import_free(&im);
 *
 * Formats (chosen by extension, or by name with graph_format_from_name):
 *   .el  .wel   GAP edge lists: "u v" / "u v w" per line, 0-based ids
 *   .sg  .wsg   GAP serialized CSR: bool directed, int64 edge count, int64
 *               node count (17 bytes, so nothing after it is aligned), int64
 *               offsets[n+1], int32 neighbours[m] (.wsg: int32 id, int32
 *               weight pairs), then the inverse arrays when directed
 *   .txt .snap  SNAP edge lists: '#' comments, tabs or spaces, any 64-bit
 *               ids; remapped densely in the order of their values, so the
 *               map (written next to the output as OUT.ids) is sorted and a
 *               file id is found by binary search
 *   .mtx .mm    Matrix Market coordinate: pattern, integer or real; general
 *               or symmetric; 1-based
 *   .graph      already converted (examples/graph.h)
 *
 * Policy (counted, printed by graph_import_print_summary): the store holds
 * an undirected simple graph, every edge both ways, as the traversals need.
 * Self-loops are removed. Repeated edges are removed. A directed edge whose
 * reverse is not in the file gets it added (symmetrised). Isolated vertices
 * (ids below the largest that no edge names, or the ones a header counts)
 * are kept. Weights and values are checked as numbers, then dropped.
 *
 * How: the reader emits each edge as two 64-bit keys (u<<32 | v<<1 | tag),
 * the tag saying whether the file named that direction; keys fill a buffer
 * of mem_bytes, each full buffer is radix sorted, collapsed and spilled to an
 * unlinked temporary file; the runs are merged, and the merged stream is the
 * CSR in order: offsets and edges are written as they come, then read back
 * once for the data hash. Before that, the output's size is checked against
 * the free space of OUT's file system and RLIMIT_FSIZE (refused, nothing
 * written). Output goes to OUT.tmp.<pid> and is renamed to OUT only when
 * complete; any error unlinks it. Ids are 31 bits (the key's
 * layout): a graph with more vertices is refused from its header (.sg, .mtx)
 * or the first id past the width (text), before any sorting.
 *
 * Errors name the file, the line (text) or byte offset (binary), what was
 * expected and what was found; a NUL byte in a text line is one (the line
 * is read to its newline, never to a NUL). Host-only.
 */
#ifndef GPUMEM_EXAMPLES_GRAPH_FORMATS_H
#define GPUMEM_EXAMPLES_GRAPH_FORMATS_H

#include <ctype.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include "graph.h"

enum {
    GRAPH_FMT_AUTO = -1,
    GRAPH_FMT_NATIVE = 0, /* examples/graph.h's own file */
    GRAPH_FMT_EL,
    GRAPH_FMT_WEL,
    GRAPH_FMT_SG,
    GRAPH_FMT_WSG,
    GRAPH_FMT_SNAP,
    GRAPH_FMT_MTX,
    GRAPH_FMTS
};
#define GRAPH_ID_LIMIT 0x7FFFFFFFull /* vertices a converted graph may have: ids fit 31 bits */
#define GRAPH_IDS_MAGIC "GPUMEMI1"   /* OUT.ids: magic, uint64 n, then n uint64 file ids */

GRAPH_API const char *graph_format_name(int f) {
    static const char *const names[GRAPH_FMTS] = {"graph", "el", "wel", "sg", "wsg", "snap", "mtx"};
    return f >= 0 && f < GRAPH_FMTS ? names[f] : "unknown";
}

/* "el", "snap", ...; also the extensions' other spellings. -1 if none. */
GRAPH_API int graph_format_from_name(const char *s) {
    int f;
    for (f = 0; f < GRAPH_FMTS; f++)
        if (!strcmp(s, graph_format_name(f))) return f;
    if (!strcmp(s, "txt")) return GRAPH_FMT_SNAP;
    if (!strcmp(s, "mm")) return GRAPH_FMT_MTX;
    return -1;
}

/* By the extension; -1 when it names none of the formats. */
GRAPH_API int graph_format_of_path(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return -1;
    return graph_format_from_name(dot + 1);
}

/* Does the file start with examples/graph.h's magic? */
GRAPH_API int graph_is_native(const char *path) {
    char magic[8];
    int fd = open(path, O_RDONLY), yes;
    if (fd < 0) return 0;
    yes = pread(fd, magic, 8, 0) == 8 && memcmp(magic, GRAPH_MAGIC, 8) == 0;
    close(fd);
    return yes;
}

/* ======================================================================== */
/* 1. Sorting 64-bit keys                                                   */
/* ======================================================================== */

/* LSD radix sort, a byte a pass, skipping the bytes every key shares (the
 * high bytes of small graphs). Sorted result in a; tmp is as long. */
GRAPH_API void graph_radix_sort_u64(uint64_t *a, uint64_t *tmp, uint64_t n) {
    static uint64_t count[8][256]; /* one sort at a time: the converter is single-threaded */
    uint64_t *src = a, *dst = tmp, i;
    int b;
    memset(count, 0, sizeof count);
    for (i = 0; i < n; i++)
        for (b = 0; b < 8; b++) count[b][(src[i] >> (8 * b)) & 0xFF]++;
    for (b = 0; b < 8; b++) {
        uint64_t sum = 0, *t;
        int k, shared = 0;
        for (k = 0; k < 256; k++) shared |= count[b][k] == n;
        if (shared) continue;
        for (k = 0; k < 256; k++) {
            uint64_t c = count[b][k];
            count[b][k] = sum;
            sum += c;
        }
        for (i = 0; i < n; i++) dst[count[b][(src[i] >> (8 * b)) & 0xFF]++] = src[i];
        t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, n * 8);
}

/* ======================================================================== */
/* 2. The importer's state                                                  */
/* ======================================================================== */

/* A sorted run spilled to an unlinked temporary file, read back in chunks. */
typedef struct graph_import_run_file {
    int fd;
    uint64_t n, next;      /* keys in the file, next one to read */
    uint64_t *chunk;       /* a window of the file */
    uint64_t chunk_at, chunk_n;
} graph_import_run_file;

typedef struct graph_import {
    /* what to do (set after graph_import_init) */
    const char *in_path, *out_path, *tmp_dir;
    int format;
    uint64_t mem_bytes;
    void (*progress)(const struct graph_import *im, double frac); /* about twice a second while reading */
    /* what was found (graph_import_print_summary prints it) */
    uint64_t input_bytes, lines, input_edges, self_loops, duplicates, symmetrised, isolated, weights;
    uint64_t n_nodes, n_entries, runs_spilled;
    uint64_t out_bytes;    /* the output's size, at most (known once the input is read: the 100 % progress) */
    int directed_input;    /* .sg's flag; text formats: an edge without its reverse was found */
    int mtx_symmetric;
    double seconds;
    uint64_t *ids;         /* SNAP: the file id of each dense vertex (sorted), else NULL */
    /* working state */
    char *err;
    size_t err_len;
    uint64_t *keys, *scratch, cap, n_keys;
    graph_import_run_file *runs;
    uint32_t n_runs, runs_cap;
    uint64_t max_id_plus1; /* .el, .wel: the vertex count is the largest id + 1 */
    double t0, last_say;
    /* SNAP's id table: open addressing, key -> dense id */
    uint64_t *id_keys;
    uint32_t *id_vals;
    uint64_t id_cap, id_count;
    int id_has_max; /* UINT64_MAX is the table's empty mark, so it is kept aside */
    uint32_t id_max_val;
} graph_import;

GRAPH_API void graph_import_init(graph_import *im, const char *in, const char *out, int format) {
    memset(im, 0, sizeof *im);
    im->in_path = in;
    im->out_path = out;
    im->format = format;
    im->mem_bytes = 256ull << 20;
    im->tmp_dir = "/tmp";
}

GRAPH_API void graph_import_free(graph_import *im) {
    uint32_t i;
    for (i = 0; i < im->n_runs; i++) {
        close(im->runs[i].fd);
        free(im->runs[i].chunk);
    }
    free(im->runs);
    free(im->keys);
    free(im->scratch);
    free(im->id_keys);
    free(im->id_vals);
    free(im->ids);
    im->runs = NULL;
    im->keys = im->scratch = im->id_keys = im->ids = NULL;
    im->id_vals = NULL;
    im->n_runs = 0;
}

/* An error about the input at a text line. */
#define GRAPH__AT_LINE(im, line, ...) graph__import_fail_at(im, "line", line, __VA_ARGS__)
#define GRAPH__AT_BYTE(im, at, ...) graph__import_fail_at(im, "byte", at, __VA_ARGS__)

GRAPH_API gpumem_status graph__import_fail_at(graph_import *im, const char *unit, uint64_t where, const char *fmt,
                                             ...) {
    int n = snprintf(im->err, im->err_len, "%s: %s %llu: ", im->in_path, unit, (unsigned long long)where);
    if (n >= 0 && (size_t)n < im->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(im->err + n, im->err_len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return GPUMEM_EINVAL;
}

GRAPH_API void graph__import_tick(graph_import *im, double frac) {
    double now = graph_now_s();
    /* A reader's fraction is its position over what it expects; whatever
     * a damaged file makes of that, progress is said within 0..100 %. */
    if (!(frac >= 0.0)) frac = 0.0;
    if (frac > 1.0) frac = 1.0;
    if (im->progress && (now - im->last_say > 0.5 || frac >= 1.0)) {
        im->last_say = now;
        im->progress(im, frac);
    }
}

/* ======================================================================== */
/* 3. Keys: two per edge, sorted runs, spilled                              */
/* ======================================================================== */

#define GRAPH__KEY(u, v, named) (((uint64_t)(u) << 32) | ((uint64_t)(v) << 1) | (uint64_t)(named))

GRAPH_API gpumem_status graph__write_all(int fd, const void *buf, uint64_t bytes, uint64_t at) {
    const unsigned char *p = (const unsigned char *)buf;
    while (bytes) {
        ssize_t put = pwrite(fd, p, bytes > (1u << 30) ? (1u << 30) : (size_t)bytes, (off_t)at);
        if (put <= 0) return GPUMEM_EIO;
        p += put;
        at += (uint64_t)put;
        bytes -= (uint64_t)put;
    }
    return GPUMEM_OK;
}

/* Sort the buffer and collapse repeats: the same direction named twice by
 * the file is one duplicate edge (counted once, on its named key). */
GRAPH_API uint64_t graph__sort_collapse(graph_import *im, uint64_t *k, uint64_t n) {
    uint64_t i, out = 0;
    graph_radix_sort_u64(k, im->scratch, n);
    for (i = 0; i < n; i++) {
        if (out && k[i] == k[out - 1]) {
            im->duplicates += k[i] & 1;
            continue;
        }
        k[out++] = k[i];
    }
    return out;
}

/* A full buffer becomes a sorted run in an unlinked temporary file: it
 * vanishes with the process, whatever happens. */
GRAPH_API gpumem_status graph__spill(graph_import *im) {
    char path[4096];
    graph_import_run_file *r;
    uint64_t n = graph__sort_collapse(im, im->keys, im->n_keys);
    int fd;
    if (im->n_runs == im->runs_cap) {
        uint32_t cap = im->runs_cap ? 2 * im->runs_cap : 16;
        graph_import_run_file *more = (graph_import_run_file *)realloc(im->runs, cap * sizeof *more);
        if (!more) return graph_fail(im->err, im->err_len, GPUMEM_ENOMEM, "%s: no memory for the runs", im->in_path);
        im->runs = more;
        im->runs_cap = cap;
    }
    if (snprintf(path, sizeof path, "%s/gpumem-import-XXXXXX", im->tmp_dir) >= (int)sizeof path ||
        (fd = mkstemp(path)) < 0)
        return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: temporary file in %s: %s", im->in_path, im->tmp_dir,
                          strerror(errno));
    unlink(path);
    if (graph__write_all(fd, im->keys, n * 8, 0) != GPUMEM_OK) {
        close(fd);
        return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: writing a sorted run to %s: %s", im->in_path,
                          im->tmp_dir, strerror(errno));
    }
    r = &im->runs[im->n_runs++];
    memset(r, 0, sizeof *r);
    r->fd = fd;
    r->n = n;
    im->runs_spilled++;
    im->n_keys = 0;
    return GPUMEM_OK;
}

/* One edge of the file, ids already dense and in range. `both_named`: the
 * format names both directions at once (Matrix Market symmetric). */
GRAPH_API gpumem_status graph__edge(graph_import *im, uint32_t u, uint32_t v, int both_named) {
    im->input_edges++;
    if (u == v) {
        im->self_loops++;
        return GPUMEM_OK;
    }
    if (im->n_keys + 2 > im->cap) {
        gpumem_status st = graph__spill(im);
        if (st != GPUMEM_OK) return st;
    }
    im->keys[im->n_keys++] = GRAPH__KEY(u, v, 1);
    im->keys[im->n_keys++] = GRAPH__KEY(v, u, both_named);
    return GPUMEM_OK;
}

/* ======================================================================== */
/* 4. Text input: lines from a large buffer                                 */
/* ======================================================================== */

typedef struct graph_text {
    int fd;
    char *buf;
    size_t cap, len, pos;
    uint64_t line, consumed; /* line number of the last line returned; bytes before buf */
    int eof;
    const char *want;        /* what a line should hold, for the message about a NUL byte */
} graph_text;

#define GRAPH_TEXT_BUF (4u << 20)

/* The next line (without its end), NUL-terminated in place; 1, or 0 at the
 * end, or -1 on an error (message set). */
GRAPH_API int graph_text_line(graph_import *im, graph_text *t, char **line) {
    for (;;) {
        char *nl = (char *)memchr(t->buf + t->pos, '\n', t->len - t->pos);
        if (nl || (t->eof && t->pos < t->len)) {
            char *s = t->buf + t->pos;
            char *end = nl ? nl : t->buf + t->len;
            const char *nul;
            if (end > s && end[-1] == '\r') end--;
            t->pos = nl ? (size_t)(nl - t->buf) + 1 : t->len;
            t->line++;
            /* The parsers read a line as a C string: a NUL byte would end it
             * there and whatever follows would be accepted unread. Text
             * files hold none, so one means a damaged or binary file. */
            if ((nul = (const char *)memchr(s, 0, (size_t)(end - s))) != NULL) {
                GRAPH__AT_LINE(im, t->line, "expected %s, found a NUL byte at column %llu (not a text file?)",
                               t->want ? t->want : "a line of text", (unsigned long long)(nul - s + 1));
                return -1;
            }
            *end = 0;
            *line = s;
            return 1;
        }
        if (t->eof) return 0;
        /* keep the partial line, read more behind it */
        memmove(t->buf, t->buf + t->pos, t->len - t->pos);
        t->consumed += t->pos;
        t->len -= t->pos;
        t->pos = 0;
        if (t->len == t->cap - 1) {
            GRAPH__AT_LINE(im, t->line + 1, "expected a line of at most %u bytes, found a longer one", GRAPH_TEXT_BUF);
            return -1;
        }
        {
            ssize_t got = read(t->fd, t->buf + t->len, t->cap - 1 - t->len);
            if (got < 0) {
                graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: %s", im->in_path, strerror(errno));
                return -1;
            }
            if (got == 0) t->eof = 1;
            t->len += (size_t)got;
            t->buf[t->len] = 0;
            /* 100 % is said once, by graph_import_run when the reading is done */
            graph__import_tick(im, 0.99 * (double)(t->consumed + t->len) / (double)(im->input_bytes + 1));
        }
    }
}

GRAPH_API const char *graph__skip_space(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

/* An unsigned decimal id; NULL if there is none or it overflows 64 bits. */
GRAPH_API const char *graph__parse_id(const char *s, uint64_t *out) {
    uint64_t v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return NULL;
        v = v * 10 + d;
        p++;
    }
    if (p == s || (*p && *p != ' ' && *p != '\t')) return NULL;
    *out = v;
    return p;
}

/* A number (weight or value): an integer when `integer`, else any real.
 * It starts at s: strtod and strtoll would skip white space first, and a
 * vertical tab or form feed (not a separator here) then passed as part of
 * the field (fuzzing found "0 2\v0" read as the weight 0). */
GRAPH_API const char *graph__parse_number(const char *s, int integer) {
    char *end;
    if (isspace((unsigned char)*s)) return NULL;
    if (integer) {
        (void)strtoll(s, &end, 10);
    } else {
        (void)strtod(s, &end);
    }
    if (end == s || (*end && *end != ' ' && *end != '\t')) return NULL;
    return end;
}

/* A quoted excerpt of a line for a message. A control character or other
 * byte that does not print is shown as C writes it (\t, \r, \x01), so
 * that a tab where a space was expected can be seen (issue 45: it was "?"). */
GRAPH_API const char *graph__excerpt(const char *line, char *buf, size_t n) {
    size_t i, o = 0;
    for (i = 0; line[i] && o + 8 < n; i++) { /* room for one escape (4) and "..." */
        unsigned char c = (unsigned char)line[i];
        if (c == '\t' || c == '\r' || c == '\\') buf[o++] = '\\', buf[o++] = c == '\t' ? 't' : c == '\r' ? 'r' : '\\';
        else if (!isprint(c)) o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    if (line[i]) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o] = 0;
    return buf;
}

/* The text formats (.el, .wel, SNAP, Matrix Market). SNAP calls this twice:
 * pass 0 only collects the ids, pass 1 emits the edges. */
GRAPH_API void graph__lower(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

GRAPH_API gpumem_status graph__id_insert(graph_import *im, uint64_t id);
GRAPH_API uint32_t graph__id_lookup(const graph_import *im, uint64_t id);

/* What an edge line of the format holds, for messages. */
GRAPH_API const char *graph__line_want(int fmt, int mm_pattern, int mm_integer) {
    return fmt == GRAPH_FMT_WEL   ? "\"u v weight\""
           : fmt == GRAPH_FMT_MTX ? (mm_pattern   ? "\"row column\" (the header says pattern)"
                                     : mm_integer ? "\"row column integer\" (the header says integer)"
                                                  : "\"row column value\" (the header says real)")
                                  : "\"u v\" (two vertex ids)";
}

GRAPH_API gpumem_status graph__read_text(graph_import *im, int pass) {
    graph_text t;
    char *line, ex[64];
    int fmt = im->format, got, weighted = fmt == GRAPH_FMT_WEL, header_seen = fmt != GRAPH_FMT_MTX, mm_pattern = 0,
        mm_integer = 0;
    uint64_t mm_rows = 0, mm_cols = 0, mm_nnz = 0, entries = 0;
    gpumem_status st = GPUMEM_OK;
    memset(&t, 0, sizeof t);
    t.fd = open(im->in_path, O_RDONLY);
    if (t.fd < 0) return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: %s", im->in_path, strerror(errno));
    t.cap = GRAPH_TEXT_BUF + 1;
    if (!(t.buf = (char *)malloc(t.cap))) {
        close(t.fd);
        return graph_fail(im->err, im->err_len, GPUMEM_ENOMEM, "%s: no memory for the read buffer", im->in_path);
    }
    t.want = graph__line_want(fmt, 0, 0);
    if (fmt == GRAPH_FMT_MTX) { /* the banner, case-insensitive as the format says */
        char obj[32] = "", layout[32] = "", field[32] = "", sym[32] = "";
        t.want = "the banner \"%%MatrixMarket matrix coordinate <field> <symmetry>\"";
        got = graph_text_line(im, &t, &line);
        if (got < 0) goto fail_quiet;
        /* The keyword is matched by hand: scanf's "%%" skips white space
         * before it, so "%\r%MatrixMarket" (fuzzing) passed as a banner. */
        if (got == 0 || strncmp(line, "%%MatrixMarket", 14) != 0 || !isspace((unsigned char)line[14]) ||
            sscanf(line + 14, "%31s %31s %31s %31s", obj, layout, field, sym) != 4) {
            st = GRAPH__AT_LINE(im, 1, "expected the banner \"%%%%MatrixMarket matrix coordinate <field> <symmetry>\","
                                       " found \"%s\": not a Matrix Market file",
                                got ? graph__excerpt(line, ex, sizeof ex) : "");
            goto fail;
        }
        graph__lower(obj);
        graph__lower(layout);
        graph__lower(field);
        graph__lower(sym);
        if (strcmp(obj, "matrix") || strcmp(layout, "coordinate")) {
            st = GRAPH__AT_LINE(im, 1, "expected \"matrix coordinate\" (a sparse matrix), found \"%s %s\"", obj, layout);
            goto fail;
        }
        mm_pattern = !strcmp(field, "pattern");
        mm_integer = !strcmp(field, "integer");
        if (!mm_pattern && !mm_integer && strcmp(field, "real")) {
            st = GRAPH__AT_LINE(im, 1, "expected the field pattern, integer or real, found \"%s\"", field);
            goto fail;
        }
        im->mtx_symmetric = !strcmp(sym, "symmetric");
        if (!im->mtx_symmetric && strcmp(sym, "general")) {
            st = GRAPH__AT_LINE(im, 1, "expected the symmetry general or symmetric, found \"%s\"", sym);
            goto fail;
        }
        weighted = !mm_pattern;
        t.want = "the size line \"rows columns entries\"";
    }
    while ((got = graph_text_line(im, &t, &line)) > 0) {
        const char *p = graph__skip_space(line);
        uint64_t a, b;
        if (*p == 0) continue; /* blank */
        if ((fmt == GRAPH_FMT_SNAP && *p == '#') || (fmt == GRAPH_FMT_MTX && *p == '%') ||
            ((fmt == GRAPH_FMT_EL || fmt == GRAPH_FMT_WEL) && (*p == '#' || *p == '%')))
            continue;
        if (!header_seen) { /* Matrix Market's size line: rows, columns, entries */
            const char *q;
            if (!(q = graph__parse_id(p, &mm_rows)) || !(q = graph__parse_id(graph__skip_space(q), &mm_cols)) ||
                !(q = graph__parse_id(graph__skip_space(q), &mm_nnz)) || *graph__skip_space(q)) {
                st = GRAPH__AT_LINE(im, t.line, "expected the size line \"rows columns entries\", found \"%s\"",
                                    graph__excerpt(line, ex, sizeof ex));
                goto fail;
            }
            if (mm_rows == 0 || mm_cols == 0) {
                st = GRAPH__AT_LINE(im, t.line, "expected at least one row and column, found %llu x %llu",
                                    (unsigned long long)mm_rows, (unsigned long long)mm_cols);
                goto fail;
            }
            im->n_nodes = mm_rows > mm_cols ? mm_rows : mm_cols;
            if (im->n_nodes > GRAPH_ID_LIMIT) {
                st = GRAPH__AT_LINE(im, t.line, "expected at most %llu vertices (31-bit ids), found %llu: the graph is"
                                                " too large for this tool", GRAPH_ID_LIMIT,
                                    (unsigned long long)im->n_nodes);
                goto fail;
            }
            header_seen = 1;
            t.want = graph__line_want(fmt, mm_pattern, mm_integer);
            continue;
        }
        {
            const char *q = graph__parse_id(p, &a);
            if (q) q = graph__parse_id(graph__skip_space(q), &b);
            if (q && weighted) {
                q = graph__skip_space(q);
                q = *q ? graph__parse_number(q, mm_integer) : NULL;
            }
            if (!q || *graph__skip_space(q)) {
                st = GRAPH__AT_LINE(im, t.line, "expected %s, found \"%s\"", graph__line_want(fmt, mm_pattern, mm_integer),
                                    graph__excerpt(line, ex, sizeof ex));
                goto fail;
            }
        }
        im->lines = t.line;
        im->weights += weighted;
        if (fmt == GRAPH_FMT_MTX) {
            if (++entries > mm_nnz) {
                st = GRAPH__AT_LINE(im, t.line, "expected %llu entries (the size line says so), found more",
                                    (unsigned long long)mm_nnz);
                goto fail;
            }
            if (a < 1 || a > mm_rows || b < 1 || b > mm_cols) {
                st = GRAPH__AT_LINE(im, t.line, "expected a row in 1..%llu and a column in 1..%llu, found %llu %llu",
                                    (unsigned long long)mm_rows, (unsigned long long)mm_cols, (unsigned long long)a,
                                    (unsigned long long)b);
                goto fail;
            }
            st = graph__edge(im, (uint32_t)(a - 1), (uint32_t)(b - 1), im->mtx_symmetric);
        } else if (fmt == GRAPH_FMT_SNAP) {
            if (pass == 0) {
                if ((st = graph__id_insert(im, a)) == GPUMEM_OK) st = graph__id_insert(im, b);
                if (st == GPUMEM_OK && im->id_count + im->id_has_max > GRAPH_ID_LIMIT)
                    st = GRAPH__AT_LINE(im, t.line, "expected at most %llu distinct ids (31 bits), found more: the"
                                                    " graph is too large for this tool", GRAPH_ID_LIMIT);
            } else {
                st = graph__edge(im, graph__id_lookup(im, a), graph__id_lookup(im, b), 0);
            }
        } else {
            if (a >= GRAPH_ID_LIMIT || b >= GRAPH_ID_LIMIT) {
                st = GRAPH__AT_LINE(im, t.line, "expected vertex ids below %llu (31 bits), found %llu %llu: the graph"
                                                " is too large for this tool", GRAPH_ID_LIMIT,
                                    (unsigned long long)a, (unsigned long long)b);
                goto fail;
            }
            if (a + 1 > im->max_id_plus1) im->max_id_plus1 = a + 1;
            if (b + 1 > im->max_id_plus1) im->max_id_plus1 = b + 1;
            st = graph__edge(im, (uint32_t)a, (uint32_t)b, 0);
        }
        if (st != GPUMEM_OK) goto fail;
    }
    if (got < 0) goto fail_quiet;
    if (fmt == GRAPH_FMT_MTX && !header_seen) {
        st = GRAPH__AT_LINE(im, t.line + 1, "expected the size line \"rows columns entries\", found the end of the file");
        goto fail;
    }
    if (fmt == GRAPH_FMT_MTX && entries != mm_nnz) {
        st = GRAPH__AT_LINE(im, t.line + 1, "expected %llu entries (the size line says so), found %llu and the end of"
                                            " the file", (unsigned long long)mm_nnz, (unsigned long long)entries);
        goto fail;
    }
    if (fmt != GRAPH_FMT_MTX && (pass == 0 ? im->id_count + im->id_has_max : im->input_edges) == 0 &&
        (fmt != GRAPH_FMT_SNAP || pass == 0)) {
        st = GRAPH__AT_LINE(im, t.line + 1, "expected at least one edge, found the end of the file");
        goto fail;
    }
    if (fmt == GRAPH_FMT_EL || fmt == GRAPH_FMT_WEL) im->n_nodes = im->max_id_plus1;
    free(t.buf);
    close(t.fd);
    return GPUMEM_OK;
fail_quiet:
    st = st == GPUMEM_OK ? GPUMEM_EINVAL : st;
fail:
    free(t.buf);
    close(t.fd);
    return st;
}

/* ======================================================================== */
/* 5. SNAP's id table                                                       */
/* ======================================================================== */

GRAPH_API uint64_t graph__id_slot(const graph_import *im, uint64_t id) {
    uint64_t h = (id * 0x9E3779B97F4A7C15ull) >> 17, mask = im->id_cap - 1;
    for (h &= mask; im->id_keys[h] != UINT64_MAX && im->id_keys[h] != id; h = (h + 1) & mask) {}
    return h;
}

GRAPH_API gpumem_status graph__id_insert(graph_import *im, uint64_t id) {
    uint64_t s;
    if (id == UINT64_MAX) {
        im->id_has_max = 1;
        return GPUMEM_OK;
    }
    if ((im->id_count + 1) * 2 > im->id_cap) { /* grow at half full */
        uint64_t old_cap = im->id_cap, i, cap = old_cap ? 2 * old_cap : 1u << 16;
        uint64_t *old = im->id_keys, *keys = (uint64_t *)malloc(cap * 8);
        if (!keys) return graph_fail(im->err, im->err_len, GPUMEM_ENOMEM, "%s: no memory for the id map", im->in_path);
        memset(keys, 0xFF, cap * 8);
        im->id_keys = keys;
        im->id_cap = cap;
        for (i = 0; i < old_cap; i++)
            if (old[i] != UINT64_MAX) im->id_keys[graph__id_slot(im, old[i])] = old[i];
        free(old);
    }
    s = graph__id_slot(im, id);
    if (im->id_keys[s] == UINT64_MAX) {
        im->id_keys[s] = id;
        im->id_count++;
    }
    return GPUMEM_OK;
}

GRAPH_API uint32_t graph__id_lookup(const graph_import *im, uint64_t id) {
    return id == UINT64_MAX ? im->id_max_val : im->id_vals[graph__id_slot(im, id)];
}

/* After pass 0: dense ids in the order of the file ids, and the map kept. */
GRAPH_API gpumem_status graph__id_number(graph_import *im) {
    uint64_t n = im->id_count + (uint64_t)im->id_has_max, i, k = 0, *tmp;
    im->ids = (uint64_t *)malloc(n * 8);
    tmp = (uint64_t *)malloc(n * 8);
    im->id_vals = (uint32_t *)malloc(im->id_cap * 4);
    if (!im->ids || !tmp || !im->id_vals) {
        free(tmp);
        return graph_fail(im->err, im->err_len, GPUMEM_ENOMEM, "%s: no memory for the id map", im->in_path);
    }
    for (i = 0; i < im->id_cap; i++)
        if (im->id_keys[i] != UINT64_MAX) im->ids[k++] = im->id_keys[i];
    graph_radix_sort_u64(im->ids, tmp, k);
    free(tmp);
    for (i = 0; i < k; i++) im->id_vals[graph__id_slot(im, im->ids[i])] = (uint32_t)i;
    if (im->id_has_max) {
        im->ids[k] = UINT64_MAX;
        im->id_max_val = (uint32_t)k;
    }
    im->n_nodes = n;
    return GPUMEM_OK;
}

/* The dense id of a file id in a sorted map, or UINT64_MAX if absent. */
GRAPH_API uint64_t graph_ids_find(const uint64_t *ids, uint64_t n, uint64_t file_id) {
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < file_id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && ids[lo] == file_id ? lo : UINT64_MAX;
}

/* ======================================================================== */
/* 6. GAP's serialized CSR (.sg, .wsg)                                      */
/* ======================================================================== */

#define GRAPH_SG_HEADER 17u

/* Buffered sequential reads of one region of a file. */
typedef struct graph_region {
    int fd;
    uint64_t at; /* file offset of buf[0] */
    unsigned char *buf;
    size_t len, pos, cap;
} graph_region;

GRAPH_API int graph__region_get(graph_region *r, void *out, size_t n) {
    if (r->pos + n > r->len) {
        ssize_t got;
        r->at += r->pos;
        r->pos = 0;
        errno = 0; /* a short read sets none: the message then says the file is shorter */
        got = pread(r->fd, r->buf, r->cap, (off_t)r->at);
        if (got < (ssize_t)n) return -1;
        r->len = (size_t)got;
    }
    memcpy(out, r->buf + r->pos, n);
    r->pos += n;
    return 0;
}

GRAPH_API gpumem_status graph__read_sg(graph_import *im) {
    unsigned char head[GRAPH_SG_HEADER];
    int64_t m, n;
    uint64_t want, v, e = 0, width = im->format == GRAPH_FMT_WSG ? 8 : 4, prev = 0, end;
    graph_region off, nb;
    struct stat sb;
    gpumem_status st = GPUMEM_OK;
    int fd = open(im->in_path, O_RDONLY);
    if (fd < 0) return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: %s", im->in_path, strerror(errno));
    if (fstat(fd, &sb) != 0 || pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head) {
        st = sb.st_size == 0 ? graph_fail(im->err, im->err_len, GPUMEM_EINVAL,
                                          "%s: byte 0: expected a %u-byte GAP header, found an empty file",
                                          im->in_path, GRAPH_SG_HEADER)
                             : GRAPH__AT_BYTE(im, (uint64_t)sb.st_size, "truncated: expected a %u-byte GAP header,"
                                                  " found a %llu-byte file", GRAPH_SG_HEADER,
                                              (unsigned long long)sb.st_size);
        close(fd);
        return st;
    }
    memcpy(&m, head + 1, 8);
    memcpy(&n, head + 9, 8);
    if (head[0] > 1) {
        close(fd);
        return GRAPH__AT_BYTE(im, 0, "expected the directed flag (0 or 1) of a GAP .%s file, found %u: not a GAP"
                                     " serialized graph", graph_format_name(im->format), head[0]);
    }
    im->directed_input = head[0];
    if (n <= 0 || (uint64_t)n > GRAPH_ID_LIMIT) {
        close(fd);
        return GRAPH__AT_BYTE(im, 9, "expected a node count in 1..%llu (31-bit ids), found %lld%s", GRAPH_ID_LIMIT,
                              (long long)n, n > 0 ? ": the graph is too large for this tool" : "");
    }
    if (m < 0 || (uint64_t)m > (1ull << 40)) {
        close(fd);
        return GRAPH__AT_BYTE(im, 1, "expected an edge count in 0..2^40, found %lld", (long long)m);
    }
    want = (uint64_t)(n + 1) * 8 + (uint64_t)m * width;
    want = GRAPH_SG_HEADER + (head[0] ? 2 * want : want);
    if ((uint64_t)sb.st_size != want) {
        close(fd);
        return GRAPH__AT_BYTE(im, (uint64_t)sb.st_size < want ? (uint64_t)sb.st_size : want,
                              "%s: expected a %llu-byte file from the counts (edges %lld at byte 1, nodes %lld at"
                              " byte 9%s), found %llu bytes", (uint64_t)sb.st_size < want ? "truncated" : "count"
                              " fields do not match the file's size", (unsigned long long)want, (long long)m,
                              (long long)n, head[0] ? ", directed: inverse arrays too" : "",
                              (unsigned long long)sb.st_size);
    }
    im->n_nodes = (uint64_t)n;
    memset(&off, 0, sizeof off);
    memset(&nb, 0, sizeof nb);
    off.fd = nb.fd = fd;
    off.at = GRAPH_SG_HEADER;
    nb.at = GRAPH_SG_HEADER + (uint64_t)(n + 1) * 8;
    off.cap = nb.cap = 1u << 20;
    off.buf = (unsigned char *)malloc(off.cap);
    nb.buf = (unsigned char *)malloc(nb.cap);
    if (!off.buf || !nb.buf) {
        st = graph_fail(im->err, im->err_len, GPUMEM_ENOMEM, "%s: no memory for the read buffers", im->in_path);
        goto out;
    }
    for (v = 0; v <= (uint64_t)n && st == GPUMEM_OK; v++) {
        int64_t o;
        uint64_t at = GRAPH_SG_HEADER + v * 8;
        if (graph__region_get(&off, &o, 8) != 0) { /* the size was checked: the file changed, or an I/O error */
            st = GRAPH__AT_BYTE(im, at, "expected the offset of vertex %llu, found the read failing (%s)",
                                (unsigned long long)v, errno ? strerror(errno) : "the file is shorter than it was");
            break;
        }
        /* Signed comparisons: an offset is an int64, and a negative one
         * taken as unsigned would pass as huge and run the neighbour loop
         * past the edge count. */
        if ((v == 0 && o != 0) || (v > 0 && (o < (int64_t)prev || o > m)) || (v == (uint64_t)n && o != m)) {
            st = GRAPH__AT_BYTE(im, at, "expected the offset of vertex %llu in %llu..%lld%s, found %lld",
                                (unsigned long long)v, (unsigned long long)(v ? prev : 0), (long long)(v ? m : 0),
                                v == (uint64_t)n ? " (the last offset is the edge count)" : "", (long long)o);
            break;
        }
        if (v == 0) continue;
        for (end = (uint64_t)o; e < end; e++) { /* vertex v-1's neighbours */
            int32_t w[2];
            uint64_t wat = nb.at + nb.pos;
            if (graph__region_get(&nb, w, (size_t)width) != 0) {
                st = GRAPH__AT_BYTE(im, wat, "expected neighbour %llu of vertex %llu, found the read failing (%s)",
                                    (unsigned long long)(e - prev), (unsigned long long)(v - 1),
                                    errno ? strerror(errno) : "the file is shorter than it was");
                break;
            }
            if (w[0] < 0 || w[0] >= n) {
                st = GRAPH__AT_BYTE(im, wat, "expected a neighbour id in 0..%lld, found %d", (long long)(n - 1), w[0]);
                break;
            }
            im->weights += width == 8;
            if ((st = graph__edge(im, (uint32_t)(v - 1), (uint32_t)w[0], 0)) != GPUMEM_OK) break;
            graph__import_tick(im, 0.99 * (double)e / (double)(m + 1));
        }
        prev = (uint64_t)o;
    }
out:
    free(off.buf);
    free(nb.buf);
    close(fd);
    return st;
}

/* ======================================================================== */
/* 7. Merging the runs into the CSR file                                    */
/* ======================================================================== */

/* The next key of run r, or UINT64_MAX when it is done (no real key is:
 * ids are 31 bits). */
GRAPH_API uint64_t graph__run_peek(graph_import_run_file *r, uint64_t chunk_keys) {
    if (r->next == r->n) return UINT64_MAX;
    if (r->next >= r->chunk_at + r->chunk_n) {
        r->chunk_at = r->next;
        r->chunk_n = r->n - r->next < chunk_keys ? r->n - r->next : chunk_keys;
        if (graph_pread_all(r->fd, r->chunk, r->chunk_n * 8, r->chunk_at * 8) != GPUMEM_OK) return UINT64_MAX - 1;
    }
    return r->chunk[r->next - r->chunk_at];
}

/* Buffered sequential writer. */
typedef struct graph_writer {
    int fd;
    uint64_t at;
    unsigned char *buf;
    size_t len, cap;
    int failed;
} graph_writer;

GRAPH_API void graph__put(graph_writer *w, const void *p, size_t n) {
    if (w->len + n > w->cap) {
        w->failed |= graph__write_all(w->fd, w->buf, w->len, w->at) != GPUMEM_OK;
        w->at += w->len;
        w->len = 0;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

GRAPH_API void graph__flush(graph_writer *w) {
    w->failed |= graph__write_all(w->fd, w->buf, w->len, w->at) != GPUMEM_OK;
    w->at += w->len;
    w->len = 0;
}

/* The merged key stream, grouped by (u, v): one CSR entry each. A group
 * with no key the file named is an edge added by symmetrising. */
GRAPH_API gpumem_status graph__write_csr(graph_import *im, int fd, graph_header *h) {
    graph_writer ow, ew;
    uint64_t n = im->n_nodes, next_vertex = 0, m = 0, group = UINT64_MAX, last = UINT64_MAX, chunk_keys = 0;
    int named = 0;
    uint32_t i, k = im->n_runs;
    gpumem_status st = GPUMEM_OK;
    uint64_t *heads = NULL, in_memory_next = 0, in_memory_n = 0;
    memset(&ow, 0, sizeof ow);
    memset(&ew, 0, sizeof ew);
    graph_layout(h, n, 0);
    ow.fd = ew.fd = fd;
    ow.at = h->offsets_at;
    ew.at = h->edges_at;
    ow.cap = ew.cap = 1u << 20;
    ow.buf = (unsigned char *)malloc(ow.cap);
    ew.buf = (unsigned char *)malloc(ew.cap);
    if (k && im->n_keys) { /* what is left in the buffer is the last run */
        if ((st = graph__spill(im)) != GPUMEM_OK) return st;
        k = im->n_runs;
    }
    if (k) { /* the buffer becomes the runs' read windows */
        chunk_keys = im->cap / k > 8192 ? im->cap / k : 8192;
        for (i = 0; i < k; i++) im->runs[i].chunk = (uint64_t *)malloc(chunk_keys * 8);
        free(im->keys);
        free(im->scratch);
        im->keys = im->scratch = NULL;
        heads = (uint64_t *)malloc(k * 8);
        for (i = 0; heads && i < k; i++) {
            if (!im->runs[i].chunk) break;
            heads[i] = graph__run_peek(&im->runs[i], chunk_keys);
        }
        if (!heads || i < k) st = GPUMEM_ENOMEM;
    } else {
        in_memory_n = graph__sort_collapse(im, im->keys, im->n_keys);
    }
    if (!ow.buf || !ew.buf) st = GPUMEM_ENOMEM;
    if (st != GPUMEM_OK) {
        free(ow.buf);
        free(ew.buf);
        free(heads);
        return graph_fail(im->err, im->err_len, st, "%s: no memory for the merge", im->in_path);
    }
    for (;;) {
        uint64_t key;
        if (k == 0) {
            key = in_memory_next < in_memory_n ? im->keys[in_memory_next++] : UINT64_MAX;
        } else { /* the smallest head: a linear scan, runs are few (input / memory) */
            uint32_t best = 0;
            for (i = 1; i < k; i++)
                if (heads[i] < heads[best]) best = i;
            key = heads[best];
            if (key == UINT64_MAX - 1) {
                st = graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: reading a sorted run back failed", im->in_path);
                break;
            }
            if (key != UINT64_MAX) {
                im->runs[best].next++;
                heads[best] = graph__run_peek(&im->runs[best], chunk_keys);
            }
        }
        if (key != UINT64_MAX && key == last) { /* the same key from another run */
            im->duplicates += key & 1;
            continue;
        }
        last = key;
        if (group != UINT64_MAX && (key == UINT64_MAX || key >> 1 != group)) { /* close the group */
            uint32_t u = (uint32_t)(group >> 31), v = (uint32_t)(group & 0x7FFFFFFFu);
            for (; next_vertex <= u; next_vertex++) graph__put(&ow, &m, 8);
            graph__put(&ew, &v, 4);
            m++;
            im->symmetrised += !named;
            named = 0;
        }
        if (key == UINT64_MAX) break;
        group = key >> 1;
        named |= (int)(key & 1);
    }
    for (; next_vertex <= n; next_vertex++) graph__put(&ow, &m, 8);
    graph__flush(&ow);
    graph__flush(&ew);
    free(ow.buf);
    free(ew.buf);
    free(heads);
    if (st != GPUMEM_OK) return st;
    if (ow.failed || ew.failed)
        return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: write failed: %s", im->out_path, strerror(errno));
    im->n_entries = m;
    h->n_edges = m;
    graph_layout(h, n, m);
    return GPUMEM_OK;
}

/* Read the written arrays back once: the data hash, and the isolated
 * vertices from the offsets. */
GRAPH_API gpumem_status graph__hash_back(graph_import *im, int fd, graph_header *h) {
    uint64_t bytes[2], at[2], hash = 0, prev = 0, first = 1;
    size_t cap = 1u << 20;
    unsigned char *buf = (unsigned char *)malloc(cap);
    int part;
    if (!buf) return graph_fail(im->err, im->err_len, GPUMEM_ENOMEM, "%s: no memory", im->out_path);
    bytes[0] = (h->n_nodes + 1) * 8;
    bytes[1] = h->n_edges * 4;
    at[0] = h->offsets_at;
    at[1] = h->edges_at;
    for (part = 0; part < 2; part++)
        while (bytes[part]) {
            size_t n = bytes[part] < cap ? (size_t)bytes[part] : cap, i; /* cap is a multiple of 8: chunks hash as one */
            if (graph_pread_all(fd, buf, n, at[part]) != GPUMEM_OK) {
                free(buf);
                return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: read back failed", im->out_path);
            }
            hash = graph_hash(hash, buf, n);
            if (part == 0)
                for (i = 0; i < n; i += 8) {
                    uint64_t o;
                    memcpy(&o, buf + i, 8);
                    if (!first) im->isolated += o == prev;
                    first = 0;
                    prev = o;
                }
            at[part] += n;
            bytes[part] -= n;
        }
    free(buf);
    h->data_hash = hash;
    return GPUMEM_OK;
}

/* Write `bytes` to `path` through a temporary name and a rename. */
GRAPH_API gpumem_status graph__write_ids(graph_import *im, const char *path) {
    char tmp[4200];
    uint64_t n = im->n_nodes;
    int fd, ok;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp ||
        (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
        return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: %s", tmp, strerror(errno));
    ok = graph__write_all(fd, GRAPH_IDS_MAGIC, 8, 0) == GPUMEM_OK && graph__write_all(fd, &n, 8, 8) == GPUMEM_OK &&
         graph__write_all(fd, im->ids, n * 8, 16) == GPUMEM_OK;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return graph_fail(im->err, im->err_len, GPUMEM_EIO, "%s: write failed: %s", path, strerror(errno));
    }
    return GPUMEM_OK;
}

/* Read OUT.ids (SNAP's map); *ids NULL and OK when there is none. */
GRAPH_API gpumem_status graph_ids_load(const char *path, uint64_t **ids, uint64_t *n, char *err, size_t len) {
    char magic[8];
    struct stat sb;
    int fd = open(path, O_RDONLY);
    *ids = NULL;
    *n = 0;
    if (fd < 0) return GPUMEM_OK;
    if (fstat(fd, &sb) != 0 || pread(fd, magic, 8, 0) != 8 || memcmp(magic, GRAPH_IDS_MAGIC, 8) != 0 ||
        pread(fd, n, 8, 8) != 8 || (uint64_t)sb.st_size != 16 + *n * 8 || !(*ids = (uint64_t *)malloc(*n * 8 + 8)) ||
        graph_pread_all(fd, *ids, *n * 8, 16) != GPUMEM_OK) {
        close(fd);
        free(*ids);
        *ids = NULL;
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: not a gpumem id map (%s, 16 + 8 bytes an id)", path,
                          GRAPH_IDS_MAGIC);
    }
    close(fd);
    return GPUMEM_OK;
}

/* ======================================================================== */
/* 8. The whole conversion                                                  */
/* ======================================================================== */

/* Bytes as a person reads them. */
GRAPH_API const char *graph__size_str(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.1f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.1f MiB", (double)b / (double)(1ull << 20));
    else snprintf(buf, n, "%llu KiB", (unsigned long long)((b + 1023) >> 10));
    return buf;
}

/* Before anything is written: the output's size, from the vertex count and
 * the most entries the keys can make (two per edge that is not a loop), and
 * whether the file system holding OUT has room for it and the process may
 * write a file that large (ulimit -f). The vertex count alone can ask for
 * gigabytes (a one-line .el naming vertex 2^31 - 2 needs 16 GiB of
 * offsets); a disk that fills half way leaves the user with a failed write
 * after minutes, and RLIMIT_FSIZE kills the process (SIGXFSZ) before the
 * temporary file can be removed. So it is refused here, with the numbers. */
GRAPH_API gpumem_status graph__check_room(graph_import *im) {
    char dir[4096], need_s[32], have_s[32];
    const char *slash = strrchr(im->out_path, '/');
    graph_header h;
    struct statvfs fs;
    struct rlimit lim;
    uint64_t entries = 2 * (im->input_edges - im->self_loops), need, ids = im->ids ? 16 + im->n_nodes * 8 : 0;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash == im->out_path ? 1 : slash - im->out_path), im->out_path);
    else snprintf(dir, sizeof dir, ".");
    graph_layout(&h, im->n_nodes, entries);
    need = h.file_bytes;
    im->out_bytes = need;
    if (statvfs(dir, &fs) == 0) { /* a file system that cannot say (rare) is written to, as before */
        uint64_t avail = (uint64_t)fs.f_bavail * (uint64_t)(fs.f_frsize ? fs.f_frsize : fs.f_bsize);
        if (need + ids > avail)
            return graph_fail(im->err, im->err_len, GPUMEM_E2BIG,
                              "%s: the converted graph needs up to %s (%llu vertices, at most %llu entries%s), and"
                              " the file system holding %s has %s free: nothing written; free space there or"
                              " convert to another place", im->out_path,
                              graph__size_str(need + ids, need_s, sizeof need_s), (unsigned long long)im->n_nodes,
                              (unsigned long long)entries, ids ? ", and the id map" : "", dir,
                              graph__size_str(avail, have_s, sizeof have_s));
    }
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && need > (uint64_t)lim.rlim_cur)
        return graph_fail(im->err, im->err_len, GPUMEM_E2BIG,
                          "%s: the converted graph needs up to %s (%llu vertices, at most %llu entries), more than"
                          " the file size limit of %s (ulimit -f): nothing written", im->out_path,
                          graph__size_str(need, need_s, sizeof need_s), (unsigned long long)im->n_nodes,
                          (unsigned long long)entries, graph__size_str((uint64_t)lim.rlim_cur, have_s, sizeof have_s));
    return GPUMEM_OK;
}

GRAPH_API gpumem_status graph_import_run(graph_import *im, char *err, size_t len) {
    char tmp[4200], ids_path[4200];
    graph_header h;
    unsigned char page[GRAPH_PAGE];
    struct stat sb;
    gpumem_status st;
    int fd = -1;
    im->err = err;
    im->err_len = len;
    im->t0 = graph_now_s();
    if (im->format == GRAPH_FMT_AUTO) im->format = graph_format_of_path(im->in_path);
    if (im->format <= GRAPH_FMT_NATIVE || im->format >= GRAPH_FMTS)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: %s", im->in_path,
                          im->format == GRAPH_FMT_NATIVE ? "already a gpumem graph: nothing to convert"
                                                         : "cannot tell the format from the extension: expected .el,"
                                                           " .wel, .sg, .wsg, .txt/.snap or .mtx/.mm, or --format");
    if (stat(im->in_path, &sb) != 0)
        return graph_fail(err, len, errno == ENOENT ? GPUMEM_ENODEV : GPUMEM_EIO, "%s: %s", im->in_path,
                          strerror(errno));
    if (!S_ISREG(sb.st_mode)) return graph_fail(err, len, GPUMEM_EINVAL, "%s: not a regular file", im->in_path);
    im->input_bytes = (uint64_t)sb.st_size;
    if (sb.st_size == 0)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: %s: expected %s, found an empty file", im->in_path,
                          im->format == GRAPH_FMT_SG || im->format == GRAPH_FMT_WSG ? "byte 0" : "line 1",
                          im->format == GRAPH_FMT_SG || im->format == GRAPH_FMT_WSG ? "a 17-byte GAP header"
                          : im->format == GRAPH_FMT_MTX                            ? "a Matrix Market banner"
                                                                                   : "an edge list");
    im->cap = im->mem_bytes / 16 < 64 ? 64 : im->mem_bytes / 16; /* keys and the sort's scratch */
    im->keys = (uint64_t *)malloc(im->cap * 8);
    im->scratch = (uint64_t *)malloc(im->cap * 8);
    if (!im->keys || !im->scratch)
        return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory for a %llu MiB sort buffer", im->in_path,
                          (unsigned long long)(im->mem_bytes >> 20));
    if (im->format == GRAPH_FMT_SG || im->format == GRAPH_FMT_WSG) {
        st = graph__read_sg(im);
    } else {
        st = GPUMEM_OK;
        if (im->format == GRAPH_FMT_SNAP) {
            if ((st = graph__read_text(im, 0)) == GPUMEM_OK) st = graph__id_number(im);
            im->input_edges = im->weights = 0;
        }
        if (st == GPUMEM_OK) st = graph__read_text(im, 1);
    }
    if (st != GPUMEM_OK) return st;
    if (im->n_nodes == 0)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: expected at least one vertex, found none", im->in_path);
    if ((st = graph__check_room(im)) != GPUMEM_OK) return st;
    graph__import_tick(im, 1.0); /* after the check: the 100 % line may say what will be written */
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", im->out_path, (long)getpid()) >= (int)sizeof tmp ||
        snprintf(ids_path, sizeof ids_path, "%s.ids", im->out_path) >= (int)sizeof ids_path)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: path too long", im->out_path);
    if ((fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0644)) < 0)
        return graph_fail(err, len, GPUMEM_EIO, "%s: %s", tmp, strerror(errno));
    memset(&h, 0, sizeof h);
    st = graph__write_csr(im, fd, &h);
    if (st == GPUMEM_OK) st = graph__hash_back(im, fd, &h);
    if (st == GPUMEM_OK) {
        h.header_hash = graph_header_hash(&h);
        memset(page, 0, sizeof page);
        memcpy(page, &h, sizeof h);
        if (graph__write_all(fd, page, sizeof page, 0) != GPUMEM_OK || ftruncate(fd, (off_t)h.file_bytes) != 0)
            st = graph_fail(err, len, GPUMEM_EIO, "%s: write failed: %s", tmp, strerror(errno));
    }
    if (close(fd) != 0 && st == GPUMEM_OK) st = graph_fail(err, len, GPUMEM_EIO, "%s: %s", tmp, strerror(errno));
    if (st == GPUMEM_OK && im->ids) st = graph__write_ids(im, ids_path);
    if (st == GPUMEM_OK && !im->ids) unlink(ids_path); /* a stale map from another input */
    if (st == GPUMEM_OK && rename(tmp, im->out_path) != 0)
        st = graph_fail(err, len, GPUMEM_EIO, "%s: %s", im->out_path, strerror(errno));
    if (st != GPUMEM_OK) unlink(tmp);
    im->seconds = graph_now_s() - im->t0;
    /* a symmetric matrix names both keys of each entry: a repeat collapsed twice */
    if (im->format == GRAPH_FMT_MTX && im->mtx_symmetric) im->duplicates /= 2;
    /* a directed input is one where some edge had no reverse */
    if (im->format != GRAPH_FMT_SG && im->format != GRAPH_FMT_WSG) im->directed_input = im->symmetrised > 0;
    return st;
}

GRAPH_API void graph_import_print_summary(const graph_import *im, FILE *f) {
    fprintf(f, "  %s (%s, %.1f MB) -> %s in %.2f s (%.1f MB/s of input)\n", im->in_path, graph_format_name(im->format),
            (double)im->input_bytes / 1e6, im->out_path, im->seconds,
            im->seconds > 0 ? (double)im->input_bytes / 1e6 / im->seconds : 0.0);
    fprintf(f, "    %llu vertices, %llu edges read; stored undirected: %llu entries (each edge both ways)\n",
            (unsigned long long)im->n_nodes, (unsigned long long)im->input_edges, (unsigned long long)im->n_entries);
    fprintf(f, "    self-loops removed: %llu; duplicate edges removed: %llu; edges without their reverse (added,"
               " symmetrised): %llu%s\n",
            (unsigned long long)im->self_loops, (unsigned long long)im->duplicates,
            (unsigned long long)im->symmetrised,
            im->format == GRAPH_FMT_MTX && im->mtx_symmetric ? " (symmetric matrix: both ways)"
            : im->directed_input                             ? " (the input is directed)"
                                                             : "");
    fprintf(f, "    isolated vertices kept: %llu; weights or values dropped: %llu; sorted runs spilled: %llu\n",
            (unsigned long long)im->isolated, (unsigned long long)im->weights, (unsigned long long)im->runs_spilled);
    if (im->ids) fprintf(f, "    ids remapped densely in order; the map is %s.ids\n", im->out_path);
}

#endif /* GPUMEM_EXAMPLES_GRAPH_FORMATS_H */
