/* The table tool (examples/table.c, table.h, table_csv.h): the number
 * parser against strtod, the program end to end (three modes equal to the
 * reference, also with missing values, the smallest cache and one row), bad input
 * (each file refused with its name, line and what was expected, exit 2,
 * nothing left behind), and conversion in little memory. Answers against
 * DuckDB: tests/test_table.py. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <stdarg.h>
#include <dirent.h>
#include <sys/wait.h>

#include "examples/table_csv.h"

#ifndef GPUMEM_BUILD_DIR
#define GPUMEM_BUILD_DIR "build"
#endif

#include "tests/under_asan.h"

/* A directory of its own for each test (Criterion runs tests in parallel). */
static void temp_dir(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/gpumem-test-table-%ld-%s", (long)getpid(), tag);
    mkdir(buf, 0755);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* Run a shell command line; its exit status, its output (both streams) in out. */
static int run(const char *cmd, char *out, size_t n) {
    char line[4400];
    size_t got = 0;
    FILE *p;
    int status;
    snprintf(line, sizeof line, "{ %s; } 2>&1", cmd);
    p = popen(line, "r");
    cr_assert(p != NULL);
    while (got + 1 < n && fgets(out + got, (int)(n - got), p)) got += strlen(out + got);
    while (fgetc(p) != EOF) {}
    out[got] = 0;
    status = pclose(p);
    cr_assert(WIFEXITED(status), "%s did not exit normally", cmd);
    return WEXITSTATUS(status);
}

static int run_table(const char *args, char *out, size_t n) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s/table %s", GPUMEM_BUILD_DIR, args);
    return run(cmd, out, n);
}

/* run_table of the arguments fmt formats. */
static int run_table_f(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run_table_f(char *out, size_t n, const char *fmt, ...) {
    char cmd[4200];
    va_list ap;
    int at = snprintf(cmd, sizeof cmd, "%s/table ", GPUMEM_BUILD_DIR);
    va_start(ap, fmt);
    vsnprintf(cmd + at, sizeof cmd - (size_t)at, fmt, ap);
    va_end(ap);
    return run(cmd, out, n);
}

/* The files in dir, one a line, sorted by the shell. */
static void list_dir(const char *dir, char *out, size_t n) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A %s", dir);
    run(cmd, out, n);
}

TestSuite(table, .timeout = 120);

Test(table, number_parser_is_strtod_for_decimals_and_refuses_the_rest) {
    static const char *const good[] = {"0", "-0", "12", "+7", "3.25", ".5", "5.", "1e3", "2.5E-3", "  42  ",
                                       "123456789012345", "1234567890123456789012", "0.1", "0.30000000000000004",
                                       "9007199254740993", "1e-300", "4.9e-324", "1.7976931348623157e308",
                                       "00012.5000", "-1.5e+22", "1e23"};
    static const char *const bad[] = {"", " ", "-", ".", "e3", "1e", "1e+", "abc", "1.2.3", "0x10", "inf", "nan",
                                      "1,5", "12a", "--1", "1 2"};
    uint64_t s = 12345;
    double v;
    size_t i;
    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        cr_assert_eq(table_parse_number(good[i], strlen(good[i]), &v), 0, "'%s' refused", good[i]);
        cr_assert(v == strtod(good[i], NULL), "'%s': %.17g, strtod %.17g", good[i], v, strtod(good[i], NULL));
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_neq(table_parse_number(bad[i], strlen(bad[i]), &v), 0, "'%s' taken as %g", bad[i], v);
    for (i = 0; i < 200000; i++) { /* random decimals of every length: the fast path must round as strtod */
        char t[64];
        uint64_t r = graph_splitmix(&s);
        int digits = 1 + (int)(r % 18), point = (int)((r >> 8) % (uint64_t)(digits + 1)), k, n = 0, e = (int)((r >> 16) % 51) - 25;
        if ((r >> 24) & 1) t[n++] = '-';
        for (k = 0; k < digits; k++) {
            if (k == point) t[n++] = '.';
            t[n++] = (char)('0' + graph_splitmix(&s) % 10);
        }
        if ((r >> 25) & 1) n += snprintf(t + n, sizeof t - (size_t)n, "e%d", e);
        t[n] = 0;
        cr_assert_eq(table_parse_number(t, (size_t)n, &v), 0, "'%s' refused", t);
        cr_assert(v == strtod(t, NULL), "'%s': %.17g, strtod %.17g", t, v, strtod(t, NULL));
    }
}

