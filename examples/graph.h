/* examples/graph.h - graphs in CSR files read through the gpumem cache.
 *
 *   1. The file format: a 4 KiB header, the offsets (n_nodes + 1 uint64) and
 *      the edges (n_edges uint32, every undirected edge stored both ways),
 *      each starting on a 4 KiB boundary, with a hash of the header and one
 *      of the data so that a damaged file is refused, not traversed.
 *   2. A Kronecker generator with GAP-kron's parameters (Graph500's initiator
 *      A = 0.57, B = C = 0.19, D = 0.05, 16 edges per vertex, vertex labels
 *      randomly permuted, self-loops and duplicate edges removed).
 *   3. In-memory references: a serial BFS and union-find connected
 *      components, independent of the code under test.
 *   4. The graph store: the file as a namespace of the software NVMe
 *      controller, queue pairs, and a cache in front of them.
 *   5. The steps the traversals are made of (expand one BFS vertex, push one
 *      vertex's component label, pull one vertex's PageRank), written once
 *      for host threads and CUDA threads alike: they read the graph only
 *      through gpumem_cache_ref.
 *   6. GNN mini-batches: a feature table on storage generated from (row,
 *      byte), neighbour sampling with fanouts through the graph's cache, and
 *      gathering a row through a cache or by a direct read on a queue pair,
 *      for host and CUDA threads alike.
 *
 * Other formats (GAP .el/.sg, SNAP, Matrix Market) are converted into this
 * one by examples/graph_formats.h.
 *
 * Used by examples/graph.c (host threads), examples/cuda/graph.cu and
 * examples/cuda/gnn.cu.
 * Define GPUMEM_IMPLEMENTATION in the one file that includes this one.
 */
#ifndef GPUMEM_EXAMPLES_GRAPH_H
#define GPUMEM_EXAMPLES_GRAPH_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "gpumem_tier.h"

#define GRAPH_MAGIC "GPUMEMG1"
#define GRAPH_PAGE 4096u
#define GRAPH_NONE 0xFFFFFFFFu /* no level / no label; also the largest vertex count + 1 */
#define GRAPH_LINE 4096u       /* cache line: BaM's graph runs used 4 KiB lines */
#define GRAPH_SEED 27491095u /* the examples' default generator seed */
#define GRAPH_API static inline /* host-only helpers; the traversal steps are GPUMEM_API */

/* ======================================================================== */
/* 1. File format                                                           */
/* ======================================================================== */

typedef struct graph_header {
    char magic[8];
    uint64_t n_nodes;
    uint64_t n_edges;     /* directed entries: twice the undirected edges */
    uint64_t offsets_at;  /* byte offset of offsets[0] */
    uint64_t edges_at;    /* byte offset of edges[0] */
    uint64_t file_bytes;  /* a multiple of 4 KiB */
    uint32_t scale, edge_factor;
    uint64_t seed;
    uint64_t data_hash;   /* graph_hash over offsets, then edges */
    uint64_t header_hash; /* graph_hash over every field above */
} graph_header;

/* A graph in memory (the reference side). */
typedef struct graph_csr {
    graph_header h;
    uint64_t *offsets;
    uint32_t *edges;
} graph_csr;

/* Word-wise multiply-xorshift hash; cheap enough to check a whole file. */
GRAPH_API uint64_t graph_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = ((h ^ b[i]) * 0x100000001B3ull) ^ (h >> 31);
    return h;
}

GRAPH_API uint64_t graph_header_hash(const graph_header *h) {
    return graph_hash(0x6772617068ull, h, offsetof(graph_header, header_hash));
}

/* Header layout for a graph of n nodes and m edges. */
GRAPH_API void graph_layout(graph_header *h, uint64_t n, uint64_t m) {
    memcpy(h->magic, GRAPH_MAGIC, 8);
    h->n_nodes = n;
    h->n_edges = m;
    h->offsets_at = GRAPH_PAGE;
    h->edges_at = GPUMEM_ALIGN_UP(h->offsets_at + (n + 1) * 8, GRAPH_PAGE);
    h->file_bytes = GPUMEM_ALIGN_UP(h->edges_at + m * 4, GRAPH_PAGE);
}

/* Monotonic seconds, for the examples' timings. */
GRAPH_API double graph_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Every error message goes to `err` (when not NULL) and the status says
 * which kind: ENODEV missing file, EINVAL not a graph or damaged, EIO I/O. */
GRAPH_API gpumem_status graph_fail(char *err, size_t len, gpumem_status st, const char *fmt, ...) {
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Read and check the header of an open file (its size included). */
GRAPH_API gpumem_status graph_read_header(int fd, const char *path, graph_header *h, char *err, size_t len) {
    graph_header want;
    struct stat sb;
    ssize_t got = pread(fd, h, sizeof *h, 0);
    if (got < 0) return graph_fail(err, len, GPUMEM_EIO, "%s: %s", path, strerror(errno));
    if (got != (ssize_t)sizeof *h || memcmp(h->magic, GRAPH_MAGIC, 8) != 0)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: not a gpumem graph file (no %s header)", path, GRAPH_MAGIC);
    if (h->header_hash != graph_header_hash(h))
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: header damaged (its hash does not match)", path);
    if (h->n_nodes == 0 || h->n_nodes >= GRAPH_NONE || h->n_edges > (1ull << 40))
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: %llu nodes and %llu edges are outside what the examples take",
                          path, (unsigned long long)h->n_nodes, (unsigned long long)h->n_edges);
    graph_layout(&want, h->n_nodes, h->n_edges);
    if (want.offsets_at != h->offsets_at || want.edges_at != h->edges_at || want.file_bytes != h->file_bytes)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: header layout inconsistent with its sizes", path);
    if (fstat(fd, &sb) != 0) return graph_fail(err, len, GPUMEM_EIO, "%s: %s", path, strerror(errno));
    /* Say which way the size is off: a short file lost its end, a long one
     * had something written after the graph. */
    if ((uint64_t)sb.st_size < h->file_bytes)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: truncated: the file is %llu bytes, its header says %llu",
                          path, (unsigned long long)sb.st_size, (unsigned long long)h->file_bytes);
    if ((uint64_t)sb.st_size > h->file_bytes)
        return graph_fail(err, len, GPUMEM_EINVAL,
                          "%s: %llu bytes follow the end of the graph (the file is %llu bytes, its header says %llu)",
                          path, (unsigned long long)sb.st_size - h->file_bytes, (unsigned long long)sb.st_size,
                          (unsigned long long)h->file_bytes);
    return GPUMEM_OK;
}

GRAPH_API gpumem_status graph_pread_all(int fd, void *buf, uint64_t bytes, uint64_t at) {
    unsigned char *p = (unsigned char *)buf;
    while (bytes) {
        ssize_t got = pread(fd, p, bytes > (1u << 30) ? (1u << 30) : (size_t)bytes, (off_t)at);
        if (got <= 0) return GPUMEM_EIO;
        p += got;
        at += (uint64_t)got;
        bytes -= (uint64_t)got;
    }
    return GPUMEM_OK;
}

GRAPH_API void graph_free(graph_csr *g) {
    free(g->offsets);
    free(g->edges);
    g->offsets = NULL;
    g->edges = NULL;
}

/* Load the whole graph into memory, checking the data hash and the CSR
 * structure (offsets rising from 0 to n_edges, every edge a vertex). */
