/* The graph examples: file format (damage refused with a clear status), the
 * Kronecker generator, the in-memory references, and the graph program end to
 * end (BFS and CC through cache, queues and controller, answers checked by the
 * program against the references; bad input gives a message and exit 2). */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <sys/wait.h>

#include "examples/graph.h"
#include "tests/under_asan.h"

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
    cr_assert_eq(graph_reference_bfs(&g, 1, levels), GPUMEM_OK);
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

/* The store refuses what it cannot serve, with a status and a message, and
 * takes the hint slack it is given. */
Test(graph, store_refuses_bad_configuration) {
    char path[256], err[256];
    graph_store s;
    graph_store_config c = {4, 64, 1 << 20, 0, 0, GPUMEM_POLICY_BRRIP, NULL, 0, 0, 0, 0};
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
    /* The hinted policy's slack: the store's default (GNN's batches are
     * spaced by it), or what the config asks (bfs, cc and pagerank:
     * graph_hint_slack, chunks of items, more with more threads). */
    c.policy = GPUMEM_POLICY_HINTED;
    cr_assert_eq(graph_store_open(&s, path, &c, err, sizeof err), GPUMEM_OK, "%s", err);
    cr_expect_eq(s.seq.d.hint_slack, GRAPH_HINT_SLACK);
    graph_store_close(&s);
    c.hint_slack = graph_hint_slack(16);
    cr_assert_eq(graph_store_open(&s, path, &c, err, sizeof err), GPUMEM_OK, "%s", err);
    cr_expect_eq(s.seq.d.hint_slack, 64);
    graph_store_close(&s);
    cr_expect_eq(graph_hint_slack(1), GRAPH_HINT_SLACK);
    cr_expect_eq(graph_hint_slack(32), 128);
    unlink(path);
}

/* BFS (both frontier orders) and CC through a cache 1/8 of the graph, and a
 * cache of exactly 2 lines per thread; the program compares every level and
 * label with the references and exits 1 on any difference. */
