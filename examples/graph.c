/* graph: BFS and connected components over a CSR graph file, read by host
 * threads through the gpumem cache, queue pairs and the software NVMe
 * controller, and checked against in-memory references. The main job.
 *
 *   build/graph demo [FILE] [--scale S]   generate FILE if missing (GAP-kron
 *                                         parameters), then BFS with a cache
 *                                         smaller than the graph, BFS with a
 *                                         cache that holds it, and CC
 *   build/graph gen FILE [--scale S] [--edge-factor E] [--seed X]
 *   build/graph bfs FILE [options]        one BFS (source: --source V, or a
 *                                         vertex with more than 2 neighbours)
 *   build/graph cc FILE [options]           ends with "N components" and the largest's size
 *   build/graph pagerank FILE [--iterations N]  pull, damping 0.85, checked
 *   build/graph gnn FILE [--row-bytes F] [--batch B] [--batches N] [--fanouts 10,5]
 *                   [--lookahead K]       GNN mini-batches: sample through the
 *                                         graph's cache, gather feature rows
 *                                         through a cache, by direct reads and
 *                                         by pread, all checked; rows/s of each;
 *                                         K batches sampled ahead hint the
 *                                         feature cache with each row's next use
 *   build/graph gnn-sweep FILE OUT.tsv    gnn against cache size and row size
 *   build/graph convert IN OUT [--format F] [--mem-mib M]  GAP .el/.wel/.sg/.wsg,
 *                                         SNAP or Matrix Market into this tool's CSR
 *   bfs, cc, pagerank, policies, sweep, gnn and gnn-sweep take any of those formats: the
 *   input is converted into --cache-dir (default build) and the conversion is
 *   reused while the input's size and mtime are unchanged; answers name
 *   vertices by the file's own ids.
 *   build/graph sweep FILE OUT.tsv [options]  I/O amplification against cache
 *                                         size (make graph-sweep plots it)
 *   build/graph policies FILE --policy P  BFS and CC with a cache an eighth of
 *                                         the graph under CLOCK and under P, in
 *                                         one run: hit rate and line reads
 *   options: --cache-mib M  --threads T  --pairs P  --depth D  --iops N
 *            --host-mib M (a host-memory tier below the cache, gpumem_tier.h;
 *            demo: 4x the small cache by default, so it shows the storage
 *            reads without and with it)  --placement P (the host tier's)
 *            --ordered (BFS: expand each level in vertex order)
 *            --policy P (the cache's replacement policy, gpumem_policy.h)
 *            --trace OUT (record the cache's accesses for bench/policy_sim)
 *            --hints on|off (bfs, cc, pagerank: tell the cache each round's
 *            next uses; on by default where the policy takes hints (the
 *            default, then the lock-free slot kind hinted-rrip, or
 *            --policy hinted, the sequential one) or --trace records them;
 *            it prints what the hints proved)
 *            --prefetch on|off (bfs, cc, pagerank: one more thread reads
 *            each round's lines ahead of the workers, gpumem_cache_prefetch;
 *            implies --hints on, whose plan says which lines and when)
 *            --warm on|off (bfs, cc, pagerank: run the traversal again on
 *            the cache it filled, and compare that pass with plain memory;
 *            the demo does it for its whole-graph run)
 *
 * Every run prints its rounds as they finish, then hit rate, I/O
 * amplification (bytes read from storage / bytes the algorithm needed) and
 * throughput; bfs, cc and pagerank (and the demo's BFS with the whole graph
 * cached) then run once more over plain memory
 * (the host's copy of the graph, the same threads, checked too) and say how
 * much longer the run through the cache took. Exit status: 0 if every answer matched the reference, 1 if a
 * run failed or disagreed, 2 for bad arguments or an unusable graph file. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <stdarg.h>

#include "graph_formats.h"
#include "tool_cli.h"

typedef struct options {
    const char *path, *out; /* the graph file; sweep: the table */
    const char *machine;    /* sweep: written into the table */
    uint32_t scale, edge_factor, threads, pairs, depth;
    uint64_t seed, source, cache_bytes, iops;
    int given;   /* O_* bits of the options on the command line */
    int ordered; /* BFS: expand each level's frontier in vertex order */
    uint32_t policy;   /* the cache's replacement policy */
    const char *trace; /* record the cache's accesses to this file */
    uint64_t host_bytes;     /* a host tier below the cache; 0: none */
    uint32_t host_placement; /* its placement (GPUMEM_TIER_*) */
    int format;              /* the input's format, GRAPH_FMT_AUTO: from the extension */
    const char *cache_dir;   /* where converted inputs are kept */
    uint64_t mem_bytes;      /* the conversion's sort memory */
    uint32_t iterations;     /* PageRank */
    uint64_t *ids, n_ids;    /* SNAP: file id of each vertex (sorted), or NULL */
    uint64_t id_base;        /* otherwise file id = vertex + id_base (Matrix Market: 1) */
    const char *input;       /* the FILE the user named (path may become its conversion) */
    uint64_t source_id;      /* --source as given, in the file's ids (source: the tool's) */
    const char *answer_out;  /* --out: bfs, cc, pagerank write every vertex's answer here */
    /* gnn */
    uint32_t row_bytes, batch, batches; /* feature row size; seeds a mini-batch; mini-batches */
    graph_gnn_plan plan;                /* hops and fanouts */
    const char *features;               /* the feature table's file, or NULL: one in cache_dir */
    int hints;          /* tell the cache each round's next uses (--hints; -1 until resolved: see main) */
    int prefetch;       /* read each round's lines ahead (--prefetch, default off; implies hints) */
    uint32_t lookahead; /* gnn: mini-batches sampled ahead, their rows' next uses hinted (--lookahead) */
    int weights;        /* gnn: each feature line's weight told the cache (--weights; -1 until resolved: main) */
    int warm;           /* run the traversal again on the cache it filled (--warm; the demo's whole-graph run) */
    uint32_t hint_slack; /* the hinted policy's slack in chunks (--hint-slack; 0: graph_hint_slack(threads)) */
} options;
/* --lookahead's bound: GIDS's window buffer looks a few batches ahead; past
 * 64 the sampled batches' rows outgrow what a cache of 1/8 can hold. */
#define GRAPH_GNN_MAX_LOOKAHEAD 64u

/* A vertex as the input file names it. */
static unsigned long long file_id(const options *o, uint64_t v) {
    return (unsigned long long)(o->ids && v < o->n_ids ? o->ids[v] : v + o->id_base);
}

/* Room for this many recorded accesses (8 bytes each); the rest are dropped
 * and the count says so. */
#define TRACE_CAP (16u << 20)

/* An empty trace of TRACE_CAP accesses, or NULL after a message. */
static gpumem_policy_trace *trace_new(void) {
    gpumem_policy_trace *t = (gpumem_policy_trace *)calloc(1, sizeof *t);
    if (t) t->buf = (uint64_t *)malloc((size_t)TRACE_CAP * 8);
    if (!t || !t->buf) {
        fprintf(stderr, "graph: no memory for the trace\n");
        free(t);
        return NULL;
    }
    t->cap = TRACE_CAP;
    return t;
}

static void trace_free(gpumem_policy_trace *t) {
    if (t) free(t->buf), free(t);
}

/* Write trace t to `path` and say how much it holds. 0, or 1 after a message. */
static int trace_save(const gpumem_policy_trace *t, const char *path) {
    if (gpumem_policy_trace_write(t, path) != GPUMEM_OK) {
        fprintf(stderr, "graph: cannot write the trace to %s\n", path);
        return 1;
    }
    printf("  trace: %llu accesses written to %s (%llu more not recorded)\n",
           (unsigned long long)gpumem_policy_trace_count(t), path,
           (unsigned long long)(t->n - gpumem_policy_trace_count(t)));
    return 0;
}

static void say(const char *what, double frac) {
    printf("  generating: %-24s %3.0f %%\n", what, 100.0 * frac);
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* One run: rounds of work items spread over host threads                   */
/* ------------------------------------------------------------------------ */

enum { RUN_BFS, RUN_CC, RUN_PR };
#define CHUNK 64u /* work items a thread claims at a time */
#define GRAPH_PR_TOLERANCE 1e-9 /* PageRank: each rank within this fraction of the reference's */

typedef struct run {
    graph_store *store; /* the graph */
    int kind;
    uint32_t n_threads;
    uint64_t n_items;   /* this round: frontier size (BFS) or vertex count (CC) */
    uint64_t cursor;    /* next unclaimed item, shared */
    uint64_t done;      /* items finished, for progress */
    /* BFS */
    uint32_t *levels, *frontier, *next, next_count, level;
    /* CC */
    uint32_t *comp, *active, *next_active, changed;
    /* PageRank: round 0 computes the starting shares, then one round an iteration */
    double *rank, *contrib, *contrib_next, damping;
    int pr_start;
    graph_counts *counts; /* per thread, summed by the caller */
    gpumem_cache *hinted; /* the cache told each round's next uses (--hints), or NULL */
    uint64_t epoch_base;  /* this round's first epoch (hint_epoch) */
    struct hint_plan {
        uint64_t *first;
        uint32_t *next, *wave_of;
    } plan;               /* this round's next uses (hint_plan_round) */
    const graph_csr *g;   /* the host's copy of the offsets, for the plan */
    int prefetch;         /* --prefetch: a thread reads the plan's lines ahead of the workers */
    uint64_t pf_late;     /* prefetches whose epoch the workers had passed (ERANGE): left to them */
    uint64_t pf_failed;   /* prefetches that failed otherwise (the demand miss sees it too) */
    /* Other work (GNN mini-batches): item i of the round, by thread `id` */
    void (*item)(struct run *r, uint32_t id, uint64_t i, graph_refs *refs, graph_counts *c);
    void *ctx;
} run;

typedef struct worker_arg {
    run *r;
    uint32_t id;
} worker_arg;

/* ---- next-use hints (--hints): what each round knows of the next ---------- */

/* Round `round`'s epochs start at round << 32; an epoch is one chunk of the
 * round's items, whatever the thread count. Threads claim chunks in order
 * but finish them out of order (a hub's chunk takes long), so their clocks
 * drift apart by many chunks (more with more threads): the cache's hinted
 * policy allows graph_hint_slack(T), or --hint-slack. An epoch
 * of a wave (a chunk for each thread) made the slack's reach in items
 * shrink with fewer threads: hinted / OPT on BFS was 1.27 at 2 threads,
 * 1.18 at 16 on kron18 (bench/results/policy-hints-vm.md). The lock-free
 * slot kind keeps an epoch's low 24 bits: a round would need 2^29 items
 * (2^23 chunks) before two of its epochs alias. */
static uint64_t hint_epoch(uint64_t base, uint64_t item) {
    return base | item / CHUNK;
}

/* The lines item v reads: its two offsets, then its neighbour list; line q
 * of them (q < hint_n_lines; offsets_only: the offsets' lines alone, what
 * PageRank's degrees round reads). The offsets come from the host's copy (the
 * reference graph: 8 bytes a vertex, as an application would keep in GPU
 * memory), so planning reads nothing through the cache. */
static uint64_t hint_n_lines(const graph_store *s, const graph_csr *g, uint32_t v, int offsets_only) {
    uint64_t at = s->h.offsets_at + 8ull * v, b = g->offsets[v], e = g->offsets[v + 1];
    uint64_t n = (at + 15) / GRAPH_LINE - at / GRAPH_LINE + 1;
    if (offsets_only) return n;
    return e > b ? n + (s->h.edges_at + 4 * e - 1) / GRAPH_LINE - (s->h.edges_at + 4 * b) / GRAPH_LINE + 1 : n;
}

static uint64_t hint_line(const graph_store *s, const graph_csr *g, uint32_t v, uint64_t q) {
    uint64_t at = s->h.offsets_at + 8ull * v, n_off = (at + 15) / GRAPH_LINE - at / GRAPH_LINE + 1;
    return q < n_off ? at / GRAPH_LINE + q : (s->h.edges_at + 4 * g->offsets[v]) / GRAPH_LINE + q - n_off;
}

/* A round's plan: for each line each item reads, the wave of the round's
 * next item to read it (NONE: none does). The round starts with a hint of
 * each line's first use; each item, done, hints its lines' next uses, so
 * the cache always knows every cached line's next use in the round. */
typedef struct hint_plan hint_plan; /* in struct run: first (per item: its first entry in next, n_items + 1),
                                      next (per line read: the wave of its next reader), wave_of (per line
                                      of the file: scratch, then its first wave) */

static void hint_plan_free(hint_plan *h) {
    free(h->first);
    free(h->next);
    free(h->wave_of);
    memset(h, 0, sizeof *h);
}

static uint32_t hint_vertex_of(const run *r, uint64_t j) {
    return r->kind == RUN_BFS ? r->frontier[j] : (uint32_t)j;
}

/* Plan round `base` of r (BFS: its frontier; CC: the active vertices;
 * PageRank: every vertex) and hint each line's first use; with `also`, the
 * same first uses one round later (PageRank's next iteration reads the
 * same). Without memory for a plan the round runs unhinted. */
static void hint_plan_round(run *r, const graph_csr *g, uint64_t base, int also) {
    hint_plan *h = &r->plan;
    graph_store *s = r->store;
    uint64_t j, n_pairs = 0, n_file = s->h.file_bytes / GRAPH_LINE + 1, l;
    hint_plan_free(h);
    if (!(h->first = (uint64_t *)malloc((r->n_items + 1) * 8))) return;
    for (j = 0; j < r->n_items; j++) {
        uint32_t v = hint_vertex_of(r, j);
        h->first[j] = n_pairs;
        /* PageRank's first round reads the degrees: the offsets alone */
        if (r->kind != RUN_CC || r->active[v]) n_pairs += hint_n_lines(s, g, v, r->kind == RUN_PR && r->pr_start);
    }
    h->first[r->n_items] = n_pairs;
    h->next = (uint32_t *)malloc(n_pairs * 4 + 4);
    h->wave_of = (uint32_t *)malloc(n_file * 4);
    if (!h->next || !h->wave_of) {
        hint_plan_free(h);
        return;
    }
    memset(h->wave_of, 0xff, n_file * 4);
    for (j = r->n_items; j-- > 0;) { /* backwards: each line's next reader is the one seen last */
        uint32_t v = hint_vertex_of(r, j), wave = (uint32_t)(hint_epoch(0, j));
        uint64_t q;
        for (q = 0; q < h->first[j + 1] - h->first[j]; q++) {
            uint64_t line = hint_line(s, g, v, q);
            h->next[h->first[j] + q] = h->wave_of[line];
            h->wave_of[line] = wave;
        }
    }
    for (l = 0; l < n_file; l++)
        if (h->wave_of[l] != UINT32_MAX) {
            (void)gpumem_cache_hint(s->cache, l, base | h->wave_of[l]);
            if (also) (void)gpumem_cache_hint(s->cache, l, (base + (1ull << 32)) | h->wave_of[l]);
        }
    r->epoch_base = base;
}

/* Item j is next: hint the next use after it of each line it reads (once
 * a line), before it reads them, so the cache knows from the use on. */
static void hint_item_next(run *r, const graph_csr *g, uint64_t j) {
    const hint_plan *h = &r->plan;
    uint32_t v = hint_vertex_of(r, j);
    uint64_t q, prev = UINT64_MAX;
    if (!h->next) return;
    for (q = 0; q < h->first[j + 1] - h->first[j]; q++) {
        uint32_t wave = h->next[h->first[j] + q];
        uint64_t line = hint_line(r->store, g, v, q);
        if (wave != UINT32_MAX && line != prev) (void)gpumem_cache_hint(r->store->cache, line, r->epoch_base | wave);
        prev = line;
    }
}

/* Before round `round`: its plan (PageRank: also its next iteration's
 * first uses, while there is one). */
static void hint_before_round(run *r, const graph_csr *g, uint32_t round, uint32_t last_round) {
    if (!r->hinted) return;
    r->g = g;
    hint_plan_round(r, g, (uint64_t)(round + 1) << 32, r->kind == RUN_PR && round < last_round);
}

/* What the hints proved and who chose the victims (the hinted policy). */
static void print_hints(const graph_store *s) {
    const gpumem__phint *h = &s->seq.hint;
    if (s->cache && !s->cache->seq && s->cache->policy == GPUMEM_POLICY_HINTED_RRIP) { /* the slot kind */
        const gpumem_policy_slot_hints *sh = &s->cache->slot_hints;
        printf("  hints: %u judged right, %u wrong (trust %u of %u); %u applied (hinted-rrip)\n", sh->right,
               sh->wrong, sh->trust, GPUMEM_POLICY_TRUST_MAX, sh->applied);
        return;
    }
    if (!s->seq_mem || s->seq.d.kind != GPUMEM_POLICY_HINTED) return;
    printf("  hints: %llu proven right, %llu wrong (trust %u of %u); victims: %llu by hint, %llu by the fallback "
           "(%s)\n",
           (unsigned long long)h->right, (unsigned long long)h->wrong, h->trust, GPUMEM_POLICY_TRUST_MAX,
           (unsigned long long)h->hinted_victims, (unsigned long long)h->fallback_victims,
           gpumem_policy_name(s->seq.d.hint_fallback));
    if (h->weight_victims || h->fallback_out)
        printf("  weights: %llu victims the lightest; of the weighted lines evicted, %.1f %% (by weight) and %.1f %% (by "
               "the fallback) came back within a cache's worth of fills: weights %s\n",
               (unsigned long long)h->weight_victims, 100.0 * (double)h->weight_back / (double)(h->weight_out + !h->weight_out),
               100.0 * (double)h->fallback_back / (double)(h->fallback_out + !h->fallback_out),
               gpumem__weights_trusted(h) ? "trusted" : "not trusted");
}

/* --prefetch: the round's plan read ahead of the workers, at most
 * PREFETCH_WAVES waves past the shared cursor (farther, a line read ahead
 * could push out one needed before it; a wave is a chunk a thread), each
 * line with the epoch of the chunk that reads it, so that the cache keeps
 * it for then and never evicts a line needed sooner for it
 * (gpumem_cache_prefetch). A prefetch that
 * gives way (EAGAIN) or comes too late leaves its line to the demand miss:
 * the answers do not depend on it. */
#define PREFETCH_WAVES 1

static void *prefetcher(void *p) {
    run *r = (run *)p;
    const hint_plan *h = &r->plan;
    const uint64_t ahead = (uint64_t)CHUNK * r->n_threads * PREFETCH_WAVES;
    uint64_t j = 0;
    while (j < r->n_items && __atomic_load_n(&r->done, __ATOMIC_RELAXED) < r->n_items) {
        uint64_t cur = __atomic_load_n(&r->cursor, __ATOMIC_RELAXED), q, prev = UINT64_MAX;
        uint32_t v;
        if (j < cur) j = cur; /* the workers are there already */
        if (j >= r->n_items) break;
        if (j >= cur + ahead) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            continue;
        }
        v = hint_vertex_of(r, j);
        for (q = 0; q < h->first[j + 1] - h->first[j]; q++) {
            uint64_t line = hint_line(r->store, r->g, v, q);
            gpumem_status st;
            if (line == prev) continue;
            prev = line;
            st = gpumem_cache_prefetch(r->store->cache, line, hint_epoch(r->epoch_base, j));
            if (st == GPUMEM_ERANGE) r->pf_late++;
            else if (st != GPUMEM_OK && st != GPUMEM_EAGAIN) r->pf_failed++;
        }
        j++;
    }
    return NULL;
}