GRAPH_API gpumem_status graph_load(const char *path, graph_csr *g, char *err, size_t len) {
    uint64_t n, m, v, i;
    gpumem_status st;
    int fd = open(path, O_RDONLY);
    memset(g, 0, sizeof *g);
    if (fd < 0)
        return graph_fail(err, len, errno == ENOENT ? GPUMEM_ENODEV : GPUMEM_EIO, "%s: %s", path, strerror(errno));
    if ((st = graph_read_header(fd, path, &g->h, err, len)) != GPUMEM_OK) {
        close(fd);
        return st;
    }
    n = g->h.n_nodes;
    m = g->h.n_edges;
    g->offsets = (uint64_t *)malloc((n + 1) * 8);
    g->edges = (uint32_t *)malloc(m ? m * 4 : 4);
    if (!g->offsets || !g->edges) {
        close(fd);
        graph_free(g);
        return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory for the in-memory reference copy", path);
    }
    st = graph_pread_all(fd, g->offsets, (n + 1) * 8, g->h.offsets_at);
    if (st == GPUMEM_OK) st = graph_pread_all(fd, g->edges, m * 4, g->h.edges_at);
    close(fd);
    if (st != GPUMEM_OK) {
        graph_free(g);
        return graph_fail(err, len, st, "%s: read failed", path);
    }
    if (graph_hash(graph_hash(0, g->offsets, (n + 1) * 8), g->edges, m * 4) != g->h.data_hash) {
        graph_free(g);
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: data damaged (its hash does not match the header's)", path);
    }
    for (v = 0; v < n; v++)
        if (g->offsets[v] > g->offsets[v + 1]) break;
    if (g->offsets[0] != 0 || v < n || g->offsets[n] != m) {
        graph_free(g);
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: offsets are not a CSR index", path);
    }
    for (i = 0; i < m; i++)
        if (g->edges[i] >= n) {
            graph_free(g);
            return graph_fail(err, len, GPUMEM_EINVAL, "%s: edge %llu names vertex %u of %llu", path,
                              (unsigned long long)i, g->edges[i], (unsigned long long)n);
        }
    return GPUMEM_OK;
}

/* Write through a temporary name and rename, so an interrupted write never
 * leaves a file that looks complete. */
GRAPH_API gpumem_status graph_write(const char *path, graph_csr *g, char *err, size_t len) {
    char tmp[4096];
    unsigned char page[GRAPH_PAGE];
    uint64_t n = g->h.n_nodes, m = g->h.n_edges;
    int fd, ok;
    graph_layout(&g->h, n, m);
    g->h.data_hash = graph_hash(graph_hash(0, g->offsets, (n + 1) * 8), g->edges, m * 4);
    g->h.header_hash = graph_header_hash(&g->h);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return graph_fail(err, len, GPUMEM_EIO, "%s: %s", tmp, strerror(errno));
    memset(page, 0, sizeof page);
    memcpy(page, &g->h, sizeof g->h);
    ok = pwrite(fd, page, sizeof page, 0) == (ssize_t)sizeof page;
    ok = ok && pwrite(fd, g->offsets, (n + 1) * 8, (off_t)g->h.offsets_at) == (ssize_t)((n + 1) * 8);
    ok = ok && pwrite(fd, g->edges, m * 4, (off_t)g->h.edges_at) == (ssize_t)(m * 4);
    ok = ok && ftruncate(fd, (off_t)g->h.file_bytes) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return graph_fail(err, len, GPUMEM_EIO, "%s: write failed: %s", path, strerror(errno));
    }
    return GPUMEM_OK;
}

/* ======================================================================== */
/* 2. Kronecker generator (GAP-kron / Graph500 parameters)                  */
/* ======================================================================== */

GRAPH_API uint64_t graph_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

GRAPH_API void graph_sort_u32(uint32_t *a, uint64_t n);

/* 2^scale vertices, edge_factor * 2^scale sampled edges. Each edge descends
 * `scale` levels of the 2x2 initiator, picking a quadrant with probability
 * A, B, C or D; labels are then permuted so that the high-degree vertices
 * are not all at small IDs (as GAP does). Self-loops and repeated edges are
 * dropped and every edge is stored in both directions, sorted. `say`, when
 * not NULL, gets progress lines. */
GRAPH_API gpumem_status graph_generate_kron(uint32_t scale, uint32_t edge_factor, uint64_t seed, graph_csr *g,
                                         void (*say)(const char *what, double frac)) {
    const uint32_t a = (uint32_t)(0.57 * 4294967296.0), ab = (uint32_t)(0.76 * 4294967296.0),
                   abc = (uint32_t)(0.95 * 4294967296.0);
    uint64_t n = 1ull << scale, samples = (uint64_t)edge_factor << scale, k, v, i, kept;
    uint32_t *perm, *pairs;
    uint64_t *fill;
    memset(g, 0, sizeof *g);
    if (scale < 1 || scale > 30 || edge_factor < 1 || edge_factor > 64) return GPUMEM_EINVAL;
    perm = (uint32_t *)malloc(n * 4);
    pairs = (uint32_t *)malloc(samples * 8);
    g->offsets = (uint64_t *)calloc(n + 1, 8);
    fill = (uint64_t *)malloc((n + 1) * 8);
    if (!perm || !pairs || !g->offsets || !fill) {
        free(perm);
        free(pairs);
        free(fill);
        graph_free(g);
        return GPUMEM_ENOMEM;
    }
    {   /* a random permutation of the labels (Fisher-Yates) */
        uint64_t s = seed ^ 0x7065726Dull;
        for (v = 0; v < n; v++) perm[v] = (uint32_t)v;
        for (v = n - 1; v > 0; v--) {
            uint64_t j = graph_splitmix(&s) % (v + 1);
            uint32_t t = perm[v];
            perm[v] = perm[j];
            perm[j] = t;
        }
    }
    for (k = 0; k < samples; k++) {
        uint64_t s = seed * 0x2545F4914F6CDD1Dull + k, r = 0;
        uint32_t u = 0, w = 0, lvl;
        for (lvl = 0; lvl < scale; lvl++) {
            uint32_t x;
            if ((lvl & 1) == 0) r = graph_splitmix(&s);
            x = (uint32_t)(lvl & 1 ? r >> 32 : r);
            u = (u << 1) | (x >= ab);                  /* C or D: lower half */
            w = (w << 1) | ((x >= a && x < ab) || x >= abc); /* B or D: right half */
        }
        pairs[2 * k] = perm[u];
        pairs[2 * k + 1] = perm[w];
        if (say && (k & ((1u << 22) - 1)) == 0) say("sampling edges", (double)k / (double)samples);
    }
    free(perm);
    for (k = 0; k < samples; k++)
        if (pairs[2 * k] != pairs[2 * k + 1]) {
            g->offsets[pairs[2 * k] + 1]++;
            g->offsets[pairs[2 * k + 1] + 1]++;
        }
    for (v = 0; v < n; v++) g->offsets[v + 1] += g->offsets[v];
    g->edges = (uint32_t *)malloc(g->offsets[n] ? g->offsets[n] * 4 : 4);
    if (!g->edges) {
        free(pairs);
        free(fill);
        graph_free(g);
        return GPUMEM_ENOMEM;
    }
    memcpy(fill, g->offsets, (n + 1) * 8);
    for (k = 0; k < samples; k++) {
        uint32_t u = pairs[2 * k], w = pairs[2 * k + 1];
        if (u == w) continue;
        g->edges[fill[u]++] = w;
        g->edges[fill[w]++] = u;
    }
    free(pairs);
    free(fill);
    if (say) say("sorting adjacency lists", 0.5);
    /* sort each list and drop repeats, compacting in place */
    kept = 0;
    for (v = 0; v < n; v++) {
        uint64_t b = g->offsets[v], e = g->offsets[v + 1], first = kept;
        graph_sort_u32(g->edges + b, e - b);
        for (i = b; i < e; i++)
            if (i == b || g->edges[i] != g->edges[i - 1]) g->edges[kept++] = g->edges[i];
        g->offsets[v] = first;
    }
    g->offsets[n] = kept;
    memset(&g->h, 0, sizeof g->h);
    graph_layout(&g->h, n, kept);
    g->h.scale = scale;
    g->h.edge_factor = edge_factor;
    g->h.seed = seed;
    return GPUMEM_OK;
}

