/* bench/policy_traces.h - synthetic line-access traces for the policy
 * simulator, after the papers' workloads (HPE's taxonomy, Rodinia kernels,
 * ObservUVM's and GMT's graph runs). Host only.
 *
 * Each generator appends line numbers to a ptrace_out (a file in the binary
 * trace format of gpumem_policy.h, or memory) and is deterministic for its
 * arguments. `lines` is the footprint the generator aims for.
 */
#ifndef GPUMEM_BENCH_POLICY_TRACES_H
#define GPUMEM_BENCH_POLICY_TRACES_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_policy.h"
#include "bench/policy_sim.h"
#include "examples/graph.h"

typedef struct ptrace_out {
    FILE *f;        /* binary trace file, or NULL: */
    uint64_t *mem;  /* memory of cap entries (tests) */
    uint64_t n, cap;
    uint64_t buf[4096];
    size_t nb;
} ptrace_out;

static inline void pt_flush(ptrace_out *o) {
    if (o->f && o->nb) fwrite(o->buf, 8, o->nb, o->f);
    o->nb = 0;
}

static inline void pt_emit(ptrace_out *o, uint64_t line) {
    if (o->f) {
        o->buf[o->nb++] = line;
        if (o->nb == sizeof o->buf / 8) pt_flush(o);
    } else if (o->n < o->cap) {
        o->mem[o->n] = line;
    }
    o->n++;
}

/* Type I: every line once, touched `touch` times in a row (threads of a warp). */
static inline void pt_stream(ptrace_out *o, uint64_t lines, uint32_t touch) {
    uint64_t l;
    uint32_t t;
    for (l = 0; l < lines; l++)
        for (t = 0; t < touch; t++) pt_emit(o, l);
}

/* Type II: a loop over `lines` lines, `passes` times (thrashes any LRU smaller). */
static inline void pt_loop(ptrace_out *o, uint64_t lines, uint32_t passes) {
    uint32_t p;
    for (p = 0; p < passes; p++) pt_stream(o, lines, 1);
}

/* Rodinia hotspot: temp_in, power, temp_out grids of rows x lpr lines; each
 * output line reads its row and the rows above and below. */
static inline void pt_hotspot(ptrace_out *o, uint64_t rows, uint64_t lpr, uint32_t iters) {
    uint64_t a = 0, b = 2 * rows * lpr, pw = rows * lpr, r, j, t;
    uint32_t it;
    for (it = 0; it < iters; it++) {
        for (r = 0; r < rows; r++)
            for (j = 0; j < lpr; j++) {
                if (r > 0) pt_emit(o, a + (r - 1) * lpr + j);
                pt_emit(o, a + r * lpr + j);
                if (r + 1 < rows) pt_emit(o, a + (r + 1) * lpr + j);
                pt_emit(o, pw + r * lpr + j);
                pt_emit(o, b + r * lpr + j);
            }
        t = a, a = b, b = t;
    }
}

/* Rodinia srad: image J and six derived arrays (c, dN, dS, dW, dE);
 * kernel 1 reads J's stencil and writes the derivatives, kernel 2 reads
 * them (c one row down too) and writes J. */
static inline void pt_srad(ptrace_out *o, uint64_t rows, uint64_t lpr, uint32_t iters) {
    uint64_t g = rows * lpr, r, j, d;
    uint32_t it;
    for (it = 0; it < iters; it++) {
        for (r = 0; r < rows; r++)
            for (j = 0; j < lpr; j++) {
                if (r > 0) pt_emit(o, (r - 1) * lpr + j);
                pt_emit(o, r * lpr + j);
                if (r + 1 < rows) pt_emit(o, (r + 1) * lpr + j);
                for (d = 1; d <= 5; d++) pt_emit(o, d * g + r * lpr + j);
            }
        for (r = 0; r < rows; r++)
            for (j = 0; j < lpr; j++) {
                pt_emit(o, g + r * lpr + j);
                if (r + 1 < rows) pt_emit(o, g + (r + 1) * lpr + j);
                for (d = 2; d <= 5; d++) pt_emit(o, d * g + r * lpr + j);
                pt_emit(o, r * lpr + j);
            }
    }
}

/* Rodinia pathfinder: the wall row by row, with two small result rows
 * swapped per row; `passes` runs over the same wall. */
static inline void pt_pathfinder(ptrace_out *o, uint64_t rows, uint64_t lpr, uint32_t passes) {
    uint64_t wall = rows * lpr, src = wall, dst = wall + lpr, r, j, t;
    uint32_t p;
    for (p = 0; p < passes; p++)
        for (r = 0; r < rows; r++) {
            for (j = 0; j < lpr; j++) {
                if (j > 0) pt_emit(o, src + j - 1);
                pt_emit(o, src + j);
                pt_emit(o, r * lpr + j);
                pt_emit(o, dst + j);
            }
            t = src, src = dst, dst = t;
        }
}

