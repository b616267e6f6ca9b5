/* The graph examples: file format (damage refused with a clear status), the
 * Kronecker generator, the in-memory references, and the graph program end to
 * end (BFS and CC through cache, queues and controller, answers checked by the
 * program against the references; bad input gives a message and exit 2). */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <sys/wait.h>

#include "examples/graph.h"

#ifndef GPUMEM_BUILD_DIR
#define GPUMEM_BUILD_DIR "build"
#endif

/* A file name of its own for each test (Criterion runs tests in parallel). */
static void temp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/gpumem-test-graph-%ld-%s.graph", (long)getpid(), tag);
}

static void make_graph_file(const char *path, uint32_t scale) {
    graph_csr g;
    char err[256];
    cr_assert_eq(graph_generate_kron(scale, 16, 42, &g, NULL), GPUMEM_OK);
    cr_assert_eq(graph_write(path, &g, err, sizeof err), GPUMEM_OK, "%s", err);
    graph_free(&g);
}

/* Run the graph program; returns its exit status, output in `out`. */
static int run_graph(const char *args, char *out, size_t n) {
    char cmd[1024];
    size_t got = 0;
    FILE *p;
    int status;
    snprintf(cmd, sizeof cmd, "%s/graph %s 2>&1", GPUMEM_BUILD_DIR, args);
    p = popen(cmd, "r");
    cr_assert(p != NULL);
    while (got + 1 < n && fgets(out + got, (int)(n - got), p)) got += strlen(out + got);
    while (fgetc(p) != EOF) {}
    out[got] = 0;
    status = pclose(p);
    cr_assert(WIFEXITED(status), "graph %s did not exit normally", args);
    return WEXITSTATUS(status);
}

TestSuite(graph, .timeout = 120);

Test(graph, generator_is_a_symmetric_simple_deterministic_kron_graph) {
    graph_csr g, again;
    uint64_t v, i, max_deg = 0, n, m;
    cr_assert_eq(graph_generate_kron(12, 16, 7, &g, NULL), GPUMEM_OK);
    n = g.h.n_nodes;
    m = g.h.n_edges;
    cr_assert_eq(n, 4096);
    /* 16 * 4096 sampled edges, both directions, fewer after dropping repeats */
    cr_assert(m > 2 * 16 * 4096 / 2 && m <= 2 * 16 * 4096, "%llu edges", (unsigned long long)m);
    for (v = 0; v < n; v++) {
        uint64_t d = g.offsets[v + 1] - g.offsets[v];
        if (d > max_deg) max_deg = d;
        for (i = g.offsets[v]; i < g.offsets[v + 1]; i++) {
            uint32_t u = g.edges[i];
            uint64_t j;
            int back = 0;
            cr_assert_neq(u, v, "self-loop at %llu", (unsigned long long)v);
            if (i > g.offsets[v]) cr_assert_gt(u, g.edges[i - 1], "list of %llu not sorted or repeated", (unsigned long long)v);
            for (j = g.offsets[u]; j < g.offsets[u + 1]; j++) back |= g.edges[j] == v;
            cr_assert(back, "edge %llu-%u has no reverse", (unsigned long long)v, u);
        }
    }
    /* Kronecker graphs are skewed: the largest degree is far above the mean. */
    cr_assert_gt(max_deg, 20 * m / n, "max degree %llu, mean %llu", (unsigned long long)max_deg,
                 (unsigned long long)(m / n));
    cr_assert_eq(graph_generate_kron(12, 16, 7, &again, NULL), GPUMEM_OK);
    cr_assert_eq(again.h.n_edges, m);
    cr_assert_eq(memcmp(again.edges, g.edges, m * 4), 0, "same seed, different graph");
    graph_free(&again);
    cr_assert_eq(graph_generate_kron(12, 16, 8, &again, NULL), GPUMEM_OK);
    cr_assert(again.h.n_edges != m || memcmp(again.edges, g.edges, m * 4) != 0, "seed ignored");
    graph_free(&again);
    graph_free(&g);
    cr_assert_eq(graph_generate_kron(0, 16, 1, &g, NULL), GPUMEM_EINVAL);
    cr_assert_eq(graph_generate_kron(12, 0, 1, &g, NULL), GPUMEM_EINVAL);
}