GRAPH_API int graph_cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* Most Kronecker lists are short: insertion sort them, qsort the rest. */
GRAPH_API void graph_sort_u32(uint32_t *a, uint64_t n) {
    uint64_t i, j;
    if (n > 32) {
        qsort(a, n, 4, graph_cmp_u32);
        return;
    }
    for (i = 1; i < n; i++) {
        uint32_t x = a[i];
        for (j = i; j > 0 && a[j - 1] > x; j--) a[j] = a[j - 1];
        a[j] = x;
    }
}

/* ======================================================================== */
/* 3. In-memory references                                                  */
/* ======================================================================== */

/* Serial level-synchronous BFS: levels[v] = hops from src, GRAPH_NONE if
 * unreached. ENOMEM (levels untouched) without memory for its queue. */
GRAPH_API gpumem_status graph_reference_bfs(const graph_csr *g, uint32_t src, uint32_t *levels) {
    uint64_t n = g->h.n_nodes, head = 0, tail = 0, i;
    uint32_t *queue = (uint32_t *)malloc(n * 4);
    if (!queue) return GPUMEM_ENOMEM;
    for (i = 0; i < n; i++) levels[i] = GRAPH_NONE;
    levels[src] = 0;
    queue[tail++] = src;
    while (head < tail) {
        uint32_t v = queue[head++];
        for (i = g->offsets[v]; i < g->offsets[v + 1]; i++) {
            uint32_t u = g->edges[i];
            if (levels[u] == GRAPH_NONE) {
                levels[u] = levels[v] + 1;
                queue[tail++] = u;
            }
        }
    }
    free(queue);
    return GPUMEM_OK;
}

/* A vertex with more than 2 neighbours, picked pseudo-randomly (BaM's BFS
 * sources have more than 2), or the caller's choice. */
GRAPH_API uint32_t graph_pick_source(const graph_csr *g, uint64_t seed) {
    uint64_t s = seed ^ 0x736F75726365ull, tries;
    for (tries = 0; tries < 1000000; tries++) {
        uint32_t v = (uint32_t)(graph_splitmix(&s) % g->h.n_nodes);
        if (g->offsets[v + 1] - g->offsets[v] > 2) return v;
    }
    return 0;
}

GRAPH_API uint32_t graph_uf_find(uint32_t *parent, uint32_t v) {
    while (parent[v] != v) {
        parent[v] = parent[parent[v]]; /* path halving */
        v = parent[v];
    }
    return v;
}

/* Union-find components, labelled as the traversal labels them: by the
 * smallest vertex of each component (union by smaller root keeps it the root). */
GRAPH_API void graph_reference_cc(const graph_csr *g, uint32_t *comp) {
    uint64_t n = g->h.n_nodes, v, i;
    for (v = 0; v < n; v++) comp[v] = (uint32_t)v;
    for (v = 0; v < n; v++)
        for (i = g->offsets[v]; i < g->offsets[v + 1]; i++) {
            uint32_t a = graph_uf_find(comp, (uint32_t)v), b = graph_uf_find(comp, g->edges[i]);
            if (a < b) comp[b] = a;
            else if (b < a) comp[a] = b;
        }
    for (v = 0; v < n; v++) comp[v] = graph_uf_find(comp, (uint32_t)v);
}

/* PageRank, pull, as graph_pagerank_pull computes it (GAP's formulation):
 * every vertex starts at 1/n; each iteration a vertex's rank is
 * (1 - d)/n + d * (the sum over its neighbours u of rank(u) / degree(u)),
 * summed in neighbour-list order. Isolated vertices keep (1 - d)/n and give
 * nothing (no redistribution of their mass, as in GAP). */
#define GRAPH_DAMPING 0.85
GRAPH_API gpumem_status graph_reference_pagerank(const graph_csr *g, uint32_t iterations, double damping,
                                                 double *rank) {
    uint64_t n = g->h.n_nodes, v, i;
    double *contrib = (double *)malloc(n * sizeof(double)), base = (1.0 - damping) / (double)n;
    uint32_t it;
    if (!contrib) return GPUMEM_ENOMEM; /* rank untouched */
    for (v = 0; v < n; v++) {
        uint64_t deg = g->offsets[v + 1] - g->offsets[v];
        rank[v] = 1.0 / (double)n;
        contrib[v] = deg ? rank[v] / (double)deg : 0.0;
    }
    for (it = 0; it < iterations; it++) {
        for (v = 0; v < n; v++) {
            double sum = 0;
            for (i = g->offsets[v]; i < g->offsets[v + 1]; i++) sum += contrib[g->edges[i]];
            rank[v] = base + damping * sum;
        }
        for (v = 0; v < n; v++) {
            uint64_t deg = g->offsets[v + 1] - g->offsets[v];
            contrib[v] = deg ? rank[v] / (double)deg : 0.0;
        }
    }
    free(contrib);
    return GPUMEM_OK;
}

/* ======================================================================== */
/* 4. The graph store: file -> software controller -> queue pairs -> cache  */
/* ======================================================================== */

#define GRAPH_MAX_PAIRS 64u
/* The hinted policy's slack, in epochs (a use this far from its hint still
 * proves it right): GNN's epochs are batches spaced GRAPH_HINT_SLACK + 1
 * apart; bfs, cc and pagerank's are chunks of work (64 items, graph.c),
 * and T threads finish theirs up to graph_hint_slack(T) chunks apart. */
#define GRAPH_HINT_SLACK 32u
/* Measured on kron18 with a 4 MiB cache (bench/results/policy-hints-vm.md):
 * of the slacks tried (16, 32 at 2 threads; 16-64 at 4 and 16) BFS came
 * closest to OPT with 32 at 2 and 4 threads and 64 at 16; CC and PageRank
 * move little between 32 and 64. On kron16 with 1 MiB less did better (8 at
 * 2 threads, 32 at 16): graph --hint-slack sets it. */
GRAPH_API uint32_t graph_hint_slack(uint32_t n_threads) {
    return 4 * n_threads > GRAPH_HINT_SLACK ? 4 * n_threads : GRAPH_HINT_SLACK;
}

typedef struct graph_store_config {
    uint32_t n_pairs;     /* queue pairs the cache spreads its reads over */
    uint32_t depth;       /* their depth */
    uint64_t cache_bytes; /* rounded down to whole lines */
    uint64_t iops;        /* the controller's completion-rate cap, 0 = none */
    uint64_t latency_ns;  /* and its service time per command */
    uint32_t policy;      /* the cache's replacement policy (any gpumem_policy.h kind) */
    gpumem_policy_trace *trace; /* NULL, or the cache records every access there */
    uint64_t host_bytes;  /* a host tier below the cache (gpumem_tier.h) of this many bytes; 0: none */
    uint32_t host_placement; /* its placement, GPUMEM_TIER_* (GMT-Reuse: call graph_store_train between rounds) */
    uint32_t line_bytes;  /* the cache's line, a power of two; 0: GRAPH_LINE (the table tool varies it) */
    uint32_t hint_slack;  /* the hinted policy's slack in epochs; 0: GRAPH_HINT_SLACK */
} graph_store_config;