Test(graph, program_answers_match_references) {
    char path[256], args[512], out[16384];
    const char *runs[] = {"bfs %s --cache-mib 0.25 --threads 8", "bfs %s --cache-mib 0.25 --threads 8 --ordered",
                          "cc %s --cache-mib 0.25 --threads 8", "bfs %s --cache-mib 0.0625 --threads 8 --pairs 1",
                          "cc %s --cache-mib 0.0625 --threads 8 --depth 2",
                          /* hints (on by default: hinted-rrip) are advice: the same answers without them,
                           * with the sequential hinted policy, and when the policy takes none (recorded,
                           * refused) */
                          "bfs %s --cache-mib 0.0625 --threads 8 --hints off",
                          "cc %s --cache-mib 0.0625 --threads 8 --policy hinted --hints on",
                          "pagerank %s --cache-mib 0.0625 --threads 8 --iterations 3",
                          "pagerank %s --cache-mib 0.0625 --threads 8 --iterations 3 --hints off",
                          "bfs %s --cache-mib 0.0625 --threads 8 --policy hinted",
                          "bfs %s --cache-mib 0.0625 --threads 8 --policy brrip --hints on",
                          /* read ahead (implies the hints): advice too */
                          "bfs %s --cache-mib 0.0625 --threads 8 --prefetch on",
                          "cc %s --cache-mib 0.0625 --threads 8 --prefetch on --policy hinted-rrip",
                          "pagerank %s --cache-mib 0.0625 --threads 8 --iterations 3 --prefetch on --policy brrip",
                          /* a second pass on the filled cache: all hits where it holds the graph, and
                           * checked like the first where it does not */
                          "bfs %s --cache-mib 4 --threads 8 --warm on",
                          "cc %s --cache-mib 4 --threads 8 --warm on --hints off",
                          "pagerank %s --cache-mib 0.0625 --threads 8 --iterations 3 --warm on"};
    size_t i, read_ahead = 0;
    temp_path(path, sizeof path, "answers");
    make_graph_file(path, 14); /* 2 MiB */
    for (i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(args, sizeof args, runs[i], path);
        cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
        cr_assert(strstr(out, "matches the in-memory reference"), "graph %s:\n%s", args, out);
        cr_assert(strstr(out, "0 violations; wrong answers: 0"), "graph %s:\n%s", args, out);
        cr_assert(strstr(out, "the same over plain memory, 8 threads: matches in"), "graph %s:\n%s", args, out);
        /* the sequential hinted policy runs when asked for (and takes hints by default); the slot
         * kind hinted-rrip when no --policy is given and hints are not turned off, or when asked for */
        cr_assert_eq(strstr(out, " proven right, ") != NULL,
                     strstr(args, "--policy hinted") && !strstr(args, "--policy hinted-"),
                     "graph %s:\n%s", args, out);
        cr_assert_eq(strstr(out, "applied (hinted-rrip)") != NULL,
                     strstr(args, "--policy hinted-rrip") || (!strstr(args, "--policy") && !strstr(args, "--hints off")),
                     "graph %s:\n%s", args, out);
        cr_assert(strstr(args, "--prefetch on") || !strstr(out, "lines read ahead"), "graph %s:\n%s", args, out);
        read_ahead += strstr(out, "lines read ahead") != NULL;
        cr_assert_eq(strstr(out, "again on the cache it filled (--warm): matches in") != NULL,
                     strstr(args, "--warm on") != NULL, "graph %s:\n%s", args, out);
        if (strstr(args, "--cache-mib 4 ")) /* the whole graph cached: the second pass reads nothing */
            cr_assert(strstr(out, "100.0 % hits, 0 lines read"), "graph %s:\n%s", args, out);
    }
    cr_assert_gt(read_ahead, 0, "no --prefetch run read a line ahead");
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
        {"bfs %G --hints maybe", "--hints maybe: want on or off"},
        {"gnn %G --hints on", "gnn does not take --hints"},
        {"bfs %G --prefetch maybe", "--prefetch maybe: want on or off"},
        {"bfs %G --warm maybe", "--warm maybe: want on or off"},
        {"gnn %G --warm on", "gnn does not take --warm"},
        {"bfs %G --prefetch on --hints off", "--prefetch on reads the plan of --hints: not with --hints off"},
        {"gnn %G --prefetch on", "gnn does not take --prefetch"},
        {"bfs %G --hint-slack 0", "--hint-slack 0: want 1..1048576 chunks"},
        {"cc %G --hint-slack lots", "--hint-slack lots: want 1..1048576 chunks"},
        {"gnn %G --hint-slack 8", "gnn does not take --hint-slack"},
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
        {"gnn %G --row-bytes 100", "--row-bytes 100: want 256..16384, a multiple of 256"},
        {"gnn %G --row-bytes 300", "--row-bytes 300: want 256..16384"},
        {"gnn %G --row-bytes 16640", "--row-bytes 16640: want 256..16384"},
        {"gnn %G --fanouts 0,5", "--fanouts 0,5: want 1..4 numbers, each 1..64"},
        {"gnn %G --fanouts 10,65", "--fanouts 10,65: want"},
        {"gnn %G --fanouts 2,2,2,2,2", "--fanouts 2,2,2,2,2: want 1..4 numbers"},
        {"gnn %G --fanouts 10:5", "--fanouts 10:5: want"},
        {"gnn %G --fanouts 10,", "--fanouts 10,: want"},
        {"gnn %G --batch 0", "--batch 0: want 1..65536"},
        {"gnn %G --batches 0", "--batches 0: want 1..100000"},
        {"gnn %G --batch 65536 --fanouts 64,64", "at most 16777216"},
        {"gnn %G --features %D", "is a directory"},
        {"gnn %G --ordered", "gnn does not take --ordered"},
        {"gnn %M", "No such file or directory"},
        {"gnn-sweep %G", "gnn-sweep: name FILE OUT.tsv"},
        {"gnn-sweep %G %M --cache-mib 1", "gnn-sweep does not take --cache-mib"},
        {"gnn-sweep %G %M --features %M", "gnn-sweep does not take --features"},
        {"gnn %G --lookahead 65", "--lookahead 65: want 0..64 mini-batches"},
        {"gnn %G --lookahead -1", "--lookahead -1: want 0..64 mini-batches"},
        {"gnn %G --lookahead x", "--lookahead x: want 0..64 mini-batches"},
        {"gnn %G --lookahead", "--lookahead needs a value"},
        {"bfs %G --lookahead 4", "bfs does not take --lookahead"},
        {"gnn-sweep %G %M --lookahead 1", "gnn-sweep does not take --lookahead"},
        {"gnn %G --weights x", "--weights x: want on or off"},
        {"gnn %G --lookahead 4 --weights on --policy lru", "--weights on: only --policy hinted takes weights"},
        {"bfs %G --weights on", "bfs does not take --weights"},
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

/* ======================================================================== */
/* Other formats (examples/graph_formats.h, graph convert)                 */
/* ======================================================================== */

#include "examples/graph_formats.h"

/* A directed edge list with what users' files have: a self-loop, a repeated
 * edge, edges given both ways and edges given one way. Six components over
 * 200 vertices, none isolated (SNAP files cannot name isolated vertices). */
#define FMT_N 200u
typedef struct edge_list {
    uint32_t u[1024], v[1024];
    uint32_t m;
} edge_list;

static void fmt_edges(edge_list *e) {
    uint64_t s = 99;
    uint32_t i;
    e->m = 0;
#define ADD(a, b) (e->u[e->m] = (a), e->v[e->m] = (b), e->m++)
    for (i = 0; i < 150; i++) ADD(i, (i + 1) % 150);           /* a ring of 150 */
    for (i = 0; i < 200; i++) {                                  /* chords inside it */
        uint32_t a = (uint32_t)(graph_splitmix(&s) % 150), b = (uint32_t)(graph_splitmix(&s) % 150);
        ADD(a, b);
    }
    for (i = 150; i < 190; i++) ADD(i + 1 < 190 ? i + 1 : 150, i); /* a ring of 40, the other way round */
    for (i = 190; i < 200; i += 2) ADD(i, i + 1);                /* 5 pairs */
    ADD(3, 3);                                                   /* a self-loop */
    ADD(0, 1);                                                   /* a repeat */
    ADD(1, 0);                                                   /* the reverse of one */
#undef ADD
}

/* What the store must hold: every edge both ways, no loops, no repeats. */
static uint64_t fmt_expected_hash(const edge_list *e, uint64_t *m_out) {
    uint64_t keys[2048], offsets[FMT_N + 1], i, m = 0, h;
    uint32_t edges[2048];
    for (i = 0; i < e->m; i++) {
        keys[2 * i] = ((uint64_t)e->u[i] << 32) | e->v[i];
        keys[2 * i + 1] = ((uint64_t)e->v[i] << 32) | e->u[i];
    }
    {
        uint64_t tmp[2048];
        graph_radix_sort_u64(keys, tmp, 2 * e->m);
    }
    memset(offsets, 0, sizeof offsets);
    for (i = 0; i < 2 * e->m; i++) {
        uint32_t a = (uint32_t)(keys[i] >> 32), b = (uint32_t)keys[i];
        if (a == b || (i && keys[i] == keys[i - 1])) continue;
        edges[m++] = b;
        offsets[a + 1]++;
    }
    for (i = 0; i < FMT_N; i++) offsets[i + 1] += offsets[i];
    h = graph_hash(graph_hash(0, offsets, sizeof offsets), edges, m * 4);
    *m_out = m;
    return h;
}

/* The distinct pairs the list names, loops left out; `unordered`: a-b and
 * b-a are one (a symmetric matrix names each edge once). */
static uint64_t named_pairs(const edge_list *e, int unordered) {
    uint64_t keys[1024], tmp[1024], n = 0, i, distinct = 0;
    for (i = 0; i < e->m; i++) {
        uint32_t a = e->u[i], b = e->v[i];
        if (a == b) continue;
        if (unordered && a > b) a = e->v[i], b = e->u[i];
        keys[n++] = ((uint64_t)a << 32) | b;
    }
    graph_radix_sort_u64(keys, tmp, n);
    for (i = 0; i < n; i++) distinct += i == 0 || keys[i] != keys[i - 1];
    return distinct;
}

/* A GAP serialized graph of the edge list: the symmetric CSR (undirected),
 * or out- and in-lists (directed); .wsg's neighbours carry a weight. */
static void write_sg(const char *path, const edge_list *e, int directed, int weighted) {
    int64_t m = 0, n = FMT_N, off[FMT_N + 1];
    uint32_t pass, i, v;
    FILE *f = fopen(path, "wb");
    unsigned char flag = (unsigned char)directed;
    cr_assert(f);
    if (directed) m = e->m;
    else {
        uint64_t mm;
        fmt_expected_hash(e, &mm);
        m = (int64_t)mm;
    }
    fwrite(&flag, 1, 1, f);
    fwrite(&m, 8, 1, f);
    fwrite(&n, 8, 1, f);
    for (pass = 0; pass < (directed ? 2u : 1u); pass++) {
        /* pass 0: out-lists (undirected: the simple symmetric lists); 1: in-lists */
        int32_t lists[FMT_N][64];
        uint32_t deg[FMT_N];
        memset(deg, 0, sizeof deg);
        for (i = 0; i < e->m; i++) {
            uint32_t a = pass ? e->v[i] : e->u[i], b = pass ? e->u[i] : e->v[i], k, dup = 0;
            if (!directed) {
                if (a == b) continue;
                for (k = 0; k < deg[a]; k++) dup |= lists[a][k] == (int32_t)b;
                if (!dup) lists[a][deg[a]++] = (int32_t)b;
                for (k = 0, dup = 0; k < deg[b]; k++) dup |= lists[b][k] == (int32_t)a;
                if (!dup) lists[b][deg[b]++] = (int32_t)a;
            } else {
                lists[a][deg[a]++] = (int32_t)b;
            }
        }
        off[0] = 0;
        for (v = 0; v < FMT_N; v++) off[v + 1] = off[v] + deg[v];
        cr_assert_eq(off[FMT_N], m);
        fwrite(off, 8, FMT_N + 1, f);
        for (v = 0; v < FMT_N; v++)
            for (i = 0; i < deg[v]; i++) {
                int32_t w = 7;
                fwrite(&lists[v][i], 4, 1, f);
                if (weighted) fwrite(&w, 4, 1, f);
            }
    }
    cr_assert_eq(fclose(f), 0);
}

enum { F_EL, F_WEL, F_SNAP, F_MTX_PATTERN, F_MTX_REAL, F_MTX_SYM_INT, F_SG, F_WSG, F_SG_DIRECTED, F_KINDS };
static const char *const fmt_names[F_KINDS] = {"el", "wel", "txt", "mtx", "mtx", "mtx", "sg", "wsg", "sg"};
#define SNAP_ID(v) (5000000000ull + 1000003ull * (v)) /* 64-bit ids, in the same order */

static void write_format(const char *path, int kind, const edge_list *e) {
    FILE *f;
    uint32_t i;
    if (kind >= F_SG) {
        write_sg(path, e, kind == F_SG_DIRECTED, kind == F_WSG);
        return;
    }
    f = fopen(path, "w");
    cr_assert(f);
    if (kind == F_SNAP) fprintf(f, "# Directed graph (each unordered pair of nodes is saved once)\n# FromNodeId\tToNodeId\n");
    if (kind == F_MTX_PATTERN) fprintf(f, "%%%%MatrixMarket matrix coordinate pattern general\n%% a comment\n");
    if (kind == F_MTX_REAL) fprintf(f, "%%%%MatrixMarket matrix coordinate real general\n");
    if (kind == F_MTX_SYM_INT) fprintf(f, "%%%%MatrixMarket matrix coordinate integer symmetric\n");
    if (kind >= F_MTX_PATTERN) fprintf(f, "%u %u %u\n", FMT_N, FMT_N, e->m);
    for (i = 0; i < e->m; i++) {
        uint32_t a = e->u[i], b = e->v[i];
        if (kind == F_EL) fprintf(f, "%u %u\n", a, b);
        if (kind == F_WEL) fprintf(f, "%u %u %u\n", a, b, i % 9 + 1);
        if (kind == F_SNAP) fprintf(f, "%llu\t%llu\n", SNAP_ID(a), SNAP_ID(b));
        if (kind == F_MTX_PATTERN) fprintf(f, "%u %u\n", a + 1, b + 1);
        if (kind == F_MTX_REAL) fprintf(f, "%u  %u  %.3e\n", a + 1, b + 1, 0.5 + i);
        if (kind == F_MTX_SYM_INT) fprintf(f, "%u %u %d\n", (a > b ? a : b) + 1, (a > b ? b : a) + 1, -(int)i);
    }
    cr_assert_eq(fclose(f), 0);
}

static void fmt_dir(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/gpumem-test-graph-%ld-%s", (long)getpid(), tag);
    mkdir(buf, 0755);
}

/* Every format of the same edge list gives the same CSR, by hash, with the
 * counts of what the policy removed and added. */
Test(graph, every_format_gives_the_identical_csr) {
    edge_list e;
    char dir[256], in[512], out[512], err[512];
    uint64_t m, want = 0;
    int kind;
    fmt_edges(&e);
    want = fmt_expected_hash(&e, &m);
    fmt_dir(dir, sizeof dir, "formats");
    for (kind = 0; kind < F_KINDS; kind++) {
        graph_import im;
        graph_csr g;
        snprintf(in, sizeof in, "%s/g%d.%s", dir, kind, fmt_names[kind]);
        snprintf(out, sizeof out, "%s/g%d.graph", dir, kind);
        write_format(in, kind, &e);
        graph_import_init(&im, in, out, GRAPH_FMT_AUTO);
        im.tmp_dir = dir;
        cr_assert_eq(graph_import_run(&im, err, sizeof err), GPUMEM_OK, "%s: %s", in, err);
        cr_assert_eq(graph_load(out, &g, err, sizeof err), GPUMEM_OK, "%s", err);
        cr_expect_eq(g.h.n_nodes, FMT_N, "%s", in);
        cr_expect_eq(g.h.n_edges, m, "%s: %llu entries, want %llu", in, (unsigned long long)g.h.n_edges,
                     (unsigned long long)m);
        cr_expect_eq(g.h.data_hash, want, "%s: CSR differs", in);
        cr_expect_eq(im.n_entries, m);
        cr_expect_eq(im.isolated, 0);
        if (kind < F_SG) { /* the text files carry the raw list: loops, repeats */
            cr_expect_eq(im.input_edges, e.m, "%s", in);
            uint64_t loops = 0, distinct = named_pairs(&e, kind == F_MTX_SYM_INT), i;
            for (i = 0; i < e.m; i++) loops += e.u[i] == e.v[i];
            cr_expect_geq(loops, 1);
            cr_expect_eq(im.self_loops, loops, "%s", in);
            cr_expect_eq(im.duplicates, e.m - loops - distinct, "%s: %llu duplicates, want %llu", in,
                         (unsigned long long)im.duplicates, (unsigned long long)(e.m - loops - distinct));
            cr_expect_eq(im.symmetrised, kind == F_MTX_SYM_INT ? 0 : m - distinct, "%s: %llu symmetrised", in,
                         (unsigned long long)im.symmetrised);
        }
        if (kind == F_SNAP) {
            cr_expect(im.ids != NULL && im.ids[0] == SNAP_ID(0) && im.ids[FMT_N - 1] == SNAP_ID(FMT_N - 1));
        }
        cr_expect_eq(im.weights, kind == F_WEL || kind == F_MTX_REAL || kind == F_MTX_SYM_INT ? e.m
                                 : kind == F_WSG                                              ? m
                                                                                              : 0, "%s", in);
        graph_free(&g);
        graph_import_free(&im);
        unlink(in);
        unlink(out);
        snprintf(out, sizeof out, "%s/g%d.graph.ids", dir, kind);
        unlink(out);
    }
    rmdir(dir);
}

/* The vertex a file id names, for each kind of file. */
static unsigned long long dense_of(int kind, unsigned long long id) {
    return kind == F_SNAP ? (id - 5000000000ull) / 1000003ull : kind >= F_MTX_PATTERN && kind <= F_MTX_SYM_INT ? id - 1 : id;
}

static unsigned long long file_of(int kind, unsigned long long v) {
    return kind == F_SNAP ? SNAP_ID(v) : kind >= F_MTX_PATTERN && kind <= F_MTX_SYM_INT ? v + 1 : v;
}

/* The program's last line of answers, with its vertex names turned back
 * into the tool's own ids, so that files in different formats compare. */
static void answer_line(int kind, const char *out, const char *start, char *canon, size_t n) {
    const char *p = strstr(out, start);
    char line[512], *nl;
    size_t o = 0;
    cr_assert(p, "no \"%s\" in:\n%s", start, out);
    snprintf(line, sizeof line, "%s", p + 1);
    if ((nl = strchr(line, '\n'))) *nl = 0;
    for (p = line; *p && o + 32 < n;) { /* "vertex N" and PageRank's "N (rank)" carry file ids */
        unsigned long long id;
        int used;
        if ((!strncmp(p, "vertex ", 7) && sscanf(p + 7, "%llu%n", &id, &used) == 1 && (used += 7)) ||
            (strstr(line, "PageRank") && p > line && p[-1] == ' ' && sscanf(p, "%llu (%n", &id, &used) == 1 &&
             p[used - 1] == '(')) {
            o += (size_t)snprintf(canon + o, n - o, "<%llu>%s", dense_of(kind, id), p[used - 1] == '(' ? " (" : "");
            p += used;
        } else {
            canon[o++] = *p++;
        }
    }
    canon[o] = 0;
}

/* BFS, CC and PageRank on each format, through the conversion the program
 * makes and keeps: the same answers, named in each file's own ids. */
Test(graph, every_format_gives_the_same_answers, .timeout = 240) {
    static const char *const runs[3][2] = {{"bfs %s --source %llu", "\nBFS: "},
                                           {"cc %s", "\nCC: "},
                                           {"pagerank %s --iterations 10", "\nPageRank: "}};
    edge_list e;
    char dir[256], in[512], fmt[256], args[1024], out[16384], canon[3][512], first[3][512];
    int kind, r;
    fmt_edges(&e);
    fmt_dir(dir, sizeof dir, "answers");
    for (kind = 0; kind < F_KINDS; kind++) {
        snprintf(in, sizeof in, "%s/a%d.%s", dir, kind, fmt_names[kind]);
        write_format(in, kind, &e);
        for (r = 0; r < 3; r++) {
            snprintf(fmt, sizeof fmt, "%s --cache-dir %%s --threads 4 --cache-mib 0.125", runs[r][0]);
            if (r == 0) snprintf(args, sizeof args, fmt, in, file_of(kind, 5), dir);
            else snprintf(args, sizeof args, fmt, in, dir);
            cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
            cr_assert(strstr(out, "matches the in-memory reference"), "graph %s:\n%s", args, out);
            answer_line(kind, out, runs[r][1], canon[r], sizeof canon[r]);
            if (kind == 0) memcpy(first[r], canon[r], sizeof first[r]);
            cr_expect_str_eq(canon[r], first[r], "graph %s: answers differ from the .el file's", args);
        }
    }
    cr_expect(strstr(first[1], "7 components, the largest has 150 vertices"), "%s", first[1]);
    cr_expect(strstr(first[0], "BFS: from <5>, 150 of 200 vertices reached"), "%s", first[0]);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

/* A file larger than the sort's memory: sorted runs spill to temporary
 * files (unlinked: none is left) and merge into the same CSR. */
Test(graph, conversion_with_little_memory_spills_and_merges) {
    edge_list e;
    char dir[256], in[512], out[512], err[512], cmd[600];
    uint64_t m, want;
    graph_import im;
    graph_csr g;
    FILE *ls;
    int kind;
    fmt_edges(&e);
    want = fmt_expected_hash(&e, &m);
    fmt_dir(dir, sizeof dir, "spill");
    for (kind = 0; kind < F_KINDS; kind += 3) {
        snprintf(in, sizeof in, "%s/s%d.%s", dir, kind, fmt_names[kind]);
        snprintf(out, sizeof out, "%s/s%d.graph", dir, kind);
        write_format(in, kind, &e);
        graph_import_init(&im, in, out, GRAPH_FMT_AUTO);
        im.tmp_dir = dir;
        im.mem_bytes = 16 * 128; /* 128 keys: 64 edges a run */
        cr_assert_eq(graph_import_run(&im, err, sizeof err), GPUMEM_OK, "%s", err);
        cr_expect_geq(im.runs_spilled, 2, "%s: %llu runs", in, (unsigned long long)im.runs_spilled);
        cr_assert_eq(graph_load(out, &g, err, sizeof err), GPUMEM_OK, "%s", err);
        cr_expect_eq(g.h.data_hash, want, "%s: CSR differs after spilling", in);
        graph_free(&g);
        graph_import_free(&im);
        unlink(in);
        unlink(out);
        snprintf(out, sizeof out, "%s/s%d.graph.ids", dir, kind);
        unlink(out);
    }
    snprintf(cmd, sizeof cmd, "ls -A %s", dir);
    ls = popen(cmd, "r");
    cr_assert(ls);
    cr_expect_eq(fgets(cmd, sizeof cmd, ls), NULL, "left behind: %s", cmd);
    pclose(ls);
    rmdir(dir);
}

/* The conversion is reused while the input's size and mtime hold, and made
 * again when either changes. */
Test(graph, conversion_is_reused_while_the_input_is_unchanged) {
    edge_list e;
    char dir[256], in[512], args[1024], out[16384];
    struct timespec times[2] = {{0, 0}, {1000000000, 0}};
    fmt_edges(&e);
    fmt_dir(dir, sizeof dir, "reuse");
    snprintf(in, sizeof in, "%s/r.el", dir);
    write_format(in, F_EL, &e);
    snprintf(args, sizeof args, "cc %s --cache-dir %s/c --threads 2 --cache-mib 0.125", in, dir);
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "converting") && !strstr(out, "reusing"), "%s", out);
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "reusing") && !strstr(out, "converting"), "%s", out);
    cr_assert_eq(utimensat(AT_FDCWD, in, times, 0), 0); /* same size, another mtime */
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "converting") && !strstr(out, "reusing"), "%s", out);
    {
        FILE *f = fopen(in, "a"); /* another size: one more edge joins two components */
        cr_assert(f);
        fprintf(f, "0 150\n");
        fclose(f);
    }
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "converting") && strstr(out, "6 components, the largest has 190"), "%s", out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

