/* Criterion tests of issue 30, finding 8: the trace simulator's input
 * (bench/policy_sim, the formats in gpumem_policy.h). Ids are decimal or
 * 0x-hex below 2^63; every malformed or out-of-range id, an empty trace, a
 * partial binary record and a capacity of 0 lines stop the run with exit 2
 * and a message naming the file and line (or byte offset), before any
 * output. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef GPUMEM_BUILD_DIR
#define GPUMEM_BUILD_DIR "build"
#endif

TestSuite(trace_input, .timeout = 60);

static char dir[64];

static void make_dir(void) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/gpumem-trace-XXXXXX");
        cr_assert(mkdtemp(dir) != NULL);
    }
}

/* Write `bytes` (n of them) to DIR/name; its path in `path`. */
static void put(const char *name, const char *bytes, size_t n, char *path, size_t cap) {
    FILE *f;
    make_dir();
    snprintf(path, cap, "%s/%s", dir, name);
    f = fopen(path, "wb");
    cr_assert(f != NULL);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

/* Run policy_sim on `path` with `args`; exit status, stdout and stderr. */
static int run_sim(const char *path, const char *args, char *out, char *err, size_t n) {
    char cmd[2048], o[300], e[300];
    FILE *f;
    size_t got;
    int status;
    snprintf(o, sizeof o, "%s.out", path);
    snprintf(e, sizeof e, "%s.err", path);
    snprintf(cmd, sizeof cmd, "%s/policy_sim run %s %s > %s 2> %s", GPUMEM_BUILD_DIR, path, args, o, e);
    status = system(cmd);
    cr_assert(WIFEXITED(status));
    f = fopen(o, "rb");
    got = fread(out, 1, n - 1, f);
    out[got] = 0;
    fclose(f);
    f = fopen(e, "rb");
    got = fread(err, 1, n - 1, f);
    err[got] = 0;
    fclose(f);
    return WEXITSTATUS(status);
}

/* A bad text trace: exit 2, the message names the file and line and has
 * `words`, and nothing is printed on stdout. */
static void expect_refused(const char *name, const char *text, const char *args, const char *where,
                           const char *words) {
    char path[256], out[4096], err[4096], at[300];
    put(name, text, strlen(text), path, sizeof path);
    cr_assert_eq(run_sim(path, args, out, err, sizeof out), 2, "%s: exit 2 expected; stderr: %s", name, err);
    snprintf(at, sizeof at, "%s%s", path, where);
    cr_assert(strstr(err, at) != NULL, "%s: the message must name \"%s\": %s", name, at, err);
    cr_assert(strstr(err, words) != NULL, "%s: the message must say \"%s\": %s", name, words, err);
    cr_assert_eq(out[0], 0, "%s: no output expected, got: %s", name, out);
}

Test(trace_input, decimal_with_leading_zeros_is_decimal) {
    char path[256], out[4096], err[4096];
    const char *text = "010\n10\n08\n8\n0x0A w\n# comment\n  09 # comment\n9\n";
    put("zeros.txt", text, strlen(text), path, sizeof path);
    cr_assert_eq(run_sim(path, "--policies lru --lines 2", out, err, sizeof out), 0, "%s", err);
    /* 10, 10, 8, 8, 10, 9, 9: 7 accesses of 3 lines (octal would make 010 8 and 08 0) */
    cr_assert(strstr(out, "7 accesses, 3 distinct lines") != NULL, "%s", out);
}

Test(trace_input, malformed_ids_are_refused_with_file_and_line) {
    expect_refused("octal.txt", "1\n09x\n", "--lines 2", ":2:", "expected");
    expect_refused("negative.txt", "1\n2\n-1\n", "--lines 2", ":3:", "decimal or 0x-hex");
    expect_refused("plus.txt", "+5\n", "--lines 2", ":1:", "decimal or 0x-hex");
    expect_refused("word.txt", "5 read\n", "--lines 2", ":1:", "found \"5 read\"");
    expect_refused("hex.txt", "0x\n", "--lines 2", ":1:", "hex digits");
    expect_refused("huge.txt", "1\n18446744073709551616\n", "--lines 2", ":2:", "below 2^63");
    /* 2^63 + 1 would be line 1 written in the binary format: refused */
    expect_refused("bit63.txt", "1\n9223372036854775809\n", "--lines 2", ":2:", "below 2^63");
    expect_refused("bit63hex.txt", "0x8000000000000000\n", "--lines 2", ":1:", "below 2^63");
}

Test(trace_input, largest_id_is_read) {
    char path[256], out[4096], err[4096];
    const char *text = "9223372036854775807\n0x7fffffffffffffff\n1\n";
    put("max.txt", text, strlen(text), path, sizeof path);
    cr_assert_eq(run_sim(path, "--policies lru --lines 2", out, err, sizeof out), 0, "%s", err);
    cr_assert(strstr(out, "3 accesses, 2 distinct lines") != NULL, "%s", out);
}

Test(trace_input, empty_trace_is_refused) {
    expect_refused("empty.txt", "", "--lines 2", ":", "expected at least one access");
    expect_refused("comments.txt", "# nothing\n\n", "--lines 2", ":", "expected at least one access");
}

Test(trace_input, capacity_zero_is_refused) {
    expect_refused("cap.txt", "1\n2\n3\n", "--policies lru --fracs 0.01", ":", "capacity 1 is 0 lines");
    {
        char path[256], out[4096], err[4096];
        put("cap0.txt", "1\n", 2, path, sizeof path);
        cr_assert_eq(run_sim(path, "--lines 0", out, err, sizeof out), 2);
        cr_assert(strstr(err, "--lines") != NULL, "%s", err);
        cr_assert_eq(out[0], 0);
    }
}

Test(trace_input, partial_binary_record_is_refused) {
    char path[256], out[4096], err[4096];
    static const char bin[] = "GPMTRC01\1\0\0\0\0\0\0\0\2\0";
    put("partial.bin", bin, sizeof bin - 1, path, sizeof path);
    cr_assert_eq(run_sim(path, "--lines 2", out, err, sizeof out), 2, "%s", err);
    cr_assert(strstr(err, "byte 16") != NULL && strstr(err, "2 trailing bytes") != NULL, "%s", err);
    cr_assert_eq(out[0], 0);
}
