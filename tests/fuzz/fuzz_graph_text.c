/* fuzz_graph_text: the graph converter (examples/graph_formats.h) on text
 * input - GAP .el and .wel, SNAP, Matrix Market - against the reference
 * reader of tests/fuzz/graph_ref.h.
 *
 * Input: a byte choosing the format (low 2 bits) and the sort buffer (bit
 * 4: 1 KiB, 64 keys, so that runs spill and merge), then the file.
 * Properties, for every input:
 *   - the converter and the reference agree on accepting it; where both
 *     accept, the CSR file holds exactly the reference's graph (vertex
 *     count, every edge both ways, loops and repeats removed) and SNAP's
 *     id map the file's distinct ids in order;
 *   - a refusal names the file, says what was expected, and names the line
 *     the reference finds first (a refusal for room, "nothing written", is
 *     the converter's own: the harness caps files at 8 MiB);
 *   - progress stays within 0..100 %;
 *   - nothing is left behind: after a refusal the directory holds the
 *     input alone, after a conversion the input and its outputs. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

#include "examples/graph_formats.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/graph_ref.h"

static char dir[200];
static const char *const ext[4] = {"el", "wel", "txt", "mtx"};
static const int ref_fmt[4] = {REF_EL, REF_WEL, REF_SNAP, REF_MTX};

static void progress(const graph_import *im, double frac) {
    (void)im;
    FUZZ_CHECK(frac >= 0.0 && frac <= 1.0, "progress %.1f %%", 100.0 * frac);
}

static void once(void) {
    struct rlimit lim = {8u << 20, 8u << 20};
    if (dir[0]) return;
    fuzz_tmpdir(dir, sizeof dir, "graph");
    /* Outputs are capped, so that an input naming vertex 2^31 - 2 is
     * refused for room instead of writing 16 GiB; a write past the cap
     * fails (EFBIG) instead of killing the fuzzer. */
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
}

/* The directory holds exactly `names` (n of them). */
static void expect_dir(const char *const *names, int n, const char *when) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int seen = 0, k;
    FUZZ_CHECK(d != NULL, "opendir");
    while ((e = readdir(d)) != NULL) {
        int known = 0;
        if (e->d_name[0] == '.') continue;
        for (k = 0; k < n; k++) known |= !strcmp(e->d_name, names[k]);
        FUZZ_CHECK(known, "%s: %s left behind", when, e->d_name);
        seen++;
    }
    closedir(d);
    FUZZ_CHECK(seen == n, "%s: %d of %d files there", when, seen, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char in[300], out[300], ids[320], err[1024], inname[16], where[64];
    unsigned sel = size ? data[0] : 0;
    int f = sel & 3, rs;
    graph_import im;
    gpumem_status st;
    ref_graph ref;
    once();
    if (size) data++, size--;
    snprintf(inname, sizeof inname, "in.%s", ext[f]);
    snprintf(in, sizeof in, "%s/%s", dir, inname);
    snprintf(out, sizeof out, "%s/out.graph", dir);
    snprintf(ids, sizeof ids, "%s.ids", out);
    FUZZ_CHECK(fuzz_write_file(in, data, size) == 0, "writing the input");
    graph_import_init(&im, in, out, GRAPH_FMT_AUTO);
    im.mem_bytes = sel & 0x10 ? 1024 : 1u << 20;
    im.tmp_dir = dir;
    im.progress = progress;
    err[0] = 0;
    st = graph_import_run(&im, err, sizeof err);
    rs = ref_read_text(ref_fmt[f], (const char *)data, size, &ref);
    if (st != GPUMEM_OK) {
        const char *names[1] = {inname};
        expect_dir(names, 1, err);
        /* the input named, or the output where it is the output that does not fit */
        FUZZ_CHECK((!strncmp(err, in, strlen(in)) && strstr(err, "expected")) ||
                       (!strncmp(err, out, strlen(out)) && strstr(err, "needs up to")),
                   "a refusal without file or expectation: %s", err);
        if (!strstr(err, "nothing written") && rs != REF_UNSURE) {
            FUZZ_CHECK(rs == REF_BAD, "refused what the reference reads (%llu vertices, %zu entries): %s",
                       (unsigned long long)ref.n, ref.n_keys, err);
            snprintf(where, sizeof where, ": line %llu: ", (unsigned long long)ref.bad_at);
            FUZZ_CHECK(strstr(err, where) != NULL, "the reference finds the first error at line %llu: %s",
                       (unsigned long long)ref.bad_at, err);
        }
    } else {
        graph_csr g;
        char lerr[256];
        uint64_t v, i, k = 0;
        const char *names[3] = {inname, "out.graph", "out.graph.ids"};
        expect_dir(names, f == 2 ? 3 : 2, "after a conversion");
        FUZZ_CHECK(rs != REF_BAD, "accepted what the reference refuses at line %llu", (unsigned long long)ref.bad_at);
        FUZZ_CHECK(graph_load(out, &g, lerr, sizeof lerr) == GPUMEM_OK, "the output does not load: %s", lerr);
        if (rs == REF_OK) {
            FUZZ_CHECK(g.h.n_nodes == ref.n, "%llu vertices, the reference %llu", (unsigned long long)g.h.n_nodes,
                       (unsigned long long)ref.n);
            FUZZ_CHECK(g.h.n_edges == ref.n_keys, "%llu entries, the reference %zu", (unsigned long long)g.h.n_edges,
                       ref.n_keys);
            for (v = 0; v < g.h.n_nodes; v++)
                for (i = g.offsets[v]; i < g.offsets[v + 1]; i++, k++)
                    FUZZ_CHECK(k < ref.n_keys && ref.keys[k] == (v << 32 | g.edges[i]),
                               "entry %llu: %llu-%u, the reference %llu-%llu", (unsigned long long)k,
                               (unsigned long long)v, g.edges[i], (unsigned long long)(ref.keys[k] >> 32),
                               (unsigned long long)(ref.keys[k] & 0xFFFFFFFFu));
            if (f == 2) {
                uint64_t *map, n_map;
                FUZZ_CHECK(graph_ids_load(ids, &map, &n_map, lerr, sizeof lerr) == GPUMEM_OK && map, "id map: %s",
                           lerr);
                FUZZ_CHECK(n_map == ref.n_ids, "%llu ids in the map, the reference %zu", (unsigned long long)n_map,
                           ref.n_ids);
                for (i = 0; i < n_map; i++)
                    FUZZ_CHECK(map[i] == ref.ids[i], "id %llu: %llu, the reference %llu", (unsigned long long)i,
                               (unsigned long long)map[i], (unsigned long long)ref.ids[i]);
                free(map);
            }
        }
        graph_free(&g);
        unlink(out);
        unlink(ids);
    }
    graph_import_free(&im);
    ref_free(&ref);
    unlink(in);
    return 0;
}