Test(table, modes_agree_with_the_reference_with_missing_values_and_the_smallest_cache) {
    char dir[128], args[4096], out[65536];
    temp_dir(dir, sizeof dir, "modes");
    cr_assert_eq(run_table_f(out, sizeof out, "gen %s/t.table --rows 50000 --missing 0.05 --tail 0.05,0.01", dir), 0,
                 "%s", out);
    /* 48 lines of 4 KiB: the least 8 threads holding up to 6 each (Q5) are allowed; lines evicted all along */
    cr_assert_eq(
        run_table_f(out, sizeof out, "query %s/t.table --min 20 --threads 8 --cache-mib 0.1875 --row-group 1024", dir),
        0, "%s", out);
    cr_assert(strstr(out, "every answer of every mode equal to the reference"), "%s", out);
    cr_assert(!strstr(out, "DIFFERS"), "%s", out);
    cr_assert(strstr(out, "answer Q5 sum"), "%s", out);
    /* 46 lines: refused before any query runs */
    cr_assert_eq(run_table_f(out, sizeof out, "query %s/t.table --threads 8 --cache-mib 0.18", dir), 2, "%s", out);
    cr_assert(strstr(out, "too small for Q5 on 8 threads") && !strstr(out, "Q0 "), "%s", out);
    cr_assert_eq(run_table_f(out, sizeof out, "query %s/t.table --min 30 --line-bytes 512 --threads 3", dir), 0, "%s",
                 out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    run(args, out, sizeof out);
}

/* The same seed as CSV and as a table, and the CSV converted: the same bits. */
Test(table, a_generated_csv_converts_to_the_generated_table) {
    char dir[128], args[4096], a[65536], b[65536];
    temp_dir(dir, sizeof dir, "same");
    snprintf(args, sizeof args, "gen %s/t.csv --rows 20000 --missing 0.02 --tail 0.1,0.02 && %s/table gen %s/g.table"
             " --rows 20000 --missing 0.02 --tail 0.1,0.02 && %s/table convert %s/t.csv %s/c.table", dir,
             GPUMEM_BUILD_DIR, dir, GPUMEM_BUILD_DIR, dir, dir);
    cr_assert_eq(run_table(args, a, sizeof a), 0, "%s", a);
    snprintf(args, sizeof args, "query %s/g.table --min 20 | grep ^answer", dir);
    cr_assert_eq(run_table(args, a, sizeof a), 0, "%s", a);
    snprintf(args, sizeof args, "query %s/c.table --min 20 | grep ^answer", dir);
    cr_assert_eq(run_table(args, b, sizeof b), 0, "%s", b);
    cr_assert(strstr(a, "answer Q5"), "%s", a);
    cr_assert_str_eq(a, b);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    run(args, a, sizeof a);
}

Test(table, help_and_bad_arguments) {
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"", "name a command"},
        {"frobnicate", "unknown command 'frobnicate'"},
        {"query", "query: name FILE"},
        {"query x --min", "--min needs a value"},
        {"query x --min abc", "--min abc: not a number"},
        {"query x --line-bytes 300", "--line-bytes 300: want 512, 1024, 2048 or 4096"},
        {"query x --row-group 1000", "--row-group 1000: want a multiple of 512"},
        {"query x --threads 0", "--threads 0: want 1..256"},
        {"query x --columns a,b,c,d,e,f", "want 1..5 column names"},
        {"query x --columns a,b --queries 3", "Q3 needs 3 columns"},
        {"query x --rows 5", "query does not take --rows"},
        {"gen", "gen: name OUT"},
        {"gen x --tail 0.1,0.2", "--tail 0.1,0.2: want two fractions"},
        {"gen /nonexistent-dir/x.table", "directory /nonexistent-dir"},
        {"convert a", "convert: name IN OUT"},
        {"convert a b --delimiter ab", "--delimiter 'ab': want one byte"},
        {"convert a b --text-columns keep", "--text-columns keep: want dict or skip"},
        {"sweep x", "sweep: name FILE OUT.tsv"},
        {"sweep x y --mins ,", "--mins ,: want 1..8 numbers"},
    };
    char out[8192];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(run_table(cases[i].args, out, sizeof out), 2, "table %s: want exit 2: %s", cases[i].args, out);
        cr_assert(strstr(out, cases[i].says), "table %s: want '%s' in: %s", cases[i].args, cases[i].says, out);
    }
    cr_assert_eq(run_table("--help", out, sizeof out), 0);
    cr_assert(strstr(out, "usage: table gen OUT") && strstr(out, "table query FILE") && strstr(out, "convert IN OUT"),
              "%s", out);
    cr_assert_eq(run_table("query --help", out, sizeof out), 0);
    cr_assert(strstr(out, "--line-bytes") && strstr(out, "--row-group") && !strstr(out, "--rows "), "%s", out);
}

