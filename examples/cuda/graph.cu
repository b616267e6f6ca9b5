// graph, on the GPU: BFS and connected components over a CSR graph file, read
// by GPU threads through the cache, queue pairs and the software controller
// (a host thread reading the file), checked against the in-memory references.
// The traversal steps are the host version's (examples/graph.h), run by one
// GPU thread per frontier vertex (BFS) or per vertex (CC).
//
// With --hints the cache's policy is GPUMEM_POLICY_HINTED_RRIP and BFS tells
// it, from device code, what it knows: once a level has found the next
// frontier, a kernel hints the lines each of its vertices will read (its
// offsets and its neighbour list, found in a copy of the offsets in GPU
// memory, so planning reads nothing through the cache) for the next level's
// epoch, one warp-coalesced hint per line (gpumem_cache_hint_coalesced).
// Hints are advice: the answers are checked the same way. A next frontier
// whose lines outnumber the cache's slots cannot all be kept: those hints
// prove wrong, the cache's trust in them falls, and it stops applying them.
//
//   build/graph gen build/kron.graph                      (host: make the graph)
//   build/cuda/examples/graph build/kron.graph [cache MiB] [--hints]   (needs a GPU; make gpu-examples)
//
// Exit status: 0 if both answers match, 1 if not, 2 for an unusable graph.
#define _POSIX_C_SOURCE 200809L
#include "cuda_host.h"
#define GPUMEM_IMPLEMENTATION
#include "gpu_cache.h" // the cache's contended metadata in GPU (managed) memory
#define GRAPH_CACHE_CREATE gpu_cache_create
#define GRAPH_CACHE_DESTROY gpu_cache_destroy

#include "../graph.h"
#include "tests/cuda/watch.h" // a stalled run reports and exits instead of hanging

__device__ void add_counts(graph_counts *total, const graph_counts *c) {
    atomicAdd(&total->vertices, c->vertices);
    atomicAdd(&total->edges, c->edges);
    atomicAdd(&total->bytes_needed, c->bytes_needed);
    atomicAdd(&total->updates, c->updates);
    atomicAdd(&total->full_retries, c->full_retries);
    if (c->errors) {
        atomicAdd(&total->errors, c->errors);
        atomicCAS(&total->first_error, 0, c->first_error);
    }
}

__global__ void bfs_level(const gpumem_cache_array *arrays, uint32_t n_nodes, uint64_t n_edges,
                          const uint32_t *frontier, uint64_t n, uint32_t next_level, uint32_t *levels, uint32_t *next,
                          uint32_t *next_count, graph_counts *total, int hints) {
    graph_refs r = graph_refs_make(&arrays[0], &arrays[1], n_nodes, n_edges);
    graph_counts c;
    memset(&c, 0, sizeof c);
    // --hints: the clock at this level, moved from device code (a host call
    // between kernels would move the managed cache object's page to the host
    // and back each level); a CAS maximum, so one thread is enough.
    if (hints && blockIdx.x == 0 && threadIdx.x == 0) (void)gpumem_cache_epoch(arrays[0].cache, next_level - 1);
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n && !c.errors;
         i += (uint64_t)gridDim.x * blockDim.x)
        graph_bfs_expand(&r, frontier[i], next_level, levels, next, next_count, &c);
    graph_refs_drop(&r);
    add_counts(total, &c);
}

// The next frontier's reads, hinted for epoch `when` (the level that
// expands it): vertex u reads offsets[u], offsets[u + 1] and its neighbours.
// A thread per vertex; lanes whose lines meet send one hint a line.
__global__ void bfs_hint_next(const gpumem_cache_array *arrays, const uint64_t *offsets, const uint32_t *frontier,
                              uint64_t n, uint64_t when, unsigned long long *refused) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t u = frontier[i];
        const gpumem_cache_array *a = &arrays[0], *e = &arrays[1];
        const uint64_t first = (a->offset + 8ull * u) >> a->cache->line_shift;
        const uint64_t last = (a->offset + 8ull * u + 15) >> a->cache->line_shift;
        uint64_t line;
        for (line = first; line <= last; line++)
            if (gpumem_cache_hint_coalesced(a->cache, line, when) != GPUMEM_OK) atomicAdd(refused, 1ull);
        if (offsets[u + 1] > offsets[u] &&
            gpumem_cache_array_hint(e, offsets[u], offsets[u + 1] - offsets[u], when) != GPUMEM_OK)
            atomicAdd(refused, 1ull);
    }
}

