/* examples/table.h - columnar tables read by row through the gpumem cache:
 * the data-dependent analytics queries of the BaM dissertation (its NYC taxi
 * queries Q0..Q5, §3.1 and §9.5.2) on a user's own table.
 *
 *   1. The file format: a header of whole 4 KiB pages naming each column,
 *      then one array of 8-byte doubles per column (missing values are a
 *      NaN), each on a 4 KiB boundary, then the dictionaries of the text
 *      columns. Each column carries a hash, checked whenever a query reads
 *      the whole column for its reference.
 *   2. The query: Q0 counts the rows whose filter column c0 passes a bound
 *      (c0 >= min); Qk averages (c1 + ... + ck) / c0 over those rows, a row
 *      with a missing value giving no term, as SQL's AVG skips a NULL
 *      (x / 0 is IEEE's infinity, as DuckDB has it for doubles). Rows are taken in ranges of TABLE_RANGE (BaM's warp of 32
 *      threads takes 512 rows); each range's sum is kept apart and the sums
 *      are added in range order, so every mode and thread count gives the
 *      same bits.
 *   3. One range of a query from any source: the cache (only rows that
 *      pass touch c1..ck), memory (a row group read whole, the tiled
 *      baseline), or host pread of exactly the needed values. Written once
 *      for host and CUDA threads (pread: host only).
 *   4. A generator of taxi-like tables (build/table gen, and the GPU
 *      example when its file is missing).
 *
 * The CSV reader and the converter are examples/table_csv.h; the program is
 * examples/table.c, the GPU version examples/cuda/analytics.cu. The store
 * (a file served by the software NVMe controller, queue pairs, a cache) is
 * examples/graph.h's graph_store_serve.
 * Define GPUMEM_IMPLEMENTATION in the one file that includes this one.
 */
#ifndef GPUMEM_EXAMPLES_TABLE_H
#define GPUMEM_EXAMPLES_TABLE_H

#include <math.h>

#include "graph.h"

#define TABLE_MAGIC "GPUMEMT1"
#define TABLE_PAGE 4096u
#define TABLE_NAME_BYTES 48u   /* a column's name, NUL included */
#define TABLE_MAX_COLS 256u
#define TABLE_MAX_ROWS (1ull << 40)
#define TABLE_RANGE 512u       /* rows a work item: BaM's warp takes 512 consecutive rows */
#define TABLE_MAX_K 5u         /* Q5: five columns besides the filter */
#define TABLE_LBA 512u         /* the controller's block: a direct read costs the blocks it covers */
#define TABLE_MAX_BLOCKS 256u  /* its largest command: 128 KiB */
#define TABLE_API static inline

/* ======================================================================== */
/* 1. File format                                                           */
/* ======================================================================== */

enum { TABLE_NUMBER = 0, TABLE_TEXT = 1 }; /* a column's kind; TEXT: dictionary codes 0, 1, ... */

typedef struct table_column {
    char name[TABLE_NAME_BYTES];
    uint32_t kind;
    uint32_t reserved_;
    uint64_t at;         /* byte offset of value 0 */
    uint64_t missing;    /* values that are NaN */
    uint64_t hash;       /* graph_hash over the n_rows values */
    uint64_t dict_at;    /* TEXT: its dictionary: in code order, each entry its code (8 bytes), the
                          * string, a NUL, zeros to the next multiple of 8 */
    uint64_t dict_bytes; /* TEXT: the entries' bytes; dict_count entries */
    uint64_t dict_count;
} table_column;

typedef struct table_header {
    char magic[8];
    uint64_t n_rows;
    uint32_t n_cols, header_pages;
    uint64_t file_bytes;  /* a multiple of 4 KiB */
    uint64_t header_hash; /* graph_hash over the fixed part and the columns, this field 0 */
} table_header;

/* A table's header and columns, as read from its file. */
typedef struct table_info {
    table_header h;
    table_column *cols;
} table_info;

