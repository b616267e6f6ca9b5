/* examples/table_csv.h - CSV into the table format of examples/table.h,
 * streaming, in bounded memory (host only).
 *
 *   table_convert c;
 *   table_convert_init(&c, "trips.csv", "trips.table");   // "-": standard input
 *   c.text_policy = TABLE_TEXT_SKIP;                      // or TABLE_TEXT_DICT (default)
 *   if (table_convert_run(&c, err, sizeof err) != GPUMEM_OK) fprintf(stderr, "%s\n", err);
 *   table_convert_free(&c);
 *
 * The input: a header row naming the columns, then one row a record, fields
 * separated by `delimiter` (default ','). A field may be quoted ("a, b",
 * with "" for a quote inside, newlines allowed). An empty field and `na`
 * (default "NA"), quoted or not, are missing values. Numbers are decimal
 * (12, -3.5, .5, 1e-3; spaces around them are allowed); they are parsed
 * exactly as strtod parses them (correctly rounded), with a fast path for
 * the short ones that are most of any export. Lines with nothing on them
 * are skipped.
 *
 * A column whose first present value is not a number is text: kept as
 * dictionary codes (0, 1, ... in order of appearance, the strings stored
 * after the columns) or skipped, by text_policy; a column named in
 * `text_cols` (comma-separated) is text from the start. A later
 * non-number in a numeric column is an error that names the line, the
 * column and what it holds.
 *
 * Memory: the input is read a block at a time (TABLE_CSV_BLOCK), each
 * column is written through a small buffer, and the dictionaries are held
 * up to TABLE_DICT_MAX bytes; nothing else grows with the input. A regular
 * file's rows are counted first (table_count_rows), so each column is
 * written straight to its place in OUT.tmp; a pipe's columns are spooled
 * to files of their own next to the output and copied into OUT.tmp at the
 * end (twice the writing, which is why a file is counted). OUT.tmp is
 * renamed to the output at the end; on any error every temporary file is
 * removed and the output is left as it was.
 */
#ifndef GPUMEM_EXAMPLES_TABLE_CSV_H
#define GPUMEM_EXAMPLES_TABLE_CSV_H

#include "table.h"

#define TABLE_CSV_BLOCK (1u << 20)   /* input read this much at a time; also the longest field */
#define TABLE_SPOOL_BUF (64u << 10)  /* each column's write buffer */
#define TABLE_DICT_MAX (64ull << 20) /* all text columns' strings together */

enum { TABLE_TEXT_DICT = 0, TABLE_TEXT_SKIP = 1 };

/* One column being converted. */
typedef struct table_spool {
    char name[TABLE_NAME_BYTES];
    int kind;        /* TABLE_NUMBER, TABLE_TEXT, or -1: skipped */
    int decided;     /* kind known (a present value was seen, or named in text_cols) */
    int fd;          /* its spool, or -1 writing straight into the output (c->out_fd) */
    char path[4200];
    uint64_t at, written; /* straight into the output: where its array starts, bytes so far */
    unsigned char *buf;
    uint32_t fill;
    uint64_t missing, hash;
    /* TEXT: the dictionary, an open-addressing table of offsets into `strings` */
    char *strings;
    uint64_t strings_bytes, strings_cap, n_strings;
    uint64_t *slots; /* offset + 1 of each string, 0: empty */
    uint64_t n_slots;
} table_spool;

typedef struct table_convert {
    const char *in_path, *out_path;
    char delimiter;
    const char *na;         /* besides the empty field */
    const char *text_cols;  /* columns that are text from the start, comma-separated, or NULL */
    int text_policy;        /* TABLE_TEXT_DICT or TABLE_TEXT_SKIP */
    void (*progress)(const struct table_convert *c, double frac); /* NULL: quiet */
    /* the run */
    int in_fd;
    uint64_t input_bytes;   /* 0 when not known (a pipe) */
    int out_fd;             /* OUT.tmp, open from the start when the rows were counted first */
    char out_tmp[4200];
    uint64_t counted;       /* rows counted before parsing (a regular file), or 0 */
    uint64_t bytes_done, rows, line;
    double t0, seconds;
    uint32_t n_cols, n_kept;
    table_spool *cols;
    /* the reader */
    unsigned char *block;
    size_t len, pos;
    int eof;
    char *field;            /* a quoted field, unescaped */
    size_t field_len;
    uint64_t field_line;    /* the line the last field started on */
    size_t na_len;          /* strlen(na), once */
} table_convert;