typedef struct graph_store {
    graph_header h;
    int fd;
    gpumem_swctl *ctl;
    gpumem_nvme_qp *pairs[GRAPH_MAX_PAIRS];
    gpumem_cache *cache;
    gpumem_tier *tier;    /* the host tier, or NULL */
    gpumem_policy seq;    /* the cache's policy when it is a sequential one */
    void *seq_mem;
    gpumem_cache_array offsets, edges; /* the graph's two arrays, views into the cache */
    uint32_t n_slots;
    uint32_t n_pairs;
} graph_store;

/* How the store makes and frees its cache: gpumem_cache_create and
 * gpumem_cache_destroy, unless the including file names others first (the
 * CUDA example puts the cache's contended metadata in GPU memory:
 * examples/cuda/gpu_cache.h). */
#ifndef GRAPH_CACHE_CREATE
#define GRAPH_CACHE_CREATE gpumem_cache_create
#define GRAPH_CACHE_DESTROY gpumem_cache_destroy
#endif

GRAPH_API void graph_store_close(graph_store *s) {
    if (s->tier) gpumem_tier_destroy(s->tier); /* read-only: nothing dirty to write */
    s->tier = NULL;
    if (s->ctl) {
        gpumem_swctl_stop(s->ctl);
        gpumem_swctl_destroy(s->ctl);
    }
    if (s->cache) GRAPH_CACHE_DESTROY(s->cache);
    free(s->seq_mem);
    s->seq_mem = NULL;
    if (s->fd >= 0) close(s->fd);
    s->ctl = NULL;
    s->cache = NULL;
    s->fd = -1;
}

/* Serve the open file s->fd (file_bytes, in blocks of lba_bytes, commands of
 * up to max_blocks) read-only from a software controller, with cfg->n_pairs
 * queue pairs, a cache of cfg->cache_bytes in lines of cfg->line_bytes
 * (GRAPH_LINE when 0) in front and the host tier below it. What the file holds is the caller's business: the
 * graph (graph_store_open) or a GNN feature table (graph_features_open).
 * On failure the store is closed. */
GRAPH_API gpumem_status graph_store_serve(graph_store *s, uint64_t file_bytes, uint32_t lba_bytes, uint32_t max_blocks,
                                          const graph_store_config *cfg, char *err, size_t len) {
    gpumem_swctl_config cc = gpumem_swctl_config_default();
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_nvme_ns ns;
    gpumem_status st;
    const uint32_t line = cfg->line_bytes ? cfg->line_bytes : GRAPH_LINE;
    uint32_t i;
    if (cfg->n_pairs < 1 || cfg->n_pairs > GRAPH_MAX_PAIRS) {
        st = graph_fail(err, len, GPUMEM_EINVAL, "queue pairs: %u, want 1..%u", cfg->n_pairs, GRAPH_MAX_PAIRS);
        goto fail;
    }
    if (cfg->cache_bytes / line < 1 || cfg->cache_bytes / line > 0xFFFFFFFFull) {
        st = graph_fail(err, len, GPUMEM_EINVAL, "cache of %llu bytes: want at least one %u-byte line",
                        (unsigned long long)cfg->cache_bytes, line);
        goto fail;
    }
#ifdef __CUDACC__
    /* GPU threads drive the pairs: rings pinned and mapped, each pair's
     * client state in GPU memory, a controller that never parks. */
    gpumem_swctl_config_gpu_clients(&cc);
#endif
    cc.lba_bytes = lba_bytes;
    cc.n_blocks = file_bytes / lba_bytes;
    cc.fd = s->fd;
    cc.max_blocks = max_blocks;
    cc.iops = cfg->iops;
    cc.latency_ns = cfg->latency_ns;
    if ((st = gpumem_swctl_create(&cc, &s->ctl)) != GPUMEM_OK) {
        graph_fail(err, len, st, "software controller: %s", gpumem_status_str(st));
        goto fail;
    }
    for (i = 0; i < cfg->n_pairs; i++)
        if ((st = gpumem_swctl_add_qp(s->ctl, cfg->depth, &s->pairs[i])) != GPUMEM_OK) {
            graph_fail(err, len, st, "queue pair of depth %u: %s", cfg->depth, gpumem_status_str(st));
            goto fail;
        }
    s->n_pairs = cfg->n_pairs;
    s->n_slots = (uint32_t)(cfg->cache_bytes / line);
    d.n_lines = file_bytes / line;
    d.line_bytes = line;
    d.n_slots = s->n_slots;
    d.trace = cfg->trace;
    if (cfg->policy < GPUMEM_POLICY_SLOT_KINDS) {
        d.policy = cfg->policy;
    } else { /* a sequential policy (LRU, HPE, ...) behind the cache's lock */
        gpumem_policy_desc pd = gpumem_policy_desc_default(cfg->policy, s->n_slots);
        pd.hint_slack = cfg->hint_slack ? cfg->hint_slack : GRAPH_HINT_SLACK;
        /* Room for every line's hints up to 64 per slot (25 bytes each): a
         * graph of a few times the cache loses none. */
        pd.hint_lines = (uint32_t)(d.n_lines < 16ull * s->n_slots ? 4 * d.n_lines
                                   : 64ull * s->n_slots < UINT32_MAX ? 64ull * s->n_slots : UINT32_MAX);
        s->seq_mem = malloc(gpumem_policy_bytes(&pd));
        if (!s->seq_mem || (st = gpumem_policy_init(&s->seq, &pd, s->seq_mem)) != GPUMEM_OK) {
            st = graph_fail(err, len, s->seq_mem ? st : GPUMEM_ENOMEM, "policy %s", gpumem_policy_name(cfg->policy));
            goto fail;
        }
        d.seq_policy = &s->seq;
    }
    ns = gpumem_swctl_ns(s->ctl);
    d.backing = gpumem_cache_backing_nvme(s->pairs, 1, cfg->n_pairs, &ns, 0, GPUMEM_CACHE_STRIPE);
    if ((st = GRAPH_CACHE_CREATE(&d, &s->cache)) != GPUMEM_OK) {
        graph_fail(err, len, st, "cache of %u lines: %s", s->n_slots, gpumem_status_str(st));
        goto fail;
    }
    if (cfg->host_bytes / line > 0) {
        gpumem_tier_desc td = gpumem_tier_desc_default(s->cache, (uint32_t)(cfg->host_bytes / line));
        td.placement = cfg->host_placement;
        if (cfg->host_bytes / line > GPUMEM_TIER_MAX_SLOTS) {
            st = graph_fail(err, len, GPUMEM_ERANGE, "host tier of %llu bytes: too large",
                            (unsigned long long)cfg->host_bytes);
            goto fail;
        }
        if ((st = gpumem_tier_create(&td, &s->tier)) != GPUMEM_OK) {
            graph_fail(err, len, st, "host tier of %u lines: %s", td.n_slots, gpumem_status_str(st));
            goto fail;
        }
    }
    if ((st = gpumem_swctl_start(s->ctl)) != GPUMEM_OK) {
        graph_fail(err, len, st, "software controller start: %s", gpumem_status_str(st));
        goto fail;
    }
    return GPUMEM_OK;
fail:
    graph_store_close(s);
    return st;
}

/* Open `path` (header checked), serve it read-only from a software
 * controller, and put a cache of cfg->cache_bytes in front. */