/* Bad input, each case: exit 2, a message naming the file, the line (or
 * byte offset) and what was expected and found; nothing written, nothing
 * left behind. The content is written to the file as given (%s: a valid
 * .sg of the test graph, then changed as `edit` says). */
typedef struct bad_case {
    const char *name, *content;
    size_t length;       /* 0: strlen(content) */
    const char *where;   /* "line 3", "byte 17" */
    const char *expected, *found;
    int sg_edit;         /* .sg cases: 1 truncate, 2 edge count off by one, 3 n = 2^31, 4 neighbour out of range */
} bad_case;

Test(graph, bad_input_is_refused_with_where_and_what, .timeout = 120) {
    static const bad_case cases[] = {
        {"malformed.el", "0 1\n1 2\n1 x\n", 0, "line 3", "expected \"u v\" (two vertex ids)", "found \"1 x\"", 0},
        {"noweight.wel", "0 1 2.5\n1 2\n", 0, "line 2", "expected \"u v weight\"", "found \"1 2\"", 0},
        {"toomany.txt", "# SNAP\n1\t2\n3\t4\t5\n", 0, "line 3", "expected \"u v\"", "found \"3\\t4\\t5\"", 0},
        {"range.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n4 1\n", 0, "line 4",
         "expected a row in 1..3 and a column in 1..3", "found 4 1", 0},
        {"zero.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n0 1\n", 0, "line 3",
         "expected a row in 1..3", "found 0 1", 0},
        {"fewer.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n2 3\n", 0, "line 5",
         "expected 3 entries (the size line says so)", "found 2 and the end of the file", 0},
        {"more.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2\n2 3\n", 0, "line 4",
         "expected 1 entries (the size line says so)", "found more", 0},
        {"field.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2 0.5\n", 0, "line 3",
         "expected \"row column\" (the header says pattern)", "found \"1 2 0.5\"", 0},
        {"intfield.mtx", "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 0.5\n", 0, "line 3",
         "(the header says integer)", "found \"1 2 0.5\"", 0},
        {"array.mtx", "%%MatrixMarket matrix array real general\n3 3\n", 0, "line 1",
         "expected \"matrix coordinate\"", "found \"matrix array\"", 0},
        {"nosize.mtx", "%%MatrixMarket matrix coordinate real general\n% only comments\n", 0, "line 3",
         "expected the size line", "found the end of the file", 0},
        {"wide.el", "0 1\n1 3000000000\n", 0, "line 2", "expected vertex ids below 2147483647", "found 1 3000000000",
         0},
        {"empty.el", "", 0, "line 1", "expected an edge list", "found an empty file", 0},
        {"empty.mtx", "", 0, "line 1", "expected a Matrix Market banner", "found an empty file", 0},
        {"empty.sg", "", 0, "byte 0", "expected a 17-byte GAP header", "found an empty file", 0},
        {"comments.txt", "# nothing but comments\n# here\n", 0, "line 3", "expected at least one edge",
         "found the end of the file", 0},
        {"text.el", "hello, world\n", 0, "line 1", "expected \"u v\"", "found \"hello, world\"", 0},
        {"text.mtx", "hello, world\n", 0, "line 1", "expected the banner", "not a Matrix Market file", 0},
        {"png.sg", "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10", 20, "byte 0", "expected the directed flag (0 or 1)",
         "found 137: not a GAP serialized graph", 0},
        {"short.sg", "\0\1\0", 3, "byte 3", "truncated: expected a 17-byte GAP header", "found a 3-byte file", 0},
        {"cut.sg", NULL, 0, "byte ", "truncated: expected a ", "-byte file from the counts (edges", 1},
        {"count.sg", NULL, 0, "byte ", "count fields do not match the file's size", "found", 2},
        {"huge.sg", NULL, 0, "byte 9", "expected a node count in 1..2147483647", "the graph is too large", 3},
        {"neighbour.sg", NULL, 0, "byte ", "expected a neighbour id in 0..199", "found 200", 4},
        {"binary.txt", "\x01\x02\x03\x04\xff\xfe\n", 0, "line 1", "expected \"u v\"", "found \"", 0},
        {"graph.dat", "0 1\n", 0, "graph.dat", "cannot tell the format from the extension", ".el", 0},
        /* A NUL byte ended the line where the parsers looked, and the rest
         * was accepted: "0 1\0junk" read as the edge 0-1 (fuzzing, issue 42). */
        {"nul.el", "0 1\0junk\n1 2\n", 13, "line 1", "expected \"u v\" (two vertex ids)", "found a NUL byte at column 4",
         0},
        {"nul2.el", "0 1\n1 2\0\n", 9, "line 2", "expected \"u v\"", "found a NUL byte at column 4", 0},
        {"nul.wel", "0 1 5\0junk\n", 11, "line 1", "expected \"u v weight\"", "found a NUL byte at column 6", 0},
        /* strtod skipped a vertical tab before the weight: "0 2 \v0" was read as 0-2, weight 0 (fuzzing) */
        {"vtab.wel", "0 1 5\n0 2 \v0\n", 0, "line 2", "expected \"u v weight\"", "found \"0 2 ", 0},
        {"nul.txt", "# SNAP\n1\t2\0junk\n", 16, "line 2", "expected \"u v\"", "found a NUL byte at column 4", 0},
        {"nul.mtx", "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2\0junk\n", 64, "line 3",
         "expected \"row column\" (the header says pattern)", "found a NUL byte at column 4", 0},
        /* scanf's "%%" skipped white space before the keyword: a '%', carriage
         * returns and "%MatrixMarket" passed as a banner (fuzzing) */
        {"crbanner.mtx", "%\r\r%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 1\n", 0, "line 1",
         "expected the banner", "found \"%\\r\\r%MatrixMarket", 0},
        {"spacebanner.mtx", " %%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2\n", 0, "line 1",
         "expected the banner", "not a Matrix Market file", 0},
        {"nulbanner.mtx", "%%Matrix\0Market matrix coordinate pattern general\n", 50, "line 1", "expected the banner",
         "found a NUL byte at column 9", 0},
        /* Offsets going backwards: vertex 1's is -1, which passed as a huge
         * unsigned value; the neighbour loop then ran into the inverse
         * arrays of this directed file (progress 148 % .. 446 %) and ended
         * as "byte 89: read failed". 17-byte header, out-offsets 0 -1 1 1,
         * one out-neighbour, in-offsets 0 0 1 1, one in-neighbour. */
        {"backwards.sg",
         "\1" "\1\0\0\0\0\0\0\0" "\3\0\0\0\0\0\0\0"
         "\0\0\0\0\0\0\0\0" "\377\377\377\377\377\377\377\377" "\1\0\0\0\0\0\0\0" "\1\0\0\0\0\0\0\0" "\1\0\0\0"
         "\0\0\0\0\0\0\0\0" "\0\0\0\0\0\0\0\0" "\1\0\0\0\0\0\0\0" "\1\0\0\0\0\0\0\0" "\0\0\0\0",
         89, "byte 25", "expected the offset of vertex 1 in 0..1", "found -1", 0},
    };
    char dir[256], path[512], out[512], args[1200], text[16384], cmd[600];
    size_t i;
    edge_list e;
    fmt_edges(&e);
    fmt_dir(dir, sizeof dir, "bad");
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        FILE *ls;
        int mode;
        snprintf(path, sizeof path, "%s/%s", dir, c->name);
        if (c->sg_edit) {
            int fd;
            int64_t v;
            struct stat sb;
            write_format(path, F_SG, &e);
            fd = open(path, O_RDWR);
            cr_assert(fd >= 0);
            cr_assert_eq(fstat(fd, &sb), 0);
            if (c->sg_edit == 1) cr_assert_eq(ftruncate(fd, sb.st_size - 6), 0);
            if (c->sg_edit == 2) {
                cr_assert_eq(pread(fd, &v, 8, 1), 8);
                v--;
                cr_assert_eq(pwrite(fd, &v, 8, 1), 8);
            }
            if (c->sg_edit == 3) {
                v = 1ll << 31;
                cr_assert_eq(pwrite(fd, &v, 8, 9), 8);
            }
            if (c->sg_edit == 4) { /* the last neighbour, unaligned after the 17-byte header */
                int32_t bad = FMT_N;
                cr_assert_eq(pwrite(fd, &bad, 4, sb.st_size - 4), 4);
            }
            close(fd);
        } else {
            FILE *f = fopen(path, "wb");
            cr_assert(f);
            fwrite(c->content, 1, c->length ? c->length : strlen(c->content), f);
            fclose(f);
        }
        /* convert, and bfs through a conversion into the cache directory */
        for (mode = 0; mode < 2; mode++) {
            snprintf(out, sizeof out, "%s/out.graph", dir);
            if (mode == 0) snprintf(args, sizeof args, "convert %s %s", path, out);
            else snprintf(args, sizeof args, "bfs %s --cache-dir %s --threads 2", path, dir);
            cr_expect_eq(run_graph(args, text, sizeof text), 2, "graph %s: exit status not 2:\n%s", args, text);
            cr_expect(strstr(text, path) || strstr(text, c->where), "graph %s: the file is not named:\n%s", args, text);
            cr_expect(strstr(text, c->where), "graph %s: no \"%s\":\n%s", args, c->where, text);
            cr_expect(strstr(text, c->expected), "graph %s: no \"%s\":\n%s", args, c->expected, text);
            cr_expect(strstr(text, c->found), "graph %s: no \"%s\":\n%s", args, c->found, text);
            cr_expect(!strstr(text, "level") && !strstr(text, "round"), "graph %s: worked:\n%s", args, text);
            {   /* progress is a share of the input: never above 100 % */
                const char *at = text;
                while ((at = strstr(at, "converting ")) != NULL) {
                    const char *colon = strstr(at, ": ");
                    double pct = colon ? atof(colon + 2) : 0;
                    cr_expect(pct <= 100.0, "graph %s: progress %.0f %%:\n%s", args, pct, text);
                    at += 11;
                }
            }
            /* nothing written: the directory holds the bad file alone */
            snprintf(cmd, sizeof cmd, "ls -A %s", dir);
            ls = popen(cmd, "r");
            cr_assert(ls);
            while (fgets(cmd, sizeof cmd, ls)) {
                cmd[strcspn(cmd, "\n")] = 0;
                cr_expect_str_eq(cmd, c->name, "graph %s left %s behind", args, cmd);
            }
            pclose(ls);
        }
        unlink(path);
    }
    rmdir(dir);
}