/* Each bad CSV: exit 2, the message names the file, the line and what was
 * expected, and the directory holds afterwards exactly what it held before
 * (the output that was there unchanged, no temporary file). */
Test(table, bad_csv_files_are_refused_with_where_and_what, .timeout = 180) {
    static const struct {
        const char *name, *text, *says1, *says2;
    } cases[] = {
        {"ragged_long.csv", "a,b\n1,2\n3,4,5\n", "line 3", "more than the header's 2 fields"},
        {"ragged_short.csv", "a,b,c\n1,2,3\n4,5\n6,7,8\n", "line 3: 2 fields", "expected 3"},
        {"not_a_number.csv", "a,b\n1,2\n3,x7\n", "line 3, column 2 (b): 'x7'", "expected a number"},
        {"unterminated.csv", "a,b\n1,\"2\n3,4\n", "line 2: unterminated quote", "expected a closing \""},
        {"header_only.csv", "a,b,c\n", "a header and no rows", "expected at least one row"},
        {"empty.csv", "", "empty", "expected a header row"},
        {"duplicate_names.csv", "a,b,a\n1,2,3\n", "columns 1 and 3 are both named 'a'", "expected distinct names"},
        {"no_name.csv", "a,,c\n1,2,3\n", "line 1, column 2: no name", "expected a column name"},
        {"quote_inside.csv", "a,b\n1,2\n3,4\"5\n", "line 3: a quote inside an unquoted field", "expected a field quoted"},
        {"after_quote.csv", "a,b\n\"1\"x,2\n", "line 2: 'x' after a closing quote", "expected the delimiter"},
        {"long_name.csv", "a_name_that_is_much_longer_than_the_forty_seven_bytes_allowed,b\n1,2\n",
         "line 1, column 1: name too long", "expected a column name of 1..47 bytes"},
        {"late_text.csv", "a,b\n1,2\n\n3,4\n5,NAN\n", "line 5, column 2 (b): 'NAN'", "--text b"},
        {"crlf_ragged.csv", "a,b\r\n1,2\r\n3\r\n", "line 3: 1 fields", "expected 2"},
        {"quoted_newlines.csv", "a,b\n\"x\ny\",1\n\"p\nq\",2,3\n", "line 4: more than", "fields"},
    };
    char dir[128], path[256], out_path[256], args[4096], out[16384], before[4096], after[4096];
    size_t i;
    temp_dir(dir, sizeof dir, "bad");
    snprintf(out_path, sizeof out_path, "%s/out.table", dir);
    write_file(out_path, "the output that was there\n");
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].name);
        write_file(path, cases[i].text);
        list_dir(dir, before, sizeof before);
        cr_assert_eq(run_table_f(out, sizeof out, "convert %s %s", path, out_path), 2, "%s: want exit 2: %s",
                     cases[i].name, out);
        cr_assert(strstr(out, path), "%s: the message does not name the file: %s", cases[i].name, out);
        cr_assert(strstr(out, cases[i].says1) && strstr(out, cases[i].says2), "%s: want '%s' and '%s' in: %s",
                  cases[i].name, cases[i].says1, cases[i].says2, out);
        list_dir(dir, after, sizeof after);
        cr_assert_str_eq(before, after, "%s: left behind:\n%s\nwas:\n%s", cases[i].name, after, before);
        {
            FILE *f = fopen(out_path, "r");
            char got[64] = "";
            cr_assert(f && fgets(got, sizeof got, f));
            fclose(f);
            cr_assert_str_eq(got, "the output that was there\n", "%s: the output was touched", cases[i].name);
        }
    }
    { /* a field longer than the reader's block */
        FILE *f;
        uint32_t k;
        snprintf(path, sizeof path, "%s/long_field.csv", dir);
        f = fopen(path, "w");
        fputs("a,b\n1,", f);
        for (k = 0; k < TABLE_CSV_BLOCK + 10; k++) fputc('7', f);
        fputs("\n", f);
        fclose(f);
        cr_assert_eq(run_table_f(out, sizeof out, "convert %s %s", path, out_path), 2, "%s", out);
        cr_assert(strstr(out, "line 2: a field longer than"), "%s", out);
        /* and a quoted one, over two blocks and more ("" inside counting once) */
        snprintf(path, sizeof path, "%s/long_quoted.csv", dir);
        f = fopen(path, "w");
        fputs("a,b\n1,\"", f);
        for (k = 0; k < TABLE_CSV_BLOCK + TABLE_CSV_BLOCK / 2; k++) fputs(k % 1000 ? "7" : "\"\"", f);
        fputs("\"\n", f);
        fclose(f);
        cr_assert_eq(run_table_f(out, sizeof out, "convert %s %s", path, out_path), 2, "%s", out);
        cr_assert(strstr(out, "line 2: a quoted field longer than"), "%s", out);
    }
    cr_assert_eq(run_table_f(out, sizeof out, "convert %s/missing.csv %s", dir, out_path), 2, "%s", out);
    cr_assert(strstr(out, "missing.csv: No such file"), "%s", out);
    cr_assert_eq(run_table_f(out, sizeof out, "convert %s/x.parquet %s", dir, out_path), 2, "%s", out);
    cr_assert(strstr(out, "tools/table_import.py"), "%s", out);
    snprintf(path, sizeof path, "%s/all_text.csv", dir);
    write_file(path, "a,b\nx,y\n");
    cr_assert_eq(run_table_f(out, sizeof out, "convert %s %s --text-columns skip", path, out_path), 2, "%s", out);
    cr_assert(strstr(out, "every column is text and skipped"), "%s", out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    run(args, out, sizeof out);
}