TABLE_API void table_convert_init(table_convert *c, const char *in, const char *out) {
    memset(c, 0, sizeof *c);
    c->in_path = in;
    c->out_path = out;
    c->delimiter = ',';
    c->na = "NA";
    c->text_policy = TABLE_TEXT_DICT;
    c->in_fd = -1;
    c->out_fd = -1;
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                  */
/* ------------------------------------------------------------------------ */

/* Parse s[0..n) as a decimal number: [spaces][+-]digits[.digits][(e|E)[+-]digits][spaces],
 * at least one digit before the exponent. 0 and *out, or -1. Up to 15
 * significant digits with a power of ten within 22 the result is one
 * correctly rounded multiplication or division of two exact doubles (so,
 * the nearest double, as strtod gives); anything longer goes to strtod. */
TABLE_API int table_parse_number(const char *s, size_t n, double *out) {
    static const double pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    size_t i = 0, end = n;
    uint64_t m = 0;
    int digits = 0, sig = 0, neg = 0, frac = 0, exp = 0, esign = 1, edigits = 0, lost = 0;
    while (i < end && s[i] == ' ') i++;
    while (end > i && s[end - 1] == ' ') end--;
    if (i < end && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    for (; i < end && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (sig || s[i] != '0') {
            if (sig < 19) m = m * 10 + (uint64_t)(s[i] - '0');
            else lost = 1;
            sig++;
        }
    }
    if (i < end && s[i] == '.')
        for (i++; i < end && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
            if (sig || s[i] != '0') {
                if (sig < 19) m = m * 10 + (uint64_t)(s[i] - '0');
                else lost = 1;
                sig++;
            }
            if (sig <= 19) frac++;
        }
    if (!digits) return -1;
    if (i < end && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < end && (s[i] == '+' || s[i] == '-')) esign = s[i++] == '-' ? -1 : 1;
        for (; i < end && s[i] >= '0' && s[i] <= '9'; i++, edigits++)
            if (exp < 100000) exp = exp * 10 + (s[i] - '0');
        if (!edigits) return -1;
    }
    if (i != end) return -1;
    exp = esign * exp - frac;
    if (!lost && sig <= 15 && exp >= -22 && exp <= 22) {
        double v = (double)m;
        v = exp < 0 ? v / pow10[-exp] : v * pow10[exp];
        *out = neg ? -v : v;
        return 0;
    }
    {
        char tmp[512];
        size_t k = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
        memcpy(tmp, s, k);
        tmp[k] = 0;
        *out = strtod(tmp, NULL); /* the grammar was checked above; strtod skips the leading spaces */
        return n < sizeof tmp - 1 ? 0 : -1;
    }
}

/* ------------------------------------------------------------------------ */
/* The reader: one field at a time                                          */
/* ------------------------------------------------------------------------ */

/* Read more input after the unread tail (moved to the front). 1 if any came. */
TABLE_API int table_csv_refill(table_convert *c, char *err, size_t len, int *io_error) {
    ssize_t got;
    if (c->eof) return 0;
    if (c->pos) {
        memmove(c->block, c->block + c->pos, c->len - c->pos);
        c->len -= c->pos;
        c->pos = 0;
    }
    if (c->len == TABLE_CSV_BLOCK) return 0; /* a field as long as the block */
    do got = read(c->in_fd, c->block + c->len, TABLE_CSV_BLOCK - c->len);
    while (got < 0 && errno == EINTR);
    if (got < 0) {
        graph_fail(err, len, GPUMEM_EIO, "%s: %s", c->in_path, strerror(errno));
        *io_error = 1;
        return 0;
    }
    if (got == 0) {
        c->eof = 1;
        return 0;
    }
    c->len += (size_t)got;
    c->bytes_done += (uint64_t)got;
    return 1;
}

enum { TABLE_FIELD_MORE, TABLE_FIELD_LAST, TABLE_FIELD_EOF }; /* what ends a field */

/* The next field: *text (in the block or c->field), *n bytes, *quoted; the
 * return says whether a delimiter (MORE), a line end (LAST) or the input's
 * end (EOF, no field) followed. -1 after a message for bad input. */
TABLE_API int table_csv_field(table_convert *c, const char **text, size_t *n, int *quoted, char *err, size_t len) {
    const unsigned char d = (unsigned char)c->delimiter;
    int io_error = 0;
    size_t i;
    *quoted = 0;
    c->field_line = c->line;
    if (c->pos == c->len && !table_csv_refill(c, err, len, &io_error)) return io_error ? -1 : TABLE_FIELD_EOF;
    if (c->block[c->pos] == '"') {
        uint64_t opened = c->line;
        c->field_len = 0;
        *quoted = 1;
        c->pos++;
        for (;;) {
            for (i = c->pos; i < c->len && c->block[i] != '"'; i++)
                if (c->block[i] == '\n') c->line++;
            if (c->field_len + (i - c->pos) + 1 >= TABLE_CSV_BLOCK) { /* c->field holds a block, "" included */
                graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: a quoted field longer than %u bytes", c->in_path,
                           (unsigned long long)opened, TABLE_CSV_BLOCK - 2);
                return -1;
            }
            memcpy(c->field + c->field_len, c->block + c->pos, i - c->pos);
            c->field_len += i - c->pos;
            c->pos = i;
            if (i + 1 < c->len || (i < c->len && c->eof)) { /* a quote, and what follows it is here */
                if (i + 1 < c->len && c->block[i + 1] == '"') { /* "" inside: one quote */
                    c->field[c->field_len++] = '"';
                    c->pos = i + 2;
                    continue;
                }
                c->pos = i + 1;
                break;
            }
            if (!table_csv_refill(c, err, len, &io_error)) {
                if (io_error) return -1;
                if (c->pos < c->len) continue; /* the closing quote is the input's last byte */
                graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: unterminated quote (the quoted field opened"
                           " there runs to the end of the input): expected a closing \"", c->in_path,
                           (unsigned long long)opened);
                return -1;
            }
        }
        *text = c->field;
        *n = c->field_len;
        if (c->pos == c->len && !table_csv_refill(c, err, len, &io_error)) return io_error ? -1 : TABLE_FIELD_LAST;
        if (c->block[c->pos] == d) {
            c->pos++;
            return TABLE_FIELD_MORE;
        }
        if (c->block[c->pos] == '\r' && c->pos + 1 < c->len && c->block[c->pos + 1] == '\n') c->pos++;
        if (c->block[c->pos] == '\n') {
            c->pos++;
            c->line++;
            return TABLE_FIELD_LAST;
        }
        graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: '%c' after a closing quote: expected the delimiter '%c'"
                   " or the end of the line", c->in_path, (unsigned long long)c->line, c->block[c->pos], c->delimiter);
        return -1;
    }
    for (;;) {
        const unsigned char *b = c->block;
        for (i = c->pos; i < c->len; i++) {
            const unsigned char x = b[i];
            if (x == d || x == '\n' || x == '"') break;
        }
        if (i < c->len || c->eof) {
            size_t e = i;
            int r;
            if (i < c->len && b[i] == '"') {
                graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: a quote inside an unquoted field: expected a field"
                           " quoted as a whole (\"...\", with \"\" for a quote)", c->in_path, (unsigned long long)c->line);
                return -1;
            }
            if (e > c->pos && b[e - 1] == '\r' && (i == c->len || b[i] == '\n')) e--;
            *text = (const char *)b + c->pos;
            *n = e - c->pos;
            r = i < c->len && b[i] == d ? TABLE_FIELD_MORE : TABLE_FIELD_LAST;
            if (i < c->len && b[i] == '\n') c->line++;
            c->pos = i < c->len ? i + 1 : i;
            return r;
        }
        if (c->len - c->pos >= TABLE_CSV_BLOCK) {
            graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: a field longer than %u bytes", c->in_path,
                       (unsigned long long)c->line, TABLE_CSV_BLOCK);
            return -1;
        }
        if (!table_csv_refill(c, err, len, &io_error) && io_error) return -1;
    }
}