GRAPH_API gpumem_status graph_store_open(graph_store *s, const char *path, const graph_store_config *cfg, char *err,
                                      size_t len) {
    gpumem_status st;
    memset(s, 0, sizeof *s);
    s->fd = open(path, O_RDONLY);
    if (s->fd < 0)
        return graph_fail(err, len, errno == ENOENT ? GPUMEM_ENODEV : GPUMEM_EIO, "%s: %s", path, strerror(errno));
    if ((st = graph_read_header(s->fd, path, &s->h, err, len)) != GPUMEM_OK) {
        graph_store_close(s);
        return st;
    }
    if ((st = graph_store_serve(s, s->h.file_bytes, GRAPH_LINE, 1, cfg, err, len)) != GPUMEM_OK) return st;
    s->offsets = gpumem_cache_array_make(s->cache, 8, s->h.offsets_at, s->h.n_nodes + 1);
    s->edges = gpumem_cache_array_make(s->cache, 4, s->h.edges_at, s->h.n_edges);
    return GPUMEM_OK;
}

/* ======================================================================== */
/* 5. Traversal steps, host and device                                      */
/* ======================================================================== */

/* What one thread did; summed after each run. bytes_needed counts the bytes
 * the algorithm itself needed: for each vertex it expanded, its offset (8
 * bytes: the end of its list is the next vertex's offset, counted there) and
 * its neighbour list (4 bytes an edge). It is the denominator of the I/O
 * amplification. */
typedef struct graph_counts {
    unsigned long long vertices, edges, bytes_needed, updates;
    unsigned long long full_retries; /* acquires refused by a full cache, then retried */
    unsigned long long errors;       /* statuses other than OK (first one kept below) */
    int first_error;
} graph_counts;

/* A thread's two references: one into the offsets, one into the edges.
 * Each keeps its line between accesses, so a thread holds at most two. */
typedef struct graph_refs {
    gpumem_cache_ref off, adj;
    uint32_t n_nodes;
    uint64_t n_edges;
} graph_refs;

GPUMEM_API graph_refs graph_refs_make(const gpumem_cache_array *offsets, const gpumem_cache_array *edges,
                                      uint32_t n_nodes, uint64_t n_edges) {
    graph_refs r;
    r.off = gpumem_cache_ref_make(offsets);
    r.adj = gpumem_cache_ref_make(edges);
    r.n_nodes = n_nodes;
    r.n_edges = n_edges;
    return r;
}

GPUMEM_API void graph_refs_drop(graph_refs *r) {
    (void)gpumem_cache_ref_drop(&r->off);
    (void)gpumem_cache_ref_drop(&r->adj);
}

#ifndef GRAPH_FULL_RETRIES
#define GRAPH_FULL_RETRIES 100000u /* a cache refusing this often in a row is too small to make progress */
#endif

/* Element i through `ref`. A full cache (EAGAIN) is the one status worth
 * retrying, and only after letting go of the other line this thread holds:
 * holding lines while waiting for a slot is how a small cache deadlocks. */
/* After an acquire refused by a full cache (EAGAIN): count it, back off,
 * and say whether to try again (0 once GRAPH_FULL_RETRIES tries in a row
 * were refused). The caller has let go of every line it held. */
GPUMEM_API int graph_retry_full(gpumem_backoff *b, uint32_t *tries, unsigned long long *full_retries) {
    if (++*tries >= GRAPH_FULL_RETRIES) return 0;
    (*full_retries)++;
    if (!gpumem_backoff_pause(b)) {
#if !GPUMEM_ON_DEVICE
        sched_yield();
#endif
    }
    return 1;
}

/* Elements i onwards through `ref`, in place: at most n, those in i's line
 * (*at, *k; gpumem_cache_ref_span). */
GPUMEM_API gpumem_status graph_span(gpumem_cache_ref *ref, gpumem_cache_ref *other, uint64_t i, uint64_t n,
                                    const void **at, uint64_t *k, graph_counts *c) {
    gpumem_backoff b = gpumem_backoff_start();
    uint32_t tries = 0;
    void *p = 0;
    gpumem_status st;
    while ((st = gpumem_cache_ref_span(ref, i, n, 0, &p, k)) == GPUMEM_EAGAIN &&
           ((void)gpumem_cache_ref_drop(other), graph_retry_full(&b, &tries, &c->full_retries))) {
    }
    *at = p;
    return st;
}

GPUMEM_API gpumem_status graph_get(gpumem_cache_ref *ref, gpumem_cache_ref *other, uint64_t i, void *out,
                                   graph_counts *c) {
    const void *p = 0;
    uint64_t k;
    gpumem_status st = graph_span(ref, other, i, 1, &p, &k, c);
    if (st == GPUMEM_OK) gpumem_copy_value(out, p, ref->array->elem_bytes);
    return st;
}

GPUMEM_API gpumem_status graph_fail_count(graph_counts *c, gpumem_status st) {
    if (c->errors++ == 0) c->first_error = (int)st;
    return st;
}

/* The neighbour range [*begin, *end) of v, checked against the graph's size
 * (a damaged file must not send a thread out of range): both offsets from
 * one span unless v + 1 starts the next line. */
GPUMEM_API gpumem_status graph_neighbours(graph_refs *r, uint32_t v, uint64_t *begin, uint64_t *end,
                                          graph_counts *c) {
    const void *p = 0;
    uint64_t k = 0;
    gpumem_status st = graph_span(&r->off, &r->adj, v, 2, &p, &k, c);
    if (st == GPUMEM_OK) *begin = ((const uint64_t *)p)[0];
    if (st == GPUMEM_OK && k == 2) *end = ((const uint64_t *)p)[1];
    else if (st == GPUMEM_OK) st = graph_get(&r->off, &r->adj, (uint64_t)v + 1, end, c);
    if (st == GPUMEM_OK && (*begin > *end || *end > r->n_edges)) st = GPUMEM_ERANGE;
    if (st != GPUMEM_OK) return graph_fail_count(c, st);
    c->vertices++;
    c->bytes_needed += 8 + 4 * (*end - *begin);
    return GPUMEM_OK;
}

/* The next run of a neighbour list [*i, end), in place: the *k neighbours
 * at *us, those in edge *i's line, each checked against the graph's size;
 * *i moves past them (*k 0 at the list's end). A loop over a list makes
 * one call a line, not one an edge. */
GPUMEM_API gpumem_status graph_neighbour_run(graph_refs *r, uint64_t *i, uint64_t end, const uint32_t **us,
                                             uint64_t *k, graph_counts *c) {
    const void *p = 0;
    uint64_t j;
    gpumem_status st = GPUMEM_OK;
    *k = 0;
    if (*i < end) st = graph_span(&r->adj, &r->off, *i, end - *i, &p, k, c);
    *us = (const uint32_t *)p;
    for (j = 0; st == GPUMEM_OK && j < *k; j++)
        if ((*us)[j] >= r->n_nodes) st = GPUMEM_ERANGE;
    if (st != GPUMEM_OK) return graph_fail_count(c, st);
    c->edges += *k;
    *i += *k;
    return GPUMEM_OK;
}

GPUMEM_API gpumem_status graph_neighbour(graph_refs *r, uint64_t i, uint32_t *u, graph_counts *c) {
    gpumem_status st = graph_get(&r->adj, &r->off, i, u, c);
    if (st == GPUMEM_OK && *u >= r->n_nodes) st = GPUMEM_ERANGE;
    if (st != GPUMEM_OK) return graph_fail_count(c, st);
    c->edges++;
    return GPUMEM_OK;
}

