/* table: data-dependent analytics queries over a columnar table, the BaM
 * dissertation's taxi queries (Q0..Q5) on the user's own table, read by
 * host threads three ways in one run and checked against an in-memory
 * reference (docs/analytics.md).
 *
 *   build/table gen OUT [--rows N] [--tail F20,F30] [--missing F] [--seed X]
 *                                 a taxi-like table (OUT.csv: as CSV)
 *   build/table convert IN OUT    CSV (IN "-": standard input) into the
 *                                 columnar file; Parquet and Arrow through
 *                                 tools/table_import.py (pyarrow)
 *   build/table query FILE [--filter C0] [--columns C1,..,C5] [--min X]
 *                                 Q0..Qk, each in three modes: (a) through
 *                                 the cache, only passing rows touching
 *                                 c1..ck; (b) tiled: row groups of every
 *                                 needed column read whole on the same queue
 *                                 pairs; (c) pread of exactly the needed
 *                                 values. Bytes read / needed, time, rows/s,
 *                                 hit rate, and the ratios between modes.
 *   build/table sweep FILE OUT.tsv   query at each --mins bound, 512-byte
 *                                 and 4 KiB lines (make analytics-sweep)
 *
 * Exit status: 0 if every answer matched the reference, 1 if a run failed
 * or disagreed, 2 for bad arguments or an unusable input or table file. */
#define _GNU_SOURCE /* copy_file_range */
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <sys/resource.h>

#include "table_csv.h"
#include "tool_cli.h"

enum {
    O_ROWS = 1 << 0, O_TAIL = 1 << 1, O_MISSING = 1 << 2, O_SEED = 1 << 3, O_DELIM = 1 << 4, O_NA = 1 << 5,
    O_TEXT_POLICY = 1 << 6, O_TEXT = 1 << 7, O_FILTER = 1 << 8, O_COLUMNS = 1 << 9, O_MIN = 1 << 10,
    O_QUERIES = 1 << 11, O_LINE = 1 << 12, O_GROUP = 1 << 13, O_CACHE = 1 << 14, O_THREADS = 1 << 15,
    O_PAIRS = 1 << 16, O_DEPTH = 1 << 17, O_IOPS = 1 << 18, O_MINS = 1 << 19, O_MACHINE = 1 << 20
};
static const cli_option option_docs[] = {
    {"--rows", "N", "rows to generate, 1..2^34 (default 1000000)", O_ROWS},
    {"--tail", "F20,F30", "fractions of trips of at least 20 and at least 30 miles (default 0.0047,0.0003, the\n"
                          "                       dissertation's 0.47 % and 0.03 %)", O_TAIL},
    {"--missing", "F", "fraction of values left missing, 0..0.5 (default 0)", O_MISSING},
    {"--seed", "X", "generator seed (default 27491095)", O_SEED},
    {"--delimiter", "C", "the field delimiter, one byte (default ',')", O_DELIM},
    {"--na", "TEXT", "a missing value, besides the empty field (default NA)", O_NA},
    {"--text-columns", "P", "what becomes of a column whose first value is not a number: dict (dictionary codes,\n"
                            "                       the default) or skip", O_TEXT_POLICY},
    {"--text", "C1,C2", "columns that are text from the start", O_TEXT},
    {"--filter", "C0", "the filter column (default trip_distance)", O_FILTER},
    {"--columns", "C1,..", "Qk's columns, 1..5 of them, Qk summing the first k (default fare_amount,surcharge,\n"
                           "                       hail_fee,tolls_amount,tax)", O_COLUMNS},
    {"--min", "X", "a row passes when C0 >= X (default 30)", O_MIN},
    {"--queries", "K", "run Q0..QK, K 0..5 (default: as many as --columns gives)", O_QUERIES},
    {"--line-bytes", "B", "mode (a)'s cache line: 512, 1024, 2048 or 4096 (default 4096)", O_LINE},
    {"--row-group", "R", "mode (b)'s rows a tile, a multiple of 512 (default 65536)", O_GROUP},
    {"--cache-mib", "M", "mode (a)'s cache (default 1/8 of the query's columns)", O_CACHE},
    {"--threads", "T", "host threads, 1..256 (default 4)", O_THREADS},
    CLI_PAIRS_DOCS(O_PAIRS, O_DEPTH, O_IOPS, "2"),
    {"--mins", "X,Y", "sweep: the bounds (default 20,30)", O_MINS},
    {"--machine", "TEXT", "sweep: write TEXT into the table as the machine it ran on", O_MACHINE},
};
#define RUN_OPTS (O_FILTER | O_COLUMNS | O_QUERIES | O_GROUP | O_CACHE | O_THREADS | O_PAIRS | O_DEPTH | O_IOPS)
static const cli_command commands[] = {
    {"gen", "OUT", "write a taxi-like table of --rows rows to OUT (a name ending .csv: as CSV, with a text\n"
                   "  column payment_type too): trip_distance (a long tail, --tail sets the fractions at 20 and\n"
                   "  30 miles), fare_amount, surcharge, hail_fee, tolls_amount, tax, passenger_count", 1, 1,
     O_ROWS | O_TAIL | O_MISSING | O_SEED},
    {"convert", "IN OUT", "convert CSV with a header row (IN \"-\": standard input) into a table file, written\n"
                          "  atomically; for Parquet or Arrow: python3 tools/table_import.py IN | table convert - OUT",
     2, 2, O_DELIM | O_NA | O_TEXT_POLICY | O_TEXT},
    {"query", "FILE", "Q0..Qk in three modes, each answer checked against the in-memory reference: (a) through\n"
                      "  the cache, (b) tiled row groups on the same queue pairs, (c) pread of the needed values",
     1, 1, O_MIN | O_LINE | RUN_OPTS},
    {"sweep", "FILE OUT.tsv", "query at each of --mins, with 512-byte and 4 KiB lines, as a table", 2, 2,
     O_MINS | O_MACHINE | RUN_OPTS},
};
static const cli_tool tool = {"table", commands, sizeof commands / sizeof commands[0], option_docs,
                              sizeof option_docs / sizeof option_docs[0],
                              "table COMMAND --help: that command's options. Exit status: 0 ok, 1 a run failed or"
                              " disagreed with the reference,\n2 bad arguments or an unusable input or table.\n"};