/* Two components {0,1,2,3} (a path 0-1-2-3 plus 1-3) and {4,5}; 6 isolated. */
static void small_graph(graph_csr *g) {
    static uint64_t offsets[] = {0, 1, 4, 6, 8, 9, 10, 10};
    static uint32_t edges[] = {1, 0, 2, 3, 1, 3, 1, 2, 5, 4};
    memset(g, 0, sizeof *g);
    graph_layout(&g->h, 7, 10);
    g->offsets = offsets;
    g->edges = edges;
}

Test(graph, references_on_a_known_graph) {
    graph_csr g;
    uint32_t levels[7], comp[7];
    const uint32_t want_levels[7] = {1, 0, 1, 1, GRAPH_NONE, GRAPH_NONE, GRAPH_NONE};
    const uint32_t want_comp[7] = {0, 0, 0, 0, 4, 4, 6};
    int v;
    small_graph(&g);
    graph_reference_bfs(&g, 1, levels);
    graph_reference_cc(&g, comp);
    for (v = 0; v < 7; v++) {
        cr_assert_eq(levels[v], want_levels[v], "level of %d", v);
        cr_assert_eq(comp[v], want_comp[v], "component of %d", v);
    }
}

Test(graph, file_round_trip_and_damage_refused) {
    char path[256], err[256];
    graph_csr g, back;
    unsigned char byte;
    int fd;
    temp_path(path, sizeof path, "damage");
    cr_assert_eq(graph_generate_kron(10, 16, 3, &g, NULL), GPUMEM_OK);
    cr_assert_eq(graph_write(path, &g, err, sizeof err), GPUMEM_OK, "%s", err);
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_OK, "%s", err);
    cr_assert_eq(back.h.n_edges, g.h.n_edges);
    cr_assert_eq(memcmp(back.offsets, g.offsets, (g.h.n_nodes + 1) * 8), 0);
    cr_assert_eq(memcmp(back.edges, g.edges, g.h.n_edges * 4), 0);
    graph_free(&back);

    /* one flipped bit in the edges */
    fd = open(path, O_RDWR);
    cr_assert_eq(pread(fd, &byte, 1, (off_t)g.h.edges_at + 100), 1);
    byte ^= 4;
    cr_assert_eq(pwrite(fd, &byte, 1, (off_t)g.h.edges_at + 100), 1);
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_EINVAL);
    cr_assert(strstr(err, "data damaged"), "%s", err);
    byte ^= 4; /* undo, then damage the header */
    cr_assert_eq(pwrite(fd, &byte, 1, (off_t)g.h.edges_at + 100), 1);
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_OK, "%s", err);
    graph_free(&back);
    cr_assert_eq(pread(fd, &byte, 1, 9), 1);
    byte ^= 1;
    cr_assert_eq(pwrite(fd, &byte, 1, 9), 1);
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_EINVAL);
    cr_assert(strstr(err, "header damaged"), "%s", err);
    byte ^= 1;
    cr_assert_eq(pwrite(fd, &byte, 1, 9), 1);
    cr_assert_eq(pwrite(fd, "tail", 4, (off_t)g.h.file_bytes), 4); /* bytes appended */
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_EINVAL);
    cr_assert(strstr(err, "4 bytes follow the end of the graph") && !strstr(err, "truncated"), "%s", err);
    cr_assert_eq(ftruncate(fd, (off_t)g.h.file_bytes - 4096), 0); /* truncated */
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_EINVAL);
    cr_assert(strstr(err, "truncated"), "%s", err);
    cr_assert_eq(pwrite(fd, "not a graph", 11, 0), 11);
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_EINVAL);
    cr_assert(strstr(err, "not a gpumem graph"), "%s", err);
    close(fd);
    unlink(path);
    cr_assert_eq(graph_load(path, &back, err, sizeof err), GPUMEM_ENODEV);
    graph_free(&g);
}

