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
#include <sys/resource.h>
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

/* Run `program` (policy_sim, or its LeakSanitizer build) on `path` with
 * `args`; exit status, stdout and stderr. */
static int run_program(const char *program, const char *path, const char *args, char *out, char *err, size_t n) {
    char cmd[2048], o[300], e[300];
    FILE *f;
    size_t got;
    int status;
    snprintf(o, sizeof o, "%s.out", path);
    snprintf(e, sizeof e, "%s.err", path);
    snprintf(cmd, sizeof cmd, "%s/%s run %s %s > %s 2> %s", GPUMEM_BUILD_DIR, program, path, args, o, e);
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

static int run_sim(const char *path, const char *args, char *out, char *err, size_t n) {
    return run_program("policy_sim", path, args, out, err, n);
}

/* A bad text trace: exit 2, the message names the file and line and has
 * `words`, and nothing is printed on stdout. */
static void expect_refused_n(const char *name, const char *text, size_t len, const char *args, const char *where,
                             const char *words) {
    char path[256], out[4096], err[4096], at[300];
    put(name, text, len, path, sizeof path);
    cr_assert_eq(run_sim(path, args, out, err, sizeof out), 2, "%s: exit 2 expected; stderr: %s", name, err);
    snprintf(at, sizeof at, "%s%s", path, where);
    cr_assert(strstr(err, at) != NULL, "%s: the message must name \"%s\": %s", name, at, err);
    cr_assert(strstr(err, words) != NULL, "%s: the message must say \"%s\": %s", name, words, err);
    cr_assert_eq(out[0], 0, "%s: no output expected, got: %s", name, out);
}

static void expect_refused(const char *name, const char *text, const char *args, const char *where,
                           const char *words) {
    expect_refused_n(name, text, strlen(text), args, where, words);
}

/* A good text trace read with `args`: exit 0, and the report says `says`. */
static void expect_read(const char *name, const char *text, const char *args, const char *says) {
    char path[256], out[4096], err[4096];
    put(name, text, strlen(text), path, sizeof path);
    cr_assert_eq(run_sim(path, args, out, err, sizeof out), 0, "%s", err);
    cr_assert(strstr(out, says) != NULL, "%s", out);
}

Test(trace_input, decimal_with_leading_zeros_is_decimal) {
    /* 10, 10, 8, 8, 10, 9, 9: 7 accesses of 3 lines (octal would make 010 8 and 08 0) */
    expect_read("zeros.txt", "010\n10\n08\n8\n0x0A w\n# comment\n  09 # comment\n9\n", "--policies lru --lines 2",
                "7 accesses, 3 distinct lines");
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
    expect_read("max.txt", "9223372036854775807\n0x7fffffffffffffff\n1\n", "--policies lru --lines 2",
                "3 accesses, 2 distinct lines");
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

/* An unknown --prefetch was read as readahead; a soon record with --prefetch
 * hints reads its line ahead (policy_sim's report says so). */
Test(trace_input, prefetch_kind_is_checked_and_hints_read_ahead) {
    char path[256], out[4096], err[4096];
    put("pf.txt", "e 0\ns 7 1\n1\n2\ne 1\n7\n", 20, path, sizeof path);
    cr_assert_eq(run_sim(path, "--lines 2 --prefetch maybe", out, err, sizeof out), 2);
    cr_assert(strstr(err, "--prefetch: expected readahead, fdp or hints, found maybe") != NULL, "%s", err);
    cr_assert_eq(out[0], 0);
    cr_assert_eq(run_sim(path, "--policies lru --lines 3 --prefetch hints", out, err, sizeof out), 0, "%s", err);
    cr_assert(strstr(out, "lru+soon at 3 lines: 1 lines read ahead, 1 of them used") != NULL, "%s", out);
}

Test(trace_input, partial_binary_record_is_refused) {
    char path[256], out[4096], err[4096];
    static const char bin[] = "GPMTRC01\1\0\0\0\0\0\0\0\2\0";
    put("partial.bin", bin, sizeof bin - 1, path, sizeof path);
    cr_assert_eq(run_sim(path, "--lines 2", out, err, sizeof out), 2, "%s", err);
    cr_assert(strstr(err, "byte 16") != NULL && strstr(err, "2 trailing bytes") != NULL, "%s", err);
    cr_assert_eq(out[0], 0);
}

/* Found by fuzzing (issue 42). A NUL byte ended the line for the parser,
 * and what followed it was accepted: "2\0junk" read as 2. A line holding a
 * NUL before its 255th byte also escaped the long-line check (fgets's
 * length stops at the NUL), so its rest was read as the next line and the
 * message named a line that is not there. A carriage return is part of a
 * line end only before a newline: "1\r2" read as 1. */
Test(trace_input, nul_bytes_and_lone_carriage_returns_are_refused_at_their_line) {
    char text[400];
    size_t n;
    expect_refused_n("nul.txt", "1\n2\0junk\n3\n", 12, "--lines 2", ":2:", "found a NUL byte at column 2");
    expect_refused_n("nulfirst.txt", "\0\n1\n", 4, "--lines 2", ":1:", "found a NUL byte at column 1");
    expect_refused_n("nulcomment.txt", "1 # note\0\n", 10, "--lines 2", ":1:", "found a NUL byte at column 9");
    /* the NUL at the start of a 300-byte line 2: the message says line 2, not 3 */
    n = (size_t)snprintf(text, sizeof text, "1\n");
    text[n++] = 0;
    memset(text + n, 'x', 299);
    n += 299;
    n += (size_t)snprintf(text + n, sizeof text - n, "\n5\n");
    expect_refused_n("nullong.txt", text, n, "--lines 2", ":2:", "found a NUL byte at column 1");
    expect_refused("cr.txt", "1\r2\n", "--lines 2", ":1:", "found a carriage return not followed by a newline at column 2");
    expect_refused("crend.txt", "1\n2\r", "--lines 2", ":2:", "carriage return not followed by a newline");
    expect_refused("crcr.txt", "1\r\r\n", "--lines 2", ":1:", "carriage return not followed by a newline");
}

Test(trace_input, crlf_line_ends_are_read) {
    expect_read("crlf.txt", "1\r\n2 w\r\n# c\r\n\r\n3 # x\r\n1", "--policies lru --lines 2",
                "4 accesses, 3 distinct lines");
}

/* --prefetch fdp kept a byte per 32 lines up to the largest line number:
 * line 2^33 took 256 MiB for each simulation, and 2^62 asked malloc for
 * 2^57 bytes and ended with exit 1 and no word. FDP's regions are now
 * numbered densely (a byte per region the trace touches), with the same
 * results. The memory is checked as the child's peak resident size: a
 * dense table at 2^33 is 256 MiB, the simulator needs a few tens. */
Test(trace_input, prefetch_over_far_line_numbers_takes_memory_per_line_touched) {
    char path[256], out[8192], err[4096];
    struct rusage ru;
    const char *far = "0\n4611686018427387904\n1\n0\n4611686018427387905\n";
    const char *far33 = "0\n8589934592\n1\n8589934593\n0\n";
    put("far33.txt", far33, strlen(far33), path, sizeof path);
    cr_assert_eq(run_sim(path, "--policies lru --lines 1 --prefetch fdp", out, err, sizeof out), 0, "%s", err);
    cr_assert(strstr(out, "lru+fdp") != NULL, "%s", out);
    cr_assert_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
    cr_assert_lt(ru.ru_maxrss, 128 * 1024, "the simulator's peak resident size was %ld KiB", ru.ru_maxrss);
    put("far62.txt", far, strlen(far), path, sizeof path);
    cr_assert_eq(run_sim(path, "--policies clock,lru --lines 2 --prefetch fdp", out, err, sizeof out), 0, "exit status;"
                 " stderr: %s", err);
    cr_assert(strstr(out, "clock+fdp") != NULL && strstr(out, "5 accesses, 4 distinct lines") != NULL, "%s", out);
}

/* A refused trace returned from the middle of the run, leaving its reader
 * and buffers allocated (LeakSanitizer, fuzzing, issue 42). Every refusal
 * above, once more through the LeakSanitizer build of the simulator: exit
 * 2, not LeakSanitizer's 23. */
Test(trace_input, refused_traces_leave_nothing_allocated) {
    static const struct {
        const char *name, *text, *args;
    } cases[] = {
        {"l_word.txt", "5 read\n", "--lines 2"},
        {"l_empty.txt", "# nothing\n", "--lines 2"},
        {"l_cap.txt", "1\n2\n3\n", "--policies lru --fracs 0.01"},
        {"l_late.txt", "1\n2\n3\nx\n", "--lines 2 --prefetch fdp --two-tier 0.5"},
        {"l_partial.bin", "GPMTRC01\1\0\0\0\0\0\0\0\2\0", "--lines 2"},
    };
    char path[256], out[4096], err[4096];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strncmp(cases[i].text, "GPMTRC01", 8) ? strlen(cases[i].text) : 18;
        int rc;
        put(cases[i].name, cases[i].text, len, path, sizeof path);
        rc = run_program("policy_sim_lsan", path, cases[i].args, out, err, sizeof out);
        cr_expect_eq(rc, 2, "%s: exit %d; stderr: %s", cases[i].name, rc, err);
        cr_expect(strstr(err, "LeakSanitizer") == NULL, "%s: %s", cases[i].name, err);
    }
}