static void *worker(void *p) {
    worker_arg *a = (worker_arg *)p;
    run *r = a->r;
    graph_store *s = r->store;
    /* The thread counts into its own copy, published at the end of each
     * chunk: the per-thread slots of r->counts sit side by side, and a
     * count on every edge there made the threads write one cache line. */
    graph_counts mine = r->counts[a->id], *c = &mine;
    graph_refs refs = graph_refs_make(&s->offsets, &s->edges, (uint32_t)s->h.n_nodes, s->h.n_edges);
    for (;;) {
        uint64_t first = __atomic_fetch_add(&r->cursor, CHUNK, __ATOMIC_RELAXED), i, end;
        if (first >= r->n_items) break;
        end = first + CHUNK < r->n_items ? first + CHUNK : r->n_items;
        if (r->hinted) (void)gpumem_cache_epoch(r->hinted, hint_epoch(r->epoch_base, first));
        for (i = first; i < end && !c->errors; i++) {
            if (r->hinted && !r->item) hint_item_next(r, r->g, i);
            if (r->item) {
                r->item(r, a->id, i, &refs, c);
            } else if (r->kind == RUN_BFS) {
                graph_bfs_expand(&refs, r->frontier[i], r->level + 1, r->levels, r->next, &r->next_count, c);
            } else if (r->kind == RUN_PR) {
                if (r->pr_start) graph_pagerank_start(&refs, (uint32_t)i, r->contrib, c);
                else graph_pagerank_pull(&refs, (uint32_t)i, r->contrib, r->damping, r->rank, r->contrib_next, c);
            } else if (r->active[i]) {
                r->active[i] = 0;
                graph_cc_push(&refs, (uint32_t)i, r->comp, r->next_active, &r->changed, c);
            }
        }
        r->counts[a->id] = mine;
        __atomic_fetch_add(&r->done, end - first, __ATOMIC_RELAXED);
        if (c->errors) break;
    }
    graph_refs_drop(&refs);
    return NULL;
}

/* Run one round on all threads; a ticker shows progress of long rounds. */
static int run_round(run *r, const char *what) {
    pthread_t t[1024];
    worker_arg args[1024];
    double t0 = graph_now_s(), last = t0;
    int ticker = isatty(1);
    uint32_t i, started = 0;
    pthread_t pf;
    int pf_started = 0;
    r->cursor = r->done = 0;
    /* The prefetcher needs this round's plan (--hints' first uses; none
     * without memory for it): without one the round runs unprefetched. */
    if (r->prefetch && r->hinted && r->plan.next && r->item == NULL)
        pf_started = pthread_create(&pf, NULL, prefetcher, r) == 0;
    for (i = 0; i < r->n_threads; i++) {
        args[i].r = r;
        args[i].id = i;
        if (pthread_create(&t[i], NULL, worker, &args[i]) != 0) break;
        started++;
    }
    while (__atomic_load_n(&r->done, __ATOMIC_RELAXED) < r->n_items && started == r->n_threads) {
        struct timespec ts = {0, 20000000};
        uint32_t errs = 0;
        for (i = 0; i < r->n_threads; i++) errs += __atomic_load_n(&r->counts[i].errors, __ATOMIC_RELAXED) != 0;
        if (errs) break;
        nanosleep(&ts, NULL);
        if (ticker && graph_now_s() - last > 0.5) {
            last = graph_now_s();
            printf("\r    %s: %5.1f %%", what, 100.0 * (double)r->done / (double)r->n_items);
            fflush(stdout);
        }
    }
    for (i = 0; i < started; i++) pthread_join(t[i], NULL);
    if (pf_started) {
        __atomic_store_n(&r->done, r->n_items, __ATOMIC_RELAXED); /* ends it, even after a worker's error */
        pthread_join(pf, NULL);
    }
    if (ticker && last > t0) printf("\r");
    if (started < r->n_threads)
        fprintf(stderr, "graph: %s: could start only %u of %u threads (out of memory or a process limit)\n", what,
                started, r->n_threads);
    return started == r->n_threads ? 0 : -1;
}

static graph_counts sum_counts(const graph_counts *c, uint32_t n) {
    graph_counts s;
    uint32_t i;
    memset(&s, 0, sizeof s);
    for (i = 0; i < n; i++) {
        s.vertices += c[i].vertices;
        s.edges += c[i].edges;
        s.bytes_needed += c[i].bytes_needed;
        s.updates += c[i].updates;
        s.full_retries += c[i].full_retries;
        if (c[i].errors && !s.errors) s.first_error = c[i].first_error;
        s.errors += c[i].errors;
    }
    return s;
}

/* ------------------------------------------------------------------------ */
/* BFS and CC through the store, each checked against its reference        */
/* ------------------------------------------------------------------------ */

typedef struct result {
    const char *name;
    double seconds, cache_mib, graph_mib;
    graph_counts counts;
    gpumem_cache_stats cs;
    gpumem_tier_stats ts; /* with a host tier */
    double host_mib;
    uint32_t host_placement;
    gpumem_swctl_stats ctl;
    uint64_t wrong, rounds;
    int ok;
    double plain_seconds; /* the same traversal over plain memory (plain_traverse), 0: not run */
    uint64_t pf_late, pf_failed; /* --prefetch: see struct run */
    /* --warm: the second pass, on the cache the first filled (warm_pass) */
    double warm_seconds;          /* 0: not run */
    unsigned long long warm_edges, warm_hits, warm_misses, warm_reads, warm_wrong;
} result;

/* Line acquires that found the line cached, in percent (0 with none). */
static double hit_percent(unsigned long long hits, unsigned long long misses) {
    return hits + misses ? 100.0 * (double)hits / (double)(hits + misses) : 0.0;
}

static void print_result(const result *x) {
    double amp = x->counts.bytes_needed ? (double)x->cs.bytes_read / (double)x->counts.bytes_needed : 0;
    printf("  %s: %s in %.2f s, %llu rounds; %llu vertices expanded, %llu edges (%.2f M edges/s)\n", x->name,
           x->ok ? "matches the in-memory reference" : "DOES NOT MATCH", x->seconds,
           (unsigned long long)x->rounds, x->counts.vertices, x->counts.edges,
           (double)x->counts.edges / x->seconds / 1e6);
    printf("    cache %.1f MiB for a %.1f MiB graph: %.1f %% hits, %llu lines read (%.1f MiB/s from storage:"
           " the file, through the page cache, read by the software controller's host thread)\n",
           x->cache_mib, x->graph_mib, hit_percent(x->cs.hits, x->cs.misses),
           (unsigned long long)x->cs.reads, (double)x->cs.bytes_read / 1048576.0 / x->seconds);
    printf("    I/O amplification %.2f (%.1f MiB read / %.1f MiB needed); controller: %llu reads, %llu violations;"
           " wrong answers: %llu\n",
           amp, (double)x->cs.bytes_read / 1048576.0, (double)x->counts.bytes_needed / 1048576.0,
           (unsigned long long)x->ctl.reads, (unsigned long long)x->ctl.violations, (unsigned long long)x->wrong);
    if (x->cs.prefetches || x->cs.prefetch_declined || x->pf_late || x->pf_failed)
        printf("    prefetch: %llu lines read ahead, %llu gave way (budget, or no slot free of lines needed"
               " sooner), %llu too late, %llu failed (left to the demand miss)\n",
               (unsigned long long)x->cs.prefetches, (unsigned long long)x->cs.prefetch_declined,
               (unsigned long long)x->pf_late, (unsigned long long)x->pf_failed);
    if (x->host_mib > 0)
        printf("    host tier %.1f MiB (%s): %llu misses served from host memory, %llu lines moved there;"
               " %llu reads reached storage\n",
               x->host_mib, gpumem_tier_placement_name(x->host_placement), (unsigned long long)x->ts.host_hits,
               (unsigned long long)x->ts.moves, (unsigned long long)x->cs.reads);
    if (x->counts.full_retries)
        printf("    %llu acquires found the cache full and were retried\n", x->counts.full_retries);
    if (x->warm_seconds > 0)
        printf("    again on the cache it filled (--warm): %s in %.2f s (%.2f M edges/s), %.1f %% hits, %llu lines"
               " read\n", x->warm_wrong ? "DOES NOT MATCH" : "matches", x->warm_seconds,
               (double)x->warm_edges / x->warm_seconds / 1e6, hit_percent(x->warm_hits, x->warm_misses), x->warm_reads);
}

static int store_failed(graph_store *s, const graph_counts *c, const char *what) {
    if (c->first_error == GPUMEM_EAGAIN)
        fprintf(stderr, "graph: %s: the cache (%u lines) is too small to make progress: it stayed full for %u"
                        " tries in a row; give it more lines (--cache-mib)\n", what, s->n_slots, GRAPH_FULL_RETRIES);
    else if (c->first_error == GPUMEM_ERANGE)
        fprintf(stderr, "graph: %s: the graph read through the cache names a vertex or edge out of range: the file"
                        " changed or is damaged\n", what);
    else
        fprintf(stderr, "graph: %s: %s\n", what, gpumem_status_str((gpumem_status)c->first_error));
    return 1;
}

/* The in-memory answers, each computed once and shared by every run that
 * needs it (the demo and the sweep run BFS from one source many times). */
typedef struct reference {
    const graph_csr *g;
    uint32_t *levels, levels_source; /* BFS from levels_source, or NULL */
    uint32_t *labels;                /* CC, or NULL */
    double *ranks;                   /* PageRank (o->iterations), or NULL */
} reference;

/* BFS's levels from `source`, or CC's labels; NULL without memory for them. */
static const uint32_t *reference_answer(reference *r, int kind, uint32_t source) {
    uint32_t **answer = kind == RUN_BFS ? &r->levels : &r->labels;
    if (*answer && (kind != RUN_BFS || r->levels_source == source)) return *answer;
    if (!*answer && !(*answer = (uint32_t *)malloc(r->g->h.n_nodes * 4))) return NULL;
    if (kind == RUN_BFS) {
        if (graph_reference_bfs(r->g, source, *answer) != GPUMEM_OK) {
            free(*answer);
            return *answer = NULL;
        }
        r->levels_source = source;
    } else {
        graph_reference_cc(r->g, *answer);
    }
    return *answer;
}

/* PageRank's ranks after `iterations`; NULL without memory for them. */
static const double *reference_ranks(reference *r, uint32_t iterations) {
    if (r->ranks) return r->ranks;
    if (!(r->ranks = (double *)malloc(r->g->h.n_nodes * sizeof(double)))) return NULL;
    if (graph_reference_pagerank(r->g, iterations, GRAPH_DAMPING, r->ranks) != GPUMEM_OK) {
        free(r->ranks);
        r->ranks = NULL;
    }
    return r->ranks;
}

/* The ranks not within GRAPH_PR_TOLERANCE of the reference's. The same sums
 * in the same order: host threads agree bit for bit; the tolerance leaves
 * room for a compiler's fused multiply-adds. */
static uint64_t ranks_wrong(const double *got, const double *want, uint64_t n) {
    uint64_t v, wrong = 0;
    for (v = 0; v < n; v++) {
        double off = got[v] - want[v];
        wrong += !((off < 0 ? -off : off) <= GRAPH_PR_TOLERANCE * want[v]);
    }
    return wrong;
}

static void reference_free(reference *r) {
    free(r->levels);
    free(r->labels);
    free(r->ranks);
    r->levels = r->labels = NULL;
    r->ranks = NULL;
}

/* A run's own arrays could not be had: say so, and fail the run (1). */
static int no_memory(const char *name, uint64_t bytes) {
    fprintf(stderr, "graph: %s: no memory for its %.1f MiB of per-vertex and per-thread arrays\n", name,
            (double)bytes / 1048576.0);
    return 1;
}

/* Between rounds (no thread in the cache): GMT-Reuse's CPU side refits the
 * host tier's reuse-distance model from the accesses sampled so far. */
static void graph_train(graph_store *s) {
    if (s->tier && s->tier->placement == GPUMEM_TIER_GMT_REUSE) gpumem_tier_train(s->tier, NULL);
}

/* The algorithm itself, on the store `s` that traverse opened: BFS from
 * `source`, CC or PageRank, each round printed as it ends, the answer
 * checked against the reference (x->wrong counts the vertices that differ).
 * x->counts and x->rounds sum what the threads did (the threads' counters
 * and BFS's level start from 0 here, so a second pass starts clean). 0, or
 * 1 if a round failed. */
