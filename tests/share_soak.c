/* share_soak: the share's served random mixes, many times over - the runs
 * that found a request served twice (issue 32: about one run in 15 to 100
 * lost a write before gpumem__share_take's rule). Host threads stand for
 * the GPU threads of two GPU owners, their misses served by the miss
 * queue's four server threads, over one or two software controllers; every
 * byte read is checked against the writes' model. Runs each shape `rounds`
 * times and says which runs lost what; then the reference model of lazy
 * release consistency (share_model) over `rounds` seeds per shape; exit 1
 * if any run failed.
 *
 *   make share-soak [SOAK_ROUNDS=40]      (not part of make test: minutes)
 */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdlib.h>

#include "share_workload.h"

int main(int argc, char **argv) {
    /* owners + 1, controllers, random, flags */
    static const uint32_t shapes[][4] = {{4, 2, 1, SHARE_WL_SERVED},
                                         {4, 1, 1, SHARE_WL_SERVED},
                                         {4, 1, 1, SHARE_WL_SERVED | SHARE_WL_SHORT_TIMEOUT}};
    const uint32_t rounds = argc > 1 ? (uint32_t)atoi(argv[1]) : 40;
    uint32_t i, r, lost = 0, runs = 0;
    (void)share_producer_consumer; /* the workloads' other one */
    for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (r = 0; r < rounds; r++) {
            share_run run;
            runs++;
            if (share_mix(shapes[i][0], shapes[i][1], shapes[i][2], (int)shapes[i][3], 2, 2000, &run)) {
                lost++;
                printf("share-soak: %u owners, %u controllers, flags %u, run %u: %s\n", shapes[i][0] - 1, shapes[i][1],
                       shapes[i][3], r, run.why);
                fflush(stdout);
            }
        }
    {
        /* The reference model (share_model): owners + 1, controllers, flags; seeds 100.. */
        static const uint32_t models[][3] = {{3, 0, 0}, {5, 1, 0}, {6, 0, SHARE_WL_TIER}, {4, 2, SHARE_WL_SERVED},
                                             {10, 1, SHARE_WL_SERVED}, {10, 2, SHARE_WL_TIER}};
        for (i = 0; i < sizeof models / sizeof models[0]; i++)
            for (r = 0; r < rounds; r++) {
                share_run run;
                runs++;
                if (share_model(models[i][0], models[i][1], (int)models[i][2], 100 + r, 4000, &run)) {
                    lost++;
                    printf("share-soak: model, %u owners, %u controllers, flags %u, seed %u: %s\n", models[i][0] - 1,
                           models[i][1], models[i][2], 100 + r, run.why);
                    fflush(stdout);
                }
            }
    }
    printf("share-soak: %u of %u runs lost a write or broke the model\n", lost, runs);
    return lost ? 1 : 0;
}
