// gnn, on the GPU: GNN mini-batches. GPU threads sample each seed's
// neighbours (adjacency read through the graph's cache) and gather every
// sampled vertex's feature row (a) through a feature cache and (b) by direct
// reads on the feature table's queue pairs; (c) host threads pread the same
// rows into the same GPU-visible buffer, as a CPU-orchestrated GDS/cuFile
// path would. The steps are the host version's (examples/graph.h:
// graph_gnn_sample, graph_gather_cached, graph_gather_direct); every row is
// checked on the host against the generator and every batch's hash must be
// the same in the three modes.
//
//   build/graph gen build/kron.graph                          (host: make the graph)
//   build/cuda/examples/gnn build/kron.graph [cache MiB] [row bytes] [--hints]   (needs a GPU; make gpu-examples)
//
// Each batch is sampled one ahead of its gathering. With --hints the feature
// cache's policy is GPUMEM_POLICY_HINTED_RRIP and, before batch b is
// gathered, a kernel moves the cache's clock to b and hints every line of
// batch b + 1's rows for epoch b + 1 from device code (graph_gather_hint:
// warp-coalesced), so the gathering of b keeps the lines b + 1 reads again.
// The rows and the checks are the same either way (hints are advice).
//
// The feature table (one row per vertex, 4 KiB by default) is written by the
// host to build/features-<rows>x<row bytes>.bin when it is missing; the
// feature cache defaults to 1/8 of it. Fanouts 10,5; 20 batches of 1024 seeds.
// Exit status: 0 if every row matched, 1 if not, 2 for bad arguments.
#define _POSIX_C_SOURCE 200809L
#include "cuda_host.h"
#define GPUMEM_IMPLEMENTATION
#include "gpu_cache.h" // the cache's contended metadata in GPU (managed) memory
#define GRAPH_CACHE_CREATE gpu_cache_create
#define GRAPH_CACHE_DESTROY gpu_cache_destroy

#include <thread>
#include <vector>

#include "../graph.h"
#include "tests/cuda/watch.h" // a stalled run reports and exits instead of hanging

#define GNN_BATCH 1024u
#define GNN_BATCHES 20u
#define GNN_SEED GRAPH_SEED
#define GNN_THREADS 128u

// Everything the kernels add up, in managed memory.
struct gnn_totals {
    graph_counts sampling;
    unsigned long long rows, bytes_needed, commands, bytes_read, full_retries, errors;
    int first_error;
    unsigned long long hints_refused; // --hints: lines whose hint the cache refused
};

__device__ void add_gather(gnn_totals *t, const graph_gather_counts *k, gpumem_status st) {
    atomicAdd(&t->rows, k->rows);
    atomicAdd(&t->bytes_needed, k->bytes_needed);
    atomicAdd(&t->commands, k->commands);
    atomicAdd(&t->bytes_read, k->bytes_read);
    atomicAdd(&t->full_retries, k->full_retries);
    if (st != GPUMEM_OK) {
        atomicAdd(&t->errors, 1ull);
        atomicCAS(&t->first_error, 0, (int)st);
    }
}

// One thread a seed: its sample tree in its own slots (graph_gnn_sample).
__global__ void sample_batch(const gpumem_cache_array *arrays, uint32_t n_nodes, uint64_t n_edges, graph_gnn_plan plan,
                             uint64_t seed, uint64_t batch, uint32_t n_seeds, uint32_t *samples, gnn_totals *t) {
    graph_refs r = graph_refs_make(&arrays[0], &arrays[1], n_nodes, n_edges);
    graph_counts c;
    memset(&c, 0, sizeof c);
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n_seeds && !c.errors;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t v = graph_gnn_seed_vertex(seed, batch, i, n_nodes);
        graph_gnn_sample(&r, graph_mix64(graph_mix64(seed + batch) + i), v, &plan, samples + i * plan.per_seed, &c);
    }
    graph_refs_drop(&r);
    atomicAdd(&t->sampling.vertices, c.vertices);
    atomicAdd(&t->sampling.edges, c.edges);
    if (c.errors) {
        atomicAdd(&t->sampling.errors, c.errors);
        atomicCAS(&t->sampling.first_error, 0, c.first_error);
    }
}

