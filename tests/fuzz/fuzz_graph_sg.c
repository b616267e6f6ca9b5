/* fuzz_graph_sg: the graph converter (examples/graph_formats.h) on GAP's
 * serialized CSR, .sg and .wsg, against the reference reader of
 * tests/fuzz/graph_ref.h.
 *
 * Input: a byte choosing the format (bit 0: .wsg) and the sort buffer (bit
 * 4: 1 KiB, 64 keys, so that runs spill and merge), then the file.
 * Properties, for every input:
 *   - the converter and the reference agree on accepting it; where both
 *     accept, the CSR file holds exactly the reference's graph (vertex
 *     count, every edge both ways, loops and repeats removed);
 *   - a refusal names the file, says what was expected, and names the byte
 *     the reference finds first (the offset or neighbour that is wrong);
 *   - progress stays within 0..100 %;
 *   - nothing is left behind: after a refusal the directory holds the
 *     input alone, after a conversion the input and its outputs. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

#include "examples/graph_formats.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/graph_ref.h"
#include "tests/fuzz/graph_rig.h"

static const char *const ext[2] = {"sg", "wsg"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char in[300], out[300], err[1024], inname[16], where[64];
    unsigned sel = size ? data[0] : 0;
    int f = sel & 1, rs;
    gpumem_status st;
    ref_graph ref;
    once();
    if (size) data++, size--;
    st = rig_convert(data, size, ext[f], sel, inname, in, out, err, sizeof err);
    rs = ref_read_sg(f ? 8 : 4, data, size, &ref);
    if (st != GPUMEM_OK) {
        const char *names[1] = {inname};
        expect_dir(names, 1, err);
        rig_check_refusal(err, in, out);
        if (!strstr(err, "nothing written")) {
            FUZZ_CHECK(rs == REF_BAD, "refused what the reference reads (%llu vertices, %zu entries): %s",
                       (unsigned long long)ref.n, ref.n_keys, err);
            snprintf(where, sizeof where, ": byte %llu: ", (unsigned long long)ref.bad_at);
            FUZZ_CHECK(strstr(err, where) != NULL, "the reference finds the first error at byte %llu: %s",
                       (unsigned long long)ref.bad_at, err);
        }
    } else {
        graph_csr g;
        char lerr[256];
        const char *names[2] = {inname, "out.graph"};
        expect_dir(names, 2, "after a conversion");
        FUZZ_CHECK(rs != REF_BAD, "accepted what the reference refuses at byte %llu", (unsigned long long)ref.bad_at);
        FUZZ_CHECK(graph_load(out, &g, lerr, sizeof lerr) == GPUMEM_OK, "the output does not load: %s", lerr);
        if (rs == REF_OK) {
            rig_check_same(&g, &ref);
        }
        graph_free(&g);
        unlink(out);
    }
    ref_free(&ref);
    unlink(in);
    return 0;
}