TABLE_API uint32_t table_header_pages(uint32_t n_cols) {
    return (uint32_t)GPUMEM_ALIGN_UP(sizeof(table_header) + (uint64_t)n_cols * sizeof(table_column), TABLE_PAGE) /
           TABLE_PAGE;
}

TABLE_API uint64_t table_header_hash(const table_header *h, const table_column *cols) {
    table_header z = *h;
    z.header_hash = 0;
    return graph_hash(graph_hash(0x7461626C65ull, &z, sizeof z), cols, (size_t)h->n_cols * sizeof *cols);
}

TABLE_API void table_info_free(table_info *t) {
    free(t->cols);
    t->cols = NULL;
}

/* Read and check the header of an open table file: magic, hash, every
 * column's place inside the file, and the file's size. */
TABLE_API gpumem_status table_read_header(int fd, const char *path, table_info *t, char *err, size_t len) {
    struct stat sb;
    uint32_t c;
    ssize_t got;
    memset(t, 0, sizeof *t);
    got = pread(fd, &t->h, sizeof t->h, 0);
    if (got < 0) return graph_fail(err, len, GPUMEM_EIO, "%s: %s", path, strerror(errno));
    if (got != (ssize_t)sizeof t->h || memcmp(t->h.magic, TABLE_MAGIC, 8) != 0)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: not a gpumem table file (no %s header; make one with"
                          " table convert)", path, TABLE_MAGIC);
    if (t->h.n_cols < 1 || t->h.n_cols > TABLE_MAX_COLS || t->h.n_rows < 1 || t->h.n_rows > TABLE_MAX_ROWS ||
        t->h.header_pages != table_header_pages(t->h.n_cols))
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: header damaged (%u columns, %llu rows, %u header pages)",
                          path, t->h.n_cols, (unsigned long long)t->h.n_rows, t->h.header_pages);
    t->cols = (table_column *)calloc(t->h.n_cols, sizeof *t->cols);
    if (!t->cols) return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory for the header", path);
    if (pread(fd, t->cols, t->h.n_cols * sizeof *t->cols, sizeof t->h) != (ssize_t)(t->h.n_cols * sizeof *t->cols) ||
        t->h.header_hash != table_header_hash(&t->h, t->cols)) {
        table_info_free(t);
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: header damaged (its hash does not match)", path);
    }
    for (c = 0; c < t->h.n_cols; c++) {
        const table_column *k = &t->cols[c];
        /* each bound written so that no sum wraps: a crafted header must not pass */
        if (k->at % TABLE_PAGE || k->at < (uint64_t)t->h.header_pages * TABLE_PAGE || k->at > t->h.file_bytes ||
            t->h.n_rows * 8 > t->h.file_bytes - k->at || k->name[TABLE_NAME_BYTES - 1] || !k->name[0] ||
            k->kind > TABLE_TEXT ||
            (k->kind == TABLE_TEXT && (k->dict_at > t->h.file_bytes || k->dict_bytes > t->h.file_bytes - k->dict_at))) {
            table_info_free(t);
            return graph_fail(err, len, GPUMEM_EINVAL, "%s: column %u lies outside the file", path, c + 1);
        }
    }
    if (fstat(fd, &sb) != 0) {
        table_info_free(t);
        return graph_fail(err, len, GPUMEM_EIO, "%s: %s", path, strerror(errno));
    }
    if ((uint64_t)sb.st_size != t->h.file_bytes) {
        table_info_free(t);
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: %s: the file is %llu bytes, its header says %llu", path,
                          (uint64_t)sb.st_size < t->h.file_bytes ? "truncated" : "bytes follow the table",
                          (unsigned long long)sb.st_size, (unsigned long long)t->h.file_bytes);
    }
    return GPUMEM_OK;
}