// One thread a row: (a) through the feature cache, or (b) by a direct read
// on the pair of its block (bounce: GRAPH_GNN_BOUNCE bytes a thread, only
// for rows off block boundaries).
__global__ void gather_batch(int direct, gpumem_cache *fc, gpumem_nvme_qp *const *pairs, uint32_t n_pairs,
                             const uint32_t *rows, uint64_t n_rows, uint32_t row_bytes, unsigned char *bounce,
                             unsigned char *buf, gnn_totals *t) {
    graph_gather_counts k;
    gpumem_status st = GPUMEM_OK;
    const uint64_t me = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    memset(&k, 0, sizeof k);
    for (uint64_t i = me; i < n_rows && st == GPUMEM_OK; i += (uint64_t)gridDim.x * blockDim.x) {
        if (direct)
            st = graph_gather_direct(pairs[blockIdx.x % n_pairs], rows[i], row_bytes,
                                     bounce ? bounce + me * GRAPH_GNN_BOUNCE : nullptr, buf + i * row_bytes, &k);
        else
            st = graph_gather_cached(fc, rows[i], row_bytes, buf + i * row_bytes, &k);
    }
    add_gather(t, &k, st);
}

// --hints, before batch `epoch` is gathered: the clock to it, from device
// code (a host call would move the managed cache object's page to the host
// and back each batch), in a kernel of its own so that it is there before
// any hint (HINTED_RRIP acts on a hint for this epoch or the next).
__global__ void move_clock(gpumem_cache *fc, uint64_t epoch) {
    (void)gpumem_cache_epoch(fc, epoch);
}

// --hints: batch `when`'s rows (sorted: lanes whose rows share a line send
// one hint), hinted for its epoch. A thread a row.
__global__ void hint_batch(gpumem_cache *fc, const uint32_t *rows, uint64_t n_rows, uint32_t row_bytes, uint64_t when,
                           gnn_totals *t) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n_rows; i += stride)
        if (graph_gather_hint(fc, rows[i], row_bytes, when) != GPUMEM_OK) atomicAdd(&t->hints_refused, 1ull);
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s GRAPH_FILE [feature cache MiB > 0] [row bytes: 256..16384, a multiple of 256]"
                    " [--hints]\n  (make a graph with: build/graph gen FILE)\n", argv0);
    return 2;
}