typedef struct options {
    const char *path, *out, *machine;
    uint64_t rows, seed, iops, cache_bytes;
    double tail20, tail30, missing, min, mins[8];
    uint32_t n_mins, line_bytes, row_group, threads, pairs, depth, queries;
    char delimiter;
    const char *na, *text_cols, *filter;
    int text_policy, given;
    char columns[TABLE_MAX_K][TABLE_NAME_BYTES];
    uint32_t n_columns;
} options;

/* A comma-separated list of numbers into out[0..max); their count, or 0. */
static uint32_t parse_doubles(const char *a, double *out, uint32_t max) {
    uint32_t n = 0;
    for (;;) {
        char *end;
        if (n == max) return 0;
        out[n++] = strtod(a, &end);
        if (end == a || (*end && *end != ',') || out[n - 1] != out[n - 1]) return 0;
        if (!*end) return n;
        a = end + 1;
    }
}

static int parse(int argc, char **argv, options *o, const cli_command **cmd_out, int *help) {
    const char *files[2] = {NULL, NULL};
    int i, n_files = 0, rc;
    const cli_command *cmd = cli_command_of(&tool, argc, argv, help, &rc);
    if (!cmd) return rc;
    *cmd_out = cmd;
    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        const cli_option *od;
        uint64_t u;
        double d[8];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            return 0;
        }
        if (a[0] != '-' || !a[1]) {
            if (n_files == cmd->files_max)
                return cli_bad_args(&tool, cmd, "%s takes %s; '%s' is one file too many", cmd->name, cmd->args, a);
            files[n_files++] = a;
            continue;
        }
        if (!(od = cli_option_of(&tool, cmd, argc, argv, &i, &v, &rc))) return rc;
        o->given |= (int)od->bit;
        if (od->bit == O_NA) o->na = v;
        else if (od->bit == O_TEXT) o->text_cols = v;
        else if (od->bit == O_FILTER) o->filter = v;
        else if (od->bit == O_MACHINE) o->machine = v;
        else if (od->bit == O_DELIM) {
            if (strlen(v) != 1 || v[0] == '"' || v[0] == '\n' || v[0] == '\r')
                return cli_bad_args(&tool, cmd, "--delimiter '%s': want one byte, not a quote or a line end", v);
            o->delimiter = v[0];
        } else if (od->bit == O_TEXT_POLICY) {
            if (strcmp(v, "dict") && strcmp(v, "skip")) return cli_bad_args(&tool, cmd, "--text-columns %s: want dict or skip", v);
            o->text_policy = strcmp(v, "dict") ? TABLE_TEXT_SKIP : TABLE_TEXT_DICT;
        } else if (od->bit == O_COLUMNS) {
            const char *q = v;
            o->n_columns = 0;
            for (;;) {
                const char *e = strchr(q, ',');
                size_t n = e ? (size_t)(e - q) : strlen(q);
                if (n == 0 || n >= TABLE_NAME_BYTES || o->n_columns == TABLE_MAX_K)
                    return cli_bad_args(&tool, cmd, "--columns %s: want 1..%u column names separated by commas", v,
                                        TABLE_MAX_K);
                memcpy(o->columns[o->n_columns], q, n);
                o->columns[o->n_columns++][n] = 0;
                if (!e) break;
                q = e + 1;
            }
        } else if (od->bit == O_TAIL) {
            if (parse_doubles(v, d, 2) != 2 || !(d[1] >= 0 && d[0] >= d[1] && d[0] <= 1))
                return cli_bad_args(&tool, cmd, "--tail %s: want two fractions F20,F30 with 1 >= F20 >= F30 >= 0", v);
            o->tail20 = d[0];
            o->tail30 = d[1];
        } else if (od->bit == O_MISSING) {
            if (parse_doubles(v, d, 1) != 1 || !(d[0] >= 0 && d[0] <= 0.5))
                return cli_bad_args(&tool, cmd, "--missing %s: want a fraction 0..0.5", v);
            o->missing = d[0];
        } else if (od->bit == O_MIN) {
            if (parse_doubles(v, d, 1) != 1) return cli_bad_args(&tool, cmd, "--min %s: not a number", v);
            o->min = d[0];
        } else if (od->bit == O_MINS) {
            if (!(o->n_mins = parse_doubles(v, o->mins, 8)))
                return cli_bad_args(&tool, cmd, "--mins %s: want 1..8 numbers separated by commas", v);
        } else if (od->bit == O_CACHE) {
            char *end;
            double mib = strtod(v, &end);
            if (end == v || *end || !(mib > 0) || mib > 1048576.0)
                return cli_bad_args(&tool, cmd, "--cache-mib %s: want a size in MiB, > 0", v);
            o->cache_bytes = (uint64_t)(mib * 1048576.0);
        } else if (cli_parse_u64(v, 0, UINT64_MAX, &u) != 0) {
            return cli_bad_args(&tool, cmd, "%s %s: not a number", od->name, v);
        } else if (od->bit == O_ROWS) {
            if (u < 1 || u > (1ull << 34)) return cli_bad_args(&tool, cmd, "--rows %s: want 1..2^34", v);
            o->rows = u;
        } else if (od->bit == O_SEED) {
            o->seed = u;
        } else if (od->bit == O_QUERIES) {
            if (u > TABLE_MAX_K) return cli_bad_args(&tool, cmd, "--queries %s: want 0..%u", v, TABLE_MAX_K);
            o->queries = (uint32_t)u;
        } else if (od->bit == O_LINE) {
            if (u != 512 && u != 1024 && u != 2048 && u != 4096)
                return cli_bad_args(&tool, cmd, "--line-bytes %s: want 512, 1024, 2048 or 4096", v);
            o->line_bytes = (uint32_t)u;
        } else if (od->bit == O_GROUP) {
            if (u < TABLE_RANGE || u % TABLE_RANGE || u > (1u << 24))
                return cli_bad_args(&tool, cmd, "--row-group %s: want a multiple of %u, at most 2^24", v, TABLE_RANGE);
            o->row_group = (uint32_t)u;
        } else if (od->bit == O_THREADS) {
            if (u < 1 || u > 256) return cli_bad_args(&tool, cmd, "--threads %s: want 1..256", v);
            o->threads = (uint32_t)u;
        } else if ((rc = cli_pairs_value(&tool, cmd, od->name, v, u, GRAPH_MAX_PAIRS, &o->pairs, &o->depth,
                                         &o->iops)) != 0) {
            return rc; /* --pairs, --depth, --iops */
        }
    }
    if (n_files < cmd->files_min) return cli_bad_args(&tool, cmd, "%s: name %s", cmd->name, cmd->args);
    if ((o->given & O_QUERIES) && o->queries > o->n_columns)
        return cli_bad_args(&tool, cmd, "--queries %u: Q%u needs %u columns, --columns names %u", o->queries,
                            o->queries, o->queries, o->n_columns);
    if (!(o->given & O_QUERIES)) o->queries = o->n_columns;
    o->path = files[0];
    o->out = files[1];
    return 0;
}