TABLE_API gpumem_status table_open_info(const char *path, int *fd, table_info *t, char *err, size_t len) {
    gpumem_status st;
    memset(t, 0, sizeof *t);
    *fd = open(path, O_RDONLY);
    if (*fd < 0)
        return graph_fail(err, len, errno == ENOENT ? GPUMEM_ENODEV : GPUMEM_EIO, "%s: %s", path, strerror(errno));
    if ((st = table_read_header(*fd, path, t, err, len)) != GPUMEM_OK) {
        close(*fd);
        *fd = -1;
    }
    return st;
}

/* The column called `name`, or -1. */
TABLE_API int table_find(const table_info *t, const char *name) {
    uint32_t c;
    for (c = 0; c < t->h.n_cols; c++)
        if (!strcmp(t->cols[c].name, name)) return (int)c;
    return -1;
}

/* ======================================================================== */
/* 2. Queries                                                               */
/* ======================================================================== */

/* Qk over a table: k = 0..5 columns besides the filter. col_at[0] is the
 * filter column's byte offset, col_at[1..k] the others'. */
typedef struct table_query {
    uint32_t k;
    double min;              /* a row passes when c0 >= min (a NaN never passes) */
    uint64_t n_rows;
    uint64_t col_at[TABLE_MAX_K + 1];
} table_query;

/* One range's (or a whole query's) result. */
typedef struct table_part {
    double sum;           /* Qk: the sum of (c1 + ... + ck) / c0 over the terms */
    uint64_t terms;       /* rows that gave a term (Q0: rows that pass) */
    uint64_t passing;     /* rows whose c0 passes */
} table_part;

/* What one thread did: bytes the query needed (c0 of every row, c1..ck of
 * every passing row: 8 bytes a value) and bytes it read from storage
 * (cache mode: counted by the cache), with the commands that read them. */
typedef struct table_counts {
    unsigned long long rows, bytes_needed, bytes_read, commands, full_retries, errors;
    int first_error;
} table_counts;

GPUMEM_API uint64_t table_ranges(uint64_t n_rows) { return (n_rows + TABLE_RANGE - 1) / TABLE_RANGE; }

/* Sum the ranges' parts in range order: the same bits whoever made them. */
TABLE_API table_part table_total(const table_part *parts, uint64_t n) {
    table_part t = {0, 0, 0};
    uint64_t i;
    for (i = 0; i < n; i++) {
        t.sum += parts[i].sum;
        t.terms += parts[i].terms;
        t.passing += parts[i].passing;
    }
    return t;
}

/* ======================================================================== */
/* 3. One range of a query, from the cache, memory or pread                 */
/* ======================================================================== */

enum { TABLE_FROM_CACHE, TABLE_FROM_MEMORY, TABLE_FROM_PREAD };

/* Where a range's values come from. CACHE: refs[j] into column j's array
 * (a thread holds up to k + 1 lines); MEMORY: mem[j][row - mem_first], a
 * row group read whole; PREAD: c0 of the range in mem[0] (one read of the
 * range), each other value one 8-byte pread of `fd`. */
typedef struct table_source {
    int kind;
    gpumem_cache_ref *refs;
    const double *mem[TABLE_MAX_K + 1];
    uint64_t mem_first;
    int fd;
} table_source;

/* Value `row` of column j. A full cache (EAGAIN) is retried after letting
 * go of every other line the thread holds (holding lines while waiting for
 * a slot is how a small cache deadlocks; graph_get does the same). */
