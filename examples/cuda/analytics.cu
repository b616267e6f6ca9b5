// analytics, on the GPU: the dissertation's data-dependent taxi queries
// Q0..Q5 (docs/analytics.md) over a table file, by GPU threads. The query
// step is the host version's (examples/table.h: table_range), so the
// answers are the host's to the bit.
//
//   (a) GPU threads through the cache: a warp's 32 threads take 32
//       consecutive ranges of 512 rows, scan c0 and read c1..ck only for
//       the rows that pass, through the cache, queue pairs and the software
//       controller (a host thread reading the file);
//   (b) the CPU-orchestrated tiled baseline (RAPIDS's shape): host threads
//       read row groups of every needed column whole into pinned memory,
//       then a kernel scans each tile.
// Both are checked against the host's reference (table_range over the same
// tiles on the host); bytes read over needed, time and rows/s are printed.
//
//   build/cuda/examples/analytics build/taxi.table [min] [line bytes]   (needs a GPU; make gpu-examples)
//
// A missing TABLE_FILE is written first: the generator's table (as
// build/table gen writes it) of AN_ROWS rows, 0.47 % at >= 20 miles, 0.03 %
// at >= 30; any other table with those column names will do.
//
// Columns: trip_distance filters; fare_amount, surcharge, hail_fee,
// tolls_amount, tax are c1..c5 (the generator's names).
// Exit status: 0 if every answer matched, 1 if not, 2 for bad arguments or
// an unusable table.
#define _POSIX_C_SOURCE 200809L
#include "cuda_host.h"
#define GPUMEM_IMPLEMENTATION
#include "gpu_cache.h" // the cache's contended metadata in GPU (managed) memory
#define GRAPH_CACHE_CREATE gpu_cache_create
#define GRAPH_CACHE_DESTROY gpu_cache_destroy

#include <thread>
#include <vector>

#include "../table.h"
#include "tests/cuda/watch.h" // a stalled run reports and exits instead of hanging

#define AN_THREADS 128u
#define AN_GROUP 65536u // rows a tile in (b)
#define AN_ROWS 2000000u // the table written when the file is missing (112 MiB)

__device__ void add_counts(table_counts *t, const table_counts *c) {
    atomicAdd(&t->rows, c->rows);
    atomicAdd(&t->bytes_needed, c->bytes_needed);
    atomicAdd(&t->full_retries, c->full_retries);
    if (c->errors) {
        atomicAdd(&t->errors, c->errors);
        atomicCAS(&t->first_error, 0, c->first_error);
    }
}

// (a): one thread a range of TABLE_RANGE rows, its k + 1 references held
// between rows (a thread holds up to k + 1 lines).
__global__ void query_cached(const gpumem_cache_array *arrays, table_query q, table_part *parts, table_counts *t) {
    gpumem_cache_ref refs[TABLE_MAX_K + 1];
    table_source src;
    table_counts c;
    memset(&src, 0, sizeof src);
    memset(&c, 0, sizeof c);
    for (uint32_t j = 0; j <= q.k; j++) refs[j] = gpumem_cache_ref_make(&arrays[j]);
    src.kind = TABLE_FROM_CACHE;
    src.refs = refs;
    const uint64_t n = table_ranges(q.n_rows);
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n && !c.errors;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t end = (i + 1) * TABLE_RANGE < q.n_rows ? (i + 1) * TABLE_RANGE : q.n_rows;
        table_range(&src, &q, i * TABLE_RANGE, end, &parts[i], &c);
    }
    for (uint32_t j = 0; j <= q.k; j++) (void)gpumem_cache_ref_drop(&refs[j]);
    add_counts(t, &c);
}

// (b): one thread a range of the tile rows [first, end), read from the tile.
__global__ void query_tile(const double *tile, table_query q, uint64_t first, uint64_t end, table_part *parts,
                           table_counts *t) {
    table_source src;
    table_counts c;
    memset(&src, 0, sizeof src);
    memset(&c, 0, sizeof c);
    src.kind = TABLE_FROM_MEMORY;
    src.mem_first = first;
    for (uint32_t j = 0; j <= q.k; j++) src.mem[j] = tile + (size_t)j * AN_GROUP;
    for (uint64_t r = first + (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) * TABLE_RANGE; r < end && !c.errors;
         r += (uint64_t)gridDim.x * blockDim.x * TABLE_RANGE)
        table_range(&src, &q, r, r + TABLE_RANGE < end ? r + TABLE_RANGE : end, &parts[r / TABLE_RANGE], &c);
    add_counts(t, &c);
}