/* ------------------------------------------------------------------------ */
/* gen: a taxi-like table                                                   */
/* ------------------------------------------------------------------------ */

static int gen_csv(const options *o, const table_gen_spec *g) {
    char tmp[4200], line[512];
    FILE *f;
    uint64_t r;
    uint32_t c;
    int ok;
    snprintf(tmp, sizeof tmp, "%s.tmp", o->path);
    if (!(f = fopen(tmp, "w"))) {
        fprintf(stderr, "table: %s: %s\n", tmp, strerror(errno));
        return 2;
    }
    for (c = 0; c < TABLE_GEN_COLS; c++) fprintf(f, "%s,", table_gen_names[c]);
    fprintf(f, "payment_type\n");
    for (r = 0; r < o->rows; r++) {
        int n = 0;
        for (c = 0; c < TABLE_GEN_COLS; c++) {
            double v = table_gen_value(g, r, c);
            n += v != v ? snprintf(line + n, sizeof line - (size_t)n, ",")
                        : snprintf(line + n, sizeof line - (size_t)n, c == TABLE_GEN_COLS - 1 ? "%.0f," : "%.2f,", v);
        }
        fprintf(f, "%s%s\n", line, table_gen_payment[graph_mix64(g->seed + r * 13 + 9) % 3]);
    }
    ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, o->path) != 0) {
        fprintf(stderr, "table: %s: write failed: %s\n", o->path, strerror(errno));
        unlink(tmp);
        return 2;
    }
    return 0;
}