GPUMEM_API gpumem_status table_value(table_source *s, const table_query *q, uint32_t j, uint64_t row, double *out,
                                     table_counts *c) {
    if (s->kind == TABLE_FROM_MEMORY || (s->kind == TABLE_FROM_PREAD && j == 0)) {
        *out = s->mem[j][row - s->mem_first];
        return GPUMEM_OK;
    }
#if !GPUMEM_ON_DEVICE
    if (s->kind == TABLE_FROM_PREAD) {
        c->commands++;
        c->bytes_read += 8;
        return graph_pread_all(s->fd, out, 8, q->col_at[j] + row * 8);
    }
#endif
    {
        gpumem_backoff b = gpumem_backoff_start();
        uint32_t tries = 0, other;
        gpumem_status st;
        (void)q;
        while ((st = gpumem_cache_ref_get(&s->refs[j], row, out)) == GPUMEM_EAGAIN) {
            for (other = 0; other <= q->k; other++)
                if (other != j) (void)gpumem_cache_ref_drop(&s->refs[other]);
            if (!graph_retry_full(&b, &tries, &c->full_retries)) break;
        }
        return st;
    }
}

/* Rows [first, end) of query q into *p. Only the rows whose c0 passes read
 * c1..ck; every value they need is read, missing or not (an engine reads a
 * NULL's slot too), and a row gives a term when none is missing. */
GPUMEM_API gpumem_status table_range(table_source *s, const table_query *q, uint64_t first, uint64_t end,
                                     table_part *p, table_counts *c) {
    uint64_t row;
    gpumem_status st = GPUMEM_OK;
    p->sum = 0;
    p->terms = p->passing = 0;
    for (row = first; row < end; row++) {
        double c0, x, sum = 0;
        uint32_t j;
        int missing = 0;
        if ((st = table_value(s, q, 0, row, &c0, c)) != GPUMEM_OK) break;
        if (!(c0 >= q->min)) continue; /* NaN: missing never passes */
        p->passing++;
        for (j = 1; j <= q->k; j++) {
            if ((st = table_value(s, q, j, row, &x, c)) != GPUMEM_OK) break;
            missing |= x != x;
            sum += x;
        }
        if (st != GPUMEM_OK) break;
        if (q->k == 0) p->terms++;
        else if (!missing) {
            p->sum += sum / c0;
            p->terms++;
        }
    }
    c->rows += end - first;
    c->bytes_needed += 8 * (end - first) + 8ull * q->k * p->passing;
    if (st != GPUMEM_OK && c->errors++ == 0) c->first_error = (int)st;
    return st;
}

/* ======================================================================== */
/* 4. A taxi-like table                                                     */
/* ======================================================================== */

/* The generator's table: a trip's distance with a long tail (fractions
 * tail20 of the rows at 20 miles or more and tail30 at 30 or more: the
 * dissertation's 0.47 % and 0.03 % by default), its fare (2.5 + 2.5 a mile
 * + up to 5), surcharges, a hail fee, tolls, a tax and the passengers, in
 * cents; each value missing with probability `missing`. Every value is a
 * function of (seed, row, column) alone, so a CSV (build/table gen X.csv)
 * and a table file of the same seed hold the same values. */
#define TABLE_GEN_COLS 7
static const char *const table_gen_names[TABLE_GEN_COLS] = {"trip_distance", "fare_amount", "surcharge",
                                                            "hail_fee", "tolls_amount", "tax", "passenger_count"};
static const char *const table_gen_payment[3] = {"card", "cash", "no charge"}; /* the CSV's text column */

typedef struct table_gen_spec {
    uint64_t seed;
    double tail20, tail30, missing;
} table_gen_spec;

TABLE_API double table_gen_uniform(uint64_t seed, uint64_t row, uint64_t what) {
    return (double)(graph_mix64(seed * 0x9E3779B97F4A7C15ull + row * 0xD1B54A32D192ED03ull + what) >> 11) *
           (1.0 / 9007199254740992.0);
}

TABLE_API double table_cents(double x) { return (double)(int64_t)(x * 100.0 + 0.5) / 100.0; } /* x >= 0 */