/* ------------------------------------------------------------------------ */
/* Columns: spools and dictionaries                                         */
/* ------------------------------------------------------------------------ */

TABLE_API gpumem_status table_spool_flush(table_convert *c, table_spool *s, char *err, size_t len) {
    size_t done = 0;
    s->hash = graph_hash(s->hash, s->buf, s->fill);
    while (done < s->fill) {
        ssize_t w = s->fd >= 0 ? write(s->fd, s->buf + done, s->fill - done)
                               : pwrite(c->out_fd, s->buf + done, s->fill - done, (off_t)(s->at + s->written));
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return graph_fail(err, len, GPUMEM_EIO, "%s: writing %s: %s", c->out_path, s->path,
                              w < 0 ? strerror(errno) : "no room");
        }
        done += (size_t)w;
        s->written += (uint64_t)w;
    }
    s->fill = 0;
    return GPUMEM_OK;
}

TABLE_API gpumem_status table_spool_put(table_convert *c, table_spool *s, double v, char *err, size_t len) {
    memcpy(s->buf + s->fill, &v, 8);
    s->fill += 8;
    return s->fill == TABLE_SPOOL_BUF ? table_spool_flush(c, s, err, len) : GPUMEM_OK;
}

/* The code of string t[0..n) in column s's dictionary, adding it if new. */
TABLE_API gpumem_status table_dict_code(table_convert *c, table_spool *s, const char *t, size_t n, double *code,
                                        char *err, size_t len) {
    uint64_t h = graph_hash(0x64696374ull, t, n), i;
    if (!s->slots || s->n_strings * 2 >= s->n_slots) { /* grow the table, rehash */
        uint64_t m = s->n_slots ? s->n_slots * 2 : 1024, k;
        uint64_t *slots = (uint64_t *)calloc(m, 8);
        if (!slots) return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory for column %s's dictionary",
                                      c->in_path, s->name);
        for (k = 0; k < s->n_slots; k++)
            if (s->slots[k]) {
                const char *o = s->strings + s->slots[k] - 1;
                uint64_t j = graph_hash(0x64696374ull, o, strlen(o)) & (m - 1);
                while (slots[j]) j = (j + 1) & (m - 1);
                slots[j] = s->slots[k];
            }
        free(s->slots);
        s->slots = slots;
        s->n_slots = m;
    }
    for (i = h & (s->n_slots - 1); s->slots[i]; i = (i + 1) & (s->n_slots - 1)) {
        const char *o = s->strings + s->slots[i] - 1;
        if (o[n] == 0 && !memcmp(o, t, n)) { /* o is NUL-terminated: o[n] is inside it or its end */
            *code = (double)((uint64_t *)(void *)(s->strings + s->slots[i] - 1 - 8))[0];
            return GPUMEM_OK;
        }
    }
    if (memchr(t, 0, n))
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: column %s: a NUL byte in a text value",
                          c->in_path, (unsigned long long)c->field_line, s->name);
    { /* each entry: its code (8 bytes, aligned), then the string and its NUL */
        uint64_t need = GPUMEM_ALIGN_UP(8 + n + 1, 8), total = 0;
        uint32_t k;
        for (k = 0; k < c->n_cols; k++) total += c->cols[k].strings_bytes;
        if (total + need > TABLE_DICT_MAX)
            return graph_fail(err, len, GPUMEM_E2BIG, "%s: line %llu: column %s: the text columns' dictionaries pass"
                              " %llu MiB: skip the column (--text-columns skip) or keep fewer distinct values",
                              c->in_path, (unsigned long long)c->field_line, s->name,
                              (unsigned long long)(TABLE_DICT_MAX >> 20));
        if (s->strings_bytes + need > s->strings_cap) {
            uint64_t cap = s->strings_cap ? s->strings_cap * 2 : 65536;
            char *p;
            while (cap < s->strings_bytes + need) cap *= 2;
            if (!(p = (char *)realloc(s->strings, cap)))
                return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory for column %s's dictionary",
                                  c->in_path, s->name);
            s->strings = p;
            s->strings_cap = cap;
        }
        memcpy(s->strings + s->strings_bytes, &s->n_strings, 8);
        memcpy(s->strings + s->strings_bytes + 8, t, n);
        s->strings[s->strings_bytes + 8 + n] = 0;
        memset(s->strings + s->strings_bytes + 8 + n + 1, 0, need - (8 + n + 1));
        s->slots[i] = s->strings_bytes + 8 + 1;
        s->strings_bytes += need;
        *code = (double)s->n_strings++;
    }
    return GPUMEM_OK;
}