/* The store refuses what it cannot serve, with a status and a message. */
Test(graph, store_refuses_bad_configuration) {
    char path[256], err[256];
    graph_store s;
    graph_store_config c = {4, 64, 1 << 20, 0, 0, GPUMEM_POLICY_BRRIP, NULL, 0, 0};
    temp_path(path, sizeof path, "store");
    make_graph_file(path, 10);
    c.n_pairs = 0;
    cr_assert_eq(graph_store_open(&s, path, &c, err, sizeof err), GPUMEM_EINVAL);
    cr_assert(strstr(err, "queue pairs"), "%s", err);
    c.n_pairs = 4;
    c.cache_bytes = 100;
    cr_assert_eq(graph_store_open(&s, path, &c, err, sizeof err), GPUMEM_EINVAL);
    cr_assert(strstr(err, "cache"), "%s", err);
    c.cache_bytes = 1 << 20;
    c.depth = 3;
    cr_assert_neq(graph_store_open(&s, path, &c, err, sizeof err), GPUMEM_OK);
    cr_assert(strstr(err, "depth 3"), "%s", err);
    c.depth = 64;
    cr_assert_eq(graph_store_open(&s, path, &c, err, sizeof err), GPUMEM_OK, "%s", err);
    cr_assert_eq(s.offsets.valid, 1);
    cr_assert_eq(s.edges.valid, 1);
    graph_store_close(&s);
    unlink(path);
}

/* BFS (both frontier orders) and CC through a cache 1/8 of the graph, and a
 * cache of exactly 2 lines per thread; the program compares every level and
 * label with the references and exits 1 on any difference. */
Test(graph, program_answers_match_references) {
    char path[256], args[512], out[16384];
    const char *runs[] = {"bfs %s --cache-mib 0.25 --threads 8", "bfs %s --cache-mib 0.25 --threads 8 --ordered",
                          "cc %s --cache-mib 0.25 --threads 8", "bfs %s --cache-mib 0.0625 --threads 8 --pairs 1",
                          "cc %s --cache-mib 0.0625 --threads 8 --depth 2"};
    size_t i;
    temp_path(path, sizeof path, "answers");
    make_graph_file(path, 14); /* 2 MiB */
    for (i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(args, sizeof args, runs[i], path);
        cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
        cr_assert(strstr(out, "matches the in-memory reference"), "graph %s:\n%s", args, out);
        cr_assert(strstr(out, "0 violations; wrong answers: 0"), "graph %s:\n%s", args, out);
    }
    unlink(path);
}

/* Every bad argument: exit 2, a message naming the problem, and no work done
 * (nothing generated, no traversal started, no file written). %G is a valid
 * graph file, %M a path that does not exist, %D a directory. */