static int generate(const options *o) {
    size_t n = strlen(o->path);
    int csv = n > 4 && !strcmp(o->path + n - 4, ".csv"), rc;
    double t0 = graph_now_s();
    printf("  generating %llu taxi-like rows (%.3g %% at >= 20 miles, %.3g %% at >= 30, %.3g %% missing) as %s\n",
           (unsigned long long)o->rows, 100 * o->tail20, 100 * o->tail30, 100 * o->missing, csv ? "CSV" : "a table");
    fflush(stdout);
    table_gen_spec g;
    char err[512];
    g.seed = o->seed;
    g.tail20 = o->tail20;
    g.tail30 = o->tail30;
    g.missing = o->missing;
    if (csv) rc = gen_csv(o, &g);
    else if ((rc = table_gen_write(o->path, o->rows, &g, err, sizeof err) != GPUMEM_OK ? 2 : 0) != 0)
        fprintf(stderr, "table: %s\n", err);
    if (rc == 0) printf("  wrote %s in %.1f s\n", o->path, graph_now_s() - t0);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* convert                                                                  */
/* ------------------------------------------------------------------------ */

static void say_converting(const table_convert *c, double frac) {
    double s = graph_now_s() - c->t0;
    if (c->rows == 0 && frac == 0.0)
        printf("  converting %s: %llu rows counted in %.1f s; parsing\n", c->in_path, (unsigned long long)c->counted, s);
    else if (c->input_bytes)
        printf("  converting %s: %3.0f %% of %.1f MB, %llu rows, %.1f MB/s\n", c->in_path, 100.0 * frac,
               (double)c->input_bytes / 1e6, (unsigned long long)c->rows, s > 0 ? (double)c->bytes_done / 1e6 / s : 0);
    else
        printf("  converting %s: %.1f MB, %llu rows, %.1f MB/s\n", c->in_path, (double)c->bytes_done / 1e6,
               (unsigned long long)c->rows, s > 0 ? (double)c->bytes_done / 1e6 / s : 0);
    fflush(stdout);
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

static int convert(const cli_command *cmd, const options *o) {
    table_convert c;
    char err[1024];
    struct rusage ru;
    int rc = 0;
    uint32_t i;
    if (ends_with(o->path, ".parquet") || ends_with(o->path, ".arrow") || ends_with(o->path, ".feather") ||
        ends_with(o->path, ".ipc")) {
        fprintf(stderr, "table: %s: Parquet and Arrow are read by pyarrow, not here: run\n"
                        "    python3 tools/table_import.py %s | %s convert - %s\n", o->path, o->path, "build/table", o->out);
        return 2;
    }
    if ((rc = cli_check_writable(&tool, cmd, o->out)) != 0) return rc;
    table_convert_init(&c, o->path, o->out);
    c.delimiter = o->delimiter;
    c.na = o->na;
    c.text_cols = o->text_cols;
    c.text_policy = o->text_policy;
    c.progress = say_converting;
    if (table_convert_run(&c, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "table: %s\n", err);
        rc = 2;
    } else {
        getrusage(RUSAGE_SELF, &ru);
        printf("  wrote %s: %llu rows, %u columns:", o->out, (unsigned long long)c.rows, c.n_kept);
        for (i = 0; i < c.n_cols; i++)
            printf(" %s%s", c.cols[i].name, c.cols[i].kind < 0 ? " (text, skipped)" :
                                            c.cols[i].kind == TABLE_TEXT ? " (text: dictionary codes)" : "");
        printf("\n  %.1f MB in %.2f s: %.1f MB/s; peak memory %.1f MiB\n", (double)c.bytes_done / 1e6, c.seconds,
               c.seconds > 0 ? (double)c.bytes_done / 1e6 / c.seconds : 0.0, (double)ru.ru_maxrss / 1024.0);
    }
    table_convert_free(&c);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* query: three modes, each checked against the reference                   */
/* ------------------------------------------------------------------------ */

enum { MODE_CACHE, MODE_TILED, MODE_PREAD, MODES };
static const char *const mode_names[MODES] = {"(a) gathers through the cache", "(b) tiled row groups, pairs",
                                              "(c) pread of needed values"};

typedef struct job {
    const options *o;
    const table_query *q;
    int mode, fd;
    graph_store *store;
    gpumem_cache_array arrays[TABLE_MAX_K + 1];
    uint64_t cursor, n_items; /* ranges (a, c) or row groups (b) */
    table_part *parts;        /* one a range */
    table_counts counts[256];
} job;

typedef struct worker_arg {
    job *j;
    uint32_t id;
} worker_arg;

static gpumem_status tiled_group(job *j, uint32_t id, uint64_t g, double *buf, table_source *src, table_counts *c) {
    const table_query *q = j->q;
    const uint64_t first = g * j->o->row_group;
    const uint64_t end = first + j->o->row_group < q->n_rows ? first + j->o->row_group : q->n_rows;
    gpumem_nvme_qp *qp = j->store->pairs[id % j->store->n_pairs];
    uint64_t r;
    uint32_t col;
    for (col = 0; col <= q->k; col++) { /* the tile: every needed column's rows, read whole */
        uint64_t lba = (q->col_at[col] + first * 8) / TABLE_LBA;
        const uint64_t last = (q->col_at[col] + end * 8 + TABLE_LBA - 1) / TABLE_LBA;
        unsigned char *dst = (unsigned char *)(buf + (size_t)col * j->o->row_group);
        while (lba < last) {
            uint32_t n = last - lba < TABLE_MAX_BLOCKS ? (uint32_t)(last - lba) : TABLE_MAX_BLOCKS;
            gpumem_status st = gpumem_nvme_qp_read_buf(qp, lba, n, dst, (gpumem_nvme_cpl *)0);
            c->commands++;
            if (st != GPUMEM_OK) {
                if (c->errors++ == 0) c->first_error = (int)st;
                return st;
            }
            c->bytes_read += (uint64_t)n * TABLE_LBA;
            dst += (size_t)n * TABLE_LBA;
            lba += n;
        }
        src->mem[col] = buf + (size_t)col * j->o->row_group;
    }
    src->mem_first = first;
    for (r = first; r < end; r += TABLE_RANGE) {
        gpumem_status st = table_range(src, q, r, r + TABLE_RANGE < end ? r + TABLE_RANGE : end,
                                       &j->parts[r / TABLE_RANGE], c);
        if (st != GPUMEM_OK) return st;
    }
    return GPUMEM_OK;
}

static void *worker(void *p) {
    worker_arg *a = (worker_arg *)p;
    job *j = a->j;
    const table_query *q = j->q;
    table_counts *c = &j->counts[a->id];
    gpumem_cache_ref refs[TABLE_MAX_K + 1];
    table_source src;
    double *buf = NULL;
    uint32_t col;
    memset(&src, 0, sizeof src);
    src.kind = j->mode == MODE_CACHE ? TABLE_FROM_CACHE : j->mode == MODE_TILED ? TABLE_FROM_MEMORY : TABLE_FROM_PREAD;
    src.fd = j->fd;
    src.refs = refs;
    for (col = 0; col <= q->k && j->mode == MODE_CACHE; col++) refs[col] = gpumem_cache_ref_make(&j->arrays[col]);
    if (j->mode == MODE_TILED) buf = (double *)malloc((size_t)(q->k + 1) * j->o->row_group * 8 + TABLE_LBA);
    if (j->mode == MODE_PREAD) buf = (double *)malloc(TABLE_RANGE * 8);
    if (j->mode != MODE_CACHE && !buf) c->errors = 1, c->first_error = GPUMEM_ENOMEM;
    while (!c->errors) {
        const uint64_t i = __atomic_fetch_add(&j->cursor, 1, __ATOMIC_RELAXED);
        uint64_t first = i * TABLE_RANGE, end;
        if (i >= j->n_items) break;
        end = first + TABLE_RANGE < q->n_rows ? first + TABLE_RANGE : q->n_rows;
        if (j->mode == MODE_TILED) {
            (void)tiled_group(j, a->id, i, buf, &src, c);
        } else {
            if (j->mode == MODE_PREAD) { /* c0 of the range in one read; the rest value by value */
                gpumem_status st = graph_pread_all(j->fd, buf, (end - first) * 8, q->col_at[0] + first * 8);
                c->commands++;
                c->bytes_read += (end - first) * 8;
                if (st != GPUMEM_OK && c->errors++ == 0) c->first_error = (int)st;
                src.mem[0] = buf;
                src.mem_first = first;
            }
            if (!c->errors) (void)table_range(&src, q, first, end, &j->parts[i], c);
        }
    }
    for (col = 0; col <= q->k && j->mode == MODE_CACHE; col++) (void)gpumem_cache_ref_drop(&refs[col]);
    free(buf);
    return NULL;
}

/* Run job j on o->threads threads; the counts summed into *sum. 0 or -1. */
static int run_job(job *j, table_counts *sum) {
    pthread_t t[256];
    worker_arg args[256];
    uint32_t i, started = 0;
    memset(j->counts, 0, sizeof j->counts);
    memset(sum, 0, sizeof *sum);
    j->cursor = 0;
    for (i = 0; i < j->o->threads; i++) {
        args[i].j = j;
        args[i].id = i;
        if (pthread_create(&t[i], NULL, worker, &args[i]) != 0) break;
        started++;
    }
    for (i = 0; i < started; i++) pthread_join(t[i], NULL);
    for (i = 0; i < started; i++) {
        const table_counts *c = &j->counts[i];
        sum->rows += c->rows;
        sum->bytes_needed += c->bytes_needed;
        sum->bytes_read += c->bytes_read;
        sum->commands += c->commands;
        sum->full_retries += c->full_retries;
        if (c->errors && !sum->errors) sum->first_error = c->first_error;
        sum->errors += c->errors;
    }
    return started == j->o->threads && !sum->errors ? 0 : -1;
}

/* The reference: one thread, the needed columns read whole a chunk at a
 * time with plain pread, each column's hash checked on the way, each
 * range's part computed here, not by table_range. 0, or 2 (damaged, or a
 * read failed) after a message. */
static int reference(const table_info *t, int fd, const int *cols, const table_query *q, table_part *parts,
                     const char *path) {
    const uint64_t chunk = 64 * TABLE_RANGE;
    double *v = (double *)malloc((size_t)(q->k + 1) * chunk * 8);
    uint64_t hash[TABLE_MAX_K + 1] = {0}, r;
    uint32_t j;
    int rc = 0;
    if (!v) {
        fprintf(stderr, "table: no memory for the reference's chunks\n");
        return 2;
    }
    for (r = 0; r < q->n_rows && !rc; r += chunk) {
        const uint64_t n = q->n_rows - r < chunk ? q->n_rows - r : chunk;
        uint64_t i;
        for (j = 0; j <= q->k && !rc; j++) {
            if (graph_pread_all(fd, v + j * chunk, n * 8, q->col_at[j] + r * 8) != GPUMEM_OK) {
                fprintf(stderr, "table: %s: read failed: %s\n", path, strerror(errno));
                rc = 2;
            }
            hash[j] = graph_hash(hash[j], v + j * chunk, n * 8);
        }
        for (i = 0; i < n && !rc; i++) {
            table_part *p = &parts[(r + i) / TABLE_RANGE];
            double d = v[i], s = 0;
            int bad = 0;
            if ((r + i) % TABLE_RANGE == 0) memset(p, 0, sizeof *p);
            if (isnan(d) || d < q->min) continue;
            p->passing++;
            for (j = 1; j <= q->k; j++) {
                bad |= isnan(v[j * chunk + i]);
                s += v[j * chunk + i];
            }
            if (q->k == 0 || !bad) {
                p->terms++;
                p->sum += q->k ? s / d : 0;
            }
        }
    }
    for (j = 0; j <= q->k && !rc; j++)
        if (hash[j] != t->cols[cols[j]].hash) {
            fprintf(stderr, "table: %s: column %s damaged (its hash does not match the header's)\n", path,
                    t->cols[cols[j]].name);
            rc = 2;
        }
    free(v);
    return rc;
}

typedef struct query_result {
    table_part total;
    double seconds[MODES];
    table_counts counts[MODES];
    unsigned long long bytes_read[MODES];
    gpumem_cache_stats cs;
    int equal[MODES];
} query_result;

/* Is --cache-mib too small for Qk: fewer lines than the threads hold? 2 after a message, or 0. */
static int cache_too_small(const options *o, uint32_t k, uint32_t line) {
    if (!o->cache_bytes || o->cache_bytes / line >= (uint64_t)o->threads * (k + 1)) return 0;
    fprintf(stderr, "table: --cache-mib: a cache of %llu lines of %u bytes is too small for Q%u on %u threads, which"
                    " hold up to %u lines each: give it at least %u lines (--cache-mib %.3f) or use fewer threads\n",
            (unsigned long long)(o->cache_bytes / line), line, k, o->threads, k + 1, o->threads * (k + 1),
            (double)o->threads * (k + 1) * line / 1048576.0);
    return 2;
}

/* Qk over FILE in the three modes. 0 ok, 1 failed or wrong, 2 bad. */
static int run_query(const options *o, const table_info *t, const int *cols, const table_query *q, uint32_t line,
                     query_result *x) {
    const uint64_t n_ranges = table_ranges(q->n_rows);
    table_part *parts = (table_part *)calloc(n_ranges, sizeof *parts), *ref = (table_part *)calloc(n_ranges, sizeof *ref);
    graph_store store;
    graph_store_config sc;
    gpumem_cache_stats before;
    char err[512];
    job j;
    int m, rc = 0;
    uint32_t c;
    uint64_t needed_cols = (uint64_t)(q->k + 1) * q->n_rows * 8;
    memset(x, 0, sizeof *x);
    memset(&j, 0, sizeof j);
    memset(&store, 0, sizeof store);
    memset(&sc, 0, sizeof sc);
    if (!parts || !ref) {
        free(parts);
        free(ref);
        fprintf(stderr, "table: no memory for %llu ranges\n", (unsigned long long)n_ranges);
        return 2;
    }
    sc.n_pairs = o->pairs;
    sc.depth = o->depth;
    sc.iops = o->iops;
    sc.policy = gpumem_cache_desc_default().policy;
    sc.line_bytes = line;
    sc.cache_bytes = o->cache_bytes ? o->cache_bytes : GPUMEM_ALIGN_UP(needed_cols / 8, line);
    /* A thread holds a line of each column it reads: the default is at least
     * 4x that; a --cache-mib below it is refused (it could not make progress). */
    if (!o->cache_bytes && sc.cache_bytes < 4ull * o->threads * (q->k + 1) * line)
        sc.cache_bytes = 4ull * o->threads * (q->k + 1) * line;
    if (cache_too_small(o, q->k, line)) {
        free(parts);
        free(ref);
        return 2;
    }
    store.fd = open(o->path, O_RDONLY);
    j.fd = open(o->path, O_RDONLY);
    if (store.fd < 0 || j.fd < 0 || graph_store_serve(&store, t->h.file_bytes, TABLE_LBA, TABLE_MAX_BLOCKS, &sc, err,
                                                      sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "table: %s: %s\n", o->path, store.fd < 0 || j.fd < 0 ? strerror(errno) : err);
        if (j.fd >= 0) close(j.fd);
        free(parts);
        free(ref);
        return 2;
    }
    if ((rc = reference(t, j.fd, cols, q, ref, o->path)) != 0) goto out;
    x->total = table_total(ref, n_ranges);
    j.o = o;
    j.q = q;
    j.store = &store;
    j.parts = parts;
    for (c = 0; c <= q->k; c++) j.arrays[c] = gpumem_cache_array_make(store.cache, 8, q->col_at[c], q->n_rows);
    for (m = 0; m < MODES && !rc; m++) {
        double t0;
        table_part got;
        j.mode = m;
        j.n_items = m == MODE_TILED ? (q->n_rows + o->row_group - 1) / o->row_group : n_ranges;
        memset(parts, 0xA5, n_ranges * sizeof *parts); /* no range left over from the mode before */
        gpumem_cache_get_stats(store.cache, &before);
        t0 = graph_now_s();
        if (run_job(&j, &x->counts[m]) != 0) {
            fprintf(stderr, "table: Q%u %s: %s\n", q->k, mode_names[m], gpumem_status_str(x->counts[m].first_error));
            rc = 1;
        }
        x->seconds[m] = graph_now_s() - t0;
        if (m == MODE_CACHE) {
            gpumem_cache_get_stats(store.cache, &x->cs);
            x->cs.hits -= before.hits;
            x->cs.misses -= before.misses;
            x->cs.bytes_read -= before.bytes_read;
            x->bytes_read[m] = x->cs.bytes_read;
        } else {
            x->bytes_read[m] = x->counts[m].bytes_read;
        }
        got = table_total(parts, n_ranges);
        x->equal[m] = !rc && !memcmp(&got, &x->total, sizeof got);
        if (!rc && !x->equal[m]) {
            fprintf(stderr, "table: Q%u %s: %.17g over %llu rows (%llu pass), the reference %.17g over %llu (%llu)\n",
                    q->k, mode_names[m], got.sum, (unsigned long long)got.terms, (unsigned long long)got.passing,
                    x->total.sum, (unsigned long long)x->total.terms, (unsigned long long)x->total.passing);
            rc = 1;
        }
    }
    if (gpumem_cache_check_quiescent(store.cache) != 0 || x->cs.violations) {
        fprintf(stderr, "table: the cache is not quiescent after the run\n");
        rc = 1;
    }
out:
    graph_store_close(&store);
    close(j.fd);
    free(parts);
    free(ref);
    return rc;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static void print_query(const options *o, const table_info *t, const int *cols, const table_query *q, uint32_t line,
                        const query_result *x) {
    char what[512];
    int m, n = 0;
    uint32_t j;
    if (q->k == 0) {
        n = snprintf(what, sizeof what, "count(*)");
    } else {
        n = snprintf(what, sizeof what, "avg((");
        for (j = 1; j <= q->k; j++) n += snprintf(what + n, sizeof what - (size_t)n, "%s%s", j > 1 ? " + " : "",
                                                 t->cols[cols[j]].name);
        n += snprintf(what + n, sizeof what - (size_t)n, ") / %s)", t->cols[cols[0]].name);
    }
    printf("\nQ%u  %s where %s >= %g: ", q->k, what, t->cols[cols[0]].name, q->min);
    if (q->k == 0) printf("%llu", (unsigned long long)x->total.passing);
    else if (x->total.terms) printf("%.12g", x->total.sum / (double)x->total.terms);
    else printf("NULL");
    printf("  (%llu of %llu rows pass, %.4f %%; %llu terms)\n", (unsigned long long)x->total.passing,
           (unsigned long long)q->n_rows, 100.0 * (double)x->total.passing / (double)q->n_rows,
           (unsigned long long)x->total.terms);
    printf("    %-38s %10s %11s %11s %9s %12s %9s %9s\n", "mode", "read MiB", "needed MiB", "read/needed", "seconds",
           "rows/s", "hit rate", "answer");
    for (m = 0; m < MODES; m++) {
        const table_counts *c = &x->counts[m];
        char hit[32] = "-", name[64];
        if (m == MODE_CACHE)
            snprintf(hit, sizeof hit, "%.1f %%", 100.0 * ratio((double)x->cs.hits, (double)(x->cs.hits + x->cs.misses)));
        snprintf(name, sizeof name, m == MODE_CACHE ? "%s, %u B lines" : "%s", mode_names[m], line);
        printf("    %-38s %10.2f %11.2f %11.3f %9.3f %12.0f %9s %9s\n", name, (double)x->bytes_read[m] / 1048576.0,
               (double)c->bytes_needed / 1048576.0, ratio((double)x->bytes_read[m], (double)c->bytes_needed),
               x->seconds[m], ratio((double)c->rows, x->seconds[m]), hit, x->equal[m] ? "equal" : "DIFFERS");
    }
    printf("    (b)/(a): %.2fx the bytes read, %.2fx the time; (c)/(a): %.2fx the bytes, %.2fx the time; (a): %llu"
           " acquires refused by a full cache, retried\n",
           ratio((double)x->bytes_read[1], (double)x->bytes_read[0]), ratio(x->seconds[1], x->seconds[0]),
           ratio((double)x->bytes_read[2], (double)x->bytes_read[0]), ratio(x->seconds[2], x->seconds[0]),
           x->counts[0].full_retries);
    /* one line for scripts: the answer's exact bits */
    printf("answer Q%u sum %.17g terms %llu passing %llu\n", q->k, x->total.sum, (unsigned long long)x->total.terms,
           (unsigned long long)x->total.passing);
    (void)o;
}

/* The columns a query names, checked against the table: 0, or 2 after a message. */
static int resolve_columns(const options *o, const table_info *t, int *cols, table_query *q) {
    uint32_t j, c;
    const char *names[TABLE_MAX_K + 1];
    names[0] = o->filter;
    for (j = 0; j < o->queries; j++) names[j + 1] = o->columns[j];
    memset(q, 0, sizeof *q);
    for (j = 0; j <= o->queries; j++) {
        cols[j] = table_find(t, names[j]);
        if (cols[j] < 0) {
            fprintf(stderr, "table: %s: no column '%s' (%s); it has:", o->path, names[j],
                    j ? "--columns" : "--filter");
            for (c = 0; c < t->h.n_cols; c++) fprintf(stderr, "%s %s", c ? "," : "", t->cols[c].name);
            fprintf(stderr, "\n");
            return 2;
        }
        if (t->cols[cols[j]].kind == TABLE_TEXT) {
            fprintf(stderr, "table: %s: column '%s' holds text (dictionary codes): expected a numeric column\n",
                    o->path, names[j]);
            return 2;
        }
        q->col_at[j] = t->cols[cols[j]].at;
    }
    q->n_rows = t->h.n_rows;
    return 0;
}

static int query_all(const options *o, const table_info *t, double min, uint32_t line, FILE *tsv) {
    int cols[TABLE_MAX_K + 1], rc;
    table_query q;
    uint32_t k;
    if ((rc = resolve_columns(o, t, cols, &q)) != 0) return rc;
    q.min = min;
    if (o->cache_bytes && (rc = cache_too_small(o, o->queries, line)) != 0) return rc; /* before any work */
    printf("table query %s: %llu rows; filter %s >= %g; %u threads, %u queue pairs of depth %u; (a) %u B lines,"
           " (b) row groups of %u rows\n", o->path, (unsigned long long)t->h.n_rows, o->filter, min, o->threads,
           o->pairs, o->depth, line, o->row_group);
    for (k = 0; k <= o->queries && !rc; k++) {
        query_result x;
        q.k = k;
        rc = run_query(o, t, cols, &q, line, &x);
        if (rc == 2) break;
        print_query(o, t, cols, &q, line, &x);
        if (tsv && !rc) {
            int m;
            fprintf(tsv, "%g\t%.6f\t%u\t%u", min, (double)x.total.passing / (double)q.n_rows, line, k);
            for (m = 0; m < MODES; m++)
                fprintf(tsv, "\t%.4f", ratio((double)x.bytes_read[m], (double)x.counts[m].bytes_needed));
            fprintf(tsv, "\t%.4f", ratio((double)x.bytes_read[1], (double)x.bytes_read[0]));
            for (m = 0; m < MODES; m++) fprintf(tsv, "\t%.4f", x.seconds[m]);
            fprintf(tsv, "\t%.4f\n", ratio((double)x.cs.hits, (double)(x.cs.hits + x.cs.misses)));
            fflush(tsv);
        }
    }
    return rc;
}

static int query(const options *o, const char *tsv_path) {
    static const uint32_t lines[] = {512, 4096};
    table_info t;
    char err[512];
    FILE *tsv = NULL;
    int fd, rc;
    size_t p, l;
    double t0 = graph_now_s();
    if (table_open_info(o->path, &fd, &t, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "table: %s\n", err);
        return 2;
    }
    close(fd);
    if (!tsv_path) {
        rc = query_all(o, &t, o->min, o->line_bytes, NULL);
    } else {
        if (!(tsv = fopen(tsv_path, "w"))) {
            fprintf(stderr, "table: %s: %s\n", tsv_path, strerror(errno));
            table_info_free(&t);
            return 2;
        }
        if (o->machine) fprintf(tsv, "# machine: %s\n", o->machine);
        fprintf(tsv, "# %s: %llu rows; filter %s; %u threads, %u queue pairs; row groups of %u rows\n", o->path,
                (unsigned long long)t.h.n_rows, o->filter, o->threads, o->pairs, o->row_group);
        fprintf(tsv, "# min\tselectivity\tline_bytes\tk\tcache_read_over_needed\ttiled_read_over_needed"
                     "\tpread_read_over_needed\ttiled_over_cache_bytes\tcache_s\ttiled_s\tpread_s\thit_rate\n");
        for (rc = 0, p = 0; p < o->n_mins && !rc; p++)
            for (l = 0; l < sizeof lines / sizeof lines[0] && !rc; l++) rc = query_all(o, &t, o->mins[p], lines[l], tsv);
        fclose(tsv);
    }
    printf("\ntable %s: %s (%.1f s)\n", tsv_path ? "sweep" : "query",
           rc ? "FAILED" : "every answer of every mode equal to the reference", graph_now_s() - t0);
    if (tsv_path && !rc) printf("table sweep: wrote %s\n", tsv_path);
    table_info_free(&t);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    const cli_command *cmd = NULL;
    int rc, help;
    static const char *const defaults[TABLE_MAX_K] = {"fare_amount", "surcharge", "hail_fee", "tolls_amount", "tax"};
    uint32_t j;
    memset(&o, 0, sizeof o);
    o.rows = 1000000;
    o.seed = GRAPH_SEED;
    o.tail20 = 0.0047;
    o.tail30 = 0.0003;
    o.delimiter = ',';
    o.na = "NA";
    o.filter = "trip_distance";
    o.min = 30;
    o.line_bytes = 4096;
    o.row_group = 65536;
    o.threads = 4;
    o.pairs = 2;
    o.depth = 256;
    o.mins[0] = 20;
    o.mins[1] = 30;
    o.n_mins = 2;
    for (j = 0; j < TABLE_MAX_K; j++) snprintf(o.columns[j], TABLE_NAME_BYTES, "%s", defaults[j]);
    o.n_columns = TABLE_MAX_K;
    if ((rc = parse(argc, argv, &o, &cmd, &help)) != 0) return rc;
    if (help) {
        cli_print_usage(&tool, stdout, cmd);
        return 0;
    }
    if (!strcmp(cmd->name, "gen")) return (rc = cli_check_writable(&tool, cmd, o.path)) ? rc : generate(&o);
    if (!strcmp(cmd->name, "convert")) return convert(cmd, &o);
    if (!strcmp(cmd->name, "sweep") && (rc = cli_check_writable(&tool, cmd, o.out)) != 0) return rc;
    return query(&o, !strcmp(cmd->name, "sweep") ? o.out : NULL);
}
