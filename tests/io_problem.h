/* The end-of-run checks the I/O workloads share (nvme_workload.h,
 * mix_workload.h), in order: no protocol violation, every command the
 * threads issued reached the controller, every read had the right content,
 * every EIO was an injected error decoded as such, and the store holds each
 * block's last successful write. */
#ifndef GPUMEM_TEST_IO_PROBLEM_H
#define GPUMEM_TEST_IO_PROBLEM_H

#include <stdio.h>

#include "gpumem_swctl.h"

/* NULL if every check passed, else what was wrong, written to msg. */
static inline const char *io_problem(char *msg, size_t n, const gpumem_target_stats *s, uint64_t issued,
                                     uint64_t bad_data, uint64_t eio, uint64_t eio_wrong_words,
                                     uint64_t store_mismatches) {
    if (s->violations)
        snprintf(msg, n, "%lu protocol violations (cid %lu, doorbell %lu/%lu, cq %lu, prp %lu, lba %lu)",
                 (unsigned long)s->violations, (unsigned long)s->cid_in_flight, (unsigned long)s->bad_doorbell,
                 (unsigned long)s->doorbell_backwards, (unsigned long)s->cq_head_past_posted,
                 (unsigned long)s->bad_prp, (unsigned long)s->lba_out_of_range);
    else if (s->commands != issued)
        snprintf(msg, n, "controller completed %lu commands, hosts issued %lu", (unsigned long)s->commands,
                 (unsigned long)issued);
    else if (bad_data)
        snprintf(msg, n, "%lu reads returned wrong content", (unsigned long)bad_data);
    else if (eio != s->errors_injected || eio_wrong_words || s->errors_other)
        snprintf(msg, n, "errors: %lu seen, %lu injected, %lu decoded wrongly, %lu not injected", (unsigned long)eio,
                 (unsigned long)s->errors_injected, (unsigned long)eio_wrong_words, (unsigned long)s->errors_other);
    else if (store_mismatches)
        snprintf(msg, n, "%lu blocks in the backing store differ from the last write", (unsigned long)store_mismatches);
    else
        return NULL;
    return msg;
}

#endif