/* Value `col` of row `row`; NaN: missing. */
TABLE_API double table_gen_value(const table_gen_spec *g, uint64_t row, uint32_t col) {
    const double u = table_gen_uniform(g->seed, row, 1), w = table_gen_uniform(g->seed, row, 2);
    double d;
    if (g->missing > 0 && table_gen_uniform(g->seed, row, 100 + col) < g->missing) return NAN;
    if (u < g->tail30) d = 30.0 + 70.0 * w;     /* the longest trips */
    else if (u < g->tail20) d = 20.0 + 9.99 * w; /* 20 to 30 miles */
    else d = 0.1 + 19.89 * w * w * w;            /* a long tail below 20 */
    d = table_cents(d);
    switch (col) {
    case 0: return d;
    case 1: return table_cents(2.5 + 2.5 * d + 5.0 * table_gen_uniform(g->seed, row, 3));
    case 2: return (double)(graph_mix64(g->seed + row * 7 + 4) % 3) * 0.5;
    case 3: return table_gen_uniform(g->seed, row, 5) < 0.2 ? 1.0 : 0.0;
    case 4:
        return table_gen_uniform(g->seed, row, 6) < 0.1 ? table_cents(5.76 * (double)(1 + graph_mix64(row + g->seed) % 3))
                                                         : 0.0;
    case 5: return 0.5;
    default: return (double)(1 + graph_mix64(g->seed ^ (row * 31 + 8)) % 6);
    }
}

/* Write the table file of n_rows rows to `path` (through path.tmp and a
 * rename), a column at a time, a chunk at a time. */
TABLE_API gpumem_status table_gen_write(const char *path, uint64_t n_rows, const table_gen_spec *g, char *err,
                                        size_t len) {
    char tmp[4200];
    table_header h;
    table_column cols[TABLE_GEN_COLS];
    unsigned char page[TABLE_PAGE];
    double *buf = (double *)malloc(65536 * 8);
    uint64_t at, r;
    uint32_t c;
    int fd, ok = 1;
    memset(&h, 0, sizeof h);
    memset(cols, 0, sizeof cols);
    memcpy(h.magic, TABLE_MAGIC, 8);
    h.n_rows = n_rows;
    h.n_cols = TABLE_GEN_COLS;
    h.header_pages = table_header_pages(TABLE_GEN_COLS);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !buf) {
        free(buf);
        if (fd >= 0) close(fd);
        return graph_fail(err, len, fd < 0 ? GPUMEM_EIO : GPUMEM_ENOMEM, "%s: %s", tmp,
                          fd < 0 ? strerror(errno) : "no memory");
    }
    at = (uint64_t)h.header_pages * TABLE_PAGE;
    for (c = 0; c < TABLE_GEN_COLS && ok; c++) {
        snprintf(cols[c].name, TABLE_NAME_BYTES, "%s", table_gen_names[c]);
        cols[c].at = at;
        for (r = 0; r < n_rows && ok; r += 65536) {
            uint64_t i, n = n_rows - r < 65536 ? n_rows - r : 65536;
            for (i = 0; i < n; i++) {
                buf[i] = table_gen_value(g, r + i, c);
                cols[c].missing += buf[i] != buf[i];
            }
            cols[c].hash = graph_hash(cols[c].hash, buf, n * 8);
            ok = pwrite(fd, buf, n * 8, (off_t)(at + r * 8)) == (ssize_t)(n * 8);
        }
        at = GPUMEM_ALIGN_UP(at + n_rows * 8, TABLE_PAGE);
    }
    h.file_bytes = at;
    h.header_hash = table_header_hash(&h, cols);
    memset(page, 0, sizeof page);
    memcpy(page, &h, sizeof h);
    memcpy(page + sizeof h, cols, sizeof cols);
    ok = ok && pwrite(fd, page, sizeof page, 0) == (ssize_t)sizeof page && ftruncate(fd, (off_t)at) == 0;
    ok = close(fd) == 0 && ok;
    free(buf);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return graph_fail(err, len, GPUMEM_EIO, "%s: write failed: %s", path, strerror(errno));
    }
    return GPUMEM_OK;
}

#endif /* GPUMEM_EXAMPLES_TABLE_H */