static int run_algorithm(const options *o, reference *answers, int kind, uint32_t source, const char *name, run *r,
                         graph_store *s, result *x) {
    const graph_csr *ref = answers->g;
    const uint32_t *expect;
    uint64_t n = ref->h.n_nodes, v;
    int rc = 0;
    memset(r->counts, 0, o->threads * sizeof *r->counts);
    r->level = 0;
    if (kind == RUN_BFS) {
        uint32_t *tmp;
        r->levels = (uint32_t *)malloc(n * 4);
        r->frontier = (uint32_t *)malloc(n * 4);
        r->next = (uint32_t *)malloc(n * 4);
        if (!r->levels || !r->frontier || !r->next) {
            free(r->levels), free(r->frontier), free(r->next);
            return no_memory(name, 3 * n * 4);
        }
        for (v = 0; v < n; v++) r->levels[v] = GRAPH_NONE;
        r->levels[source] = 0;
        r->frontier[0] = source;
        r->n_items = 1;
        printf("  %s from vertex %llu (%llu neighbours): cache %.1f MiB, %u threads, %u queue pairs of depth %u,"
               " frontier %s\n", name, file_id(o, source),
               (unsigned long long)(ref->offsets[source + 1] - ref->offsets[source]),
               x->cache_mib, o->threads, o->pairs, o->depth, o->ordered ? "in vertex order" : "in discovery order");
        while (r->n_items > 0) {
            double tr = graph_now_s();
            char what[64];
            snprintf(what, sizeof what, "level %u", r->level);
            r->next_count = 0;
            hint_before_round(r, ref, r->level, UINT32_MAX);
            if (run_round(r, what) != 0) rc = 1;
            x->counts = sum_counts(r->counts, o->threads);
            if (rc || x->counts.errors) break;
            printf("    level %2u: %9llu vertices expanded, %9u found  (%.2f s)\n", r->level,
                   (unsigned long long)r->n_items, r->next_count, graph_now_s() - tr);
            fflush(stdout);
            graph_train(s);
            tmp = r->frontier;
            r->frontier = r->next;
            r->next = tmp;
            r->n_items = r->next_count;
            /* In vertex order, the level's lists are read in file order: each
             * line is wanted by its vertices close together in time. */
            if (o->ordered) qsort(r->frontier, r->n_items, 4, graph_cmp_u32);
            r->level++;
            x->rounds++;
        }
        if (!(expect = reference_answer(answers, RUN_BFS, source))) rc = no_memory("the BFS reference", n * 4);
        for (v = 0; expect && v < n; v++) x->wrong += r->levels[v] != expect[v];
        free(r->levels);
        free(r->frontier);
        free(r->next);
    } else if (kind == RUN_PR) {
        double *tmp;
        uint32_t it;
        r->rank = (double *)malloc(n * sizeof(double));
        r->contrib = (double *)malloc(n * sizeof(double));
        r->contrib_next = (double *)malloc(n * sizeof(double));
        if (!r->rank || !r->contrib || !r->contrib_next) {
            free(r->rank), free(r->contrib), free(r->contrib_next);
            return no_memory(name, 3 * n * sizeof(double));
        }
        r->damping = GRAPH_DAMPING;
        r->n_items = n;
        printf("  %s: pull, %u iterations, damping %.2f, cache %.1f MiB, %u threads, %u queue pairs of depth %u\n",
               name, o->iterations, GRAPH_DAMPING, x->cache_mib, o->threads, o->pairs, o->depth);
        for (it = 0; it <= o->iterations && rc == 0; it++) {
            double tr = graph_now_s();
            char what[64];
            snprintf(what, sizeof what, it ? "iteration %u" : "degrees", it);
            r->pr_start = it == 0;
            hint_before_round(r, ref, it, o->iterations);
            if (run_round(r, what) != 0) rc = 1;
            x->counts = sum_counts(r->counts, o->threads);
            if (rc || x->counts.errors) break;
            printf("    %-13s %9llu vertices, %11llu edges read  (%.2f s)\n", what, (unsigned long long)n,
                   x->counts.edges, graph_now_s() - tr);
            fflush(stdout);
            graph_train(s);
            if (it) { /* the shares just written are the next iteration's input */
                tmp = r->contrib;
                r->contrib = r->contrib_next;
                r->contrib_next = tmp;
            }
            x->rounds++;
        }
        const double *ranks = reference_ranks(answers, o->iterations);
        if (ranks) x->wrong += ranks_wrong(r->rank, ranks, n);
        else rc = no_memory("the PageRank reference", n * sizeof(double));
        free(r->rank);
        free(r->contrib);
        free(r->contrib_next);
    } else {
        uint32_t *tmp;
        r->comp = (uint32_t *)malloc(n * 4);
        r->active = (uint32_t *)malloc(n * 4);
        r->next_active = (uint32_t *)calloc(n, 4);
        if (!r->comp || !r->active || !r->next_active) {
            free(r->comp), free(r->active), free(r->next_active);
            return no_memory(name, 3 * n * 4);
        }
        for (v = 0; v < n; v++) {
            r->comp[v] = (uint32_t)v;
            r->active[v] = 1;
        }
        r->n_items = n;
        printf("  %s: label propagation, cache %.1f MiB, %u threads, %u queue pairs of depth %u\n", name,
               x->cache_mib, o->threads, o->pairs, o->depth);
        do {
            double tr = graph_now_s();
            unsigned long long before = x->counts.vertices, upd = x->counts.updates;
            char what[64];
            snprintf(what, sizeof what, "round %llu", (unsigned long long)x->rounds);
            r->changed = 0;
            hint_before_round(r, ref, (uint32_t)x->rounds, UINT32_MAX);
            if (run_round(r, what) != 0) rc = 1;
            x->counts = sum_counts(r->counts, o->threads);
            if (rc || x->counts.errors) break;
            printf("    round %2llu: %9llu vertices pushed, %9llu labels lowered  (%.2f s)\n",
                   (unsigned long long)x->rounds, x->counts.vertices - before, x->counts.updates - upd,
                   graph_now_s() - tr);
            fflush(stdout);
            graph_train(s);
            tmp = r->active;
            r->active = r->next_active;
            r->next_active = tmp; /* all zero again: worker cleared each active flag it used */
            x->rounds++;
        } while (r->changed);
        if (!(expect = reference_answer(answers, RUN_CC, 0))) rc = no_memory("the CC reference", n * 4);
        for (v = 0; expect && v < n; v++) x->wrong += r->comp[v] != expect[v];
        free(r->comp);
        free(r->active);
        free(r->next_active);
    }
    return rc;
}

/* --warm: the same traversal once more, on the cache the first pass filled
 * and with the same threads, its time and hits kept apart from the first
 * pass's (x->warm_*). With a cache that holds the whole graph every access
 * hits: set against the same traversal over plain memory, this is what the
 * cache's hits cost (BaM's Figure 9.1 comparison), with no storage time in
 * it. It runs without hints or prefetch: a cache that holds the graph has
 * nothing to choose, and the hints' epochs would start over. Its answer is
 * checked like the first; a wrong one or an error fails the run. 0, or 1. */
static int warm_pass(const options *o, reference *answers, int kind, uint32_t source, run *r, graph_store *s,
                     result *x) {
    gpumem_cache_stats before, after;
    result w;
    gpumem_cache *hinted = r->hinted;
    int prefetch = r->prefetch, rc;
    char name[128];
    double t0;
    memset(&w, 0, sizeof w);
    snprintf(name, sizeof name, "%s, again on the cache it filled", x->name);
    w.cache_mib = x->cache_mib;
    r->hinted = NULL;
    r->prefetch = 0;
    gpumem_cache_get_stats(s->cache, &before);
    t0 = graph_now_s();
    rc = run_algorithm(o, answers, kind, source, name, r, s, &w);
    x->warm_seconds = graph_now_s() - t0;
    gpumem_cache_get_stats(s->cache, &after);
    r->hinted = hinted;
    r->prefetch = prefetch;
    x->warm_edges = w.counts.edges;
    x->warm_hits = after.hits - before.hits;
    x->warm_misses = after.misses - before.misses;
    x->warm_reads = after.reads - before.reads;
    x->wrong += w.wrong;
    x->warm_wrong = w.wrong;
    if (w.counts.errors && x->counts.errors++ == 0) x->counts.first_error = w.counts.first_error;
    return rc;
}

/* Runs BFS (kind RUN_BFS, from `source`), CC or PageRank over a fresh store
 * and checks it; with o->warm, once more on the cache the first pass filled
 * (warm_pass). Returns 0 ok, 1 failed or wrong, 2 unusable arguments. */