/* A 13-byte .el naming vertex 2^31 - 2 asks for 2^31 vertices: 16 GiB of
 * offsets. The converter wrote them without a look at the disk (fuzzing,
 * issue 42). Now the output's size is checked against the free space of
 * its file system (statvfs) and the file size limit before anything is
 * written: exit 2, the output named, needed against free, nothing left
 * behind. Free space is faked (tests/fake_statvfs.c) so that the test
 * reads the same on any disk; every run is under `ulimit -f` (32 MiB), so
 * that a converter that writes anyway is stopped (SIGXFSZ) at 32 MiB
 * instead of filling the disk - which fails the test too. */
static int run_graph_limited(const char *env, const char *args, char *out, size_t n) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "sh -c 'ulimit -f 65536; %s exec %s/graph %s' 2>&1", env, GPUMEM_BUILD_DIR, args);
    {
        size_t got = 0;
        int status;
        FILE *p = popen(cmd, "r");
        cr_assert(p != NULL);
        while (got + 1 < n && fgets(out + got, (int)(n - got), p)) got += strlen(out + got);
        while (fgetc(p) != EOF) {}
        out[got] = 0;
        status = pclose(p);
        cr_assert(WIFEXITED(status) && !WIFSIGNALED(status), "graph %s: status %#x (killed?):\n%s", args, status, out);
        return WEXITSTATUS(status);
    }
}