/* Rodinia backprop: input units (in_lines lines) and a weight matrix of 17
 * hidden units per input (17 x in_lines lines) plus its previous-delta copy.
 * The forward pass reads the weights column by column (every line 16
 * times), adjust_weights reads and writes both matrices row by row. */
static inline void pt_backprop(ptrace_out *o, uint64_t in_lines, uint32_t iters) {
    uint64_t w = in_lines, wl = 17 * in_lines, old = w + wl, l;
    uint32_t h, it;
    for (it = 0; it < iters; it++) {
        for (h = 0; h < 16; h++)
            for (l = 0; l < wl; l++) {
                if (l % 17 == 0) pt_emit(o, l / 17);
                pt_emit(o, w + l);
            }
        for (l = 0; l < wl; l++) {
            if (l % 17 == 0) pt_emit(o, l / 17);
            pt_emit(o, w + l);
            pt_emit(o, old + l);
        }
    }
}

static inline void pt_uniform(ptrace_out *o, uint64_t lines, uint64_t n, uint64_t seed) {
    uint64_t i;
    for (i = 0; i < n; i++) pt_emit(o, psim_splitmix(&seed) % lines);
}

/* Zipf(alpha) over `lines` lines, ranks scattered by a random permutation. */
static inline int pt_zipf(ptrace_out *o, uint64_t lines, uint64_t n, double alpha, uint64_t seed) {
    double *cdf = (double *)malloc(lines * sizeof(double)), sum = 0;
    uint64_t *perm = (uint64_t *)malloc(lines * 8), i;
    if (!cdf || !perm) {
        free(cdf);
        free(perm);
        return -1;
    }
    for (i = 0; i < lines; i++) {
        sum += 1.0 / pow((double)(i + 1), alpha);
        cdf[i] = sum;
        perm[i] = i;
    }
    for (i = lines; i-- > 1;) {
        uint64_t j = psim_splitmix(&seed) % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (i = 0; i < n; i++) {
        double u = (double)(psim_splitmix(&seed) >> 11) * (1.0 / 9007199254740992.0) * sum;
        uint64_t lo = 0, hi = lines - 1;
        while (lo < hi) {
            uint64_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        pt_emit(o, perm[lo]);
    }
    free(cdf);
    free(perm);
    return 0;
}

/* Top-down BFS over a GAP-kron graph (examples/graph.h's generator) from
 * `sources` sources, as the graph example reads it: the lines of the file's
 * offsets and edges arrays (4 KiB lines). */
static inline int pt_bfs(ptrace_out *o, uint32_t scale, uint32_t sources, uint64_t seed) {
    graph_csr g;
    uint32_t *level, *queue, s;
    uint64_t n, head, tail, e;
    if (graph_generate_kron(scale, 16, seed, &g, NULL) != GPUMEM_OK) return -1;
    n = g.h.n_nodes;
    level = (uint32_t *)malloc(n * 4);
    queue = (uint32_t *)malloc(n * 4);
    if (!level || !queue) {
        free(level);
        free(queue);
        graph_free(&g);
        return -1;
    }
    for (s = 0; s < sources; s++) {
        uint32_t src = graph_pick_source(&g, seed + s);
        memset(level, 0xff, n * 4);
        level[src] = 0;
        queue[0] = src;
        head = 0, tail = 1;
        while (head < tail) {
            uint32_t v = queue[head++];
            pt_emit(o, (g.h.offsets_at + (uint64_t)v * 8) / GRAPH_LINE);
            pt_emit(o, (g.h.offsets_at + (uint64_t)v * 8 + 8) / GRAPH_LINE);
            for (e = g.offsets[v]; e < g.offsets[v + 1]; e++) {
                uint32_t u = g.edges[e];
                if ((g.h.edges_at + e * 4) / GRAPH_LINE != (g.h.edges_at + (e - 1) * 4) / GRAPH_LINE ||
                    e == g.offsets[v])
                    pt_emit(o, (g.h.edges_at + e * 4) / GRAPH_LINE);
                if (level[u] == GRAPH_NONE) {
                    level[u] = level[v] + 1;
                    queue[tail++] = u;
                }
            }
        }
    }
    free(level);
    free(queue);
    graph_free(&g);
    return 0;
}

/* Phases: a loop, a zipf hot set, a stream, the loop again (HPE's "region
 * moving" and mixed types). Regions are disjoint. */
static inline int pt_phases(ptrace_out *o, uint64_t lines, uint64_t seed) {
    uint64_t q = lines / 4, i;
    pt_loop(o, q * 2, 4);
    for (i = 0; i < q * 8; i++) {
        uint64_t r = psim_splitmix(&seed);
        /* 80% of accesses on 10% of the region, the rest uniform. */
        pt_emit(o, 2 * q + ((r & 0xff) < 204 ? (r >> 8) % (q / 10 + 1) : (r >> 8) % q));
    }
    for (i = 0; i < q; i++) pt_emit(o, 3 * q + i);
    pt_loop(o, q * 2, 4);
    return 0;
}

#endif