// Tiles of every needed column read whole by 8 host threads' pread into
// `tile`, each scanned on the GPU (gpu) or the host (the reference). The
// bytes read go to *read. 0, or -1 for a failed read.
static int tiled(int fd, const table_query *q, double *tile, int gpu, table_part *parts, table_counts *t,
                 unsigned long long *read) {
    for (uint64_t first = 0; first < q->n_rows; first += AN_GROUP) {
        const uint64_t end = first + AN_GROUP < q->n_rows ? first + AN_GROUP : q->n_rows;
        std::vector<std::thread> threads;
        std::vector<int> failed(q->k + 1, 0);
        for (uint32_t j = 0; j <= q->k; j++)
            threads.emplace_back([&, j] {
                failed[j] = graph_pread_all(fd, tile + (size_t)j * AN_GROUP, (end - first) * 8,
                                            q->col_at[j] + first * 8) != GPUMEM_OK;
            });
        for (auto &th : threads) th.join();
        for (uint32_t j = 0; j <= q->k; j++)
            if (failed[j]) return -1;
        *read += (unsigned long long)(q->k + 1) * (end - first) * 8;
        if (gpu) {
            const uint64_t ranges = (end - first + TABLE_RANGE - 1) / TABLE_RANGE;
            query_tile<<<(uint32_t)((ranges + AN_THREADS - 1) / AN_THREADS), AN_THREADS>>>(tile, *q, first, end,
                                                                                          parts, t);
            CHECK(cudaGetLastError());
            wait_kernels(300, "query_tile");
        } else {
            table_source src;
            memset(&src, 0, sizeof src);
            src.kind = TABLE_FROM_MEMORY;
            src.mem_first = first;
            for (uint32_t j = 0; j <= q->k; j++) src.mem[j] = tile + (size_t)j * AN_GROUP;
            for (uint64_t r = first; r < end; r += TABLE_RANGE)
                table_range(&src, q, r, r + TABLE_RANGE < end ? r + TABLE_RANGE : end, &parts[r / TABLE_RANGE], t);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    static const char *const names[TABLE_MAX_K + 1] = {"trip_distance", "fare_amount", "surcharge", "hail_fee",
                                                       "tolls_amount", "tax"};
    table_info info;
    graph_store s;
    graph_store_config sc = {8, 1024, 0, 0, 0};
    table_query q;
    char err[512];
    int fd, rc = 0;
    const double min = argc > 2 ? atof(argv[2]) : 30.0;
    const uint32_t line = argc > 3 ? (uint32_t)atoi(argv[3]) : 4096;
    if (argc < 2 || argc > 4 || (line != 512 && line != 1024 && line != 2048 && line != 4096)) {
        fprintf(stderr, "usage: %s TABLE_FILE [min, default 30] [line bytes: 512, 1024, 2048, 4096]\n"
                        "  (make one with: build/table gen FILE --rows N)\n", argv[0]);
        return 2;
    }
    need_gpu("analytics");
    if (access(argv[1], F_OK) != 0) {
        const table_gen_spec g = {GRAPH_SEED, 0.0047, 0.0003, 0.0};
        printf("  %s: missing; writing a taxi-like table of %u rows\n", argv[1], AN_ROWS);
        if (table_gen_write(argv[1], AN_ROWS, &g, err, sizeof err) != GPUMEM_OK) {
            fprintf(stderr, "analytics: %s\n", err);
            return 2;
        }
    }
    if (table_open_info(argv[1], &fd, &info, err, sizeof err) != GPUMEM_OK) {
        fprintf(stderr, "analytics: %s\n", err);
        return 2;
    }
    memset(&q, 0, sizeof q);
    q.n_rows = info.h.n_rows;
    q.min = min;
    uint32_t k_max = 0;
    for (uint32_t j = 0; j <= TABLE_MAX_K; j++) {
        const int c = table_find(&info, names[j]);
        if (c < 0 || info.cols[c].kind != TABLE_NUMBER) break;
        q.col_at[j] = info.cols[c].at;
        k_max = j;
    }
    if (table_find(&info, names[0]) < 0) {
        fprintf(stderr, "analytics: %s: no numeric column trip_distance (make one with build/table gen)\n", argv[1]);
        return 2;
    }
    const uint64_t n_ranges = table_ranges(q.n_rows);
    sc.line_bytes = line;
    sc.cache_bytes = GPUMEM_ALIGN_UP((uint64_t)(k_max + 1) * q.n_rows * 8 / 8, line);
    if (sc.cache_bytes < 4096ull * line) sc.cache_bytes = 4096ull * line;
    memset(&s, 0, sizeof s);
    s.fd = open(argv[1], O_RDONLY);
    if (s.fd < 0 || graph_store_serve(&s, info.h.file_bytes, TABLE_LBA, TABLE_MAX_BLOCKS, &sc, err, sizeof err) !=
                        GPUMEM_OK) {
        fprintf(stderr, "analytics: %s: %s\n", argv[1], s.fd < 0 ? strerror(errno) : err);
        return 2;
    }
    gpumem_cache_array *arrays;
    table_part *parts, *ref;
    table_counts *t;
    double *tile;
    CHECK(cudaMallocManaged(&arrays, (TABLE_MAX_K + 1) * sizeof *arrays));
    CHECK(cudaMallocManaged(&parts, n_ranges * sizeof *parts));
    CHECK(cudaMallocManaged(&t, sizeof *t));
    CHECK(cudaHostAlloc((void **)&tile, (size_t)(TABLE_MAX_K + 1) * AN_GROUP * 8, cudaHostAllocMapped));
    ref = (table_part *)calloc(n_ranges, sizeof *ref);
    for (uint32_t j = 0; j <= k_max; j++) arrays[j] = gpumem_cache_array_make(s.cache, 8, q.col_at[j], q.n_rows);
    SwctlWatch *watch = new SwctlWatch(s.ctl, "analytics", 30000);
    printf("  analytics on the GPU: %llu rows, trip_distance >= %g, Q0..Q%u; cache %.1f MiB of %u B lines\n",
           (unsigned long long)q.n_rows, min, k_max, (double)s.n_slots * line / 1048576.0, line);
    printf("  %-4s %-34s %11s %9s %12s %8s\n", "Q", "mode", "read/needed", "seconds", "rows/s", "answer");
    for (uint32_t k = 0; k <= k_max && !rc; k++) {
        table_counts host;
        unsigned long long ref_read = 0, tile_read = 0;
        memset(&host, 0, sizeof host);
        q.k = k;
        if (tiled(fd, &q, tile, 0, ref, &host, &ref_read) != 0) {
            fprintf(stderr, "analytics: %s: read failed\n", argv[1]);
            rc = 2;
            break;
        }
        const table_part want = table_total(ref, n_ranges);
        for (int m = 0; m < 2 && !rc; m++) {
            gpumem_cache_stats before, after;
            memset(t, 0, sizeof *t);
            memset(parts, 0xA5, n_ranges * sizeof *parts);
            gpumem_cache_get_stats(s.cache, &before);
            const double t0 = graph_now_s();
            if (m == 0) {
                uint32_t blocks = s.n_slots / (k + 1) / AN_THREADS; // each thread holds up to k + 1 lines
                if (blocks > 512) blocks = 512;
                if (blocks == 0) blocks = 1;
                query_cached<<<blocks, AN_THREADS>>>(arrays, q, parts, t);
                CHECK(cudaGetLastError());
                wait_kernels(600, "query_cached");
            } else if (tiled(fd, &q, tile, 1, parts, t, &tile_read) != 0) {
                rc = 2;
            }
            const double sec = graph_now_s() - t0;
            gpumem_cache_get_stats(s.cache, &after);
            const double read = m == 0 ? (double)(after.bytes_read - before.bytes_read) : (double)tile_read;
            const table_part got = table_total(parts, n_ranges);
            const int equal = !t->errors && !memcmp(&got, &want, sizeof got);
            printf("  Q%-3u %-34s %11.3f %9.3f %12.0f %8s\n", k, m == 0 ? "(a) GPU threads through the cache" :
                   "(b) host tiles, GPU scan", t->bytes_needed ? read / (double)t->bytes_needed : 0.0, sec,
                   (double)q.n_rows / sec, equal ? "equal" : "DIFFERS");
            if (t->errors)
                fprintf(stderr, "analytics: Q%u: %llu errors (first %s)\n", k, t->errors,
                        gpumem_status_str((gpumem_status)t->first_error));
            if (!equal) rc = 1;
        }
        printf("answer Q%u sum %.17g terms %llu passing %llu\n", k, want.sum, (unsigned long long)want.terms,
               (unsigned long long)want.passing);
    }
    gpumem_cache_stats cs;
    gpumem_cache_get_stats(s.cache, &cs);
    delete watch;
    if (cs.violations) rc = 1;
    graph_store_close(&s);
    close(fd);
    cudaFree(arrays);
    cudaFree(parts);
    cudaFree(t);
    cudaFreeHost(tile);
    free(ref);
    table_info_free(&info);
    printf("analytics: %s\n", rc ? "FAILED" : "ok");
    return rc;
}