/* Short of memory anywhere (address space capped from where the program
 * cannot start to where it runs whole), a traversal exits 0, or 1 or 2 with
 * a "graph:" line saying what it lacked: never a signal. (The BFS
 * reference's queue was used unchecked and crashed it at one such cap.) */
Test(graph, short_of_memory_a_run_says_so_and_never_crashes, .timeout = 240) {
    char dir[256], path[300], args[600], env[64], out[16384];
    const char *kinds[] = {"bfs", "cc", "pagerank"};
    uint32_t k, mib, ok = 0, refused = 0;
    if (UNDER_ASAN) cr_skip_test("an address-space limit cannot be set under AddressSanitizer");
    fmt_dir(dir, sizeof dir, "oom");
    snprintf(path, sizeof path, "%s/k16.graph", dir);
    make_graph_file(path, 16);
    for (k = 0; k < 3; k++)
        for (mib = 24; mib <= 72; mib += 3) {
            int rc;
            snprintf(env, sizeof env, "ulimit -v %u;", mib * 1024);
            snprintf(args, sizeof args, "%s %s --cache-mib 1 --threads 4 --warm off", kinds[k], path);
            rc = run_graph_limited(env, args, out, sizeof out);
            cr_assert(rc == 0 || rc == 1 || rc == 2, "graph %s at %u MiB: exit %d:\n%s", args, mib, rc, out);
            if (rc) cr_assert(strstr(out, "graph:"), "graph %s at %u MiB: exit %d and no message:\n%s", args, mib,
                              rc, out);
            ok += rc == 0;
            refused += rc != 0;
        }
    cr_assert(ok > 0 && refused > 0, "%u runs whole, %u refused: the caps did not span both", ok, refused);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

static void expect_only_file(const char *dir, const char *name, const char *what) {
    char cmd[600];
    FILE *ls;
    int seen = 0;
    snprintf(cmd, sizeof cmd, "ls -A %s", dir);
    ls = popen(cmd, "r");
    cr_assert(ls);
    while (fgets(cmd, sizeof cmd, ls)) {
        cmd[strcspn(cmd, "\n")] = 0;
        cr_expect_str_eq(cmd, name, "%s left %s behind", what, cmd);
        seen++;
    }
    pclose(ls);
    cr_expect_eq(seen, 1, "%s: the input is gone", what);
}

Test(graph, conversion_that_does_not_fit_is_refused_before_writing, .timeout = 120) {
    char dir[256], in[512], out[512], args[1200], env[400], text[8192];
    FILE *f;
    int mode;
    fmt_dir(dir, sizeof dir, "room");
    snprintf(in, sizeof in, "%s/far.el", dir);
    snprintf(out, sizeof out, "%s/far.graph", dir);
    f = fopen(in, "w");
    cr_assert(f);
    fputs("0 2147483646\n", f); /* 13 bytes */
    cr_assert_eq(fclose(f), 0);
    for (mode = 0; mode < 3; mode++) {
        /* 0: 1 GiB free; 1: plenty free, but a file size limit of 32 MiB;
         * 2: as 0, through bfs's conversion into the cache directory */
        snprintf(env, sizeof env,
                 "LD_PRELOAD=%s/fake_statvfs.so GPUMEM_FAKE_FREE_BYTES=%s "
                 "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\"",
                 GPUMEM_BUILD_DIR, mode == 1 ? "1125899906842624" : "1073741824");
        if (mode < 2) snprintf(args, sizeof args, "convert %s %s", in, out);
        else snprintf(args, sizeof args, "bfs %s --cache-dir %s --threads 2", in, dir);
        cr_expect_eq(run_graph_limited(env, args, text, sizeof text), 2, "graph %s: exit status not 2:\n%s", args, text);
        cr_expect(strstr(text, mode < 2 ? out : dir), "graph %s: the output is not named:\n%s", args, text);
        cr_expect(strstr(text, "needs up to 16.0 GiB") && strstr(text, "2147483647 vertices"),
                  "graph %s: the size needed is not said:\n%s", args, text);
        if (mode == 1)
            cr_expect(strstr(text, "file size limit of 32.0 MiB"), "graph %s: the limit is not said:\n%s", args, text);
        else
            cr_expect(strstr(text, "has 1.0 GiB free"), "graph %s: the free space is not said:\n%s", args, text);
        cr_expect(strstr(text, "nothing written"), "graph %s:\n%s", args, text);
        expect_only_file(dir, "far.el", args);
    }
    /* The same file where it fits: converted, and the size said before the writing. */
    snprintf(env, sizeof env, "LD_PRELOAD=%s/fake_statvfs.so GPUMEM_FAKE_FREE_BYTES=1073741824 "
             "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\"", GPUMEM_BUILD_DIR);
    f = fopen(in, "w");
    cr_assert(f);
    fputs("0 1000\n", f);
    cr_assert_eq(fclose(f), 0);
    snprintf(args, sizeof args, "convert %s %s", in, out);
    cr_assert_eq(run_graph_limited(env, args, text, sizeof text), 0, "%s", text);
    cr_expect(strstr(text, "100 %") && strstr(text, "writing up to 16 KiB"), "%s", text);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

/* ======================================================================== */
/* GNN mini-batches (graph gnn): sampling and feature gathering             */
/* ======================================================================== */

/* The generator: a function of (row, byte) alone, different rows differ,
 * and the check names the first byte that is not the generator's. */
Test(graph, feature_rows_are_generated_and_checked_by_byte) {
    unsigned char a[GRAPH_GNN_MAX_ROW], b[GRAPH_GNN_MAX_ROW];
    graph_feature_fill(7, 4096, a);
    graph_feature_fill(7, 256, b);
    cr_assert_eq(memcmp(a, b, 256), 0, "a row's first bytes depend on its size");
    cr_assert_eq(graph_feature_check(7, 4096, a), 4096);
    graph_feature_fill(8, 4096, b);
    cr_assert_neq(memcmp(a, b, 4096), 0, "rows 7 and 8 are alike");
    a[1234] ^= 0x10;
    cr_assert_eq(graph_feature_check(7, 4096, a), 1234);
    cr_assert_eq(graph_features_row_problem(256), NULL);
    cr_assert_eq(graph_features_row_problem(16384), NULL);
    cr_assert_neq(graph_features_row_problem(255), NULL);
    cr_assert_neq(graph_features_row_problem(300), NULL);
    cr_assert_neq(graph_features_row_problem(16640), NULL);
}

/* graph_gather_hint hints each line a row lies on, and no other: rows
 * inside a line, across two, and of four lines; its status is the cache's
 * (a policy that takes no hints, a row past the table). */
Test(graph, gather_hint_names_the_lines_of_the_row) {
    static unsigned char mem[8 * GRAPH_LINE];
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    struct { uint64_t row; uint32_t bytes; uint64_t first, last; } rows[] = {
        {1, 768, 0, 0}, {5, 768, 0, 1}, {1, 16384, 4, 7}};
    uint32_t i;
    uint64_t line;
    d.n_lines = 8;
    d.line_bytes = GRAPH_LINE;
    d.n_slots = 4;
    d.backing = gpumem_cache_backing_memory(mem);
    for (i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        d.policy = GPUMEM_POLICY_HINTED_RRIP;
        cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
        cr_assert_eq(graph_gather_hint(c, rows[i].row, rows[i].bytes, 3), GPUMEM_OK);
        for (line = 0; line < 8; line++) {
            uint64_t want = line >= rows[i].first && line <= rows[i].last ? 3 : UINT64_MAX;
            cr_assert_eq(gpumem_policy_slot_pending_next_use(&c->slot_hints, line), want,
                         "row %llu of %u bytes: line %llu", (unsigned long long)rows[i].row, rows[i].bytes,
                         (unsigned long long)line);
        }
        cr_assert_eq(graph_gather_hint(c, 2, 16384, 3), GPUMEM_ERANGE, "a row past the table's 8 lines");
        gpumem_cache_destroy(c);
    }
    d.policy = GPUMEM_POLICY_BRRIP;
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    cr_assert_eq(graph_gather_hint(c, 1, 768, 3), GPUMEM_ESTATE, "a policy that takes no hints");
    gpumem_cache_destroy(c);
}

/* Sampling through a small cache, checked against the in-memory graph by
 * what a sample must be: the seed at the root, each child a neighbour of
 * its parent, all of a parent's neighbours when it has at most the fanout,
 * else exactly fanout distinct ones; empty slots only after the filled ones.
 * The same key gives the same sample; another key another one. */
/* A scale-10 graph at `path`, loaded into g and opened as s through a
 * 16-line CLOCK cache: what the sampling tests sample. */
static void sample_store_open(char *path, size_t n, const char *name, graph_csr *g, graph_store *s) {
    char err[256];
    graph_store_config c = {2, 64, 16 * GRAPH_LINE, 0, 0, GPUMEM_POLICY_CLOCK, NULL, 0, 0, 0, 0};
    temp_path(path, n, name);
    make_graph_file(path, 10);
    cr_assert_eq(graph_load(path, g, err, sizeof err), GPUMEM_OK, "%s", err);
    cr_assert_eq(graph_store_open(s, path, &c, err, sizeof err), GPUMEM_OK, "%s", err);
}

Test(graph, sampling_gives_distinct_neighbours_and_is_deterministic) {
    char path[256];
    graph_csr g;
    graph_store s;
    graph_gnn_plan p = {3, {4, 3, 2, 0}, 0};
    graph_counts counts;
    uint32_t out[64], again[64], level_at[4] = {0, 1, 5, 17}, seed;
    unsigned long long differ = 0, full = 0, partial = 0;
    sample_store_open(path, sizeof path, "sample", &g, &s);
    p.per_seed = graph_gnn_per_seed(&p);
    cr_assert_eq(p.per_seed, 1 + 4 + 12 + 24);
    memset(&counts, 0, sizeof counts);
    for (seed = 0; seed < 200; seed++) {
        graph_refs r = graph_refs_make(&s.offsets, &s.edges, (uint32_t)g.h.n_nodes, g.h.n_edges);
        uint32_t v = graph_gnn_seed_vertex(1, 0, seed, (uint32_t)g.h.n_nodes), h, j, k, m;
        cr_assert_eq(graph_gnn_sample(&r, 1000 + seed, v, &p, out, &counts), GPUMEM_OK);
        cr_assert_eq(graph_gnn_sample(&r, 1000 + seed, v, &p, again, &counts), GPUMEM_OK);
        cr_assert_eq(memcmp(out, again, p.per_seed * 4), 0, "seed %u: same key, another sample", seed);
        cr_assert_eq(graph_gnn_sample(&r, 5000 + seed, v, &p, again, &counts), GPUMEM_OK);
        differ += memcmp(out, again, p.per_seed * 4) != 0;
        graph_refs_drop(&r);
        cr_assert_eq(out[0], v);
        for (h = 0; h < 3; h++) {
            uint32_t f = p.fanout[h], n_parents = level_at[h + 1] - level_at[h];
            for (j = 0; j < n_parents; j++) {
                uint32_t parent = out[level_at[h] + j], *kids = out + level_at[h + 1] + j * f;
                uint64_t d = parent == GRAPH_NONE ? 0 : g.offsets[parent + 1] - g.offsets[parent];
                uint32_t want = d < f ? (uint32_t)d : f;
                for (k = 0; k < f; k++) {
                    if (k >= want) {
                        cr_assert_eq(kids[k], GRAPH_NONE, "seed %u hop %u: slot %u of %u filled", seed, h, k, f);
                        continue;
                    }
                    cr_assert_neq(kids[k], GRAPH_NONE, "seed %u hop %u: slot %u of %u empty (degree %llu)", seed, h,
                                  k, f, (unsigned long long)d);
                    for (m = 0; m < k; m++) cr_assert_neq(kids[m], kids[k], "seed %u: a neighbour twice", seed);
                    {
                        uint64_t i;
                        int found = 0;
                        for (i = g.offsets[parent]; i < g.offsets[parent + 1]; i++) found |= g.edges[i] == kids[k];
                        cr_assert(found, "seed %u: %u is not a neighbour of %u", seed, kids[k], parent);
                    }
                }
                if (parent != GRAPH_NONE) {
                    full += d > f;
                    partial += d <= f;
                }
            }
        }
    }
    cr_assert_eq(counts.errors, 0);
    cr_assert_gt(full, 100, "too few vertices above the fanout to test the draw");
    cr_assert_gt(partial, 100, "too few vertices at or below the fanout");
    cr_assert_gt(differ, 150, "the key hardly changes the sample (%llu of 200)", differ);
    cr_assert_eq(gpumem_cache_check_quiescent(s.cache), 0);
    graph_store_close(&s);
    graph_free(&g);
    unlink(path);
}

/* graph_gnn_expected_draws against the sampler itself: 3000 batches of 16
 * seeds sampled through a cache (two hops, fanouts 3 and 2: vertices above
 * and below them), each vertex's draws counted, repeats too. The totals
 * agree within 1 %, and each vertex expected at least 300 times lies within
 * 5 standard deviations of a Poisson count (the draws are not independent,
 * but close). */
Test(graph, gnn_expected_draws_are_what_the_sampler_draws) {
    enum { BATCHES = 3000, SEEDS = 16 };
    char path[256];
    graph_csr g;
    graph_store s;
    graph_gnn_plan p = {2, {3, 2, 0, 0}, 0};
    graph_counts counts;
    uint32_t out[16], b, i, j;
    double *want, *scratch, *got, total_want = 0, total_got = 0;
    unsigned long long checked = 0;
    sample_store_open(path, sizeof path, "draws", &g, &s);
    p.per_seed = graph_gnn_per_seed(&p);
    want = (double *)calloc(g.h.n_nodes, sizeof *want);
    got = (double *)calloc(g.h.n_nodes, sizeof *got);
    scratch = (double *)calloc(2 * g.h.n_nodes, sizeof *scratch);
    cr_assert(want && got && scratch);
    graph_gnn_expected_draws(&g, &p, SEEDS, want, scratch);
    memset(&counts, 0, sizeof counts);
    for (b = 0; b < BATCHES; b++) {
        graph_refs r = graph_refs_make(&s.offsets, &s.edges, (uint32_t)g.h.n_nodes, g.h.n_edges);
        for (i = 0; i < SEEDS; i++) {
            uint32_t v = graph_gnn_seed_vertex(3, b, i, (uint32_t)g.h.n_nodes);
            cr_assert_eq(graph_gnn_sample(&r, graph_mix64(graph_mix64(3 + b) + i), v, &p, out, &counts), GPUMEM_OK);
            for (j = 0; j < p.per_seed; j++)
                if (out[j] != GRAPH_NONE) got[out[j]] += 1;
        }
        graph_refs_drop(&r);
    }
    for (i = 0; i < g.h.n_nodes; i++) {
        const double e = want[i] * BATCHES;
        total_want += e;
        total_got += got[i];
        if (e < 300) continue;
        checked++;
        cr_assert_leq((got[i] - e) * (got[i] - e), 25 * e, "vertex %u (degree %llu): drawn %.0f times, expected %.1f", i,
                      (unsigned long long)(g.offsets[i + 1] - g.offsets[i]), got[i], e);
    }
    cr_assert_gt(checked, 100, "too few vertices drawn often enough to check (%llu)", checked);
    cr_assert_leq(total_got > total_want ? total_got - total_want : total_want - total_got, 0.01 * total_want,
                  "%.0f draws, expected %.1f", total_got, total_want);
    cr_assert_eq(counts.errors, 0);
    free(want);
    free(got);
    free(scratch);
    graph_store_close(&s);
    graph_free(&g);
    unlink(path);
}

/* The digest gnn prints: a hash over every batch's hash, each batch's rows
 * having been checked byte for byte in all three modes by the program. */
static void gnn_digest(const char *out, char *digest, size_t n) {
    const char *d = strstr(out, "digest ");
    cr_assert(d, "no digest:\n%s", out);
    snprintf(digest, n, "%.16s", d + 7);
}

/* graph gnn under every replacement policy, with the host tier under each
 * placement, and with rows that straddle cache lines and blocks (768 B) or
 * span four lines (16 KiB): every run gathers every row right in the three
 * modes, and, the mini-batches being the same, prints the same digest. The
 * feature cache holds 32 lines of a 1024-row table, so lines are evicted
 * all the time. */
Test(graph, gnn_gathers_every_row_right_under_every_policy_and_with_the_host_tier, .timeout = 240) {
    char dir[256], path[300], args[1024], out[16384], digest[32], first[32] = "";
    const char *common = "--threads 4 --pairs 2 --depth 16 --batch 16 --batches 4 --cache-mib 0.125";
    uint32_t k;
    fmt_dir(dir, sizeof dir, "gnn");
    snprintf(path, sizeof path, "%s/k10.graph", dir);
    make_graph_file(path, 10);
    for (k = GPUMEM_POLICY_FIRST; k < GPUMEM_POLICY_KINDS + GPUMEM_TIER_PLACEMENTS; k++) {
        if (k < GPUMEM_POLICY_KINDS)
            snprintf(args, sizeof args, "gnn %s --cache-dir %s %s --policy %s", path, dir, common,
                     gpumem_policy_name(k));
        else
            snprintf(args, sizeof args, "gnn %s --cache-dir %s %s --host-mib 0.25 --placement %s", path, dir, common,
                     gpumem_tier_placement_name(k - GPUMEM_POLICY_KINDS));
        cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
        cr_assert(strstr(out, ", 0 wrong, 0 batch hashes disagreeing"), "graph %s:\n%s", args, out);
        cr_assert(strstr(out, "(a) through the cache"), "graph %s:\n%s", args, out);
        if (k >= GPUMEM_POLICY_KINDS)
            cr_assert(strstr(out, "host tier") != NULL, "graph %s: no host tier:\n%s", args, out);
        gnn_digest(out, digest, sizeof digest);
        if (!first[0]) snprintf(first, sizeof first, "%s", digest);
        cr_expect_str_eq(digest, first, "graph %s: other batches or rows than under %s", args,
                         gpumem_policy_name(0));
    }
    /* rows across line and block boundaries, and rows of four lines */
    for (k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "gnn %s --cache-dir %s %s --row-bytes %u --policy lru", path, dir, common,
                 k ? 16384 : 768);
        cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
        cr_assert(strstr(out, ", 0 wrong, 0 batch hashes disagreeing"), "graph %s:\n%s", args, out);
    }
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

/* The demo, on a small graph: every run checked, and the BFS with the
 * whole graph cached run again over plain memory, checked too, and set
 * against it in the summary (what the cache costs on hits). */
Test(graph, demo_shows_what_the_cache_costs_over_plain_memory, .timeout = 120) {
    char dir[256], path[300], args[1024], out[65536];
    fmt_dir(dir, sizeof dir, "demo");
    snprintf(path, sizeof path, "%s/k10.graph", dir);
    make_graph_file(path, 10);
    snprintf(args, sizeof args, "demo %s --threads 4 --pairs 2 --depth 16", path);
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
    cr_assert(strstr(out, "graph demo: ok"), "graph %s:\n%s", args, out);
    cr_assert(strstr(out, "the same over plain memory, 4 threads: matches in "), "graph %s:\n%s", args, out);
    cr_assert(strstr(out, "the cache's own cost: BFS over plain memory (the host's copy, 4 threads) took "),
              "graph %s:\n%s", args, out);
    cr_assert(!strstr(out, "DOES NOT MATCH"), "graph %s:\n%s", args, out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

/* gnn's lines from its first batch line to the digest, without the
 * gathering times (they differ run to run): each batch's sample count, rows
 * and hash, then the digest. */
static void gnn_batches(const char *out, char *lines, size_t n) {
    const char *p = strstr(out, "    batch ");
    size_t got = 0;
    cr_assert(p, "no batch lines:\n%s", out);
    while ((p = strstr(p, "    batch ")) != NULL) {
        const char *end = strstr(p, "; gather");
        cr_assert(end && got + (size_t)(end - p) + 2 < n, "a batch line without its times:\n%s", out);
        memcpy(lines + got, p, (size_t)(end - p));
        got += (size_t)(end - p);
        lines[got++] = '\n';
        p = end;
    }
    lines[got] = 0;
}

/* --lookahead K samples the next K batches ahead and hints the feature
 * cache: every batch must be the same as without (sample counts, rows,
 * hashes, digest: the rows all checked by the program), with rows on one
 * line and rows across lines (768 B); the hinted policy runs, and says what
 * the hints proved, only with K > 0 and no --policy, or with --weights on;
 * with --policy lru the hints are refused and nothing else changes. Weights
 * go with look-ahead unless --weights off, and alone with K = 0. */
Test(graph, gnn_lookahead_changes_no_batch_and_hints_only_with_k, .timeout = 240) {
    static const char *const extra[] = {"--lookahead 0", "--lookahead 1", "--lookahead 4", "--lookahead 4 --policy lru",
                                        "--lookahead 4 --weights off", "--lookahead 0 --weights on"};
    char dir[256], path[300], args[1024], out[32768], batches[8192], first[8192];
    const char *common = "--threads 4 --pairs 2 --depth 16 --batch 16 --batches 8 --cache-mib 0.125";
    uint32_t rows, k;
    fmt_dir(dir, sizeof dir, "gnnla");
    snprintf(path, sizeof path, "%s/k10.graph", dir);
    make_graph_file(path, 10);
    for (rows = 0; rows < 2; rows++) {
        for (k = 0; k < sizeof extra / sizeof extra[0]; k++) {
            const int hinted = k == 1 || k == 2 || k == 4 || k == 5, weighted = k == 1 || k == 2 || k == 5;
            snprintf(args, sizeof args, "gnn %s --cache-dir %s %s --row-bytes %u %s", path, dir, common,
                     rows ? 768 : 4096, extra[k]);
            cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
            cr_assert(strstr(out, ", 0 wrong, 0 batch hashes disagreeing"), "graph %s:\n%s", args, out);
            gnn_batches(out, batches, sizeof batches);
            gnn_digest(out, batches + strlen(batches), sizeof batches - strlen(batches));
            if (k == 0) snprintf(first, sizeof first, "%s", batches);
            cr_expect_str_eq(batches, first, "graph %s: other batches than without look-ahead", args);
            cr_expect_eq(strstr(out, "proven right") != NULL, hinted, "graph %s: the hinted policy %s:\n%s", args,
                         hinted ? "did not run" : "ran", out);
            cr_expect_eq(strstr(out, "look-ahead: ") != NULL, k > 0, "graph %s:\n%s", args, out);
            cr_expect_eq(strstr(out, "victims the lightest") != NULL, weighted, "graph %s: weights %s:\n%s", args,
                         weighted ? "not given" : "given", out);
            if (hinted && !weighted) cr_expect(strstr(out, " and 0 weights "), "graph %s:\n%s", args, out);
            if (hinted)
                cr_expect(strstr(out, "(policy hinted)") && strstr(out, ", 0 refused"), "graph %s:\n%s", args, out);
            if (k == 3)
                cr_expect(strstr(out, "(policy lru)") && !strstr(out, ", 0 refused"), "graph %s:\n%s", args, out);
        }
    }
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

/* A feature table that is not the generator's is found out: the table in
 * the cache directory is written again; one named with --features is
 * refused (exit 2), never overwritten. */
Test(graph, gnn_feature_table_damage_is_found) {
    char dir[256], path[300], table[300], args[1024], out[16384];
    int fd;
    fmt_dir(dir, sizeof dir, "gnnbad");
    snprintf(path, sizeof path, "%s/k10.graph", dir);
    snprintf(table, sizeof table, "%s/features-1024x256.bin", dir);
    make_graph_file(path, 10);
    snprintf(args, sizeof args, "gnn %s --cache-dir %s --threads 2 --batch 4 --batches 1 --row-bytes 256", path, dir);
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
    cr_assert(strstr(out, "writing the feature table"), "%s", out);
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
    cr_assert(!strstr(out, "writing the feature table"), "written again though it was whole:\n%s", out);
    fd = open(table, O_RDWR);
    cr_assert(fd >= 0);
    cr_assert_eq(pwrite(fd, "\x01", 1, 1023 * 256 + 5), 1); /* the last row: among those checked */
    close(fd);
    cr_assert_eq(run_graph(args, out, sizeof out), 0, "graph %s:\n%s", args, out);
    cr_assert(strstr(out, "byte 261893 (row 1023, byte 5) is not the generator's") &&
              strstr(out, "writing the feature table"), "%s", out);
    fd = open(table, O_RDWR);
    cr_assert_eq(pwrite(fd, "\x01", 1, 5), 1);
    close(fd);
    snprintf(args, sizeof args, "gnn %s --features %s --threads 2 --batch 4 --batches 1 --row-bytes 256", path, table);
    cr_assert_eq(run_graph(args, out, sizeof out), 2, "graph %s:\n%s", args, out);
    cr_assert(strstr(out, "byte 5 (row 0, byte 5) is not the generator's") &&
              strstr(out, "name a file that does not exist yet"), "%s", out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}