/* Is `name` in the comma-separated list? */
TABLE_API int table_in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    while (list && *list) {
        const char *e = strchr(list, ',');
        size_t k = e ? (size_t)(e - list) : strlen(list);
        if (k == n && !strncmp(list, name, n)) return 1;
        list = e ? e + 1 : NULL;
    }
    return 0;
}

TABLE_API void table_convert_free(table_convert *c) {
    uint32_t i;
    for (i = 0; c->cols && i < c->n_cols; i++) {
        table_spool *s = &c->cols[i];
        if (s->fd >= 0) close(s->fd);
        if (s->path[0]) unlink(s->path);
        free(s->buf);
        free(s->strings);
        free(s->slots);
    }
    free(c->cols);
    free(c->block);
    free(c->field);
    if (c->in_fd > 0) close(c->in_fd);
    if (c->out_fd >= 0) {
        close(c->out_fd);
        unlink(c->out_tmp);
    }
    c->out_fd = -1;
    c->cols = NULL;
    c->block = NULL;
    c->field = NULL;
    c->in_fd = -1;
}

/* ------------------------------------------------------------------------ */
/* The conversion                                                           */
/* ------------------------------------------------------------------------ */

TABLE_API gpumem_status table_read_header_row(table_convert *c, char *err, size_t len) {
    const char *t;
    size_t n;
    int quoted, r;
    uint32_t i, j;
    c->line = 1;
    do {
        table_spool *s;
        if ((r = table_csv_field(c, &t, &n, &quoted, err, len)) < 0) return GPUMEM_EINVAL;
        if (r == TABLE_FIELD_EOF && c->n_cols == 0)
            return graph_fail(err, len, GPUMEM_EINVAL, "%s: empty: expected a header row naming the columns",
                              c->in_path);
        if (c->n_cols == TABLE_MAX_COLS)
            return graph_fail(err, len, GPUMEM_EINVAL, "%s: line 1: more than %u columns", c->in_path, TABLE_MAX_COLS);
        while (n && *t == ' ') t++, n--;
        while (n && t[n - 1] == ' ') n--;
        if (n == 0 || n >= TABLE_NAME_BYTES || memchr(t, 0, n))
            return graph_fail(err, len, GPUMEM_EINVAL, "%s: line 1, column %u: %s: expected a column name of 1..%u"
                              " bytes", c->in_path, c->n_cols + 1, n ? "name too long" : "no name",
                              TABLE_NAME_BYTES - 1);
        s = &c->cols[c->n_cols++];
        memcpy(s->name, t, n);
        for (j = 0; j + 1 < c->n_cols; j++)
            if (!strcmp(c->cols[j].name, s->name))
                return graph_fail(err, len, GPUMEM_EINVAL, "%s: line 1: columns %u and %u are both named '%s':"
                                  " expected distinct names", c->in_path, j + 1, c->n_cols, s->name);
    } while (r == TABLE_FIELD_MORE);
    for (i = 0; i < c->n_cols; i++)
        if (c->text_cols && table_in_list(c->text_cols, c->cols[i].name)) {
            c->cols[i].kind = c->text_policy == TABLE_TEXT_SKIP ? -1 : TABLE_TEXT;
            c->cols[i].decided = 1;
        }
    return GPUMEM_OK;
}