/* BFS, top down: expand frontier vertex v. Each unvisited neighbour is
 * claimed by one compare-and-swap of its level (exactly one thread wins it)
 * and appended to the next frontier. Levels are only read and claimed by the
 * traversal's own threads, so relaxed order suffices: the next level starts
 * after a barrier (thread join or kernel boundary). */
GPUMEM_API gpumem_status graph_bfs_expand(graph_refs *r, uint32_t v, uint32_t next_level, uint32_t *levels,
                                          uint32_t *next, uint32_t *next_count, graph_counts *c) {
    uint64_t b, e, k, j;
    const uint32_t *us;
    gpumem_status st = graph_neighbours(r, v, &b, &e, c);
    while (st == GPUMEM_OK && (st = graph_neighbour_run(r, &b, e, &us, &k, c)) == GPUMEM_OK && k > 0)
        for (j = 0; j < k; j++) {
            uint32_t u = us[j], seen = gpumem_atomic_load_u32(&levels[u], GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
            if (seen == GRAPH_NONE &&
                gpumem_atomic_cas_u32(&levels[u], &seen, next_level, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE)) {
                uint32_t at = gpumem_atomic_fetch_add_u32(next_count, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
                next[at] = u;
                c->updates++;
            }
        }
    return st;
}

/* Connected components by label propagation: push v's label to each
 * neighbour whose label is larger (an atomic minimum by compare-and-swap),
 * and mark every lowered neighbour active for the next round. Labels only
 * fall, so the rounds end with every vertex holding the smallest vertex of
 * its component, whatever the interleaving. */
GPUMEM_API gpumem_status graph_cc_push(graph_refs *r, uint32_t v, uint32_t *comp, uint32_t *next_active,
                                       uint32_t *changed, graph_counts *c) {
    uint32_t label = gpumem_atomic_load_u32(&comp[v], GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
    const uint32_t *us;
    uint64_t b, e, k, j;
    gpumem_status st = graph_neighbours(r, v, &b, &e, c);
    while (st == GPUMEM_OK && (st = graph_neighbour_run(r, &b, e, &us, &k, c)) == GPUMEM_OK && k > 0)
        for (j = 0; j < k; j++) {
            uint32_t u = us[j], cur = gpumem_atomic_load_u32(&comp[u], GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
            while (label < cur) {
                if (gpumem_atomic_cas_u32(&comp[u], &cur, label, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE)) {
                    gpumem_atomic_store_u32(&next_active[u], 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
                    gpumem_atomic_store_u32(changed, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
                    c->updates++;
                    break;
                }
            }
        }
    return st;
}

/* PageRank's first step: v's share of the starting rank 1/n, from its
 * degree read through the cache. */
GPUMEM_API gpumem_status graph_pagerank_start(graph_refs *r, uint32_t v, double *contrib, graph_counts *c) {
    uint64_t b, e;
    gpumem_status st = graph_neighbours(r, v, &b, &e, c);
    if (st == GPUMEM_OK) contrib[v] = e > b ? 1.0 / (double)r->n_nodes / (double)(e - b) : 0.0;
    return st;
}

/* One pull: v sums its neighbours' shares of the previous iteration (read
 * only, in `contrib`) and writes its own rank and its share for the next
 * one (only v's thread writes them). The iteration ends at a barrier
 * (thread join or kernel boundary) before the two share arrays swap. */
GPUMEM_API gpumem_status graph_pagerank_pull(graph_refs *r, uint32_t v, const double *contrib, double damping,
                                             double *rank, double *contrib_next, graph_counts *c) {
    uint64_t b = 0, e = 0, k, j, at;
    const uint32_t *us;
    double sum = 0;
    gpumem_status st = graph_neighbours(r, v, &b, &e, c);
    for (at = b; st == GPUMEM_OK && (st = graph_neighbour_run(r, &at, e, &us, &k, c)) == GPUMEM_OK && k > 0;)
        for (j = 0; j < k; j++) sum += contrib[us[j]]; /* in list order: the reference's sums, bit for bit */
    if (st != GPUMEM_OK) return st;
    rank[v] = (1.0 - damping) / (double)r->n_nodes + damping * sum;
    contrib_next[v] = e > b ? rank[v] / (double)(e - b) : 0.0; /* b: the list's start, `at` its end now */
    c->updates++;
    return GPUMEM_OK;
}

/* ======================================================================== */
/* 6. GNN mini-batches: neighbour sampling and feature gathering            */
/* ======================================================================== */

/* A GNN's features sit on storage as a table of rows of F bytes, row r at
 * byte r x F (GIDS's layout: 4 KiB rows, 1024 floats). Each mini-batch
 * takes B seed vertices, samples up to fanout[0] neighbours of each seed,
 * fanout[1] of each of those and so on (reading adjacency through the graph
 * cache), and gathers the feature rows of every vertex sampled. Sampling and
 * gathering are written once here for host and CUDA threads.
 *
 * The table is generated from (row, byte) alone, so any row, read from
 * anywhere, can be checked byte for byte. It is served by a software
 * controller of its own with 512-byte blocks: a direct read of one row then
 * costs the blocks the row covers, as on an SSD formatted with 512-byte
 * LBAs, while the cache in front of it reads whole GRAPH_LINE lines. */

#define GRAPH_GNN_MIN_ROW 256u
#define GRAPH_GNN_MAX_ROW 16384u
#define GRAPH_GNN_ROW_STEP 256u   /* row sizes are multiples of this, so every row is 8-byte aligned */
#define GRAPH_GNN_LBA 512u        /* the feature table's block size */
#define GRAPH_GNN_MAX_BLOCKS 64u  /* the controller's largest command (a row straddling blocks needs 33) */
#define GRAPH_GNN_BOUNCE (GRAPH_GNN_MAX_ROW + GRAPH_GNN_LBA) /* a direct read of a row not on a block boundary */
#define GRAPH_GNN_MAX_HOPS 4u
#define GRAPH_GNN_MAX_FANOUT 64u

/* splitmix64's finaliser: the generator's and the sampler's randomness,
 * callable from device code (graph_splitmix is host-only). */
GPUMEM_API uint64_t graph_mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Bytes 8w .. 8w+7 of feature row r, as one little-endian word: byte b of
 * row r is byte b % 8 of word b / 8, a function of (r, b) alone. */
GPUMEM_API uint64_t graph_feature_word(uint64_t row, uint64_t w) {
    return graph_mix64(row * 0x9E3779B97F4A7C15ull + w + 0x6665617475726573ull);
}

GPUMEM_API void graph_feature_fill(uint64_t row, uint32_t row_bytes, unsigned char *out) {
    uint32_t w;
    for (w = 0; w < row_bytes / 8; w++) {
        uint64_t x = graph_feature_word(row, w);
        memcpy(out + 8 * (size_t)w, &x, 8);
    }
}

/* The first byte of `got` that is not row r's, or row_bytes if none is. */
GPUMEM_API uint32_t graph_feature_check(uint64_t row, uint32_t row_bytes, const unsigned char *got) {
    uint32_t w, b;
    for (w = 0; w < row_bytes / 8; w++) {
        uint64_t want = graph_feature_word(row, w), have;
        memcpy(&have, got + 8 * (size_t)w, 8);
        if (have != want)
            for (b = 0; b < 8; b++)
                if (((have ^ want) >> (8 * b)) & 0xFF) return 8 * w + b;
    }
    return row_bytes;
}

/* The table's file: the rows, then zeros up to a whole cache line. */
GRAPH_API uint64_t graph_features_bytes(uint64_t rows, uint32_t row_bytes) {
    return GPUMEM_ALIGN_UP(rows * row_bytes, GRAPH_LINE);
}

GRAPH_API const char *graph_features_row_problem(uint32_t row_bytes) {
    if (row_bytes < GRAPH_GNN_MIN_ROW || row_bytes > GRAPH_GNN_MAX_ROW || row_bytes % GRAPH_GNN_ROW_STEP)
        return "want 256..16384, a multiple of 256";
    return NULL;
}

/* Write the table of `rows` rows of row_bytes to `path`, through a
 * temporary name and a rename (an error leaves nothing behind). `say`, when
 * not NULL, gets progress. */
GRAPH_API gpumem_status graph_features_write(const char *path, uint64_t rows, uint32_t row_bytes,
                                             void (*say)(const char *what, double frac), char *err, size_t len) {
    const uint64_t per_chunk = (4u << 20) / row_bytes, bytes = graph_features_bytes(rows, row_bytes);
    char tmp[4200];
    unsigned char *buf;
    uint64_t r = 0;
    double last = graph_now_s();
    int fd, ok = 1;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: path too long", path);
    if (!(buf = (unsigned char *)malloc(per_chunk * row_bytes)))
        return graph_fail(err, len, GPUMEM_ENOMEM, "%s: no memory to write the feature table", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        free(buf);
        return graph_fail(err, len, GPUMEM_EIO, "%s: %s", tmp, strerror(errno));
    }
    while (ok && r < rows) {
        uint64_t n = rows - r < per_chunk ? rows - r : per_chunk, k;
        for (k = 0; k < n; k++) graph_feature_fill(r + k, row_bytes, buf + k * row_bytes);
        ok = pwrite(fd, buf, n * row_bytes, (off_t)(r * row_bytes)) == (ssize_t)(n * row_bytes);
        r += n;
        if (say && graph_now_s() - last > 0.5) {
            last = graph_now_s();
            say("feature table", (double)r / (double)rows);
        }
    }
    free(buf);
    ok = ok && ftruncate(fd, (off_t)bytes) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return graph_fail(err, len, GPUMEM_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return GPUMEM_OK;
}

/* Is `path` the table of (rows, row_bytes)? Its size, and 64 rows spread
 * over it (the first and the last among them), checked byte for byte.
 * ENODEV: missing; EINVAL: another table or damaged (err says which). */
GRAPH_API gpumem_status graph_features_check(const char *path, uint64_t rows, uint32_t row_bytes, char *err,
                                             size_t len) {
    unsigned char buf[GRAPH_GNN_MAX_ROW];
    struct stat sb;
    uint64_t k, bytes = graph_features_bytes(rows, row_bytes);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return graph_fail(err, len, errno == ENOENT ? GPUMEM_ENODEV : GPUMEM_EIO, "%s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != bytes) {
        close(fd);
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: %lld bytes, expected %llu (%llu rows of %u bytes)", path,
                          (long long)sb.st_size, (unsigned long long)bytes, (unsigned long long)rows, row_bytes);
    }
    for (k = 0; k < 64; k++) {
        uint64_t r = rows > 1 ? k * (rows - 1) / 63 : 0;
        uint32_t bad;
        if (graph_pread_all(fd, buf, row_bytes, r * row_bytes) != GPUMEM_OK) {
            close(fd);
            return graph_fail(err, len, GPUMEM_EIO, "%s: read failed at row %llu", path, (unsigned long long)r);
        }
        if ((bad = graph_feature_check(r, row_bytes, buf)) < row_bytes) {
            close(fd);
            return graph_fail(err, len, GPUMEM_EINVAL, "%s: byte %llu (row %llu, byte %u) is not the generator's",
                              path, (unsigned long long)(r * row_bytes + bad), (unsigned long long)r, bad);
        }
    }
    close(fd);
    return GPUMEM_OK;
}

/* The table at `path`, of `rows` rows of row_bytes, as a store: its own
 * software controller (512-byte blocks), cfg's pairs, cache and host tier.
 * s->h.n_nodes is the row count and s->h.file_bytes the file's size; the
 * store has no graph arrays. */
GRAPH_API gpumem_status graph_features_open(graph_store *s, const char *path, uint64_t rows, uint32_t row_bytes,
                                            const graph_store_config *cfg, char *err, size_t len) {
    struct stat sb;
    memset(s, 0, sizeof *s);
    s->fd = open(path, O_RDONLY);
    if (s->fd < 0)
        return graph_fail(err, len, errno == ENOENT ? GPUMEM_ENODEV : GPUMEM_EIO, "%s: %s", path, strerror(errno));
    s->h.n_nodes = rows;
    s->h.file_bytes = graph_features_bytes(rows, row_bytes);
    if (fstat(s->fd, &sb) != 0 || (uint64_t)sb.st_size != s->h.file_bytes) {
        graph_store_close(s);
        return graph_fail(err, len, GPUMEM_EINVAL, "%s: not a table of %llu rows of %u bytes", path,
                          (unsigned long long)rows, row_bytes);
    }
    return graph_store_serve(s, s->h.file_bytes, GRAPH_GNN_LBA, GRAPH_GNN_MAX_BLOCKS, cfg, err, len);
}

/* The sampling plan: hops and their fanouts. Each seed's sample is a tree
 * of per_seed slots: the seed, then fanout[0] slots for its neighbours,
 * then fanout[1] slots under each of those, and so on; a slot no vertex
 * fills (fewer neighbours than the fanout) holds GRAPH_NONE. The layout is
 * fixed, so the sample does not depend on which thread took which seed. */
typedef struct graph_gnn_plan {
    uint32_t n_hops;
    uint32_t fanout[GRAPH_GNN_MAX_HOPS];
    uint32_t per_seed;
} graph_gnn_plan;

GRAPH_API uint32_t graph_gnn_per_seed(const graph_gnn_plan *p) {
    uint32_t h, level = 1, total = 1;
    for (h = 0; h < p->n_hops; h++) {
        level *= p->fanout[h];
        total += level;
    }
    return total;
}

/* Seed i of mini-batch `batch`: a vertex drawn from (seed, batch, i). */
GPUMEM_API uint32_t graph_gnn_seed_vertex(uint64_t seed, uint64_t batch, uint64_t i, uint32_t n_nodes) {
    return (uint32_t)(graph_mix64(graph_mix64(seed ^ 0x676E6Eull) + batch * 0x100000001B3ull + i) % n_nodes);
}

/* Sample seed vertex v's tree into out[0 .. per_seed), through the graph's
 * cache. A vertex with at most f neighbours gives them all, in order; one
 * with more gives f distinct ones, drawn by Floyd's method from (key, the
 * slot's place in the tree): for t from d - f to d - 1, position x in
 * [0, t] is drawn, and t is taken instead when x's vertex was taken
 * already. Lists hold each neighbour once, so vertices stand for positions. */
GPUMEM_API gpumem_status graph_gnn_sample(graph_refs *r, uint64_t key, uint32_t v, const graph_gnn_plan *p,
                                          uint32_t *out, graph_counts *c) {
    uint32_t h, j, level_at = 0, level_n = 1, at = 1;
    gpumem_status st = GPUMEM_OK;
    out[0] = v;
    for (h = 0; h < p->n_hops; h++) {
        const uint32_t f = p->fanout[h];
        for (j = 0; j < level_n; j++) {
            const uint32_t parent = out[level_at + j], first = at + j * f;
            uint32_t k = 0, u;
            uint64_t b = 0, e = 0, d, t;
            if (parent != GRAPH_NONE && (st = graph_neighbours(r, parent, &b, &e, c)) != GPUMEM_OK) return st;
            d = e - b;
            if (d <= f) {
                for (; k < d; k++)
                    if ((st = graph_neighbour(r, b + k, &out[first + k], c)) != GPUMEM_OK) return st;
            } else {
                for (t = d - f; t <= d - 1; t++) {
                    uint64_t x = graph_mix64(key + (uint64_t)(first + 1) * 0x9E3779B97F4A7C15ull + t) % (t + 1);
                    uint32_t seen = 0, m;
                    if ((st = graph_neighbour(r, b + x, &u, c)) != GPUMEM_OK) return st;
                    for (m = 0; m < k; m++) seen |= out[first + m] == u;
                    if (seen && (st = graph_neighbour(r, b + t, &u, c)) != GPUMEM_OK) return st;
                    out[first + k++] = u;
                }
            }
            for (; k < f; k++) out[first + k] = GRAPH_NONE;
        }
        level_at = at;
        at += level_n * f;
        level_n *= f;
    }
    return st;
}

/* How often each vertex is drawn, on average, into one mini-batch of
 * `seeds` seed vertices sampled with plan p (graph_gnn_sample's trees over
 * graph_gnn_seed_vertex's uniform seeds): out[v] for each of the graph's
 * vertices, the repeats counted. A seed is each vertex with probability
 * 1 / n; a parent of degree d draws each of its neighbours with
 * probability min(f, d) / d, so hop h + 1's expectation is hop h's pushed
 * along the edges with that factor (O(hops x edges), two vectors in
 * scratch: 2 x n_nodes doubles). This is what a trainer knows of the
 * batches past its look-ahead window: which feature rows the sampler
 * favours (GIDS keeps rows by a reverse PageRank for the same reason; for
 * this sampler the expectation is exact). */
GRAPH_API void graph_gnn_expected_draws(const graph_csr *g, const graph_gnn_plan *p, uint32_t seeds, double *out,
                                        double *scratch) {
    const uint64_t n = g->h.n_nodes;
    double *cur = scratch, *next = scratch + n, *t;
    uint64_t v, e;
    uint32_t h;
    for (v = 0; v < n; v++) out[v] = cur[v] = n ? (double)seeds / (double)n : 0;
    for (h = 0; h < p->n_hops; h++) {
        for (v = 0; v < n; v++) next[v] = 0;
        for (v = 0; v < n; v++) {
            const uint64_t d = g->offsets[v + 1] - g->offsets[v];
            const double give = d ? cur[v] * (double)(d < p->fanout[h] ? d : p->fanout[h]) / (double)d : 0;
            for (e = g->offsets[v]; give > 0 && e < g->offsets[v + 1]; e++) next[g->edges[e]] += give;
        }
        for (v = 0; v < n; v++) out[v] += next[v];
        t = cur, cur = next, next = t;
    }
}

/* What gathering did: rows copied and their bytes (needed), and, for
 * direct reads, the commands sent and the bytes they read from storage. */
typedef struct graph_gather_counts {
    unsigned long long rows, bytes_needed, commands, bytes_read, full_retries;
} graph_gather_counts;

/* 8-byte words from `src` to `dst` (both 8-byte aligned, n a multiple of 8):
 * GPU threads copy a run-time size byte by byte with memcpy. */
GPUMEM_API void graph_copy_words(unsigned char *dst, const unsigned char *src, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i += 8) *(uint64_t *)(void *)(dst + i) = *(const uint64_t *)(const void *)(src + i);
}

/* Row `row` of the feature cache `fc` (4 KiB lines) into `out`, a line at a
 * time: acquire, copy the row's part, release. A thread holds one line at a
 * time, so a full cache (EAGAIN) is waited out with nothing held. Rows
 * smaller than a line share lines with their neighbours in the file; a
 * 16 KiB row takes four lines. */
GPUMEM_API gpumem_status graph_gather_cached(gpumem_cache *fc, uint64_t row, uint32_t row_bytes, unsigned char *out,
                                             graph_gather_counts *k) {
    uint64_t at = row * row_bytes;
    const uint64_t end = at + row_bytes;
    while (at < end) {
        const uint64_t line = at / GRAPH_LINE;
        const uint32_t off = (uint32_t)(at % GRAPH_LINE);
        const uint32_t n = end - at < GRAPH_LINE - off ? (uint32_t)(end - at) : GRAPH_LINE - off;
        gpumem_backoff b = gpumem_backoff_start();
        uint32_t tries = 0;
        void *data;
        gpumem_status st;
        while ((st = gpumem_cache_acquire_coalesced(fc, line, 0, &data)) == GPUMEM_EAGAIN &&
               graph_retry_full(&b, &tries, &k->full_retries)) {
        }
        if (st != GPUMEM_OK) return st;
        graph_copy_words(out + (at - row * row_bytes), (const unsigned char *)data + off, n);
        if ((st = gpumem_cache_release_coalesced(fc, line)) != GPUMEM_OK) return st;
        at += n;
    }
    k->rows++;
    k->bytes_needed += row_bytes;
    return GPUMEM_OK;
}

/* Row `row`'s lines in the feature cache hinted for epoch `when` (a batch
 * to come: gpumem_cache_hint), warp-coalesced on the device (lanes on one
 * line send one hint). OK, or the first other status: hints are advice, so
 * a refused one changes what the cache keeps, never a row. */
GPUMEM_API gpumem_status graph_gather_hint(gpumem_cache *fc, uint64_t row, uint32_t row_bytes, uint64_t when) {
    const uint64_t at = row * row_bytes, last = (at + row_bytes - 1) / GRAPH_LINE;
    gpumem_status st = GPUMEM_OK;
    uint64_t line;
    for (line = at / GRAPH_LINE; line <= last; line++) {
        gpumem_status one = gpumem_cache_hint_coalesced(fc, line, when);
        if (st == GPUMEM_OK) st = one;
    }
    return st;
}

/* Row `row` read straight from storage through queue pair `qp` (of the
 * feature table's controller, GRAPH_GNN_LBA blocks): one command for the
 * blocks the row covers. A row on block boundaries is read into `out`
 * itself; another one into `bounce` (GRAPH_GNN_BOUNCE bytes), then copied.
 * Both must be memory the controller can write. */
GPUMEM_API gpumem_status graph_gather_direct(gpumem_nvme_qp *qp, uint64_t row, uint32_t row_bytes,
                                             unsigned char *bounce, unsigned char *out, graph_gather_counts *k) {
    const uint64_t at = row * row_bytes, first = at / GRAPH_GNN_LBA;
    const uint64_t end = (at + row_bytes + GRAPH_GNN_LBA - 1) / GRAPH_GNN_LBA;
    const int aligned = at % GRAPH_GNN_LBA == 0 && row_bytes % GRAPH_GNN_LBA == 0;
    gpumem_status st = gpumem_nvme_qp_read_buf(qp, first, (uint32_t)(end - first), aligned ? out : bounce,
                                               (gpumem_nvme_cpl *)0);
    k->commands++;
    if (st != GPUMEM_OK) return st;
    if (!aligned) graph_copy_words(out, bounce + (at - first * GRAPH_GNN_LBA), row_bytes);
    k->rows++;
    k->bytes_needed += row_bytes;
    k->bytes_read += (end - first) * GRAPH_GNN_LBA;
    return GPUMEM_OK;
}

#endif /* GPUMEM_EXAMPLES_GRAPH_H */