/* Quotes, CRLF, NA, text columns kept and skipped, a one-row table. */
Test(table, good_csv_variants_convert_and_query) {
    char dir[128], path[256], args[4096], out[65536];
    temp_dir(dir, sizeof dir, "good");
    snprintf(path, sizeof path, "%s/v.csv", dir);
    write_file(path, "name,\"trip_distance\",fare_amount,note\r\n\"x, \"\"y\"\"\",31.5,10,a\r\nz,NA,3,b\r\n"
                     "\"multi\nline\",40,,a\r\nw,35,20,\"NA\"\r\n");
    cr_assert_eq(run_table_f(out, sizeof out, "convert %s %s/v.table", path, dir), 0, "%s", out);
    cr_assert(strstr(out, "4 rows, 4 columns") && strstr(out, "name (text: dictionary codes)"), "%s", out);
    cr_assert_eq(run_table_f(out, sizeof out, "query %s/v.table --columns fare_amount --min 30", dir), 0, "%s", out);
    /* rows 31.5/10 and 35/20 give terms; 40 has no fare; NA never passes */
    cr_assert(strstr(out, "answer Q0 sum 0 terms 3 passing 3"), "%s", out);
    {
        char want[128];
        snprintf(want, sizeof want, "answer Q1 sum %.17g terms 2 passing 3", 10 / 31.5 + 20.0 / 35);
        cr_assert(strstr(out, want), "want '%s' in %s", want, out);
    }
    cr_assert_eq(run_table_f(out, sizeof out, "query %s/v.table --columns note --min 30", dir), 2, "%s", out);
    cr_assert(strstr(out, "column 'note' holds text"), "%s", out);
    cr_assert_eq(run_table_f(out, sizeof out, "query %s/v.table --filter distance --columns fare_amount", dir), 2, "%s",
                 out);
    cr_assert(strstr(out, "no column 'distance' (--filter); it has: name, trip_distance, fare_amount, note"), "%s",
              out);
    cr_assert_eq(run_table_f(out, sizeof out, "query %s/v.table --columns fare_amount,tolls", dir), 2, "%s", out);
    cr_assert(strstr(out, "no column 'tolls' (--columns)"), "%s", out);
    cr_assert_eq(run_table_f(out, sizeof out, "convert %s %s/s.table --text-columns skip", path, dir), 0, "%s", out);
    cr_assert(strstr(out, "2 columns") && strstr(out, "note (text, skipped)"), "%s", out);
    snprintf(path, sizeof path, "%s/one.csv", dir);
    write_file(path, "d;f\n2.5;5");
    cr_assert_eq(run_table_f(out, sizeof out,
                             "convert %s %s/one.table --delimiter ';' && %s/table query %s/one.table --filter d"
                             " --columns f --min 0",
                             path, dir, GPUMEM_BUILD_DIR, dir),
                 0, "%s", out);
    cr_assert(strstr(out, "answer Q1 sum 2 terms 1 passing 1"), "%s", out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    run(args, out, sizeof out);
}

/* A table file that is not one, truncated, or with a damaged column. */
Test(table, damaged_table_files_exit_2) {
    char dir[128], args[4096], out[16384];
    temp_dir(dir, sizeof dir, "damage");
    cr_assert_eq(run_table_f(out, sizeof out, "gen %s/t.table --rows 3000", dir), 0, "%s", out);
    cr_assert_eq(run_table_f(out, sizeof out, "query %s/t.csv", dir), 2, "%s", out);
    cr_assert(strstr(out, "t.csv: No such file"), "%s", out);
    snprintf(args, sizeof args, "cp %s/t.table %s/cut.table && truncate -s -4096 %s/cut.table && %s/table query"
             " %s/cut.table", dir, dir, dir, GPUMEM_BUILD_DIR, dir);
    cr_assert_eq(run(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "truncated: the file is"), "%s", out);
    /* one byte of fare_amount changed (column 2 starts at 4096 + the first column's pages) */
    snprintf(args, sizeof args, "cp %s/t.table %s/bad.table && printf 'X' | dd of=%s/bad.table bs=1 seek=%d"
             " conv=notrunc 2>/dev/null && %s/table query %s/bad.table", dir, dir, dir,
             4096 + (int)GPUMEM_ALIGN_UP(3000 * 8, 4096) + 100, GPUMEM_BUILD_DIR, dir);
    cr_assert_eq(run(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "column fare_amount damaged"), "%s", out);
    snprintf(args, sizeof args, "(printf GPUMEMT1; head -c 8192 /dev/zero) > %s/h.table && %s/table query"
             " %s/h.table", dir, GPUMEM_BUILD_DIR, dir);
    cr_assert_eq(run(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "header damaged"), "%s", out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    run(args, out, sizeof out);
}

/* Convert a 20 MB CSV in an address space of 64 MiB (the input block, the
 * quoted-field buffer and a write buffer per column are all it holds), from
 * standard input too, and get the table a roomy run gets. */
Test(table, conversion_in_little_memory_gives_the_same_table, .timeout = 180) {
    char dir[128], args[4096], out[65536];
    temp_dir(dir, sizeof dir, "mem");
    cr_assert_eq(run_table_f(out, sizeof out,
                             "gen %s/t.csv --rows 500000 --missing 0.01 && %s/table convert %s/t.csv %s/a.table", dir,
                             GPUMEM_BUILD_DIR, dir, dir),
                 0, "%s", out);
    snprintf(args, sizeof args, "%s %s/table convert - %s/b.table < %s/t.csv", UNDER_ASAN ? "" : "ulimit -v 65536 &&",
             GPUMEM_BUILD_DIR, dir, dir);
    cr_assert_eq(run(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "500000 rows"), "%s", out);
    if (!UNDER_ASAN) { /* the peak it reports stays a few MiB whatever the input's size */
        const char *p = strstr(out, "peak memory ");
        cr_assert(p && atof(p + 12) < 16.0, "%s", out);
    }
    snprintf(args, sizeof args, "cmp %s/a.table %s/b.table", dir, dir);
    cr_assert_eq(run(args, out, sizeof out), 0, "the two conversions differ: %s", out);
    if (!UNDER_ASAN) { /* and too little memory is refused cleanly, nothing left behind */
        snprintf(args, sizeof args, "ulimit -v 4096 && %s/table convert %s/t.csv %s/c.table; echo rc=$?; ls %s",
                 GPUMEM_BUILD_DIR, dir, dir, dir);
        run(args, out, sizeof out);
        cr_assert(!strstr(out, "rc=0") && !strstr(out, "c.table"), "%s", out);
    }
    snprintf(args, sizeof args, "rm -rf %s", dir);
    run(args, out, sizeof out);
}

/* Quoted fields with newlines and "" across many 1 MiB blocks: a file
 * (its rows counted first, each column written in place) and a pipe (each
 * column spooled) give the same table, with every row. */
Test(table, quoted_newlines_across_blocks_count_and_convert_alike, .timeout = 120) {
    char dir[128], args[4096], out[65536], path[256];
    FILE *f;
    int i;
    temp_dir(dir, sizeof dir, "blocks");
    snprintf(path, sizeof path, "%s/q.csv", dir);
    f = fopen(path, "w");
    cr_assert(f != NULL);
    fputs("id,note,x\r\n", f);
    for (i = 0; i < 120000; i++) {
        if (i % 1000 == 0) fputs("\r\n\n", f); /* blank lines, skipped */
        fprintf(f, i % 3 ? "%d,\"a \"\"quoted\"\"\nline, %d\",%d.5\r\n" : "%d,plain %d,%d.5\n", i, i % 7, i);
    }
    fclose(f);
    cr_assert_eq(run_table_f(out, sizeof out,
                             "convert %s %s/a.table && %s/table convert - %s/b.table < %s && cmp %s/a.table"
                             " %s/b.table && %s/table query %s/a.table --filter x --columns id --min 60000",
                             path, dir, GPUMEM_BUILD_DIR, dir, path, dir, dir, GPUMEM_BUILD_DIR, dir),
                 0, "%s", out);
    cr_assert(strstr(out, "120000 rows, 3 columns"), "%s", out);
    cr_assert(strstr(out, "terms 60000 passing 60000"), "%s", out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    run(args, out, sizeof out);
}