TABLE_API gpumem_status table_open_spools(table_convert *c, char *err, size_t len) {
    uint32_t i;
    uint64_t at = (uint64_t)table_header_pages(c->n_cols) * TABLE_PAGE;
    for (i = 0; i < c->n_cols && c->out_fd >= 0; i++) { /* the rows are known: each array where it will stay */
        table_spool *s = &c->cols[i];
        s->at = at;
        at = GPUMEM_ALIGN_UP(at + c->counted * 8, TABLE_PAGE);
        if (!(s->buf = (unsigned char *)malloc(TABLE_SPOOL_BUF)))
            return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory", c->out_path);
    }
    for (i = 0; i < c->n_cols && c->out_fd < 0; i++) {
        table_spool *s = &c->cols[i];
        snprintf(s->path, sizeof s->path, "%s.tmp.%u", c->out_path, i);
        s->fd = open(s->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        s->buf = (unsigned char *)malloc(TABLE_SPOOL_BUF);
        if (s->fd < 0 || !s->buf) {
            gpumem_status st = graph_fail(err, len, s->fd < 0 ? GPUMEM_EIO : GPUMEM_ENOMEM, "%s: %s", s->path,
                                          s->fd < 0 ? strerror(errno) : "no memory");
            if (s->fd < 0) s->path[0] = 0;
            return st;
        }
    }
    return GPUMEM_OK;
}

/* One field of column s at the current line: missing, a number, or text. */
TABLE_API gpumem_status table_put_field(table_convert *c, table_spool *s, uint32_t col, const char *t, size_t n,
                                        char *err, size_t len) {
    double v;
    int missing = n == 0 || (n == c->na_len && !memcmp(t, c->na, n)); /* quoted or not, as DuckDB's nullstr */
    if (!missing && !s->decided) {
        s->decided = 1;
        if (table_parse_number(t, n, &v) != 0) s->kind = c->text_policy == TABLE_TEXT_SKIP ? -1 : TABLE_TEXT;
    }
    if (s->kind < 0) return GPUMEM_OK;
    if (missing) {
        s->missing++;
        v = NAN;
    } else if (s->kind == TABLE_TEXT) {
        gpumem_status st = table_dict_code(c, s, t, n, &v, err, len);
        if (st != GPUMEM_OK) return st;
    } else if (table_parse_number(t, n, &v) != 0) {
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu, column %u (%s): '%.*s': expected a number (the"
                          " column's first value was one), empty or %s; name it with --text %s to keep it as text",
                          c->in_path, (unsigned long long)c->field_line, col + 1, s->name, (int)(n > 40 ? 40 : n), t,
                          c->na,
                          s->name);
    }
    return table_spool_put(c, s, v, err, len);
}

/* Copy spool s to fd at `at`: in the kernel (copy_file_range) where it
 * can, which saves a trip of every byte through this process. */
TABLE_API gpumem_status table_copy_spool(table_convert *c, table_spool *s, int fd, uint64_t at, uint64_t bytes,
                                         char *err, size_t len) {
    off_t in_off = 0, out_off = (off_t)at;
#ifdef _GNU_SOURCE
    while (bytes) {
        ssize_t got = copy_file_range(s->fd, &in_off, fd, &out_off, bytes < (1u << 30) ? (size_t)bytes : 1u << 30, 0);
        if (got <= 0) break; /* not on this file system (or an error the plain copy meets again) */
        bytes -= (uint64_t)got;
    }
#endif
    while (bytes) {
        ssize_t got = pread(s->fd, s->buf, bytes < TABLE_SPOOL_BUF ? (size_t)bytes : TABLE_SPOOL_BUF, in_off);
        if (got <= 0 || pwrite(fd, s->buf, (size_t)got, out_off) != got)
            return graph_fail(err, len, GPUMEM_EIO, "%s: writing: %s", c->out_path, got < 0 ? strerror(errno) :
                              errno ? strerror(errno) : "short write");
        in_off += got;
        out_off += got;
        bytes -= (uint64_t)got;
    }
    return GPUMEM_OK;
}

/* Header, columns, dictionaries into OUT.tmp, then rename. */
TABLE_API gpumem_status table_write_output(table_convert *c, char *err, size_t len) {
    const int direct = c->out_fd >= 0; /* the arrays are in place already */
    char *tmp = c->out_tmp;
    table_header h;
    table_column *cols = (table_column *)calloc(c->n_kept ? c->n_kept : 1, sizeof *cols);
    unsigned char *page;
    uint64_t at;
    uint32_t i, k = 0;
    gpumem_status st = GPUMEM_OK;
    int fd;
    if (!cols) return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory", c->out_path);
    memset(&h, 0, sizeof h);
    memcpy(h.magic, TABLE_MAGIC, 8);
    h.n_rows = c->rows;
    h.n_cols = c->n_kept;
    h.header_pages = table_header_pages(c->n_kept);
    at = (uint64_t)h.header_pages * TABLE_PAGE;
    for (i = 0; i < c->n_cols; i++) {
        const table_spool *s = &c->cols[i];
        if (s->kind < 0) continue;
        memcpy(cols[k].name, s->name, TABLE_NAME_BYTES);
        cols[k].kind = s->kind == TABLE_TEXT ? TABLE_TEXT : TABLE_NUMBER;
        cols[k].at = direct ? s->at : at;
        cols[k].missing = s->missing;
        cols[k].hash = s->hash;
        at = GPUMEM_ALIGN_UP(cols[k].at + c->rows * 8, TABLE_PAGE);
        k++;
    }
    if (direct) /* after every array, a skipped column's (left a hole) too */
        at = c->cols[c->n_cols - 1].at + GPUMEM_ALIGN_UP(c->rows * 8, TABLE_PAGE);
    for (i = 0, k = 0; i < c->n_cols; i++) {
        const table_spool *s = &c->cols[i];
        if (s->kind < 0) continue;
        if (s->kind == TABLE_TEXT) {
            cols[k].dict_at = at;
            cols[k].dict_bytes = s->strings_bytes;
            cols[k].dict_count = s->n_strings;
            at += s->strings_bytes;
        }
        k++;
    }
    h.file_bytes = GPUMEM_ALIGN_UP(at, TABLE_PAGE);
    h.header_hash = table_header_hash(&h, cols);
    snprintf(c->out_tmp, sizeof c->out_tmp, "%s.tmp", c->out_path);
    fd = direct ? c->out_fd : open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    c->out_fd = -1; /* closed and removed here, whatever happens */
    page = (unsigned char *)calloc(h.header_pages, TABLE_PAGE);
    if (fd < 0 || !page) {
        free(cols);
        free(page);
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return graph_fail(err, len, GPUMEM_EIO, "%s: %s", tmp, fd < 0 ? strerror(errno) : "no memory");
    }
    memcpy(page, &h, sizeof h);
    memcpy(page + sizeof h, cols, (size_t)h.n_cols * sizeof *cols);
    if (pwrite(fd, page, (size_t)h.header_pages * TABLE_PAGE, 0) != (ssize_t)h.header_pages * TABLE_PAGE)
        st = graph_fail(err, len, GPUMEM_EIO, "%s: writing: %s", tmp, strerror(errno));
    for (i = 0, k = 0; i < c->n_cols && st == GPUMEM_OK; i++) {
        table_spool *s = &c->cols[i];
        if (s->kind < 0) continue;
        if (!direct) st = table_copy_spool(c, s, fd, cols[k].at, c->rows * 8, err, len);
        if (st == GPUMEM_OK && s->kind == TABLE_TEXT &&
            pwrite(fd, s->strings, s->strings_bytes, (off_t)cols[k].dict_at) != (ssize_t)s->strings_bytes)
            st = graph_fail(err, len, GPUMEM_EIO, "%s: writing: %s", tmp, strerror(errno));
        if (s->fd >= 0) { /* each spool goes once copied: the disk holds the output and one spool at most */
            close(s->fd);
            s->fd = -1;
            unlink(s->path);
            s->path[0] = 0;
        }
        k++;
    }
    if (st == GPUMEM_OK && ftruncate(fd, (off_t)h.file_bytes) != 0)
        st = graph_fail(err, len, GPUMEM_EIO, "%s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == GPUMEM_OK) st = graph_fail(err, len, GPUMEM_EIO, "%s: %s", tmp, strerror(errno));
    if (st == GPUMEM_OK && rename(tmp, c->out_path) != 0)
        st = graph_fail(err, len, GPUMEM_EIO, "%s: %s", c->out_path, strerror(errno));
    if (st != GPUMEM_OK) unlink(tmp);
    free(page);
    free(cols);
    return st;
}

/* Count a regular file's rows (records after the header, lines that are
 * empty or only "\r" not counted, newlines inside quotes not ending one) as
 * the parser will find them, then rewind. A file the parser refuses may
 * count wrong: it is refused anyway. */
TABLE_API gpumem_status table_count_rows(table_convert *c, char *err, size_t len) {
    uint64_t records = 0, line_bytes = 0;
    int quoted = 0, last_cr = 0;
    for (;;) {
        ssize_t got = read(c->in_fd, c->block, TABLE_CSV_BLOCK), i;
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return graph_fail(err, len, GPUMEM_EIO, "%s: %s", c->in_path, strerror(errno));
        if (got == 0) break;
        if (!quoted && !memchr(c->block, '"', (size_t)got)) { /* no quote in the block: line ends alone matter */
            const unsigned char *p = c->block, *e = c->block + got, *nl;
            while ((nl = (const unsigned char *)memchr(p, '\n', (size_t)(e - p))) != NULL) {
                line_bytes += (uint64_t)(nl - p);
                if (nl > p) last_cr = nl[-1] == '\r';
                records += line_bytes > (uint64_t)last_cr;
                line_bytes = 0;
                last_cr = 0;
                p = nl + 1;
            }
            line_bytes += (uint64_t)(e - p);
            if (e > p) last_cr = e[-1] == '\r';
            continue;
        }
        for (i = 0; i < got; i++) {
            const unsigned char x = c->block[i];
            if (x == '"') quoted ^= 1;
            if (x == '\n' && !quoted) {
                records += line_bytes > (uint64_t)last_cr;
                line_bytes = 0;
                last_cr = 0;
            } else {
                line_bytes++;
                last_cr = x == '\r';
            }
        }
    }
    records += line_bytes > (uint64_t)last_cr;
    c->counted = records ? records - 1 : 0;
    if (lseek(c->in_fd, 0, SEEK_SET) != 0) return graph_fail(err, len, GPUMEM_EIO, "%s: %s", c->in_path, strerror(errno));
    return GPUMEM_OK;
}

/* The whole conversion. On failure nothing is left behind. */
TABLE_API gpumem_status table_convert_run(table_convert *c, char *err, size_t len) {
    gpumem_status st;
    struct stat sb;
    double last = 0;
    uint32_t i;
    c->t0 = graph_now_s();
    c->na_len = strlen(c->na);
    c->block = (unsigned char *)malloc(TABLE_CSV_BLOCK);
    c->field = (char *)malloc(TABLE_CSV_BLOCK);
    c->cols = (table_spool *)calloc(TABLE_MAX_COLS, sizeof *c->cols);
    if (!c->block || !c->field || !c->cols) return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory", c->in_path);
    for (i = 0; i < TABLE_MAX_COLS; i++) c->cols[i].fd = -1;
    c->in_fd = strcmp(c->in_path, "-") ? open(c->in_path, O_RDONLY) : 0;
    if (c->in_fd < 0)
        return graph_fail(err, len, errno == ENOENT ? GPUMEM_ENODEV : GPUMEM_EIO, "%s: %s", c->in_path,
                          strerror(errno));
    if (fstat(c->in_fd, &sb) == 0 && S_ISREG(sb.st_mode)) c->input_bytes = (uint64_t)sb.st_size;
    if (c->input_bytes) { /* count the rows first: then each column goes straight to its place in the output */
        if ((st = table_count_rows(c, err, len)) != GPUMEM_OK) return st;
        if (c->progress) c->progress(c, 0.0); /* rows 0 of c->counted: the count is done */
        snprintf(c->out_tmp, sizeof c->out_tmp, "%s.tmp", c->out_path);
        if (c->counted && (c->out_fd = open(c->out_tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
            return graph_fail(err, len, GPUMEM_EIO, "%s: %s", c->out_tmp, strerror(errno));
    }
    if ((st = table_read_header_row(c, err, len)) != GPUMEM_OK) return st;
    if ((st = table_open_spools(c, err, len)) != GPUMEM_OK) return st;
    for (;;) {
        const char *t;
        size_t n;
        int quoted, r;
        uint32_t col = 0;
        uint64_t line = c->line;
        r = table_csv_field(c, &t, &n, &quoted, err, len);
        if (r < 0) return GPUMEM_EINVAL;
        if (r == TABLE_FIELD_EOF) break;
        if (r == TABLE_FIELD_LAST && n == 0 && !quoted) continue; /* a blank line */
        for (;;) {
            if (col == c->n_cols)
                return graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: more than the header's %u fields (a ragged"
                                  " row): expected %u", c->in_path, (unsigned long long)line, c->n_cols, c->n_cols);
            if ((st = table_put_field(c, &c->cols[col], col, t, n, err, len)) != GPUMEM_OK) return st;
            col++;
            if (r != TABLE_FIELD_MORE) break;
            if ((r = table_csv_field(c, &t, &n, &quoted, err, len)) < 0) return GPUMEM_EINVAL;
            if (r == TABLE_FIELD_EOF) { /* a delimiter ended the input: one more, empty field */
                t = "";
                n = 0;
                r = TABLE_FIELD_LAST;
            }
        }
        if (col != c->n_cols)
            return graph_fail(err, len, GPUMEM_EINVAL, "%s: line %llu: %u fields (a ragged row): expected %u, as the"
                              " header has", c->in_path, (unsigned long long)line, col, c->n_cols);
        if (++c->rows > TABLE_MAX_ROWS)
            return graph_fail(err, len, GPUMEM_E2BIG, "%s: more than %llu rows", c->in_path,
                              (unsigned long long)TABLE_MAX_ROWS);
        if (c->progress && (c->rows & 0xFFFF) == 0 && graph_now_s() - last > 1.0) {
            last = graph_now_s();
            c->progress(c, c->input_bytes ? (double)c->bytes_done / (double)c->input_bytes : 0.0);
        }
    }
    if (c->rows == 0)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: a header and no rows: expected at least one row of values",
                          c->in_path);
    if (c->counted && c->rows != c->counted) /* the file changed under us, or the count is wrong */
        return graph_fail(err, len, GPUMEM_EIO, "%s: %llu rows read, %llu counted before: did it change while being"
                          " read?", c->in_path, (unsigned long long)c->rows, (unsigned long long)c->counted);
    for (i = 0; i < c->n_cols; i++) {
        table_spool *s = &c->cols[i];
        if (s->kind >= 0) c->n_kept++;
        if (s->kind >= 0 && (st = table_spool_flush(c, s, err, len)) != GPUMEM_OK) return st;
    }
    if (c->n_kept == 0)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: every column is text and skipped: nothing to write",
                          c->in_path);
    if ((st = table_write_output(c, err, len)) != GPUMEM_OK) return st;
    c->seconds = graph_now_s() - c->t0;
    if (c->progress) c->progress(c, 1.0);
    return GPUMEM_OK;
}

#endif /* GPUMEM_EXAMPLES_TABLE_CSV_H */
