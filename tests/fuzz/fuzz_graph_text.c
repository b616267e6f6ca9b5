/* fuzz_graph_text: the graph converter (examples/graph_formats.h) on text
 * input - GAP .el and .wel, SNAP, Matrix Market - against the reference
 * reader of tests/fuzz/graph_ref.h.
 *
 * Input: a byte choosing the format (low 2 bits) and the sort buffer (bit
 * 4: 1 KiB, 64 keys, so that runs spill and merge), then the file.
 * Properties, for every input:
 *   - the converter and the reference agree on accepting it; where both
 *     accept, the CSR file holds exactly the reference's graph (vertex
 *     count, every edge both ways, loops and repeats removed) and SNAP's
 *     id map the file's distinct ids in order;
 *   - a refusal names the file, says what was expected, and names the line
 *     the reference finds first (a refusal for room, "nothing written", is
 *     the converter's own: the harness caps files at 8 MiB);
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

static const char *const ext[4] = {"el", "wel", "txt", "mtx"};
static const int ref_fmt[4] = {REF_EL, REF_WEL, REF_SNAP, REF_MTX};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char in[300], out[300], ids[320], err[1024], inname[16];
    int f, rs;
    ref_graph ref;
    gpumem_status st = rig_convert_input(&data, &size, ext, 3, &f, inname, in, out, err, sizeof err);
    snprintf(ids, sizeof ids, "%s.ids", out);
    rs = ref_read_text(ref_fmt[f], (const char *)data, size, &ref);
    if (st != GPUMEM_OK) {
        rig_check_refused(err, in, out, inname, rs, &ref, "line", rs != REF_UNSURE);
    } else {
        graph_csr g;
        char lerr[256];
        const char *names[3] = {inname, "out.graph", "out.graph.ids"};
        rig_load_accepted(out, names, f == 2 ? 3 : 2, rs, &ref, "line", &g);
        if (rs == REF_OK) {
            rig_check_same(&g, &ref);
            if (f == 2) {
                uint64_t *map, n_map, i;
                FUZZ_CHECK(graph_ids_load(ids, &map, &n_map, lerr, sizeof lerr) == GPUMEM_OK && map, "id map: %s",
                           lerr);
                FUZZ_CHECK(n_map == ref.n_ids, "%llu ids in the map, the reference %zu", (unsigned long long)n_map,
                           ref.n_ids);
                for (i = 0; i < n_map; i++)
                    FUZZ_CHECK(map[i] == ref.ids[i], "id %llu: %llu, the reference %llu", (unsigned long long)i,
                               (unsigned long long)map[i], (unsigned long long)ref.ids[i]);
                free(map);
            }
        }
        graph_free(&g);
        unlink(out);
        unlink(ids);
    }
    ref_free(&ref);
    unlink(in);
    return 0;
}