__global__ void cc_round(const gpumem_cache_array *arrays, uint32_t n_nodes, uint64_t n_edges, uint32_t *comp,
                         uint32_t *active, uint32_t *next_active, uint32_t *changed, graph_counts *total) {
    graph_refs r = graph_refs_make(&arrays[0], &arrays[1], n_nodes, n_edges);
    graph_counts c;
    memset(&c, 0, sizeof c);
    for (uint64_t v = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; v < n_nodes && !c.errors;
         v += (uint64_t)gridDim.x * blockDim.x)
        if (active[v]) {
            active[v] = 0;
            graph_cc_push(&r, (uint32_t)v, comp, next_active, changed, &c);
        }
    graph_refs_drop(&r);
    add_counts(total, &c);
}

// Opens a fresh store, runs BFS (source given) or CC (source GRAPH_NONE), checks.
static int run(const char *path, const graph_csr *ref, uint64_t cache_bytes, uint32_t source, int hints) {
    graph_store_config sc = {8, 1024, cache_bytes, 0, 0};
    graph_store s;
    char err[512];
    uint64_t n = ref->h.n_nodes, v, wrong = 0, rounds = 0;
    uint32_t *a, *b, *c, *flag, blocks, *expect = (uint32_t *)malloc(n * 4);
    gpumem_cache_array *arrays;
    graph_counts *total;
    gpumem_cache_stats cs;
    gpumem_swctl_stats ctl;
    const char *name = source == GRAPH_NONE ? "CC" : "BFS";
    double t0;
    uint64_t *offsets = nullptr;       // --hints: the offsets, in GPU memory, to plan the hints
    unsigned long long *refused = nullptr;
    sc.policy = hints ? GPUMEM_POLICY_HINTED_RRIP : GPUMEM_POLICY_DEFAULT;
    if (graph_store_open(&s, path, &sc, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        return 2;
    }
    // Each thread holds at most 2 lines: no more threads than half the slots.
    blocks = s.n_slots / 2 / 128 < 512 ? s.n_slots / 2 / 128 : 512;
    if (blocks == 0) {
        fprintf(stderr, "graph: a cache of %u lines is too small to make progress with 128 threads\n", s.n_slots);
        graph_store_close(&s);
        return 2;
    }
    SwctlWatch *watch = new SwctlWatch(s.ctl, name, 30000);
    CHECK(cudaMallocManaged(&arrays, 2 * sizeof *arrays));
    arrays[0] = s.offsets;
    arrays[1] = s.edges;
    CHECK(cudaMallocManaged(&total, sizeof *total));
    memset(total, 0, sizeof *total);
    CHECK(cudaMallocManaged(&a, n * 4));
    CHECK(cudaMallocManaged(&b, n * 4));
    CHECK(cudaMallocManaged(&c, n * 4));
    CHECK(cudaMallocManaged(&flag, 4));
    if (hints && source != GRAPH_NONE) {
        CHECK(cudaMallocManaged(&offsets, (n + 1) * 8));
        memcpy(offsets, ref->offsets, (n + 1) * 8);
        CHECK(cudaMallocManaged(&refused, sizeof *refused));
        *refused = 0;
    }
    t0 = graph_now_s();
    if (source != GRAPH_NONE) { // a = levels, b = frontier, c = next
        uint64_t n_items = 1;
        for (v = 0; v < n; v++) a[v] = GRAPH_NONE;
        a[source] = 0;
        b[0] = source;
        while (n_items && !total->errors) {
            uint32_t *t;
            *flag = 0;
            bfs_level<<<blocks, 128>>>(arrays, (uint32_t)n, ref->h.n_edges, b, n_items, (uint32_t)rounds + 1, a, c, flag,
                                       total, offsets != nullptr);
            CHECK(cudaGetLastError());
            wait_kernels(300, "BFS level");
            printf("    level %2llu: %9llu vertices expanded, %9u found\n", (unsigned long long)rounds,
                   (unsigned long long)n_items, *flag);
            n_items = *flag;
            if (offsets && n_items) {
                bfs_hint_next<<<blocks, 128>>>(arrays, offsets, c, n_items, rounds + 1, refused);
                CHECK(cudaGetLastError());
                wait_kernels(300, "BFS hints");
            }
            t = b;
            b = c;
            c = t;
            rounds++;
        }
        if (graph_reference_bfs(ref, source, expect) != GPUMEM_OK) {
            fprintf(stderr, "graph: no memory for the BFS reference\n");
            wrong++;
        }
    } else { // a = labels, b = active, c = next active
        for (v = 0; v < n; v++) {
            a[v] = (uint32_t)v;
            b[v] = 1;
            c[v] = 0;
        }
        do {
            uint32_t *t;
            *flag = 0;
            cc_round<<<blocks, 128>>>(arrays, (uint32_t)n, ref->h.n_edges, a, b, c, flag, total);
            CHECK(cudaGetLastError());
            wait_kernels(300, "CC round");
            printf("    round %2llu done\n", (unsigned long long)rounds);
            t = b;
            b = c;
            c = t;
            rounds++;
        } while (*flag && !total->errors);
        graph_reference_cc(ref, expect);
    }
    for (v = 0; v < n; v++) wrong += a[v] != expect[v];
    t0 = graph_now_s() - t0;
    gpumem_cache_get_stats(s.cache, &cs);
    delete watch;
    gpumem_swctl_stop(s.ctl);
    gpumem_swctl_get_stats(s.ctl, &ctl);
    printf("  %s on the GPU (%u x 128 threads): %s in %.2f s, %llu edges (%.2f M edges/s); %.1f %% hits;"
           " amplification %.2f; %llu errors, %llu violations\n",
           name, blocks, wrong ? "DOES NOT MATCH the reference" : "matches the in-memory reference", t0,
           total->edges, (double)total->edges / t0 / 1e6,
           100.0 * (double)cs.hits / (double)(cs.hits + cs.misses + (cs.hits + cs.misses == 0)),
           total->bytes_needed ? (double)cs.bytes_read / (double)total->bytes_needed : 0.0, total->errors,
           (unsigned long long)ctl.violations);
    if (offsets)
        printf("  hints from device code: %u judged right, %u wrong (trust %u of %u), %u applied; %llu refused\n",
               s.cache->slot_hints.right, s.cache->slot_hints.wrong, s.cache->slot_hints.trust,
               GPUMEM_POLICY_TRUST_MAX, s.cache->slot_hints.applied, *refused);
    int ok = !wrong && !total->errors && !ctl.violations && !cs.violations && (!refused || *refused == 0);
    graph_store_close(&s);
    cudaFree(arrays);
    cudaFree(total);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(flag);
    cudaFree(offsets);
    cudaFree(refused);
    free(expect);
    return !ok;
}

int main(int argc, char **argv) {
    graph_csr g;
    char err[512];
    double mib = 0;
    uint64_t cache_bytes;
    int rc, hints = 0, bad = argc < 2, i;
    for (i = 2; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--hints")) hints = 1;
        else if (mib > 0 || !((mib = atof(argv[i])) > 0)) bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: %s GRAPH_FILE [cache MiB > 0] [--hints]   (make one with: build/graph gen FILE)\n",
                argv[0]);
        return 2;
    }
    need_gpu("graph");
    if (graph_load(argv[1], &g, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        return 2;
    }
    cache_bytes = mib > 0 ? (uint64_t)(mib * 1048576.0) : GPUMEM_ALIGN_UP(g.h.file_bytes / 4, GRAPH_LINE);
    rc = run(argv[1], &g, cache_bytes, graph_pick_source(&g, GRAPH_SEED), hints);
    if (rc < 2) rc |= run(argv[1], &g, cache_bytes, GRAPH_NONE, hints);
    graph_free(&g);
    printf("graph: %s\n", rc ? "FAILED" : "ok");
    return rc;
}