static int traverse(const options *o, reference *answers, int kind, uint32_t source, const char *name,
                    result *x) {
    graph_store_config sc;
    graph_store s;
    run r;
    char err[512];
    double t0;
    int rc = 0;
    memset(x, 0, sizeof *x);
    memset(&r, 0, sizeof r);
    memset(&sc, 0, sizeof sc); /* every field: a later one (line_bytes) is 0 unless set */
    x->name = name;
    sc.n_pairs = o->pairs;
    sc.depth = o->depth;
    sc.cache_bytes = o->cache_bytes;
    sc.iops = o->iops;
    sc.latency_ns = 0;
    sc.policy = o->policy;
    sc.trace = NULL;
    sc.host_bytes = o->host_bytes;
    sc.host_placement = o->host_placement;
    sc.hint_slack = o->hint_slack ? o->hint_slack : graph_hint_slack(o->threads);
    if ((uint64_t)o->cache_bytes / GRAPH_LINE < 2ull * o->threads) {
        fprintf(stderr, "graph: a cache of %llu lines is too small to make progress with %u threads, which hold up to"
                        " 2 lines each: give it at least %u lines (--cache-mib %.2f) or use fewer threads\n",
                (unsigned long long)(o->cache_bytes / GRAPH_LINE), o->threads, 2 * o->threads,
                2.0 * o->threads * GRAPH_LINE / 1048576.0);
        return 2;
    }
    if (o->trace && !(sc.trace = trace_new())) return 2;
    if (graph_store_open(&s, o->path, &sc, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        trace_free(sc.trace);
        return 2;
    }
    x->cache_mib = (double)s.n_slots * GRAPH_LINE / 1048576.0;
    x->graph_mib = (double)s.h.file_bytes / 1048576.0;
    x->host_mib = s.tier ? (double)s.tier->n_slots * GRAPH_LINE / 1048576.0 : 0;
    x->host_placement = o->host_placement;
    r.store = &s;
    r.kind = kind;
    r.n_threads = o->threads;
    r.hinted = o->hints ? s.cache : NULL;
    r.prefetch = o->prefetch;
    r.counts = (graph_counts *)calloc(o->threads, sizeof *r.counts);
    t0 = graph_now_s();
    rc = r.counts ? run_algorithm(o, answers, kind, source, name, &r, &s, x) : no_memory(name, o->threads * sizeof *r.counts);
    x->seconds = graph_now_s() - t0;
    print_hints(&s);
    gpumem_cache_get_stats(s.cache, &x->cs);
    if (o->warm && rc == 0 && x->wrong == 0 && x->counts.errors == 0)
        rc = warm_pass(o, answers, kind, source, &r, &s, x);
    x->pf_late = r.pf_late;
    x->pf_failed = r.pf_failed;
    if (s.tier) gpumem_tier_get_stats(s.tier, &x->ts);
    if (s.tier ? gpumem_tier_check_quiescent(s.tier) != 0 : gpumem_cache_check_quiescent(s.cache) != 0) {
        fprintf(stderr, "graph: %s: the cache is not quiescent after the run\n", name);
        rc = 1;
    }
    gpumem_swctl_stop(s.ctl);
    gpumem_swctl_get_stats(s.ctl, &x->ctl);
    if (!rc && x->counts.errors) rc = store_failed(&s, &x->counts, name);
    graph_store_close(&s);
    hint_plan_free(&r.plan);
    free(r.counts);
    if (sc.trace && trace_save(sc.trace, o->trace) != 0) rc = 1;
    trace_free(sc.trace);
    x->ok = rc == 0 && x->wrong == 0 && x->counts.errors == 0 && x->ctl.violations == 0 && x->cs.violations == 0 &&
            x->ctl.reads == x->cs.reads + x->warm_reads;
    if (rc == 0 || x->rounds) print_result(x);
    return rc ? rc : !x->ok;
}

/* ---- the same traversal over plain memory (what the cache costs) ---------- */

/* Item i of a round, over the host's copy of the graph (r->g) instead of
 * the cache: the steps of graph.h on plain arrays, with the same atomics. */
static void plain_item(run *r, uint32_t id, uint64_t i, graph_refs *refs, graph_counts *c) {
    const graph_csr *g = r->g;
    uint32_t v = r->kind == RUN_BFS ? r->frontier[i] : (uint32_t)i, label = 0;
    uint64_t e, b = g->offsets[v], end = g->offsets[v + 1];
    double sum = 0;
    (void)id, (void)refs;
    if (r->kind == RUN_CC) {
        if (!r->active[v]) return;
        r->active[v] = 0;
        label = __atomic_load_n(&r->comp[v], __ATOMIC_RELAXED);
    }
    for (e = b; e < end; e++) {
        uint32_t u = g->edges[e], cur;
        if (r->kind == RUN_PR) {
            sum += r->contrib[u];
        } else if (r->kind == RUN_BFS) {
            cur = __atomic_load_n(&r->levels[u], __ATOMIC_RELAXED);
            if (cur == GRAPH_NONE && __atomic_compare_exchange_n(&r->levels[u], &cur, r->level + 1, 0,
                                                                 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                r->next[__atomic_fetch_add(&r->next_count, 1, __ATOMIC_RELAXED)] = u;
        } else {
            for (cur = __atomic_load_n(&r->comp[u], __ATOMIC_RELAXED); label < cur;)
                if (__atomic_compare_exchange_n(&r->comp[u], &cur, label, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                    __atomic_store_n(&r->next_active[u], 1, __ATOMIC_RELAXED);
                    __atomic_store_n(&r->changed, 1, __ATOMIC_RELAXED);
                    break;
                }
        }
    }
    if (r->kind == RUN_PR && r->pr_start) r->contrib[v] = end > b ? 1.0 / (double)g->h.n_nodes / (double)(end - b) : 0;
    else if (r->kind == RUN_PR) {
        r->rank[v] = (1.0 - r->damping) / (double)g->h.n_nodes + r->damping * sum;
        r->contrib_next[v] = end > b ? r->rank[v] / (double)(end - b) : 0.0;
    }
    c->edges += end - b;
}

/* Run the traversal `x` just made through the cache once more over plain
 * memory with the same threads, check its answer against the reference,
 * and say what the cache cost (the issue's comparison: with a cache that
 * holds the whole graph, only the cache's hits). 0, or 1 if it differs. */
static int plain_traverse(const options *o, reference *answers, int kind, uint32_t source, result *x) {
    const graph_csr *g = answers->g;
    uint64_t n = g->h.n_nodes, v, wrong = 0, edges = 0;
    uint32_t *u32[4] = {NULL, NULL, NULL, NULL}, it, i;
    double *f64[3] = {NULL, NULL, NULL}, t0, secs;
    graph_store none; /* the workers' cache references go unused: a store of nothing */
    run r;
    memset(&r, 0, sizeof r);
    memset(&none, 0, sizeof none);
    r.store = &none;
    r.kind = kind;
    r.g = g;
    r.n_threads = o->threads;
    r.item = plain_item;
    r.damping = GRAPH_DAMPING;
    r.counts = (graph_counts *)calloc(o->threads, sizeof *r.counts);
    for (i = 0; i < 4; i++) u32[i] = (uint32_t *)calloc(n, 4);
    for (i = 0; i < 3; i++) f64[i] = (double *)calloc(n, sizeof(double));
    for (i = 0; i < 4; i++) wrong += !u32[i];
    for (i = 0; i < 3; i++) wrong += !f64[i];
    if (wrong || !r.counts) {
        fprintf(stderr, "graph: no memory for the plain-memory run\n");
        wrong = 1;
        goto out;
    }
    t0 = graph_now_s();
    if (kind == RUN_BFS) {
        r.levels = u32[0], r.frontier = u32[1], r.next = u32[2];
        for (v = 0; v < n; v++) r.levels[v] = GRAPH_NONE;
        r.levels[source] = 0, r.frontier[0] = source, r.n_items = 1;
        for (; r.n_items > 0; r.level++) {
            uint32_t *tmp = r.frontier;
            r.next_count = 0;
            if (run_round(&r, "plain memory") != 0) break;
            r.frontier = r.next, r.next = tmp, r.n_items = r.next_count;
        }
    } else if (kind == RUN_PR) {
        r.rank = f64[0], r.contrib = f64[1], r.contrib_next = f64[2], r.n_items = n;
        for (it = 0; it <= o->iterations; it++) {
            r.pr_start = it == 0;
            if (run_round(&r, "plain memory") != 0) break;
            if (it) { /* the shares just written are the next iteration's input */
                double *tmp = r.contrib;
                r.contrib = r.contrib_next, r.contrib_next = tmp;
            }
        }
    } else {
        r.comp = u32[0], r.active = u32[1], r.next_active = u32[2], r.n_items = n;
        for (v = 0; v < n; v++) r.comp[v] = (uint32_t)v, r.active[v] = 1;
        do {
            uint32_t *tmp = r.active;
            r.changed = 0;
            if (run_round(&r, "plain memory") != 0) break;
            r.active = r.next_active, r.next_active = tmp;
        } while (r.changed);
    }
    secs = graph_now_s() - t0;
    for (i = 0; i < o->threads; i++) edges += r.counts[i].edges;
    if (kind == RUN_PR) {
        const double *want = reference_ranks(answers, o->iterations); /* the cached run's, so there already */
        wrong += want ? ranks_wrong(r.rank, want, n) : 1;
    } else {
        const uint32_t *want = reference_answer(answers, kind, source), *got = kind == RUN_BFS ? r.levels : r.comp;
        wrong += !want; /* the cached run's reference, so there already */
        for (v = 0; want && v < n; v++) wrong += got[v] != want[v];
    }
    printf("    the same over plain memory, %u threads: %s in %.2f s (%.2f M edges/s); through the cache it took "
           "%.2fx as long", o->threads, wrong ? "DOES NOT MATCH" : "matches", secs, (double)edges / secs / 1e6,
           x->seconds / secs);
    if (x->warm_seconds > 0)
        printf(", %.2fx again on the cache it filled (%.1f %% hits)", x->warm_seconds / secs,
               hit_percent(x->warm_hits, x->warm_misses));
    printf("\n");
    x->plain_seconds = secs;
out:
    for (i = 0; i < 4; i++) free(u32[i]);
    for (i = 0; i < 3; i++) free(f64[i]);
    free(r.counts);
    return wrong != 0;
}

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

/* Each option is a bit; each command lists the options it honours and
 * refuses the rest, so no option is silently ignored. */
enum {
    O_SCALE = 1 << 0, O_EDGE_FACTOR = 1 << 1, O_SEED = 1 << 2, O_SOURCE = 1 << 3, O_CACHE = 1 << 4,
    O_THREADS = 1 << 5, O_PAIRS = 1 << 6, O_DEPTH = 1 << 7, O_IOPS = 1 << 8, O_ORDERED = 1 << 9, O_MACHINE = 1 << 10,
    O_POLICY = 1 << 11, O_TRACE = 1 << 12, O_HOST = 1 << 13, O_PLACEMENT = 1 << 14, O_FORMAT = 1 << 15,
    O_CACHE_DIR = 1 << 16, O_MEM = 1 << 17, O_ITERATIONS = 1 << 18, O_ROW_BYTES = 1 << 19, O_BATCH = 1 << 20,
    O_BATCHES = 1 << 21, O_FANOUTS = 1 << 22, O_FEATURES = 1 << 23, O_OUT = 1 << 24, O_HINTS = 1 << 25,
    O_LOOKAHEAD = 1 << 26, O_PREFETCH = 1 << 27, O_WARM = 1 << 28, O_HINT_SLACK = 1 << 29, O_WEIGHTS = 1 << 30
};
static const cli_option option_docs[] = {
    {"--scale", "S", "generate 2^S vertices, S in 10..30 (default 20)", O_SCALE},
    {"--edge-factor", "E", "edges sampled per vertex, 1..64 (default 16)", O_EDGE_FACTOR},
    {"--seed", "X", "generator seed; also picks the BFS source and gnn's seed vertices", O_SEED},
    {"--source", "V", "BFS source vertex (default: a vertex with more than 2 neighbours)", O_SOURCE},
    {"--cache-mib", "M", "cache size in MiB (demo: the small cache, default 1/8 of the graph; gnn: the feature\n"
                         "                       cache, default 1/8 of the table)", O_CACHE},
    {"--threads", "T", "host threads, 1..1024 (default 16)", O_THREADS},
    CLI_PAIRS_DOCS(O_PAIRS, O_DEPTH, O_IOPS, "4"),
    {"--ordered", NULL, "expand each BFS level in vertex order", O_ORDERED},
    {"--machine", "TEXT", "write TEXT into the table as the machine it ran on", O_MACHINE},
    {"--policy", "P", "the cache's replacement policy: brrip (default), clock, fifo, srrip, hinted-rrip, or a\n"
                      "                       sequential one: lru, lfu, cp, hpe, tournament, hinted (gpumem_policy.h)",
     O_POLICY},
    {"--trace", "OUT", "record the cache's accesses to OUT (bench/policy_sim's binary trace format; gnn: the\n"
                       "                       feature cache's, with its hints)", O_TRACE},
    {"--host-mib", "M", "a host-memory tier of M MiB below the cache (gpumem_tier.h); 0: none (the default; demo:\n"
                        "                       4x the small cache, and it shows the storage reads without and with it)",
     O_HOST},
    {"--placement", "P", "the host tier's placement: gmt-reuse (default), tier-order or never-host", O_PLACEMENT},
    {"--format", "F", "the input's format: el, wel, sg, wsg, snap (or txt), mtx (or mm), graph (default: by the\n"
                      "                       extension; a file starting with the gpumem magic is a graph)", O_FORMAT},
    {"--cache-dir", "DIR", "keep converted inputs (and gnn's feature tables) here, reused while the input's size and\n"
                           "                       mtime hold (default build)",
     O_CACHE_DIR},
    {"--mem-mib", "M", "memory for the conversion's sort, at least 1 (default 256); larger inputs spill sorted runs",
     O_MEM},
    {"--iterations", "N", "PageRank iterations, 1..1000 (default 20)", O_ITERATIONS},
    {"--row-bytes", "F", "gnn: bytes of a feature row, 256..16384, a multiple of 256 (default 4096, GIDS's)",
     O_ROW_BYTES},
    {"--batch", "B", "gnn: seed vertices a mini-batch, 1..65536 (default 128)", O_BATCH},
    {"--batches", "N", "gnn: mini-batches, 1..100000 (default 20)", O_BATCHES},
    {"--fanouts", "F1,F2", "gnn: neighbours sampled per vertex at each hop, 1..4 hops of 1..64 (default 10,5)",
     O_FANOUTS},
    {"--features", "FILE", "gnn: the feature table's file, written there if missing (default: one in --cache-dir)",
     O_FEATURES},
    {"--out", "FILE", "write every vertex's answer to FILE, in the input's ids, after a checked run: \"vertex level\"\n"
                      "                       (bfs; - unreached), \"vertex component\" (cc: its smallest vertex) or\n"
                      "                       \"vertex rank\" (pagerank), a tab between; written whole or not at all",
     O_OUT},
    {"--hints", "on|off", "tell the cache each round's next uses (default on where the policy takes them or\n"
                          "                       --trace records them; with no --policy the cache's policy is then\n"
                          "                       hinted-rrip, the lock-free slot kind; --policy hinted: the sequential\n"
                          "                       one, gpumem_policy.h)", O_HINTS},
    {"--prefetch", "on|off", "one more thread reads each round's lines ahead of the workers, at most one wave\n"
                             "                       ahead, never evicting a line needed sooner (default off;\n"
                             "                       implies --hints on, whose plan it reads)", O_PREFETCH},
    {"--lookahead", "K", "gnn: sample the next K mini-batches ahead, 0..64 (default 0), and hint the feature cache\n"
                         "                       with each row's next use among them (with no --policy, its policy is\n"
                         "                       then hinted); the batches and rows are the same for every K",
     O_LOOKAHEAD},
    {"--weights", "on|off", "gnn: tell the feature cache each line's weight, how often the sampler draws its rows\n"
                            "                       a batch (graph_gnn_expected_draws): the hinted policy keeps the\n"
                            "                       heavier of the lines no batch in the window names (default on with\n"
                            "                       --lookahead K > 0; on with K = 0: weights alone; policy hinted)",
     O_WEIGHTS},
    {"--hint-slack", "N", "bfs, cc, pagerank: chunks of 64 items a use may come before or after its hint and\n"
                          "                       still prove it right (--policy hinted; 1..1048576, default\n"
                          "                       max(32, 4 x threads), chosen on kron18 with a 4 MiB cache: a smaller\n"
                          "                       graph and cache may want less, docs/graph.md)", O_HINT_SLACK},
    {"--warm", "on|off", "run the traversal once more on the cache the first pass filled, and say what that pass\n"
                         "                       cost against plain memory (default off; with a cache that holds the\n"
                         "                       graph, what the cache's hits cost)", O_WARM},
};
#define RUN_OPTS (O_CACHE | O_THREADS | O_PAIRS | O_DEPTH | O_IOPS | O_POLICY | O_HOST | O_PLACEMENT)
#define INPUT_OPTS (O_FORMAT | O_CACHE_DIR | O_MEM) /* commands that read a graph in any format */
static const cli_command commands[] = {
    {"demo", "[FILE]", "generate FILE (default build/kron.graph) if missing, then BFS with a cache smaller than\n"
                       "  the graph (frontier in discovery and in vertex order), with one that holds it, and CC",
     0, 1, O_SCALE | O_EDGE_FACTOR | O_SEED | O_SOURCE | RUN_OPTS},
    {"gen", "FILE", "write a Kronecker graph (GAP-kron parameters) to FILE", 1, 1, O_SCALE | O_EDGE_FACTOR | O_SEED},
    {"bfs", "FILE", "one BFS through cache, queue pairs and controller, checked (--source in the file's ids)", 1, 1,
     O_SEED | O_SOURCE | O_ORDERED | O_TRACE | O_OUT | O_HINTS | O_PREFETCH | O_HINT_SLACK | O_WARM | RUN_OPTS |
         INPUT_OPTS},
    {"cc", "FILE", "connected components (label propagation), checked; ends with \"N components\" and the\n"
                   "  largest one's size", 1, 1,
     O_TRACE | O_OUT | O_HINTS | O_PREFETCH | O_HINT_SLACK | O_WARM | RUN_OPTS | INPUT_OPTS},
    {"pagerank", "FILE", "PageRank, pull, damping 0.85, a fixed number of iterations, checked against the\n"
                         "  in-memory reference (each rank within 1e-9 of it, relative); prints the five highest", 1, 1,
     O_ITERATIONS | O_TRACE | O_OUT | O_HINTS | O_PREFETCH | O_HINT_SLACK | O_WARM | RUN_OPTS | INPUT_OPTS},
    {"policies", "FILE", "BFS and CC with a cache an eighth of the graph (or --cache-mib) under CLOCK and under\n"
                         "  --policy, one after the other: hit rate and line reads of each", 1, 1,
     O_SEED | O_SOURCE | RUN_OPTS | INPUT_OPTS},
    {"sweep", "FILE OUT.tsv", "I/O amplification and hit rate against cache size, as a table", 2, 2,
     O_SEED | O_SOURCE | O_MACHINE | (RUN_OPTS & ~O_CACHE) | INPUT_OPTS},
    {"gnn", "FILE", "GNN mini-batches: sample the neighbours of --batch seeds through the graph's cache (1/8 of\n"
                    "  the graph), then gather every sampled vertex's feature row three ways, each row checked\n"
                    "  against the generator and each batch's hash compared: (a) through a cache (--cache-mib,\n"
                    "  default 1/8 of the table), (b) by direct reads on the queue pairs, (c) by host threads'\n"
                    "  pread (a GDS-like path); rows/s, bytes read against needed, hit rate", 1, 1,
     O_SEED | O_ROW_BYTES | O_BATCH | O_BATCHES | O_FANOUTS | O_FEATURES | O_LOOKAHEAD | O_WEIGHTS | O_TRACE |
         RUN_OPTS | INPUT_OPTS},
    {"gnn-sweep", "FILE OUT.tsv", "gnn's rows/s in each mode against the feature cache's size (1/32 of the\n"
                                  "  table to all of it) and the row size (256 B to 16 KiB), as a table", 2, 2,
     O_SEED | O_MACHINE | O_ROW_BYTES | O_BATCH | O_BATCHES | O_FANOUTS | (RUN_OPTS & ~O_CACHE) | INPUT_OPTS},
    {"convert", "IN OUT", "convert a GAP .el/.wel/.sg/.wsg, SNAP or Matrix Market file into this tool's CSR file\n"
                          "  (written atomically; SNAP's id map to OUT.ids); prints what it removed and added", 2, 2,
     O_FORMAT | O_MEM},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const cli_tool tool = {"graph", commands, N_COMMANDS, option_docs, sizeof option_docs / sizeof option_docs[0],
                              "graph COMMAND --help: that command's options. Exit status: 0 ok, 1 a run failed or"
                              " disagreed with the reference,\n2 bad arguments or an unusable graph file.\n"};
#define bad_args(cmd, ...) cli_bad_args(&tool, cmd, __VA_ARGS__)
#define check_writable(cmd, path) cli_check_writable(&tool, cmd, path)

/* argv[1] is the command. Every option is checked against the command, every
 * value against its range, and the cache against the threads, before any work. */
static int parse(int argc, char **argv, options *o, const cli_command **cmd_out, int *help) {
    const char *files[2] = {NULL, NULL};
    int i, n_files = 0, rc;
    const cli_command *cmd = cli_command_of(&tool, argc, argv, help, &rc);
    if (!cmd) return rc;
    *cmd_out = cmd;
    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *value;
        const cli_option *od;
        uint64_t v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            return 0;
        }
        if (a[0] != '-' || !a[1]) {
            if (n_files == cmd->files_max)
                return bad_args(cmd, "%s takes %s; '%s' is one file too many", cmd->name, cmd->args, a);
            files[n_files++] = a;
            continue;
        }
        if (!(od = cli_option_of(&tool, cmd, argc, argv, &i, &value, &rc))) return rc;
        if (!od->arg) {
            o->ordered = 1;
            continue;
        }
        a = value;
        o->given |= (int)od->bit;
        if (od->bit == O_MACHINE) {
            o->machine = a;
        } else if (od->bit == O_TRACE) {
            o->trace = a;
        } else if (od->bit == O_OUT) {
            o->answer_out = a;
        } else if (od->bit == O_CACHE_DIR) {
            o->cache_dir = a;
        } else if (od->bit == O_FEATURES) {
            o->features = a;
        } else if (od->bit == O_HINTS) {
            if (strcmp(a, "on") && strcmp(a, "off")) return bad_args(cmd, "--hints %s: want on or off", a);
            o->hints = !strcmp(a, "on");
        } else if (od->bit == O_WEIGHTS) {
            if (strcmp(a, "on") && strcmp(a, "off")) return bad_args(cmd, "--weights %s: want on or off", a);
            o->weights = !strcmp(a, "on");
        } else if (od->bit == O_PREFETCH) {
            if (strcmp(a, "on") && strcmp(a, "off")) return bad_args(cmd, "--prefetch %s: want on or off", a);
            o->prefetch = !strcmp(a, "on");
        } else if (od->bit == O_WARM) {
            if (strcmp(a, "on") && strcmp(a, "off")) return bad_args(cmd, "--warm %s: want on or off", a);
            o->warm = !strcmp(a, "on");
        } else if (od->bit == O_FANOUTS) {
            const char *q = a;
            o->plan.n_hops = 0;
            for (;;) {
                char *end;
                unsigned long f;
                errno = 0;
                f = strtoul(q, &end, 10);
                if (errno || end == q || !isdigit((unsigned char)*q) || f < 1 || f > GRAPH_GNN_MAX_FANOUT ||
                    o->plan.n_hops == GRAPH_GNN_MAX_HOPS || (*end && *end != ','))
                    return bad_args(cmd, "--fanouts %s: want 1..%u numbers, each 1..%u, separated by commas (10,5)",
                                    a, GRAPH_GNN_MAX_HOPS, GRAPH_GNN_MAX_FANOUT);
                o->plan.fanout[o->plan.n_hops++] = (uint32_t)f;
                if (!*end) break;
                q = end + 1;
            }
            o->plan.per_seed = graph_gnn_per_seed(&o->plan);
        } else if (od->bit == O_FORMAT) {
            if ((o->format = graph_format_from_name(a)) < 0)
                return bad_args(cmd, "--format %s: want el, wel, sg, wsg, snap, mtx or graph", a);
        } else if (od->bit == O_MEM) {
            char *end;
            double mib = strtod(a, &end);
            if (end == a || *end || !(mib >= 1) || mib > 1048576.0)
                return bad_args(cmd, "--mem-mib %s: want a size in MiB, at least 1", a);
            o->mem_bytes = (uint64_t)(mib * 1048576.0);
        } else if (od->bit == O_POLICY) {
            for (o->policy = GPUMEM_POLICY_FIRST; o->policy < GPUMEM_POLICY_KINDS; o->policy++)
                if (!strcmp(a, gpumem_policy_name(o->policy))) break;
            if (o->policy == GPUMEM_POLICY_KINDS)
                return bad_args(cmd, "--policy %s: want brrip, clock, fifo, srrip, hinted-rrip, lru, lfu, cp, hpe, "
                                     "tournament or hinted", a);
        } else if (od->bit == O_PLACEMENT) {
            for (o->host_placement = 0; o->host_placement < GPUMEM_TIER_PLACEMENTS; o->host_placement++)
                if (!strcmp(a, gpumem_tier_placement_name(o->host_placement))) break;
            if (o->host_placement == GPUMEM_TIER_PLACEMENTS)
                return bad_args(cmd, "--placement %s: want gmt-reuse, tier-order or never-host", a);
        } else if (od->bit == O_CACHE || od->bit == O_HOST) {
            char *end;
            double mib = strtod(a, &end);
            if (end == a || *end || !(mib > 0 || (od->bit == O_HOST && mib == 0)) || mib > 1048576.0)
                return bad_args(cmd, "%s %s: want a size in MiB, %s", od->name, a, od->bit == O_HOST ? ">= 0" : "> 0");
            if (od->bit == O_CACHE) o->cache_bytes = (uint64_t)(mib * 1048576.0);
            else o->host_bytes = (uint64_t)(mib * 1048576.0);
        } else if (od->bit == O_HINT_SLACK) {
            if (cli_parse_u64(a, 1, 1u << 20, &v) != 0)
                return bad_args(cmd, "--hint-slack %s: want 1..1048576 chunks", a);
            o->hint_slack = (uint32_t)v;
        } else if (od->bit == O_LOOKAHEAD) {
            if (cli_parse_u64(a, 0, GRAPH_GNN_MAX_LOOKAHEAD, &v) != 0)
                return bad_args(cmd, "--lookahead %s: want 0..%u mini-batches", a, GRAPH_GNN_MAX_LOOKAHEAD);
            o->lookahead = (uint32_t)v;
        } else if (cli_parse_u64(a, 0, UINT64_MAX, &v) != 0) {
            return bad_args(cmd, "%s %s: not a number", od->name, a);
        } else if (od->bit == O_SCALE) {
            if (v < 10 || v > 30) return bad_args(cmd, "--scale %s: want 10..30", a);
            o->scale = (uint32_t)v;
        } else if (od->bit == O_EDGE_FACTOR) {
            if (v < 1 || v > 64) return bad_args(cmd, "--edge-factor %s: want 1..64", a);
            o->edge_factor = (uint32_t)v;
        } else if (od->bit == O_THREADS) {
            if (v < 1 || v > 1024) return bad_args(cmd, "--threads %s: want 1..1024", a);
            o->threads = (uint32_t)v;
        } else if (od->bit == O_ROW_BYTES) {
            if (v > GRAPH_GNN_MAX_ROW || graph_features_row_problem((uint32_t)v))
                return bad_args(cmd, "--row-bytes %s: %s", a, graph_features_row_problem(0));
            o->row_bytes = (uint32_t)v;
        } else if (od->bit == O_BATCH) {
            if (v < 1 || v > 65536) return bad_args(cmd, "--batch %s: want 1..65536", a);
            o->batch = (uint32_t)v;
        } else if (od->bit == O_BATCHES) {
            if (v < 1 || v > 100000) return bad_args(cmd, "--batches %s: want 1..100000", a);
            o->batches = (uint32_t)v;
        } else if (od->bit == O_ITERATIONS) {
            if (v < 1 || v > 1000) return bad_args(cmd, "--iterations %s: want 1..1000", a);
            o->iterations = (uint32_t)v;
        } else if (od->bit == O_SOURCE) {
            o->source = o->source_id = v; /* in the file's ids: checked once the graph is known */
        } else if (od->bit == O_SEED) {
            o->seed = v;
        } else if ((rc = cli_pairs_value(&tool, cmd, od->name, a, v, GRAPH_MAX_PAIRS, &o->pairs, &o->depth,
                                         &o->iops)) != 0) {
            return rc; /* --pairs, --depth, --iops */
        }
    }
    if (n_files < cmd->files_min) return bad_args(cmd, "%s: name %s", cmd->name, cmd->args);
    if ((uint64_t)o->batch * o->plan.per_seed > (16u << 20))
        return bad_args(cmd, "--batch %u with --fanouts giving %u vertices a seed: %llu a batch, at most %u", o->batch,
                        o->plan.per_seed, (unsigned long long)o->batch * o->plan.per_seed, 16u << 20);
    o->path = o->input = files[0];
    o->out = files[1];
    /* Each thread holds up to 2 lines (the offsets' and the edges'). */
    if ((o->given & O_CACHE) && o->cache_bytes / GRAPH_LINE < 2ull * o->threads)
        return bad_args(cmd, "--cache-mib: a cache of %llu lines is too small for %u threads, which hold up to 2 lines"
                             " each: give it at least %u lines (--cache-mib %.2f) or use fewer threads",
                        (unsigned long long)(o->cache_bytes / GRAPH_LINE), o->threads, 2 * o->threads,
                        2.0 * o->threads * GRAPH_LINE / 1048576.0);
    return 0;
}

static int generate(const options *o) {
    graph_csr g;
    char err[512];
    double t0 = graph_now_s();
    gpumem_status st;
    printf("  generating a Kronecker graph: scale %u (%llu vertices), edge factor %u, A=0.57 B=C=0.19 (GAP-kron)\n",
           o->scale, 1ull << o->scale, o->edge_factor);
    fflush(stdout);
    if ((st = graph_generate_kron(o->scale, o->edge_factor, o->seed, &g, say)) != GPUMEM_OK) {
        fprintf(stderr, "graph: generating: %s\n", gpumem_status_str(st));
        return 1;
    }
    if (graph_write(o->path, &g, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        graph_free(&g);
        return 1;
    }
    printf("  wrote %s: %llu vertices, %llu directed edges, %.1f MiB, in %.1f s\n", o->path,
           (unsigned long long)g.h.n_nodes, (unsigned long long)g.h.n_edges, (double)g.h.file_bytes / 1048576.0,
           graph_now_s() - t0);
    graph_free(&g);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Speaking the input's language: its name, its ids (issue 45)              */
/* ------------------------------------------------------------------------ */

/* After a message about o->path: which input it is the conversion of, so
 * that an error names the file the user gave ("" when that is o->path). */
static const char *converted_from(const options *o) {
    static char text[4400];
    if (!o->input || !strcmp(o->input, o->path)) return "";
    snprintf(text, sizeof text, " (the conversion of %s)", o->input);
    return text;
}

/* --source names no vertex: said in the file's ids and about the file the
 * user named, with the range its ids take (n vertices in the tool's ids; 0
 * when not known). Exit 2. */
static int no_such_source(const cli_command *cmd, const options *o, uint64_t n) {
    const char *in = o->input ? o->input : o->path;
    if (n == 0)
        return bad_args(cmd, "--source %llu: no such vertex in %s", (unsigned long long)o->source_id, in);
    return bad_args(cmd, "--source %llu: no such vertex in %s: its %llu vertices are %llu..%llu%s",
                    (unsigned long long)o->source_id, in, (unsigned long long)n, file_id(o, 0), file_id(o, n - 1),
                    o->ids ? ", the ids its lines name (not every id between)" : "");
}

/* --out: every vertex's answer, in the input's ids, one "vertex<TAB>value"
 * a line after a comment line saying what the values are; written to a
 * temporary file and renamed, so FILE is whole or untouched. 0, or 1 after
 * a message. */
static int write_answers(const options *o, const reference *a, int kind, uint32_t source) {
    char tmp[4400];
    uint64_t n = a->g->h.n_nodes, v;
    FILE *f;
    int ok;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", o->answer_out, (long)getpid()) >= (int)sizeof tmp ||
        !(f = fopen(tmp, "w"))) {
        fprintf(stderr, "graph: --out %s: %s\n", o->answer_out, strerror(errno));
        return 1;
    }
    if (kind == RUN_BFS)
        fprintf(f, "# gpumem graph bfs %s from vertex %llu: vertex, level (hops from the source; - unreached)\n",
                o->input, file_id(o, source));
    else if (kind == RUN_CC)
        fprintf(f, "# gpumem graph cc %s: vertex, component (its smallest vertex)\n", o->input);
    else
        fprintf(f, "# gpumem graph pagerank %s: vertex, rank (%u iterations, damping 0.85)\n", o->input, o->iterations);
    for (v = 0; v < n; v++) {
        if (kind == RUN_BFS && a->levels[v] == GRAPH_NONE) fprintf(f, "%llu\t-\n", file_id(o, v));
        else if (kind == RUN_BFS) fprintf(f, "%llu\t%u\n", file_id(o, v), a->levels[v]);
        else if (kind == RUN_CC) fprintf(f, "%llu\t%llu\n", file_id(o, v), file_id(o, a->labels[v]));
        else fprintf(f, "%llu\t%.17g\n", file_id(o, v), a->ranks[v]);
    }
    ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, o->answer_out) != 0) {
        fprintf(stderr, "graph: --out %s: %s (nothing written)\n", o->answer_out, strerror(errno));
        unlink(tmp);
        return 1;
    }
    printf("graph: wrote %llu vertices' answers to %s\n", (unsigned long long)n, o->answer_out);
    return 0;
}

static int load_reference(const options *o, graph_csr *g) {
    char err[512];
    gpumem_status st = graph_load(o->path, g, err, sizeof err);
    if (st == GPUMEM_OK) return 0;
    fprintf(stderr, "graph: %s%s\n", err, converted_from(o));
    return 2;
}

/* The checks of a command's files that need no work: a graph file's header
 * (read, not the graph), the source vertex against it, and that outputs can
 * be written. Returns 0, or 2 after a message. */
static int check_files(const cli_command *cmd, options *o) {
    graph_header h;
    char err[512];
    int fd, rc = 0;
    if (!strcmp(cmd->name, "gen")) return check_writable(cmd, o->path);
    if ((!strcmp(cmd->name, "sweep") || !strcmp(cmd->name, "gnn-sweep")) && (rc = check_writable(cmd, o->out)) != 0)
        return rc;
    if (!strcmp(cmd->name, "demo") && access(o->path, F_OK) != 0) { /* demo generates a missing file */
        if ((o->given & O_SOURCE) && o->source >= (1ull << o->scale))
            return bad_args(cmd, "--source %llu: no such vertex (a scale-%u graph has %llu)",
                            (unsigned long long)o->source, o->scale, 1ull << o->scale);
        return check_writable(cmd, o->path);
    }
    if (o->answer_out && (rc = check_writable(cmd, o->answer_out)) != 0) return rc;
    if ((fd = open(o->path, O_RDONLY)) < 0) {
        fprintf(stderr, "graph: %s: %s%s\n", o->path, strerror(errno), converted_from(o));
        return 2;
    }
    if (graph_read_header(fd, o->path, &h, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s%s\n", err, converted_from(o));
        rc = 2;
    } else if ((o->given & O_SOURCE) && o->source >= h.n_nodes) {
        rc = no_such_source(cmd, o, h.n_nodes);
    } else if (!strcmp(cmd->name, "demo") && (((o->given & O_SCALE) && h.scale != o->scale) ||
                                              ((o->given & O_EDGE_FACTOR) && h.edge_factor != o->edge_factor) ||
                                              ((o->given & O_SEED) && h.seed != o->seed))) {
        /* The options describe a graph to generate; this file is another. */
        rc = bad_args(cmd, "%s holds the graph of scale %u, edge factor %u, seed %llu, not the one the options ask"
                           " for: name a FILE that does not exist yet and demo generates it there",
                      o->path, h.scale, h.edge_factor, (unsigned long long)h.seed);
    }
    close(fd);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Inputs in other formats: converted once, reused while unchanged          */
/* ------------------------------------------------------------------------ */

static void say_converting(const graph_import *im, double frac) {
    double s = graph_now_s() - im->t0;
    char size[32];
    /* At 100 % the input is read and the output's size known (its room
     * checked): said before the writing starts, which may take a while. */
    printf("  converting %s: %3.0f %% of %.1f MB, %llu edges, %.1f MB/s%s%s%s\n", im->in_path, 100.0 * frac,
           (double)im->input_bytes / 1e6, (unsigned long long)im->input_edges,
           s > 0 ? frac * (double)im->input_bytes / 1e6 / s : 0.0, frac >= 1.0 && im->out_bytes ? "; writing up to " : "",
           frac >= 1.0 && im->out_bytes ? graph__size_str(im->out_bytes, size, sizeof size) : "",
           frac >= 1.0 && im->out_bytes ? " to the output" : "");
    fflush(stdout);
}

/* IN to OUT, the sorted runs spilling next to OUT. 0, or 2 after a message. */
static int convert(const options *o, const char *in, const char *out, int format) {
    graph_import im;
    char err[1024], dir[4096];
    const char *slash = strrchr(out, '/');
    int rc = 0;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - out == 0 ? 1 : slash - out), out);
    else snprintf(dir, sizeof dir, ".");
    graph_import_init(&im, in, out, format);
    im.mem_bytes = o->mem_bytes;
    im.tmp_dir = dir;
    im.progress = say_converting;
    if (graph_import_run(&im, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        rc = 2;
    } else {
        graph_import_print_summary(&im, stdout);
    }
    graph_import_free(&im);
    return rc;
}

/* What the cache remembers of an input: its size, mtime and format. */
static void input_stamp(const struct stat *sb, int format, char *buf, size_t n) {
    snprintf(buf, n, "gpumem-import size %lld mtime %lld.%09ld format %s\n", (long long)sb->st_size,
             (long long)sb->st_mtim.tv_sec, (long)sb->st_mtim.tv_nsec, graph_format_name(format));
}

/* For bfs, cc, pagerank, policies and sweep: a FILE in another format is
 * converted into --cache-dir (named by its base name and a hash of its
 * path), unless the conversion there was made from this very input (size,
 * mtime and format in FILE.src beside it). o->path becomes the converted
 * file; --source is turned from the file's ids into the tool's. 0 or 2. */
static int resolve_input(const cli_command *cmd, options *o, char *conv, size_t conv_len) {
    char stamp[256], had[256], src[4400], tmp[4500], err[512];
    const char *base = strrchr(o->path, '/') ? strrchr(o->path, '/') + 1 : o->path;
    struct stat sb;
    int format = o->format, fd, rc;
    ssize_t got;
    if (stat(o->path, &sb) != 0) return 0; /* check_files says what is wrong */
    if (format == GRAPH_FMT_AUTO)
        format = graph_is_native(o->path) ? GRAPH_FMT_NATIVE : graph_format_of_path(o->path);
    if (format < 0)
        return bad_args(cmd, "%s: cannot tell the format from the extension: expected .graph, .el, .wel, .sg, .wsg,"
                             " .txt/.snap or .mtx/.mm, or --format", o->path);
    if (format != GRAPH_FMT_NATIVE) {
        uint64_t file[2] = {(uint64_t)sb.st_dev, (uint64_t)sb.st_ino}; /* this file, wherever it is named from */
        uint64_t h = graph_hash(0x696D706F7274ull, file, sizeof file);
        if (mkdir(o->cache_dir, 0755) != 0 && errno != EEXIST)
            return bad_args(cmd, "--cache-dir %s: %s", o->cache_dir, strerror(errno));
        if (snprintf(conv, conv_len, "%s/%s-%016llx.graph", o->cache_dir, base, (unsigned long long)h) >= (int)conv_len)
            return bad_args(cmd, "--cache-dir %s: path too long", o->cache_dir);
        if ((rc = check_writable(cmd, conv)) != 0) return rc;
        if (snprintf(src, sizeof src, "%s.src", conv) >= (int)sizeof src) return bad_args(cmd, "path too long");
        input_stamp(&sb, format, stamp, sizeof stamp);
        had[0] = 0;
        if ((fd = open(src, O_RDONLY)) >= 0) {
            got = read(fd, had, sizeof had - 1);
            had[got > 0 ? got : 0] = 0;
            close(fd);
        }
        if (!strcmp(had, stamp) && graph_is_native(conv)) {
            printf("  %s: reusing its conversion %s (size and mtime unchanged)\n", o->path, conv);
        } else {
            unlink(src); /* the old conversion no longer stands for this input */
            if ((rc = convert(o, o->path, conv, format)) != 0) return rc;
            if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", src, (long)getpid()) >= (int)sizeof tmp ||
                (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0 ||
                write(fd, stamp, strlen(stamp)) != (ssize_t)strlen(stamp) || close(fd) != 0 || rename(tmp, src) != 0) {
                fprintf(stderr, "graph: %s: %s (the conversion is not kept)\n", src, strerror(errno));
                unlink(tmp);
            }
        }
        o->path = conv;
        o->id_base = format == GRAPH_FMT_MTX;
    }
    if (snprintf(src, sizeof src, "%s.ids", o->path) >= (int)sizeof src) return bad_args(cmd, "path too long");
    if (graph_ids_load(src, &o->ids, &o->n_ids, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        return 2;
    }
    if (o->given & O_SOURCE) { /* the file's id to the tool's */
        uint64_t v = o->ids ? graph_ids_find(o->ids, o->n_ids, o->source)
                            : o->source >= o->id_base ? o->source - o->id_base : UINT64_MAX;
        if (v >= GRAPH_NONE && o->ids) return no_such_source(cmd, o, o->n_ids);
        o->source = v; /* below the first id: check_files, which knows the vertex count, says so */
    }
    return 0;
}

/* The answers, in the file's ids, after a checked run. */
static void print_answers(const options *o, const reference *a, int kind, uint32_t source) {
    uint64_t n = a->g->h.n_nodes, v, reached = 0, count = 0, best = 0;
    uint32_t deepest = 0;
    if (kind == RUN_BFS && a->levels) {
        for (v = 0; v < n; v++)
            if (a->levels[v] != GRAPH_NONE) {
                reached++;
                if (a->levels[v] > deepest) deepest = a->levels[v];
            }
        printf("BFS: from vertex %llu, %llu of %llu vertices reached, the farthest %u hops away\n",
               file_id(o, source), (unsigned long long)reached, (unsigned long long)n, deepest);
    } else if (kind == RUN_CC && a->labels) {
        uint32_t *size = (uint32_t *)calloc(n, 4);
        for (v = 0; v < n; v++) {
            count += a->labels[v] == v; /* each component is labelled by its smallest vertex */
            if (size && ++size[a->labels[v]] > size[best]) best = a->labels[v];
        }
        printf("CC: %llu components, the largest has %u vertices (it holds vertex %llu)\n", (unsigned long long)count,
               size ? size[best] : 0, file_id(o, best));
        free(size);
    } else if (kind == RUN_PR && a->ranks) {
        uint64_t top[5] = {0};
        int k, i, have = 0;
        double sum = 0;
        for (v = 0; v < n; v++) { /* the five highest, by insertion */
            sum += a->ranks[v];
            for (k = 0; k < have && a->ranks[top[k]] >= a->ranks[v]; k++) {}
            if (k == 5) continue;
            for (i = have < 5 ? have : 4; i > k; i--) top[i] = top[i - 1];
            top[k] = v;
            if (have < 5) have++;
        }
        printf("PageRank: ranks sum to %.6f; highest:", sum);
        for (k = 0; k < have; k++) printf(" %llu (%.6g)", file_id(o, top[k]), a->ranks[top[k]]);
        printf("\n");
    }
}

static uint32_t source_of(const options *o, const graph_csr *g) {
    return (o->given & O_SOURCE) ? (uint32_t)o->source : graph_pick_source(g, o->seed);
}

#define DEMO_RUNS 6 /* the last two with the host tier */
static int demo(options *o) {
    graph_csr g;
    reference answers = {&g, NULL, 0, NULL, NULL};
    result x[DEMO_RUNS];
    uint64_t graph_bytes, small, min_cache, host;
    uint32_t source;
    char names[DEMO_RUNS][96], small_name[40];
    int rc = 0, i, n_runs = 0, planned;
    double t0 = graph_now_s();
    printf("gpumem %s graph demo: BFS and connected components through cache, queue pairs and the software NVMe"
           " controller\n", GPUMEM_VERSION_STRING);
    if (access(o->path, F_OK) != 0) {
        printf("  %s is missing: generating it\n", o->path);
        if ((rc = generate(o)) != 0) return rc;
    }
    if ((rc = load_reference(o, &g)) != 0) return rc;
    graph_bytes = g.h.file_bytes;
    printf("  %s: %llu vertices, %llu directed edges, %.1f MiB (checked: hash and CSR structure)\n", o->path,
           (unsigned long long)g.h.n_nodes, (unsigned long long)g.h.n_edges, (double)graph_bytes / 1048576.0);
    source = source_of(o, &g);
    /* The small cache: --cache-mib, or an eighth of the graph but never under
     * the 2 lines per thread that progress needs (small graphs). */
    min_cache = 2ull * o->threads * GRAPH_LINE;
    small = (o->given & O_CACHE) ? o->cache_bytes : GPUMEM_ALIGN_UP(graph_bytes / 8, GRAPH_LINE);
    if (small < min_cache) {
        printf("  1/8 of the graph is under 2 cache lines per thread: the small cache is %.2f MiB\n",
               (double)min_cache / 1048576.0);
        small = min_cache;
    }
    if ((o->given & O_CACHE) || small != GPUMEM_ALIGN_UP(graph_bytes / 8, GRAPH_LINE))
        snprintf(small_name, sizeof small_name, "cache %.4g MiB", (double)small / 1048576.0);
    else
        snprintf(small_name, sizeof small_name, "cache 1/8");
    snprintf(names[0], sizeof names[0], "BFS, %s", small_name);
    snprintf(names[1], sizeof names[1], "BFS, %s, ordered", small_name);
    snprintf(names[2], sizeof names[2], "BFS, cache holds graph");
    snprintf(names[3], sizeof names[3], "CC, %s", small_name);
    /* The host tier: --host-mib, or GMT's proportion, 4x the GPU tier. */
    host = (o->given & O_HOST) ? o->host_bytes : 4 * small;
    snprintf(names[4], sizeof names[4], "BFS, %s + host %.4g MiB", small_name, (double)host / 1048576.0);
    snprintf(names[5], sizeof names[5], "CC, %s + host %.4g MiB", small_name, (double)host / 1048576.0);
    planned = host ? DEMO_RUNS : DEMO_RUNS - 2;
    /* BFS with the small cache (frontier in discovery order, as BaM's BFS,
     * then in vertex order), with a cache that holds the whole graph, and CC
     * with the small cache; then BFS and CC with the small cache and a host
     * tier below it (three tiers), to set against the first and the fourth. */
    {
        const struct { int kind, ordered; uint64_t cache, host; } plan[DEMO_RUNS] = {
            {RUN_BFS, 0, small, 0},
            {RUN_BFS, 1, small, 0},
            {RUN_BFS, 0, graph_bytes > min_cache ? graph_bytes : min_cache, 0},
            {RUN_CC, 0, small, 0},
            {RUN_BFS, 0, small, host},
            {RUN_CC, 0, small, host},
        };
        for (i = 0; i < planned && rc < 2; i++, n_runs++) {
            o->ordered = plan[i].ordered;
            o->cache_bytes = plan[i].cache;
            o->host_bytes = plan[i].host;
            o->warm = i == 2; /* the whole graph cached: the second pass is all hits */
            rc |= traverse(o, &answers, plan[i].kind, source, names[i], &x[i]);
            /* With the whole graph cached, every read a hit: the plain run shows what the cache costs */
            if (i == 2 && rc == 0) rc |= plain_traverse(o, &answers, RUN_BFS, source, &x[i]);
        }
    }
    reference_free(&answers);
    graph_free(&g);
    if (n_runs == planned) {
        printf("\n  %-40s %6s %7s %9s %8s %14s %10s\n", "run", "cache", "hits", "read MiB", "amplif.",
               "reads per line", "M edges/s");
        for (i = 0; i < planned; i++)
            printf("  %-40s %5.0f%% %6.1f%% %9.1f %8.2f %14.0f %10.2f\n", x[i].name,
                   100.0 * x[i].cache_mib / x[i].graph_mib,
                   100.0 * (double)x[i].cs.hits / (double)(x[i].cs.hits + x[i].cs.misses),
                   (double)x[i].cs.bytes_read / 1048576.0,
                   (double)x[i].cs.bytes_read / (double)x[i].counts.bytes_needed,
                   (double)(2 * x[i].counts.vertices + x[i].counts.edges) / (double)x[i].cs.reads,
                   (double)x[i].counts.edges / x[i].seconds / 1e6);
        printf("  amplif.: bytes read from storage / bytes the algorithm needed. reads per line: element reads"
               " served by each\n  line read from storage (without a cache each would be a request; BaM's cache cut"
               " requests 308x for BFS\n  and 493x for CC on GAP-kron, 8 GB cache for 31.5 GB).\n");
        if (x[2].plain_seconds > 0)
            printf("  the cache's own cost: BFS over plain memory (the host's copy, %u threads) took %.2f s, through"
                   " a cache that holds\n  the graph %.2f s (%.1f %% hits: it starts empty): %.2fx as long; again on"
                   " the filled cache %.2f s\n  (%.1f %% hits): %.2fx as long\n",
                   o->threads, x[2].plain_seconds, x[2].seconds, hit_percent(x[2].cs.hits, x[2].cs.misses),
                   x[2].seconds / x[2].plain_seconds, x[2].warm_seconds,
                   hit_percent(x[2].warm_hits, x[2].warm_misses),
                   x[2].warm_seconds / x[2].plain_seconds);
        for (i = 4; i < planned; i++) {
            const result *two = &x[i == 4 ? 0 : 3], *three = &x[i];
            printf("  %s with the host tier (%s): %llu storage reads against %llu without (%.2fx fewer);"
                   " %llu misses served from host memory\n",
                   i == 4 ? "BFS" : "CC", gpumem_tier_placement_name(three->host_placement),
                   (unsigned long long)three->cs.reads, (unsigned long long)two->cs.reads,
                   three->cs.reads ? (double)two->cs.reads / (double)three->cs.reads : 0.0,
                   (unsigned long long)three->ts.host_hits);
        }
    }
    printf("graph demo: %s (%.1f s)\n", rc ? "FAILED" : "ok", graph_now_s() - t0);
    return rc;
}

/* I/O amplification against cache size: BFS in both frontier orders and CC
 * with caches from 1/32 of the graph to all of it, one row per size, as
 * tab-separated values for bench/graph_sweep.gp. */
static int sweep(options *o, const char *tsv) {
    static const double fractions[] = {1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1.0};
    graph_csr g;
    reference answers = {&g, NULL, 0, NULL, NULL};
    FILE *f;
    uint32_t source;
    size_t i;
    int rc, k;
    uint64_t min_cache = 2ull * o->threads * GRAPH_LINE;
    if (!(f = fopen(tsv, "w"))) { /* check_files saw the directory writable; this should not fail */
        fprintf(stderr, "graph: %s: %s\n", tsv, strerror(errno));
        return 2;
    }
    if ((rc = load_reference(o, &g)) != 0) {
        fclose(f);
        return rc;
    }
    source = source_of(o, &g);
    if (o->machine) fprintf(f, "# machine: %s\n", o->machine);
    fprintf(f, "# %s: %llu vertices, %llu edges, %.1f MiB; %u threads; BFS from %u\n", o->path,
            (unsigned long long)g.h.n_nodes, (unsigned long long)g.h.n_edges, (double)g.h.file_bytes / 1048576.0,
            o->threads, source);
    fprintf(f, "# cache_fraction\tbfs_amplification\tbfs_ordered_amplification\tcc_amplification"
               "\tbfs_hit_rate\tbfs_ordered_hit_rate\tcc_hit_rate\n");
    for (i = 0; i < sizeof fractions / sizeof fractions[0] && rc == 0; i++) {
        result x[3];
        o->cache_bytes = GPUMEM_ALIGN_UP((uint64_t)((double)g.h.file_bytes * fractions[i]), GRAPH_LINE);
        if (o->cache_bytes < min_cache) o->cache_bytes = min_cache; /* small graphs: 2 lines per thread */
        printf("== cache %.1f MiB (1/%.0f of the graph)\n", (double)o->cache_bytes / 1048576.0, 1.0 / fractions[i]);
        for (k = 0; k < 3 && rc == 0; k++) {
            o->ordered = k == 1;
            rc = traverse(o, &answers, k < 2 ? RUN_BFS : RUN_CC, source, k == 0 ? "BFS" : k == 1 ? "BFS ordered" : "CC",
                          &x[k]);
        }
        if (rc) break;
        fprintf(f, "%.5f", fractions[i]);
        for (k = 0; k < 3; k++) fprintf(f, "\t%.4f", (double)x[k].cs.bytes_read / (double)x[k].counts.bytes_needed);
        for (k = 0; k < 3; k++)
            fprintf(f, "\t%.4f", (double)x[k].cs.hits / (double)(x[k].cs.hits + x[k].cs.misses));
        fprintf(f, "\n");
        fflush(f);
    }
    fclose(f);
    reference_free(&answers);
    graph_free(&g);
    if (rc == 0) printf("graph sweep: wrote %s\n", tsv);
    return rc;
}

/* BFS and CC with a cache an eighth of the graph (or --cache-mib), under
 * CLOCK (the cache's policy before gpumem_policy.h) and under --policy, one
 * after the other in this run. */
static int policies(options *o) {
    graph_csr g;
    reference answers = {&g, NULL, 0, NULL, NULL};
    result x[4];
    const uint32_t kinds[2] = {GPUMEM_POLICY_CLOCK, o->policy};
    uint32_t source;
    int rc, i;
    if ((rc = load_reference(o, &g)) != 0) return rc;
    source = source_of(o, &g);
    if (!(o->given & O_CACHE)) o->cache_bytes = GPUMEM_ALIGN_UP(g.h.file_bytes / 8, GRAPH_LINE);
    for (i = 0; i < 4 && rc < 2; i++) {
        o->policy = kinds[i / 2];
        rc |= traverse(o, &answers, i % 2 ? RUN_CC : RUN_BFS, source, i % 2 ? "CC" : "BFS", &x[i]);
    }
    reference_free(&answers);
    graph_free(&g);
    if (i == 4) {
        printf("\n  %-5s %-10s %8s %12s %10s %10s\n", "run", "policy", "hits", "line reads", "read MiB", "seconds");
        for (i = 0; i < 4; i++)
            printf("  %-5s %-10s %7.2f%% %12llu %10.1f %10.2f\n", x[i].name, gpumem_policy_name(kinds[i / 2]),
                   100.0 * (double)x[i].cs.hits / (double)(x[i].cs.hits + x[i].cs.misses),
                   (unsigned long long)x[i].cs.fills, (double)x[i].cs.bytes_read / 1048576.0, x[i].seconds);
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* GNN mini-batches: sampling through the graph's cache, then gathering the */
/* feature rows three ways in the same run, each checked byte for byte      */
/* ------------------------------------------------------------------------ */

enum { GATHER_CACHED, GATHER_DIRECT, GATHER_PREAD, GATHER_MODES };
static const char *const gather_names[GATHER_MODES] = {"(a) through the cache", "(b) direct reads, queue pairs",
                                                       "(c) pread, host threads"};

typedef struct gnn_state {
    const options *o;
    uint32_t row_bytes;
    uint64_t batch;            /* the mini-batch being sampled */
    uint32_t *samples;         /* o->batch trees of plan.per_seed slots */
    uint32_t *rows;            /* the batch's distinct sampled vertices, sorted (its gnn_batch's) */
    uint64_t n_rows;
    unsigned char *buf;        /* their rows, gathered: n_rows x row_bytes */
    unsigned char *bounce;     /* a GRAPH_GNN_BOUNCE buffer per thread (direct reads) */
    graph_store *features;     /* the table's controller, pairs and cache */
    int fd;                    /* the table, for pread */
    int mode;                  /* GATHER_* of this round */
    graph_gather_counts *gc;   /* per thread, this mode */
} gnn_state;

typedef struct gnn_result {
    double seconds[GATHER_MODES], sample_seconds;
    graph_gather_counts gc[GATHER_MODES];
    gpumem_cache_stats cs, graph_cs; /* the feature cache (mode a), the graph's (sampling) */
    gpumem_tier_stats ts;
    graph_counts sampling;
    unsigned long long wrong_rows, hash_disagreements, sampled;
    uint64_t digest; /* a hash of every batch's hash */
    double cache_fraction;
} gnn_result;

static void gnn_sample_item(run *r, uint32_t id, uint64_t i, graph_refs *refs, graph_counts *c) {
    gnn_state *g = (gnn_state *)r->ctx;
    const options *o = g->o;
    uint32_t v = graph_gnn_seed_vertex(o->seed, g->batch, i, refs->n_nodes);
    (void)id;
    graph_gnn_sample(refs, graph_mix64(graph_mix64(o->seed + g->batch) + i), v, &o->plan,
                     g->samples + i * o->plan.per_seed, c);
}

static void gnn_gather_item(run *r, uint32_t id, uint64_t i, graph_refs *refs, graph_counts *c) {
    gnn_state *g = (gnn_state *)r->ctx;
    graph_gather_counts *k = &g->gc[id];
    unsigned char *out = g->buf + i * g->row_bytes;
    uint64_t row = g->rows[i];
    gpumem_status st;
    (void)refs;
    if (g->mode == GATHER_CACHED) {
        st = graph_gather_cached(g->features->cache, row, g->row_bytes, out, k);
    } else if (g->mode == GATHER_DIRECT) {
        st = graph_gather_direct(g->features->pairs[id % g->features->n_pairs], row, g->row_bytes,
                                 g->bounce + (size_t)id * GRAPH_GNN_BOUNCE, out, k);
    } else { /* what a GDS/cuFile path does from the CPU: a read per row into the destination */
        st = graph_pread_all(g->fd, out, g->row_bytes, row * g->row_bytes);
        k->commands++;
        if (st == GPUMEM_OK) {
            k->rows++;
            k->bytes_needed += g->row_bytes;
            k->bytes_read += g->row_bytes;
        }
    }
    if (st != GPUMEM_OK) graph_fail_count(c, st);
}

/* The feature table for (rows, row_bytes): --features, or one in
 * --cache-dir named by its shape. Returns 0 with the path, or 2. Nothing is
 * generated here: only whether it can be. */
static int gnn_features_path(const cli_command *cmd, const options *o, uint64_t rows, uint32_t row_bytes,
                             char *path, size_t n) {
    struct stat sb;
    if (o->features) {
        snprintf(path, n, "%s", o->features);
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return bad_args(cmd, "--features %s is a directory", path);
        if (access(path, F_OK) == 0) return 0; /* gnn_features_ready checks it */
    } else {
        if (mkdir(o->cache_dir, 0755) != 0 && errno != EEXIST)
            return bad_args(cmd, "--cache-dir %s: %s", o->cache_dir, strerror(errno));
        if (snprintf(path, n, "%s/features-%llux%u.bin", o->cache_dir, (unsigned long long)rows, row_bytes) >= (int)n)
            return bad_args(cmd, "--cache-dir %s: path too long", o->cache_dir);
    }
    return check_writable(cmd, path);
}

static void say_features(const char *what, double frac) {
    printf("  writing the %s: %3.0f %%\n", what, 100.0 * frac);
    fflush(stdout);
}

/* Make sure `path` holds the table: reused when it checks out; otherwise
 * written, unless the user named a file that holds something else. 0 or 2. */
static int gnn_features_ready(const options *o, const char *path, uint64_t rows, uint32_t row_bytes) {
    char err[600];
    gpumem_status st = graph_features_check(path, rows, row_bytes, err, sizeof err);
    double t0 = graph_now_s();
    if (st == GPUMEM_OK) return 0;
    if (st != GPUMEM_ENODEV && o->features) {
        fprintf(stderr, "graph: --features %s: %s: name a file that does not exist yet and gnn writes the table"
                        " there\n", path, err);
        return 2;
    }
    printf("  %s: %s; writing the feature table (%llu rows of %u bytes, %.1f MiB)\n", path,
           st == GPUMEM_ENODEV ? "missing" : err, (unsigned long long)rows, row_bytes,
           (double)graph_features_bytes(rows, row_bytes) / 1048576.0);
    fflush(stdout);
    if (graph_features_write(path, rows, row_bytes, say_features, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        return 2;
    }
    printf("  wrote %s in %.1f s\n", path, graph_now_s() - t0);
    return 0;
}

/* ---- --lookahead K: the next K mini-batches known, each line's next use hinted */

/* One sampled mini-batch, waiting in the window for its turn to be gathered. */
typedef struct gnn_batch {
    uint32_t *rows;           /* its distinct sampled vertices, sorted */
    uint64_t n_rows, sampled; /* how many; vertices sampled, repeats counted */
    uint64_t *lines;          /* with hints: the feature lines its rows lie on, ascending */
    uint32_t *next;           /* per line: the next batch in the window to gather it, GRAPH_NONE: none */
    uint64_t n_lines;
} gnn_batch;

/* While batch b is gathered, batches b .. b + K are sampled: batch j in
 * slot j % (K + 1). The sampling is a function of (seed, batch, seed index)
 * alone, so sampling ahead changes no batch and no row. */
typedef struct gnn_window {
    gnn_batch *slot;
    uint32_t n_slots;      /* K + 1 */
    uint32_t *last;        /* with hints, per feature line: 1 + the last sampled batch to read it, 0: none */
    uint32_t *last_at;     /* and the line's place in that batch's lines */
    gpumem_cache *hinted;  /* the feature cache told the next uses (K > 0 or weights), or NULL */
    uint64_t *weight;      /* with --weights, per feature line: its weight (gnn_line_weights), or NULL */
    unsigned long long hints, weights, refused;
} gnn_window;

/* Batch j's epoch. The store's hinted policy proves a use right within
 * GRAPH_HINT_SLACK epochs of its hint (the store's default slack, which gnn
 * keeps); batches that many epochs apart keep one batch's hint from being
 * proven by another's use, and a line used in a batch and not hinted again
 * falls to the fallback as soon as the next batch starts. */
static uint64_t gnn_epoch(uint64_t batch) {
    return batch * (GRAPH_HINT_SLACK + 1);
}

static void gnn_hint(gnn_window *w, uint64_t line, uint64_t batch) {
    w->hints++;
    if (gpumem_cache_hint(w->hinted, line, gnn_epoch(batch)) != GPUMEM_OK) w->refused++;
}

/* Each feature line's weight: the expected draws a batch of the rows on it
 * (graph_gnn_expected_draws), in units of 2^-20 draws, at least 1 (0 is no
 * weight). 0, or -1 without memory. */
static int gnn_line_weights(gnn_window *w, const graph_csr *g, const graph_gnn_plan *p, uint32_t seeds,
                            uint32_t row_bytes, uint64_t table_lines) {
    const uint64_t n = g->h.n_nodes;
    double *draws = (double *)malloc(3 * n * sizeof *draws);
    uint64_t v, line;
    if (!draws || !(w->weight = (uint64_t *)calloc(table_lines, 8))) {
        free(draws);
        return -1;
    }
    graph_gnn_expected_draws(g, p, seeds, draws, draws + n);
    for (v = 0; v < n; v++)
        for (line = v * row_bytes / GRAPH_LINE; line <= (v * row_bytes + row_bytes - 1) / GRAPH_LINE; line++)
            w->weight[line] += (uint64_t)(draws[v] * 1048576.0);
    for (line = 0; line < table_lines; line++) w->weight[line] += 1;
    free(draws);
    return 0;
}

static void gnn_window_free(gnn_window *w) {
    uint32_t i;
    free(w->weight); /* gnn_line_weights' */
    for (i = 0; w->slot && i < w->n_slots; i++) {
        free(w->slot[i].rows);
        free(w->slot[i].lines);
        free(w->slot[i].next);
    }
    free(w->slot);
    free(w->last);
    free(w->last_at);
}

/* Room for K + 1 batches of up to max_rows rows of row_bytes; with hints
 * (hinted != NULL) their lines, and the last use of each of the table's
 * table_lines lines. 0, or -1 with nothing allocated. */
static int gnn_window_init(gnn_window *w, uint32_t k, uint64_t max_rows, uint32_t row_bytes, uint64_t table_lines,
                           gpumem_cache *hinted) {
    const uint64_t max_lines = max_rows * (row_bytes / GRAPH_LINE + 2); /* a row lies on at most this many */
    uint32_t i;
    int ok;
    memset(w, 0, sizeof *w);
    w->n_slots = k + 1;
    w->hinted = hinted;
    ok = (w->slot = (gnn_batch *)calloc(w->n_slots, sizeof *w->slot)) != NULL;
    for (i = 0; ok && i < w->n_slots; i++) {
        ok = (w->slot[i].rows = (uint32_t *)malloc(max_rows * 4)) != NULL;
        if (ok && hinted)
            ok = (w->slot[i].lines = (uint64_t *)malloc(max_lines * 8)) != NULL &&
                 (w->slot[i].next = (uint32_t *)malloc(max_lines * 4)) != NULL;
    }
    if (ok && hinted)
        ok = (w->last = (uint32_t *)calloc(table_lines, 4)) != NULL &&
             (w->last_at = (uint32_t *)calloc(table_lines, 4)) != NULL;
    if (ok) return 0;
    gnn_window_free(w);
    memset(w, 0, sizeof *w);
    return -1;
}

/* Batch j's lines, each once, ascending. A line seen in a batch of the
 * window not yet gathered (at or after `now`) gets j as that use's next one
 * (hinted after it); any other line is next used at j, hinted now. */
static void gnn_window_plan(gnn_window *w, gnn_batch *bt, uint64_t j, uint64_t now, uint32_t row_bytes) {
    uint64_t i, line, end;
    bt->n_lines = 0;
    for (i = 0; i < bt->n_rows; i++) {
        line = (uint64_t)bt->rows[i] * row_bytes / GRAPH_LINE;
        end = ((uint64_t)bt->rows[i] * row_bytes + row_bytes - 1) / GRAPH_LINE;
        if (bt->n_lines && bt->lines[bt->n_lines - 1] >= line) line = bt->lines[bt->n_lines - 1] + 1;
        for (; line <= end; line++) {
            uint32_t prev = w->last[line];
            bt->lines[bt->n_lines] = line;
            bt->next[bt->n_lines] = GRAPH_NONE;
            if (prev && prev - 1 >= now) w->slot[(prev - 1) % w->n_slots].next[w->last_at[line]] = (uint32_t)j;
            else gnn_hint(w, line, j);
            if (w->weight) { /* with its hint: a line not cached keeps it in the pending table until its fill */
                w->weights++;
                if (gpumem_cache_weight(w->hinted, line, w->weight[line]) != GPUMEM_OK) w->refused++;
            }
            w->last[line] = (uint32_t)j + 1;
            w->last_at[line] = (uint32_t)bt->n_lines++;
        }
    }
}

/* Batch b gathered: hint each of its lines' next use in the window. */
static void gnn_window_hint_next(gnn_window *w, uint64_t b) {
    const gnn_batch *bt = &w->slot[b % w->n_slots];
    uint64_t i;
    for (i = 0; i < bt->n_lines; i++)
        if (bt->next[i] != GRAPH_NONE) gnn_hint(w, bt->lines[i], bt->next[i]);
}

/* Sample batch j into its slot of the window (`now`: the batch about to be
 * gathered): one work item per seed, each tree in its own slots, then the
 * batch's vertices, each once, in vertex order. 0, or 1 if a round failed;
 * the sampling's errors are in x->sampling. */
static int gnn_sample_batch(run *r, gnn_state *g, gnn_window *w, uint64_t j, uint64_t now, gnn_result *x) {
    const options *o = g->o;
    gnn_batch *bt = &w->slot[j % w->n_slots];
    uint64_t i, n = 0, seen;
    double ts = graph_now_s();
    g->batch = j;
    r->item = gnn_sample_item;
    r->n_items = o->batch;
    if (run_round(r, "sampling") != 0) return 1;
    x->sampling = sum_counts(r->counts, o->threads);
    if (x->sampling.errors) return 0;
    x->sample_seconds += graph_now_s() - ts;
    for (i = 0; i < (uint64_t)o->batch * o->plan.per_seed; i++)
        if (g->samples[i] != GRAPH_NONE) bt->rows[n++] = g->samples[i];
    bt->sampled = n;
    x->sampled += n;
    graph_sort_u32(bt->rows, n);
    for (i = 0, seen = 0; i < n; i++)
        if (i == 0 || bt->rows[i] != bt->rows[seen - 1]) bt->rows[seen++] = bt->rows[i];
    bt->n_rows = seen;
    if (w->hinted) gnn_window_plan(w, bt, j, now, g->row_bytes);
    return 0;
}

/* One gnn run: o->batches mini-batches of o->batch seeds over graph g (read
 * through a cache an eighth of the graph), each gathered from the feature
 * table at `path` in the three modes, every row checked against the
 * generator and every batch's hash compared across the modes. The feature
 * cache holds feature_cache bytes; with o->lookahead, it is told each line's
 * next use in the batches sampled ahead. Returns 0 ok, 1 failed or wrong, 2 bad. */
static int gnn_run(const options *o, const graph_csr *ref, const char *path, uint32_t row_bytes,
                   uint64_t feature_cache, gnn_result *x) {
    graph_store_config sc;
    graph_store gs, fs;
    gnn_state g;
    gnn_window w;
    run r;
    char err[512];
    uint64_t table = graph_features_bytes(ref->h.n_nodes, row_bytes), b, i, max_rows, *hashes, sampled_to = 0;
    uint64_t graph_cache = GPUMEM_ALIGN_UP(ref->h.file_bytes / 8, GRAPH_LINE), min_cache = 2ull * o->threads * GRAPH_LINE;
    double last_say = graph_now_s();
    int rc = 0, m;
    memset(x, 0, sizeof *x);
    memset(&g, 0, sizeof g);
    memset(&r, 0, sizeof r);
    if (graph_cache < min_cache) graph_cache = min_cache;
    if (feature_cache < min_cache) feature_cache = min_cache;
    x->cache_fraction = (double)feature_cache / (double)table;
    memset(&sc, 0, sizeof sc);
    sc.n_pairs = o->pairs;
    sc.depth = o->depth;
    sc.iops = o->iops;
    sc.policy = o->policy;
    sc.host_placement = o->host_placement;
    sc.cache_bytes = graph_cache; /* sampling: adjacency through a cache an eighth of the graph, no host tier */
    if (graph_store_open(&gs, o->path, &sc, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        return 2;
    }
    sc.cache_bytes = feature_cache;
    sc.host_bytes = o->host_bytes;
    /* Look-ahead and weights hint the feature cache: hinted unless --policy says otherwise */
    if ((o->lookahead || o->weights) && !(o->given & O_POLICY)) sc.policy = GPUMEM_POLICY_HINTED;
    if (o->trace && !(sc.trace = trace_new())) {
        graph_store_close(&gs);
        return 2;
    }
    if (graph_features_open(&fs, path, ref->h.n_nodes, row_bytes, &sc, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "graph: %s\n", err);
        graph_store_close(&gs);
        trace_free(sc.trace);
        return 2;
    }
    max_rows = (uint64_t)o->batch * o->plan.per_seed;
    if (max_rows > ref->h.n_nodes) max_rows = ref->h.n_nodes;
    g.o = o;
    g.row_bytes = row_bytes;
    g.features = &fs;
    g.fd = fs.fd;
    g.samples = (uint32_t *)malloc((size_t)o->batch * o->plan.per_seed * 4);
    g.buf = (unsigned char *)malloc(max_rows * row_bytes);
    g.bounce = (unsigned char *)malloc((size_t)o->threads * GRAPH_GNN_BOUNCE);
    g.gc = (graph_gather_counts *)calloc(o->threads, sizeof *g.gc);
    hashes = (uint64_t *)calloc(o->batches, 8);
    r.store = &gs;
    r.n_threads = o->threads;
    r.counts = (graph_counts *)calloc(o->threads, sizeof *r.counts);
    r.ctx = &g;
    if (gnn_window_init(&w, o->lookahead, (uint64_t)o->batch * o->plan.per_seed, row_bytes, table / GRAPH_LINE,
                        o->lookahead || o->weights ? fs.cache : NULL) != 0 ||
        (o->weights && gnn_line_weights(&w, ref, &o->plan, o->batch, row_bytes, table / GRAPH_LINE) != 0) ||
        !g.samples || !g.buf || !g.bounce || !g.gc || !hashes || !r.counts) {
        fprintf(stderr, "graph: gnn: no memory for %u batches of up to %llu rows of %u bytes\n", o->lookahead + 1,
                (unsigned long long)max_rows, row_bytes);
        rc = 2;
    }
    printf("  gnn: %u batches of %u seeds, fanouts", o->batches, o->batch);
    for (i = 0; i < o->plan.n_hops; i++) printf("%s%u", i ? "," : " ", o->plan.fanout[i]);
    printf("; %llu rows of %u bytes (%.1f MiB); feature cache %.1f MiB (%.3g of the table)%s; graph cache %.1f MiB;"
           " %u threads, %u queue pairs of depth %u\n",
           (unsigned long long)ref->h.n_nodes, row_bytes, (double)table / 1048576.0, (double)fs.n_slots * GRAPH_LINE /
           1048576.0, x->cache_fraction, fs.tier ? " + host tier" : "", (double)gs.n_slots * GRAPH_LINE / 1048576.0,
           o->threads, o->pairs, o->depth);
    if (o->lookahead)
        printf("  look-ahead: %u batches sampled ahead, each feature line's next use among them hinted to the feature"
               " cache (policy %s)%s\n", o->lookahead, gpumem_policy_name(sc.policy),
               o->weights ? "; with its weight, the sampler's expected draws of its rows" : "");
    else if (o->weights)
        printf("  weights: each feature line's weight, the sampler's expected draws of its rows, told the feature "
               "cache (policy %s)\n", gpumem_policy_name(sc.policy));
    fflush(stdout);
    for (b = 0; b < o->batches && rc == 0; b++) {
        uint64_t n, want_hash = 0;
        double tg[GATHER_MODES];
        if (w.hinted) (void)gpumem_cache_epoch(w.hinted, gnn_epoch(b));
        /* 1-2. sample batch b, or with look-ahead the batches up to b + K not sampled yet (all of 0 .. K at first) */
        while (sampled_to < o->batches && sampled_to <= b + o->lookahead && rc == 0 && !x->sampling.errors)
            rc = gnn_sample_batch(&r, &g, &w, sampled_to++, b, x);
        if (rc || x->sampling.errors) break;
        g.rows = w.slot[b % w.n_slots].rows;
        g.n_rows = w.slot[b % w.n_slots].n_rows;
        n = w.slot[b % w.n_slots].sampled;
        /* 3. gather in each mode into a buffer first filled with a pattern
         * no row has, check every row, and hash the batch */
        r.item = gnn_gather_item;
        r.n_items = g.n_rows;
        for (m = 0; m < GATHER_MODES && rc == 0; m++) {
            uint64_t h, wrong = 0;
            char what[64];
            double t1;
            memset(g.buf, 0xA5, g.n_rows * row_bytes);
            memset(g.gc, 0, o->threads * sizeof *g.gc);
            g.mode = m;
            snprintf(what, sizeof what, "gathering %s", gather_names[m]);
            t1 = graph_now_s();
            if (run_round(&r, what) != 0) rc = 1;
            tg[m] = graph_now_s() - t1;
            x->seconds[m] += tg[m];
            x->sampling = sum_counts(r.counts, o->threads);
            if (rc || x->sampling.errors) break;
            for (i = 0; i < o->threads; i++) {
                x->gc[m].rows += g.gc[i].rows;
                x->gc[m].bytes_needed += g.gc[i].bytes_needed;
                x->gc[m].bytes_read += g.gc[i].bytes_read;
                x->gc[m].commands += g.gc[i].commands;
                x->gc[m].full_retries += g.gc[i].full_retries;
            }
            for (i = 0; i < g.n_rows; i++) {
                uint32_t bad = graph_feature_check(g.rows[i], row_bytes, g.buf + i * row_bytes);
                if (bad < row_bytes && wrong++ == 0)
                    fprintf(stderr, "graph: gnn: batch %llu, %s: row %u differs from the generator at byte %u\n",
                            (unsigned long long)b, gather_names[m], g.rows[i], bad);
            }
            x->wrong_rows += wrong;
            h = graph_hash(b, g.buf, g.n_rows * row_bytes);
            if (m == 0) want_hash = h;
            else if (h != want_hash) {
                x->hash_disagreements++;
                fprintf(stderr, "graph: gnn: batch %llu: %s hashed %016llx, %s %016llx\n", (unsigned long long)b,
                        gather_names[m], (unsigned long long)h, gather_names[0], (unsigned long long)want_hash);
            }
        }
        if (rc || x->sampling.errors) break;
        hashes[b] = want_hash;
        if (w.hinted) gnn_window_hint_next(&w, b);
        /* every batch while there are few, else about one line a second */
        if (o->batches <= 40 || b + 1 == o->batches || graph_now_s() - last_say > 1.0) {
            last_say = graph_now_s();
            printf("    batch %3llu: %6llu sampled, %6llu rows, hash %016llx in every mode; gather %.1f / %.1f / %.1f ms\n",
                   (unsigned long long)b, (unsigned long long)n, (unsigned long long)g.n_rows,
                   (unsigned long long)want_hash, 1e3 * tg[0], 1e3 * tg[1], 1e3 * tg[2]);
            fflush(stdout);
        }
        graph_train(&fs);
    }
    x->digest = graph_hash(0x646967657374ull, hashes, (size_t)o->batches * 8);
    gpumem_cache_get_stats(fs.cache, &x->cs);
    if (o->lookahead || o->weights)
        printf("  look-ahead: %llu next-use hints and %llu weights to the feature cache, %llu refused; its hit rate "
               "%.1f %%\n", w.hints, w.weights, w.refused, hit_percent(x->cs.hits, x->cs.misses));
    print_hints(&fs);
    gpumem_cache_get_stats(gs.cache, &x->graph_cs);
    if (fs.tier) gpumem_tier_get_stats(fs.tier, &x->ts);
    if ((fs.tier ? gpumem_tier_check_quiescent(fs.tier) : gpumem_cache_check_quiescent(fs.cache)) != 0 ||
        gpumem_cache_check_quiescent(gs.cache) != 0) {
        fprintf(stderr, "graph: gnn: a cache is not quiescent after the run\n");
        rc = 1;
    }
    if (!rc && x->sampling.errors) rc = store_failed(&fs, &x->sampling, "gnn");
    if (!rc && (x->wrong_rows || x->hash_disagreements || x->cs.violations || x->graph_cs.violations)) rc = 1;
    graph_store_close(&fs);
    graph_store_close(&gs);
    if (sc.trace && trace_save(sc.trace, o->trace) != 0) rc = 1;
    trace_free(sc.trace);
    gnn_window_free(&w);
    free(g.samples);
    free(g.buf);
    free(g.bounce);
    free(g.gc);
    free(hashes);
    free(r.counts);
    return rc;
}

static void gnn_print(const gnn_result *x) {
    int m;
    double base = x->seconds[0] > 0 ? (double)x->gc[0].rows / x->seconds[0] : 0;
    printf("\n  %-31s %12s %9s %10s %11s %12s %9s\n", "gathering", "rows/s", "x cache", "read MiB", "needed MiB",
           "read/needed", "hit rate");
    for (m = 0; m < GATHER_MODES; m++) {
        const graph_gather_counts *k = &x->gc[m];
        double rate = x->seconds[m] > 0 ? (double)k->rows / x->seconds[m] : 0;
        double read = m == GATHER_CACHED ? (double)x->cs.bytes_read : (double)k->bytes_read;
        char hit[32] = "-";
        if (m == GATHER_CACHED)
            snprintf(hit, sizeof hit, "%.1f %%", hit_percent(x->cs.hits, x->cs.misses));
        printf("  %-31s %12.0f %8.2fx %10.1f %11.1f %12.2f %9s\n", gather_names[m], rate, base > 0 ? rate / base : 0,
               read / 1048576.0, (double)k->bytes_needed / 1048576.0,
               k->bytes_needed ? read / (double)k->bytes_needed : 0.0, hit);
    }
    printf("  hit rate: line acquires that found the line cached. (a) reads whole 4 KiB lines on a miss; (b) one\n"
           "  command a row, the 512-byte blocks it covers; (c) pread of the row's bytes (counted as asked; the\n"
           "  kernel reads whole pages into its page cache).");
    if (x->ts.host_hits || x->ts.moves)
        printf("\n  host tier: %llu misses served from host memory, %llu lines moved there",
               (unsigned long long)x->ts.host_hits, (unsigned long long)x->ts.moves);
    printf("\n  sampling: %llu vertices sampled (%llu adjacency lists read through the graph cache, %.1f %% hits)"
           " in %.2f s\n",
           x->sampled, x->sampling.vertices,
           100.0 * (double)x->graph_cs.hits /
               (double)(x->graph_cs.hits + x->graph_cs.misses + (x->graph_cs.hits + x->graph_cs.misses == 0)),
           x->sample_seconds);
}

/* graph gnn FILE: one run, the three modes side by side. */
static int gnn(const cli_command *cmd, options *o) {
    graph_csr g;
    gnn_result x;
    char path[4400];
    graph_header h;
    uint64_t table, cache;
    int rc, fd;
    double t0 = graph_now_s();
    if ((fd = open(o->path, O_RDONLY)) < 0) return 2; /* check_files read it already */
    rc = graph_read_header(fd, o->path, &h, NULL, 0) != GPUMEM_OK;
    close(fd);
    if (rc) return 2;
    if ((rc = gnn_features_path(cmd, o, h.n_nodes, o->row_bytes, path, sizeof path)) != 0) return rc;
    if ((rc = load_reference(o, &g)) != 0) return rc;
    if ((rc = gnn_features_ready(o, path, g.h.n_nodes, o->row_bytes)) != 0) {
        graph_free(&g);
        return rc;
    }
    table = graph_features_bytes(g.h.n_nodes, o->row_bytes);
    cache = (o->given & O_CACHE) ? o->cache_bytes : GPUMEM_ALIGN_UP(table / 8, GRAPH_LINE);
    rc = gnn_run(o, &g, path, o->row_bytes, cache, &x);
    graph_free(&g);
    if (rc < 2) gnn_print(&x);
    printf("gnn: %llu rows gathered in each mode, %llu wrong, %llu batch hashes disagreeing; digest %016llx; %s"
           " (%.1f s)\n",
           x.gc[0].rows, x.wrong_rows, x.hash_disagreements, (unsigned long long)x.digest, rc ? "FAILED" : "ok",
           graph_now_s() - t0);
    return rc;
}

/* graph gnn-sweep FILE OUT.tsv: rows/s of each mode against the feature
 * cache's size (1/32 of the table to all of it, at --row-bytes) and against
 * the row size (256 B to 16 KiB, cache 1/8 of the table), one TSV row per
 * run, for bench/plot_gnn.py. */
static int gnn_sweep(const cli_command *cmd, options *o) {
    static const double fractions[] = {1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1.0};
    static const uint32_t sizes[] = {256, 512, 1024, 2048, 4096, 8192, 16384};
    const size_t n_points = sizeof fractions / sizeof fractions[0] + sizeof sizes / sizeof sizes[0];
    graph_csr g;
    FILE *f;
    size_t p;
    int rc;
    if ((rc = load_reference(o, &g)) != 0) return rc;
    for (p = 0; p < sizeof sizes / sizeof sizes[0] && !rc; p++) { /* every table writable before any run */
        char path[4400];
        rc = gnn_features_path(cmd, o, g.h.n_nodes, sizes[p], path, sizeof path);
    }
    if (rc || !(f = fopen(o->out, "w"))) {
        if (!rc) fprintf(stderr, "graph: %s: %s\n", o->out, strerror(errno));
        graph_free(&g);
        return 2;
    }
    if (o->machine) fprintf(f, "# machine: %s\n", o->machine);
    fprintf(f, "# %s: %llu vertices; %u batches of %u seeds, fanouts", o->path, (unsigned long long)g.h.n_nodes,
            o->batches, o->batch);
    for (p = 0; p < o->plan.n_hops; p++) fprintf(f, "%s%u", p ? "," : " ", o->plan.fanout[p]);
    fprintf(f, "; %u threads, %u queue pairs; policy %s\n", o->threads, o->pairs, gpumem_policy_name(o->policy));
    fprintf(f, "# sweep\tcache_fraction\trow_bytes\tcached_rows_s\tdirect_rows_s\tpread_rows_s\tcached_hit_rate"
               "\tcached_read_over_needed\tdirect_read_over_needed\n");
    for (p = 0; p < n_points && rc == 0; p++) {
        const int by_cache = p < sizeof fractions / sizeof fractions[0];
        const uint32_t row_bytes = by_cache ? o->row_bytes : sizes[p - sizeof fractions / sizeof fractions[0]];
        const double fraction = by_cache ? fractions[p] : 1.0 / 8;
        char path[4400];
        gnn_result x;
        uint64_t table = graph_features_bytes(g.h.n_nodes, row_bytes);
        int m;
        printf("== point %zu of %zu: rows of %u bytes, feature cache 1/%.0f of the table\n", p + 1, n_points,
               row_bytes, 1.0 / fraction);
        fflush(stdout);
        if ((rc = gnn_features_path(cmd, o, g.h.n_nodes, row_bytes, path, sizeof path)) != 0) break;
        if ((rc = gnn_features_ready(o, path, g.h.n_nodes, row_bytes)) != 0) break;
        rc = gnn_run(o, &g, path, row_bytes, GPUMEM_ALIGN_UP((uint64_t)((double)table * fraction), GRAPH_LINE), &x);
        if (rc) break;
        gnn_print(&x);
        fprintf(f, "%s\t%.5f\t%u", by_cache ? "cache" : "row", fraction, row_bytes);
        for (m = 0; m < GATHER_MODES; m++) fprintf(f, "\t%.0f", (double)x.gc[m].rows / x.seconds[m]);
        fprintf(f, "\t%.4f\t%.4f\t%.4f\n", (double)x.cs.hits / (double)(x.cs.hits + x.cs.misses),
                (double)x.cs.bytes_read / (double)x.gc[0].bytes_needed,
                (double)x.gc[1].bytes_read / (double)x.gc[1].bytes_needed);
        fflush(f);
    }
    fclose(f);
    graph_free(&g);
    if (rc == 0) printf("graph gnn-sweep: wrote %s\n", o->out);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    graph_csr g;
    reference answers = {&g, NULL, 0, NULL, NULL};
    const cli_command *cmd = NULL;
    result x;
    uint32_t source;
    char default_path[128], converted[4300];
    int rc, help, kind;
    memset(&o, 0, sizeof o);
    o.scale = 20;
    o.edge_factor = 16;
    o.seed = GRAPH_SEED;
    o.threads = 16;
    o.pairs = 4;
    o.depth = 256;
    o.cache_bytes = 16u << 20;
    o.policy = gpumem_cache_desc_default().policy;
    o.format = GRAPH_FMT_AUTO;
    o.cache_dir = "build";
    o.mem_bytes = 256ull << 20;
    o.iterations = 20;
    o.row_bytes = 4096;
    o.batch = 128;
    o.batches = 20;
    o.plan.n_hops = 2;
    o.plan.fanout[0] = 10;
    o.plan.fanout[1] = 5;
    o.plan.per_seed = graph_gnn_per_seed(&o.plan);
    /* Hints by default where they can steer something: no --policy (the
     * slot kind hinted-rrip is then the policy: lock-free, and on BFS, CC
     * and PageRank at 1/8 it read within 2.5 % of BRRIP's lines in about
     * BRRIP's time, bench/results/policy-prefetch-vm.md), a hinted --policy, or a
     * --trace that records them for bench/policy_sim. The sequential
     * hinted kind (--policy hinted) is the better one in the simulator but
     * holds one lock: on the live cache with 16 threads it read 15 % more
     * and ran 5-10x longer (bench/results/policy-hints-vm.md). */
    o.hints = o.weights = -1;
    if ((rc = parse(argc, argv, &o, &cmd, &help)) != 0) return rc;
    if (!cmd || !(cmd->opts & O_HINTS)) o.hints = 0; /* the commands that hint take --hints */
    if (cmd && o.prefetch && o.hints == 0) {
        fprintf(stderr, "graph %s: --prefetch on reads the plan of --hints: not with --hints off\n", cmd->name);
        return 2;
    }
    if (o.prefetch) o.hints = 1;
    if (o.hints < 0)
        o.hints = !(o.given & O_POLICY) || o.policy == GPUMEM_POLICY_HINTED ||
                  o.policy == GPUMEM_POLICY_HINTED_RRIP || o.trace != NULL;
    if (o.hints && !(o.given & O_POLICY)) o.policy = GPUMEM_POLICY_HINTED_RRIP;
    /* gnn's weights: with look-ahead unless told; only the sequential hinted policy takes them */
    if (cmd && o.weights > 0 && (o.given & O_POLICY) && o.policy != GPUMEM_POLICY_HINTED) {
        fprintf(stderr, "graph %s: --weights on: only --policy hinted takes weights (give none, or hinted)\n",
                cmd->name);
        return 2;
    }
    if (o.weights < 0) o.weights = o.lookahead > 0 && (!(o.given & O_POLICY) || o.policy == GPUMEM_POLICY_HINTED);
    if (help) {
        cli_print_usage(&tool, stdout, cmd);
        return 0;
    }
    if (!strcmp(cmd->name, "convert")) {
        if ((rc = check_writable(cmd, o.out)) != 0) return rc;
        return convert(&o, o.path, o.out, o.format);
    }
    if ((cmd->opts & O_FORMAT) && (rc = resolve_input(cmd, &o, converted, sizeof converted)) != 0) {
        free(o.ids);
        return rc;
    }
    if (!strcmp(cmd->name, "demo") && !o.path) {
        /* The default graph has a file of its own; another graph another. */
        if (o.scale == 20 && o.edge_factor == 16 && o.seed == GRAPH_SEED)
            snprintf(default_path, sizeof default_path, "build/kron.graph");
        else
            snprintf(default_path, sizeof default_path, "build/kron-s%u-e%u-x%llu.graph", o.scale, o.edge_factor,
                     (unsigned long long)o.seed);
        o.path = default_path;
    }
    if ((rc = check_files(cmd, &o)) != 0) return rc;
    if (!strcmp(cmd->name, "demo")) return demo(&o);
    if (!strcmp(cmd->name, "gen")) return generate(&o);
    if (!strcmp(cmd->name, "sweep")) return sweep(&o, o.out);
    if (!strcmp(cmd->name, "policies")) return policies(&o);
    if (!strcmp(cmd->name, "gnn") || !strcmp(cmd->name, "gnn-sweep")) {
        rc = !strcmp(cmd->name, "gnn") ? gnn(cmd, &o) : gnn_sweep(cmd, &o);
        free(o.ids);
        return rc;
    }
    if ((rc = load_reference(&o, &g)) != 0) return rc;
    kind = !strcmp(cmd->name, "bfs") ? RUN_BFS : !strcmp(cmd->name, "cc") ? RUN_CC : RUN_PR;
    source = kind == RUN_BFS ? source_of(&o, &g) : 0;
    rc = traverse(&o, &answers, kind, source, kind == RUN_BFS ? "BFS" : kind == RUN_CC ? "CC" : "PageRank", &x);
    if (rc == 0) rc = plain_traverse(&o, &answers, kind, source, &x);
    if (rc == 0) print_answers(&o, &answers, kind, source);
    if (rc == 0 && o.answer_out) rc = write_answers(&o, &answers, kind, source);
    reference_free(&answers);
    graph_free(&g);
    free(o.ids);
    return rc;
}
