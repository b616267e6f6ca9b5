/* graph_rig.h: what the two graph harnesses (fuzz_graph_text.c,
 * fuzz_graph_sg.c) share: their scratch directory, capped so that an input
 * naming a huge vertex is refused for room, the progress property (never
 * past 100 %), and the check that a conversion leaves exactly the files it
 * should (nothing behind on a refusal). */
#ifndef GPUMEM_FUZZ_GRAPH_RIG_H
#define GPUMEM_FUZZ_GRAPH_RIG_H

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

#include "examples/graph_formats.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/graph_ref.h"

static char dir[200];

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

/* Write the input (after its selector byte) as dir/in.<ext> and convert it
 * into dir/out.graph, with 1 KiB of sort memory when sel has 0x10 (to
 * cross runs) and 1 MiB otherwise, the progress property checked; names
 * are written to inname (16 bytes), in and out (300 each). Returns the
 * import's status; err (errn bytes) holds its message. */
static gpumem_status rig_convert(const uint8_t *data, size_t size, const char *ext, unsigned sel, char *inname,
                                 char *in, char *out, char *err, size_t errn) {
    graph_import im;
    snprintf(inname, 16, "in.%s", ext);
    snprintf(in, 300, "%s/%s", dir, inname);
    snprintf(out, 300, "%s/out.graph", dir);
    FUZZ_CHECK(fuzz_write_file(in, data, size) == 0, "writing the input");
    graph_import_init(&im, in, out, GRAPH_FMT_AUTO);
    im.mem_bytes = sel & 0x10 ? 1024 : 1u << 20;
    im.tmp_dir = dir;
    im.progress = progress;
    gpumem_status st;
    err[0] = 0;
    st = graph_import_run(&im, err, errn);
    graph_import_free(&im);
    return st;
}

/* An input's first byte picks the format (its bits format_mask: an index
 * into exts) and the import's options (rig_convert's sel); the rest is the
 * file, converted. data and size are left at the file, *format at the
 * index picked. */
static gpumem_status rig_convert_input(const uint8_t **data, size_t *size, const char *const *exts,
                                       unsigned format_mask, int *format, char *inname, char *in, char *out,
                                       char *err, size_t errn) {
    unsigned sel = *size ? (*data)[0] : 0;
    once();
    if (*size) ++*data, --*size;
    *format = (int)(sel & format_mask);
    return rig_convert(*data, *size, exts[*format], sel, inname, in, out, err, errn);
}

/* A refusal names the input and what was expected, or the output when it
 * is the output that does not fit. */
static void rig_check_refusal(const char *err, const char *in, const char *out) {
    FUZZ_CHECK((!strncmp(err, in, strlen(in)) && strstr(err, "expected")) ||
                   (!strncmp(err, out, strlen(out)) && strstr(err, "needs up to")),
               "a refusal without file or expectation: %s", err);
}

/* The converted graph holds exactly the reference's vertices and entries. */
static void rig_check_same(const graph_csr *g, const ref_graph *ref) {
    uint64_t v, i, k = 0;
    FUZZ_CHECK(g->h.n_nodes == ref->n, "%llu vertices, the reference %llu", (unsigned long long)g->h.n_nodes,
               (unsigned long long)ref->n);
    FUZZ_CHECK(g->h.n_edges == ref->n_keys, "%llu entries, the reference %zu", (unsigned long long)g->h.n_edges,
               ref->n_keys);
    for (v = 0; v < g->h.n_nodes; v++)
        for (i = g->offsets[v]; i < g->offsets[v + 1]; i++, k++)
            FUZZ_CHECK(k < ref->n_keys && ref->keys[k] == (v << 32 | g->edges[i]),
                       "entry %llu: %llu-%u, the reference %llu-%llu", (unsigned long long)k, (unsigned long long)v,
                       g->edges[i], (unsigned long long)(ref->keys[k] >> 32),
                       (unsigned long long)(ref->keys[k] & 0xFFFFFFFFu));
}

/* A refused input: only the input is left in the directory, the refusal
 * names the file and what was expected, and - where the reference judges
 * (judged) and the output was not what did not fit - the reference refuses
 * it too, its first error at the `unit` ("byte", "line") the refusal names. */
static void rig_check_refused(const char *err, const char *in, const char *out, const char *inname, int rs,
                              const ref_graph *ref, const char *unit, int judged) {
    char where[64];
    const char *names[1] = {inname};
    expect_dir(names, 1, err);
    rig_check_refusal(err, in, out);
    if (!strstr(err, "nothing written") && judged) {
        FUZZ_CHECK(rs == REF_BAD, "refused what the reference reads (%llu vertices, %zu entries): %s",
                   (unsigned long long)ref->n, ref->n_keys, err);
        snprintf(where, sizeof where, ": %s %llu: ", unit, (unsigned long long)ref->bad_at);
        FUZZ_CHECK(strstr(err, where) != NULL, "the reference finds the first error at %s %llu: %s", unit,
                   (unsigned long long)ref->bad_at, err);
    }
}

/* An accepted input: the directory holds exactly `names`, the reference
 * does not refuse it (its first error would be at the `unit` it names), and
 * the output loads into g. */
static void rig_load_accepted(const char *out, const char *const *names, int n, int rs, const ref_graph *ref,
                              const char *unit, graph_csr *g) {
    char lerr[256];
    expect_dir(names, n, "after a conversion");
    FUZZ_CHECK(rs != REF_BAD, "accepted what the reference refuses at %s %llu", unit,
               (unsigned long long)ref->bad_at);
    FUZZ_CHECK(graph_load(out, g, lerr, sizeof lerr) == GPUMEM_OK, "the output does not load: %s", lerr);
}

#endif