Test(graph, program_bad_arguments_table) {
    static const struct { const char *args, *message; } cases[] = {
        {"", "name a command"},
        {"walk %G", "unknown command 'walk'"},
        {"gen", "gen: name FILE"},
        {"gen %M --cache-mib 1", "gen does not take --cache-mib"},
        {"gen %M --scale 9", "--scale 9: want 10..30"},
        {"gen %M --scale 31", "--scale 31: want 10..30"},
        {"gen %M --edge-factor 0", "--edge-factor 0: want 1..64"},
        {"gen /nonexistent-dir/x.graph", "directory /nonexistent-dir: No such file or directory"},
        {"gen %D", "is a directory"},
        {"gen %G/x.graph", "is not a directory"},
        {"gen %M %M", "one file too many"},
        {"bfs", "bfs: name FILE"},
        {"bfs %G --threads zero", "--threads zero: not a number"},
        {"bfs %G --threads 0", "--threads 0: want 1..1024"},
        {"bfs %G --threads", "--threads needs a value"},
        {"bfs %G --depth 3", "--depth 3: want a power of two"},
        {"bfs %G --pairs 65", "--pairs 65: want 1..64"},
        {"bfs %G --cache-mib -1", "--cache-mib -1: want a size in MiB"},
        {"bfs %G --cache-mib 0.01 --threads 8", "too small for 8 threads"},
        {"bfs %G --source 99999999", "--source 99999999: no such vertex"},
        {"bfs %G --scale 12", "bfs does not take --scale"},
        {"bfs %G --frobnicate", "unknown option --frobnicate"},
        {"bfs %M", "No such file or directory"},
        {"cc %G --ordered", "cc does not take --ordered"},
        {"cc %G --source 1", "cc does not take --source"},
        {"sweep %G", "sweep: name FILE OUT.tsv"},
        {"sweep %G /nonexistent-dir/out.tsv", "directory /nonexistent-dir"},
        {"sweep %G %M --cache-mib 1", "sweep does not take --cache-mib"},
        {"sweep %G %M --ordered", "sweep does not take --ordered"},
        {"demo %M --scale 9", "--scale 9: want 10..30"},
        {"demo %M --scale 10 --source 1024", "--source 1024: no such vertex (a scale-10 graph has 1024)"},
        {"demo %G --scale 12", "holds the graph of scale 10"},
        {"demo %M --cache-mib 0.01", "too small for 16 threads"},
        {"demo %M --ordered", "demo does not take --ordered"},
        {"demo /nonexistent-dir/x.graph", "directory /nonexistent-dir"},
    };
    char graph[256], missing[256], dir[256], args[1024], out[8192];
    size_t i;
    struct stat sb;
    temp_path(graph, sizeof graph, "args");
    temp_path(missing, sizeof missing, "args-missing");
    snprintf(dir, sizeof dir, "/tmp");
    make_graph_file(graph, 10);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *c = cases[i].args;
        size_t n = 0;
        for (; *c && n + 256 < sizeof args; c++) { /* expand %G %M %D */
            if (c[0] == '%' && (c[1] == 'G' || c[1] == 'M' || c[1] == 'D')) {
                n += (size_t)snprintf(args + n, sizeof args - n, "%s", c[1] == 'G' ? graph : c[1] == 'M' ? missing : dir);
                c++;
            } else {
                args[n++] = *c;
            }
        }
        args[n] = 0;
        cr_expect_eq(run_graph(args, out, sizeof out), 2, "graph %s: exit status not 2:\n%s", args, out);
        cr_expect(strstr(out, cases[i].message) != NULL, "graph %s: message lacks \"%s\":\n%s", args,
                  cases[i].message, out);
        cr_expect(strstr(out, "generating") == NULL && strstr(out, "level") == NULL && strstr(out, "round") == NULL,
                  "graph %s: worked before refusing:\n%s", args, out);
        cr_expect(stat(missing, &sb) != 0, "graph %s: created %s", args, missing);
        unlink(missing);
    }
    unlink(graph);
}

/* --help for the program and each command: usage on stdout, exit 0. */
Test(graph, program_help) {
    static const char *cases[] = {"--help", "-h", "help", "demo --help", "gen --help", "bfs --help", "cc -h",
                                  "sweep --help", "bfs /nonexistent --threads 4 --help"};
    char out[8192];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_expect_eq(run_graph(cases[i], out, sizeof out), 0, "graph %s:\n%s", cases[i], out);
        cr_expect(strstr(out, "usage: graph "), "graph %s:\n%s", cases[i], out);
    }
    run_graph("cc --help", out, sizeof out);
    cr_expect(strstr(out, "--cache-mib") && !strstr(out, "--ordered"), "cc's usage lists other options:\n%s", out);
}

/* A damaged or unusable graph file: exit 2 and a message saying what is wrong
 * with it, never advice to delete it. */
Test(graph, program_bad_file_gives_message_and_exit_2) {
    char path[256], args[512], out[8192];
    int fd;
    temp_path(path, sizeof path, "bad");
    make_graph_file(path, 10);
    fd = open(path, O_RDWR);
    cr_assert_eq(pwrite(fd, "\x01", 1, 8192), 1); /* damage the offsets */
    close(fd);
    snprintf(args, sizeof args, "bfs %s", path);
    cr_assert_eq(run_graph(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "damaged") && !strstr(out, "remove") && !strstr(out, "delete"), "%s", out);
    cr_assert_eq(truncate(path, 0), 0);
    cr_assert_eq(run_graph(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "not a gpumem graph file"), "%s", out);
    unlink(path);
}
