/* The GPU controller's warp-wide loop under the sanitizers (make tsan, make
 * stress): its serving threads play warps of 4 lanes (tests/host_warp.h), so
 * ThreadSanitizer sees the lanes' turns - each lane accepts, checks and
 * claims its command alone, a warp barrier between turns - and would report
 * two lanes writing the controller's side of a pair at once (it does, with
 * a barrier between turns taken out). The queue workload of test_warp.c:
 * every command counted, every read checked by content. Exits 1 on any
 * problem. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_HOST_WARP 4
#include "nvme_workload.h"

int main(void) {
    /* depth, pairs, command IDs, serving threads */
    static const uint32_t runs[][4] = {{64, 1, 64, 4}, {64, 8, 64, 8}, {16, 5, 16, 7}, {64, 2, 64, 5}};
    const double scale = test_scale();
    int failed = 0;
    for (uint32_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        run_cfg rc = base_run(runs[i][0]);
        run_result r;
        const char *problem;
        rc.pairs = runs[i][1];
        rc.n_cids = runs[i][2];
        rc.gpuctl_servers = runs[i][3];
        rc.async_depth = 8;
        rc.threads = 16;
        rc.ios = (uint32_t)(500 * scale);
        run_workload(&rc, &r);
        problem = run_problem(&r);
        printf("GPU controller, warps of 4 lanes, %u pairs, %u threads: %8lu commands  %s\n", runs[i][1],
               runs[i][3], (unsigned long)r.issued, problem ? problem : "ok");
        failed += problem != NULL;
    }
    return failed != 0;
}