int main(int argc, char **argv) {
    const char *names[3] = {"(a) GPU threads through the cache", "(b) GPU threads, direct reads",
                            "(c) host threads' pread"};
    graph_csr g;
    graph_store gs, fs;
    graph_store_config sc = {8, 1024, 0, 0, 0};
    graph_gnn_plan plan = {2, {10, 5, 0, 0}, 0};
    char err[600], path[256];
    const char *arg[3] = {nullptr, nullptr, nullptr};
    int n_args = 0, hints = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hints")) hints = 1;
        else if (n_args < 3) arg[n_args++] = argv[i];
        else return usage(argv[0]);
    }
    double mib = n_args > 1 ? atof(arg[1]) : 0, seconds[3] = {0, 0, 0};
    unsigned long long wrong = 0, disagree = 0, rows_total = 0, read[3] = {0, 0, 0};
    uint32_t row_bytes = n_args > 2 ? (uint32_t)atoi(arg[2]) : 4096;
    if (n_args < 1 || (n_args > 1 && !(mib > 0)) || graph_features_row_problem(row_bytes)) return usage(argv[0]);
    need_gpu("gnn");
    if (graph_load(arg[0], &g, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "gnn: %s\n", err);
        return 2;
    }
    const uint64_t n = g.h.n_nodes, table = graph_features_bytes(n, row_bytes);
    snprintf(path, sizeof path, "build/features-%llux%u.bin", (unsigned long long)n, row_bytes);
    if (graph_features_check(path, n, row_bytes, err, sizeof err) != GPUMEM_OK) {
        printf("  %s: writing the feature table (%.1f MiB)\n", path, (double)table / 1048576.0);
        if (graph_features_write(path, n, row_bytes, nullptr, err, sizeof err) != GPUMEM_OK) {
            fprintf(stderr, "gnn: %s\n", err);
            return 2;
        }
    }
    plan.per_seed = graph_gnn_per_seed(&plan);
    sc.cache_bytes = GPUMEM_ALIGN_UP(g.h.file_bytes / 8, GRAPH_LINE);
    if (sc.cache_bytes < 256ull * GRAPH_LINE) sc.cache_bytes = 256ull * GRAPH_LINE;
    if (graph_store_open(&gs, arg[0], &sc, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "gnn: %s\n", err);
        return 2;
    }
    sc.cache_bytes = mib > 0 ? (uint64_t)(mib * 1048576.0) : GPUMEM_ALIGN_UP(table / 8, GRAPH_LINE);
    sc.policy = hints ? GPUMEM_POLICY_HINTED_RRIP : GPUMEM_POLICY_DEFAULT; // the feature cache's
    if (graph_features_open(&fs, path, n, row_bytes, &sc, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "gnn: %s\n", err);
        return 2;
    }
    // A sampling thread holds 2 graph lines, a gathering thread 1 feature line.
    const uint32_t sample_blocks = gs.n_slots / 2 / GNN_THREADS < 64 ? gs.n_slots / 2 / GNN_THREADS : 64;
    const uint32_t gather_blocks = fs.n_slots / GNN_THREADS < 512 ? fs.n_slots / GNN_THREADS : 512;
    if (sample_blocks == 0 || gather_blocks == 0) {
        fprintf(stderr, "gnn: a cache is too small for %u threads (graph %u lines, features %u)\n", GNN_THREADS,
                gs.n_slots, fs.n_slots);
        return 2;
    }
    SwctlWatch *watch_graph = new SwctlWatch(gs.ctl, "gnn sampling", 30000);
    SwctlWatch *watch_features = new SwctlWatch(fs.ctl, "gnn gathering", 30000);
    gpumem_cache_array *arrays;
    gpumem_nvme_qp **pairs;
    gnn_totals *t;
    uint32_t *samples, *rows[2];
    uint64_t n_sampled[2] = {0, 0}, n_batch_rows[2] = {0, 0};
    const uint64_t slots = (uint64_t)GNN_BATCH * plan.per_seed, max_rows = slots < n ? slots : n;
    CHECK(cudaMallocManaged(&arrays, 2 * sizeof *arrays));
    arrays[0] = gs.offsets;
    arrays[1] = gs.edges;
    CHECK(cudaMallocManaged(&pairs, fs.n_pairs * sizeof *pairs));
    for (uint32_t i = 0; i < fs.n_pairs; i++) pairs[i] = fs.pairs[i];
    CHECK(cudaMallocManaged(&t, sizeof *t));
    CHECK(cudaMallocManaged(&samples, slots * 4));
    CHECK(cudaMallocManaged(&rows[0], slots * 4));
    CHECK(cudaMallocManaged(&rows[1], slots * 4));
    // The gathered rows and the bounce buffers: pinned and mapped, written by
    // GPU threads and by the controllers' host threads alike.
    unsigned char *buf = nullptr, *bounce = nullptr;
    const unsigned flags = cudaHostAllocMapped | cudaHostAllocPortable;
    if (cudaHostAlloc((void **)&buf, max_rows * row_bytes, flags) != cudaSuccess ||
        (row_bytes % GRAPH_GNN_LBA &&
         cudaHostAlloc((void **)&bounce, (size_t)gather_blocks * GNN_THREADS * GRAPH_GNN_BOUNCE, flags) != cudaSuccess)) {
        fprintf(stderr, "gnn: no pinned memory for a batch's rows\n");
        return 2;
    }
    memset(t, 0, sizeof *t);
    printf("  gnn on the GPU: %u batches of %u seeds, fanouts 10,5; %llu rows of %u bytes; feature cache %.1f MiB"
           " (1/%.0f of the table)%s\n", GNN_BATCHES, GNN_BATCH, (unsigned long long)n, row_bytes,
           (double)fs.n_slots * GRAPH_LINE / 1048576.0, (double)table / ((double)fs.n_slots * GRAPH_LINE),
           hints ? ", policy hinted-rrip, hints a batch ahead" : "");
    // Batch b's distinct sampled vertices into rows[b % 2] (the sampling is a
    // function of the seed and the batch: sampled ahead, the same rows).
    auto sample = [&](uint64_t b) {
        uint32_t *r = rows[b % 2];
        uint64_t count = 0, n_rows = 0;
        sample_batch<<<sample_blocks, GNN_THREADS>>>(arrays, (uint32_t)n, g.h.n_edges, plan, GNN_SEED, b, GNN_BATCH,
                                                     samples, t);
        CHECK(cudaGetLastError());
        wait_kernels(300, "sampling");
        for (uint64_t i = 0; i < slots; i++)
            if (samples[i] != GRAPH_NONE) r[count++] = samples[i];
        graph_sort_u32(r, count); // the batch's vertices once each (host: orchestration, not data)
        for (uint64_t i = 0; i < count; i++)
            if (i == 0 || r[i] != r[n_rows - 1]) r[n_rows++] = r[i];
        n_sampled[b % 2] = count;
        n_batch_rows[b % 2] = n_rows;
    };
    sample(0);
    for (uint64_t b = 0; b < GNN_BATCHES && !t->errors && !t->sampling.errors; b++) {
        const uint32_t *batch_rows = rows[b % 2];
        const uint64_t count = n_sampled[b % 2], n_rows = n_batch_rows[b % 2];
        uint64_t hash[3] = {0, 0, 0};
        if (b + 1 < GNN_BATCHES) sample(b + 1);
        if (hints && b + 1 < GNN_BATCHES && !t->sampling.errors) {
            const uint64_t next_rows = n_batch_rows[(b + 1) % 2], blocks = (next_rows + GNN_THREADS - 1) / GNN_THREADS;
            move_clock<<<1, 1>>>(fs.cache, b);
            CHECK(cudaGetLastError());
            hint_batch<<<blocks < gather_blocks ? (uint32_t)blocks : gather_blocks, GNN_THREADS>>>(
                fs.cache, rows[(b + 1) % 2], next_rows, row_bytes, b + 1, t);
            CHECK(cudaGetLastError());
            wait_kernels(300, "hints");
        }
        for (int m = 0; m < 3; m++) {
            unsigned long long before = t->bytes_read;
            memset(buf, 0xA5, n_rows * row_bytes);
            double t0 = graph_now_s();
            if (m < 2) {
                uint64_t blocks = (n_rows + GNN_THREADS - 1) / GNN_THREADS;
                gather_batch<<<blocks < gather_blocks ? (uint32_t)blocks : gather_blocks, GNN_THREADS>>>(
                    m == 1, fs.cache, pairs, fs.n_pairs, batch_rows, n_rows, row_bytes, bounce, buf, t);
                CHECK(cudaGetLastError());
                wait_kernels(300, names[m]);
            } else { // 8 host threads, a read a row into the GPU-visible buffer
                std::vector<std::thread> threads;
                std::vector<int> failed(8, 0);
                for (int k = 0; k < 8; k++)
                    threads.emplace_back([&, k] {
                        for (uint64_t i = k; i < n_rows; i += 8)
                            failed[k] |= graph_pread_all(fs.fd, buf + i * row_bytes, row_bytes,
                                                         (uint64_t)batch_rows[i] * row_bytes) != GPUMEM_OK;
                    });
                for (auto &th : threads) th.join();
                for (int k = 0; k < 8; k++) t->errors += failed[k];
                t->bytes_read += n_rows * row_bytes;
            }
            seconds[m] += graph_now_s() - t0;
            read[m] += t->bytes_read - before;
            for (uint64_t i = 0; i < n_rows; i++)
                wrong += graph_feature_check(batch_rows[i], row_bytes, buf + i * row_bytes) < row_bytes;
            hash[m] = graph_hash(b, buf, n_rows * row_bytes);
            disagree += hash[m] != hash[0];
        }
        rows_total += n_rows;
        printf("    batch %2llu: %6llu sampled, %6llu rows, hash %016llx%s\n", (unsigned long long)b,
               (unsigned long long)count, (unsigned long long)n_rows, (unsigned long long)hash[0],
               hash[1] == hash[0] && hash[2] == hash[0] ? " in every mode" : ": MODES DISAGREE");
    }
    gpumem_cache_stats cs;
    gpumem_cache_get_stats(fs.cache, &cs);
    read[0] = cs.bytes_read;
    delete watch_graph;
    delete watch_features;
    printf("\n  %-36s %12s %9s %12s\n", "gathering", "rows/s", "x cache", "read/needed");
    for (int m = 0; m < 3; m++)
        printf("  %-36s %12.0f %8.2fx %12.2f\n", names[m], (double)rows_total / seconds[m],
               seconds[0] / seconds[m], (double)read[m] / ((double)rows_total * row_bytes));
    printf("  feature cache: %.1f %% hits; %llu rows wrong, %llu batch hashes disagreeing, %llu errors (first %s)\n",
           100.0 * (double)cs.hits / (double)(cs.hits + cs.misses + (cs.hits + cs.misses == 0)), wrong, disagree,
           t->errors + t->sampling.errors,
           gpumem_status_str((gpumem_status)(t->first_error ? t->first_error : t->sampling.first_error)));
    if (hints)
        printf("  hints from device code, a batch ahead: %u judged right, %u wrong (trust %u of %u), %u applied;"
               " %llu refused\n", fs.cache->slot_hints.right, fs.cache->slot_hints.wrong, fs.cache->slot_hints.trust,
               GPUMEM_POLICY_TRUST_MAX, fs.cache->slot_hints.applied, t->hints_refused);
    const int ok = !wrong && !disagree && !t->errors && !t->sampling.errors && !cs.violations;
    graph_store_close(&fs);
    graph_store_close(&gs);
    cudaFreeHost(buf);
    if (bounce) cudaFreeHost(bounce);
    cudaFree(arrays);
    cudaFree(pairs);
    cudaFree(t);
    cudaFree(samples);
    cudaFree(rows[0]);
    cudaFree(rows[1]);
    graph_free(&g);
    printf("gnn: %s\n", ok ? "ok" : "FAILED");
    return !ok;
}
