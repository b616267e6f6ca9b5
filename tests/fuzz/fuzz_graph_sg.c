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
    char in[300], out[300], err[1024], inname[16];
    int f, rs;
    ref_graph ref;
    gpumem_status st = rig_convert_input(&data, &size, ext, 1, &f, inname, in, out, err, sizeof err);
    rs = ref_read_sg(f ? 8 : 4, data, size, &ref);
    if (st != GPUMEM_OK) {
        rig_check_refused(err, in, out, inname, rs, &ref, "byte", 1);
    } else {
        graph_csr g;
        const char *names[2] = {inname, "out.graph"};
        rig_load_accepted(out, names, 2, rs, &ref, "byte", &g);
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
