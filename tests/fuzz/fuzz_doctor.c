/* fuzz_doctor: the doctor's reading of a machine (gpumem_doctor.h): sysfs,
 * procfs, /dev and its own snapshot files, under --root, with what the
 * input says in them; then --json, and the snapshot of what was read.
 *
 * Every input starts from one machine (an SSD on vfio-pci and a GPU behind
 * a PCIe switch, as tests/test_doctor.c's p2p machine), and is a list of
 * edits: [what][length][bytes]. `what` picks a file to overwrite with the
 * bytes (any bytes: /proc/cmdline, the kernel release, the class codes,
 * BARs, a bridge's config space, gpumem-doctor/cuda and owners, ...), a
 * link to point at a name made of them, a /dev entry to add, a file to
 * remove, or the checks' options (SSD address, pairs, depth, user).
 *
 * Properties, for every input:
 *   - the checks return OK, or EINVAL for a malformed snapshot file with
 *     rep.error naming the file, the line and what was expected;
 *   - gpumem_doctor_print_json's output is one valid JSON value (RFC 8259,
 *     checked here: syntax, escapes, UTF-8), with the schema's fields;
 *   - the snapshot (gpumem_doctor_snapshot) is a gzip'd ustar archive this
 *     harness can read (its own reader: stored deflate blocks, CRC-32 and
 *     size checked, ustar and pax headers, checksums), whose names and
 *     links stay inside it, and --root on it unpacked gives the same
 *     findings, word for word (vfio.open aside, never tried under a root);
 *   - a snapshot of nothing is an empty archive. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <ctype.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpumem_doctor.h"
#include "tests/fuzz/fuzz.h"

#define SSD "0000:02:10.0"
#define SSD_OLD "0000:65:00.0"
#define GPU "0000:17:00.0"
#define SWITCH "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
#define SSD_DEV SWITCH "/0000:02:10.0/" SSD
#define GPU_DEV SWITCH "/0000:02:08.0/" GPU

static char base[200], root[256], into[256], tgz[256];

/* ---- building the machine -------------------------------------------------------- */

static void put(const char *rel, const char *text);
#define DOCTOR_MACHINE_CHECK(ok, ...) FUZZ_CHECK(ok, __VA_ARGS__)
#include "tests/doctor_machine.h"

static void put_n(const char *rel, const void *p, size_t n) {
    char path[600], dir[600];
    snprintf(dir, sizeof dir, "%s", rel);
    if (strrchr(dir, '/')) {
        *strrchr(dir, '/') = 0;
        mkdirs(dir);
    }
    snprintf(path, sizeof path, "%s/%s", root, rel);
    unlink(path);
    FUZZ_CHECK(fuzz_write_file(path, p, n) == 0, "writing %s", path);
}

static void put(const char *rel, const char *text) { put_n(rel, text, strlen(text)); }

/* An edit's write: where the name is a directory of the machine already
 * (a /dev entry named "vfio"), the machine stays as it is. */
static void edit_put(const char *rel, const void *p, size_t n) {
    char path[600];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", root, rel);
    if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return;
    put_n(rel, p, n);
}

static void bridge(const char *chain, unsigned control) {
    unsigned char cs[512];
    char rel[300];
    memset(cs, 0, sizeof cs);
    cs[0x100] = 0x0D; /* ACS at 0x100, version 1 */
    cs[0x102] = 0x01;
    cs[0x104] = 0x1F;
    cs[0x106] = (unsigned char)(control & 0xFF);
    cs[0x107] = (unsigned char)(control >> 8);
    mkdirs(chain);
    snprintf(rel, sizeof rel, "%s/config", chain);
    put_n(rel, cs, sizeof cs);
}

static void pci_device(const char *dev, const char *addr, const char *cls, const char *driver, const char *group) {
    doctor_pci_device(dev, addr, cls,
                      "0x00000000fe000000 0x00000000fe003fff 0x0000000000140204\n"
                      "0x0000000000000000 0x0000000000000000 0x0000000000000000\n",
                      driver, group);
}

static void machine(void) {
    put("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on\n");
    put("proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
    put("proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units     \n"
                            "Max locked memory         unlimited            unlimited            bytes     \n");
    put("proc/sys/vm/nr_hugepages", "0\n");
    put("proc/sys/kernel/io_uring_disabled", "0\n");
    put("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Release Build\n");
    put("gpumem-doctor/cuda", "driver_version=570.86.15\ncuda_version=13000\ndevices=1\nname=NVIDIA H100\npci=" GPU
                              "\ncc=9.0\nloading=eager\nhost_atomics=0\npageable=0\ncompute_mode=0\nrdma=1\nmig=0\n"
                              "persistence=1\nbar1_total=137438953472\n");
    put("boot/config-6.1.0-18-amd64", "CONFIG_PCI_P2PDMA=y\n# CONFIG_DMA_SHARED_BUFFER is not set\n");
    mkdirs("sys/class/iommu/dmar0");
    mkdirs("sys/module/gdrdrv");
    mkdirs("sys/module/nvme_fabrics");
    bridge("sys/devices/pci0000:00/0000:00:01.0", 0);
    bridge(SWITCH, 0);
    bridge(SWITCH "/0000:02:08.0", 0x1D);
    bridge(SWITCH "/0000:02:10.0", 0);
    pci_device(GPU_DEV, GPU, "0x030200\n", "nvidia", NULL);
    pci_device(SSD_DEV, SSD, "0x010802\n", "vfio-pci", "42");
    put("sys/kernel/iommu_groups/42/type", "DMA-FQ\n");
    mkdirs(SSD_DEV "/nvme/nvme1");
    put("dev/vfio/42", "");
    put("dev/ng1n1", "");
}

/* The files an edit may overwrite. */
static const char *const files[] = {
    "proc/cmdline", "proc/sys/kernel/osrelease", "proc/self/limits", "proc/sys/vm/nr_hugepages",
    "proc/sys/kernel/io_uring_disabled", "proc/sys/kernel/io_uring_group", "proc/driver/nvidia/version",
    "gpumem-doctor/cuda", "gpumem-doctor/owners", SSD_DEV "/class", SSD_DEV "/vendor", SSD_DEV "/resource",
    GPU_DEV "/resource", GPU_DEV "/class", "sys/kernel/iommu_groups/42/type", SWITCH "/0000:02:08.0/config",
    SWITCH "/config", "boot/config-6.1.0-18-amd64", "sys/module/vfio/parameters/enable_unsafe_noiommu_mode",
    SSD_DEV "/nvme/nvme1/dev"};
#define N_FILES (sizeof files / sizeof files[0])

/* A name made of the bytes: any but '/' and NUL, not "." or "..", at
 * most 200 (what a file name may be, and nothing that climbs). */
static void name_of(const uint8_t *p, size_t n, char *out, size_t cap) {
    size_t i, o = 0;
    for (i = 0; i < n && o + 1 < cap && o < 200; i++)
        if (p[i] != '/' && p[i] != 0) out[o++] = (char)p[i];
    out[o] = 0;
    if (!o || !strcmp(out, ".") || !strcmp(out, "..")) snprintf(out, cap, "x");
}

typedef struct options {
    const char *pci;
    uint32_t pairs, depth, uid_delta;
    int noiommu, nothing;
} options;

static void edit(fuzz_bytes *in, options *o) {
    unsigned what = fuzz_u8(in), len = fuzz_u8(in);
    size_t n;
    const uint8_t *p = fuzz_span(in, len, &n);
    char name[256], rel[600], path[700];
    switch (what % 8) {
    case 0: case 1: case 2: case 3: /* overwrite a file */
        edit_put(files[(what >> 3) % N_FILES], p, n);
        break;
    case 4: /* a driver link to a driver of that name */
        name_of(p, n, name, sizeof name);
        snprintf(rel, sizeof rel, "sys/bus/pci/drivers/%s", name);
        mkdirs(rel);
        link_to((what >> 3) & 1 ? GPU_DEV "/driver" : SSD_DEV "/driver", rel);
        break;
    case 5: /* a /dev entry, or an IOMMU group named so */
        name_of(p, n, name, sizeof name);
        if ((what >> 3) & 1) {
            snprintf(rel, sizeof rel, "sys/kernel/iommu_groups/%s", name);
            mkdirs(rel);
            link_to(SSD_DEV "/iommu_group", rel);
        } else {
            snprintf(rel, sizeof rel, "dev/%s", name);
            edit_put(rel, "", 0);
        }
        break;
    case 6: /* a file or link removed */
        snprintf(path, sizeof path, "%s/%s", root, (what >> 3) % (N_FILES + 2) < N_FILES ? files[(what >> 3) % N_FILES]
                                                   : (what >> 3) % (N_FILES + 2) == N_FILES ? SSD_DEV "/driver"
                                                                                            : SSD_DEV "/iommu_group");
        unlink(path);
        break;
    default: /* the options */
        o->pci = (what >> 3) % 4 == 0 ? SSD : (what >> 3) % 4 == 1 ? GPU : (what >> 3) % 4 == 2 ? SSD_OLD : NULL;
        o->pairs = n > 0 ? 1 + p[0] * 3u : 16;
        o->depth = n > 1 ? 2u << (p[1] % 16) : 1024;
        o->uid_delta = n > 2 ? p[2] & 1 : 0;
        o->noiommu = n > 3 ? p[3] & 1 : 0;
        o->nothing = n > 4 && p[4] == 0xEE;
        break;
    }
}

/* ---- JSON, checked -------------------------------------------------------------------- */

typedef struct json {
    const unsigned char *p, *end;
} json;

static void json_ws(json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int json_lit(json *j, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n)) return 0;
    j->p += n;
    return 1;
}

/* A string: escapes as RFC 8259 lists them, no control character raw,
 * UTF-8 well formed (RFC 3629) - decoded here, not with the doctor's code. */
static int json_string(json *j, char *copy, size_t cap) {
    size_t o = 0;
    if (j->p == j->end || *j->p++ != '"') return 0;
    while (j->p < j->end) {
        unsigned c = *j->p++;
        if (c == '"') {
            if (copy) copy[o < cap ? o : cap - 1] = 0;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (j->p == j->end) return 0;
            c = *j->p++;
            if (c == 'u') {
                int k;
                for (k = 0; k < 4; k++)
                    if (j->p == j->end || !isxdigit(*j->p++)) return 0;
            } else if (!strchr("\"\\/bfnrt", (int)c)) return 0;
        } else if (c >= 0x80) {
            unsigned need, cp, k, min;
            if (c >= 0xC0 && c < 0xE0) need = 1, cp = c & 0x1F, min = 0x80;
            else if (c >= 0xE0 && c < 0xF0) need = 2, cp = c & 0x0F, min = 0x800;
            else if (c >= 0xF0 && c < 0xF8) need = 3, cp = c & 0x07, min = 0x10000;
            else return 0;
            for (k = 0; k < need; k++) {
                if (j->p == j->end || (*j->p & 0xC0) != 0x80) return 0;
                cp = cp << 6 | (*j->p++ & 0x3F);
            }
            if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        }
        if (copy && o + 1 < cap) copy[o++] = (char)c;
    }
    return 0;
}

static int json_value(json *j, int depth);

static int json_number(json *j) {
    const unsigned char *s = j->p;
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p == j->end || !isdigit(*j->p)) return 0;
    if (*j->p == '0') j->p++;
    else
        while (j->p < j->end && isdigit(*j->p)) j->p++;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p == j->end || !isdigit(*j->p)) return 0;
        while (j->p < j->end && isdigit(*j->p)) j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p == j->end || !isdigit(*j->p)) return 0;
        while (j->p < j->end && isdigit(*j->p)) j->p++;
    }
    return j->p > s;
}

static int json_value(json *j, int depth) {
    json_ws(j);
    if (j->p == j->end || depth > 32) return 0;
    if (*j->p == '{' || *j->p == '[') {
        int obj = *j->p++ == '{', first = 1;
        for (;;) {
            json_ws(j);
            if (j->p < j->end && *j->p == (obj ? '}' : ']') && first) {
                j->p++;
                return 1;
            }
            if (obj) {
                if (!json_string(j, NULL, 0)) return 0;
                json_ws(j);
                if (j->p == j->end || *j->p++ != ':') return 0;
            }
            if (!json_value(j, depth + 1)) return 0;
            json_ws(j);
            if (j->p == j->end) return 0;
            if (*j->p == ',') {
                j->p++;
                first = 0;
                continue;
            }
            return *j->p++ == (obj ? '}' : ']');
        }
    }
    if (*j->p == '"') return json_string(j, NULL, 0);
    if (json_lit(j, "true") || json_lit(j, "false") || json_lit(j, "null")) return 1;
    return json_number(j);
}

static void check_json(const gpumem_doctor_report *rep) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    json j;
    FUZZ_CHECK(f != NULL, "memstream");
    gpumem_doctor_print_json(rep, "all", root, f);
    fclose(f);
    j.p = (const unsigned char *)buf;
    j.end = j.p + n;
    FUZZ_CHECK(json_value(&j, 0), "--json output is not JSON at byte %ld of:\n%s", (long)(j.p - (const unsigned char *)buf),
               buf);
    json_ws(&j);
    FUZZ_CHECK(j.p == j.end, "--json output has more after its value");
    FUZZ_CHECK(strstr(buf, "\"schema\": \"gpumem-doctor/1\"") && strstr(buf, "\"findings\": ["), "schema:\n%s", buf);
    free(buf);
}

/* ---- the snapshot, read --------------------------------------------------------------- */

static uint32_t crc_table[256];

static uint32_t crc32_of(const unsigned char *p, size_t n) { /* table-driven, unlike the doctor's */
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    if (!crc_table[1]) {
        uint32_t k, b, v;
        for (k = 0; k < 256; k++) {
            for (v = k, b = 0; b < 8; b++) v = v & 1 ? 0xEDB88320u ^ (v >> 1) : v >> 1;
            crc_table[k] = v;
        }
    }
    for (i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* gzip (RFC 1952) of stored deflate blocks (RFC 1951, BTYPE 00) into a
 * buffer; NULL if it is not that. */
static unsigned char *gunzip_stored(const unsigned char *z, size_t n, size_t *out_n) {
    size_t at = 10, o = 0, cap = n;
    unsigned char *out;
    int last = 0;
    if (n < 18 || z[0] != 0x1f || z[1] != 0x8b || z[2] != 8 || z[3] != 0) return NULL; /* no FNAME etc. */
    out = (unsigned char *)malloc(cap + 1);
    FUZZ_CHECK(out != NULL, "memory");
    while (!last) {
        unsigned len, nlen;
        if (at + 5 > n || (z[at] & 0x06) != 0) goto bad; /* only stored blocks */
        last = z[at] & 1;
        len = z[at + 1] | (unsigned)z[at + 2] << 8;
        nlen = z[at + 3] | (unsigned)z[at + 4] << 8;
        if ((len ^ 0xFFFFu) != nlen || at + 5 + len > n) goto bad;
        memcpy(out + o, z + at + 5, len);
        o += len;
        at += 5 + len;
    }
    if (at + 8 != n) goto bad;
    {
        uint32_t crc = z[at] | (uint32_t)z[at + 1] << 8 | (uint32_t)z[at + 2] << 16 | (uint32_t)z[at + 3] << 24;
        uint32_t size = z[at + 4] | (uint32_t)z[at + 5] << 8 | (uint32_t)z[at + 6] << 16 | (uint32_t)z[at + 7] << 24;
        if (crc != crc32_of(out, o) || size != (uint32_t)o) goto bad;
    }
    *out_n = o;
    return out;
bad:
    free(out);
    return NULL;
}

static unsigned long long octal(const unsigned char *f, size_t n) {
    unsigned long long v = 0;
    size_t i;
    for (i = 0; i < n && f[i] == ' '; i++) {}
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) v = v * 8 + (unsigned)(f[i] - '0');
    return v;
}

/* A name from the archive must stay inside it: relative, no "..". */
static int inside(const char *name) {
    const char *c = name;
    if (name[0] == '/') return 0;
    while (*c) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') return 0;
        c += n + (c[n] == '/');
    }
    return 1;
}

/* A link at `name` pointing to `target` stays inside: the target, taken
 * from the link's directory, never climbs above the archive's top. */
static int link_inside(const char *name, const char *target) {
    int depth = 0;
    const char *c;
    if (target[0] == '/') return 0;
    for (c = name; *c; c++) depth += *c == '/';
    for (c = target; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            if (--depth < 0) return 0;
        } else if (n && !(n == 1 && c[0] == '.'))
            depth++;
        c += n + (c[n] == '/');
    }
    return 1;
}

/* Unpack the snapshot into `into`; returns the number of entries. */
static int unpack(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned char *z = NULL, *tar;
    size_t zn = 0, n, at = 0;
    char pax_path[1200] = "", pax_link[1200] = "";
    int entries = 0;
    long len;
    FUZZ_CHECK(f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0, "the snapshot %s", path);
    rewind(f);
    z = (unsigned char *)malloc((size_t)len + 1);
    FUZZ_CHECK(z && fread(z, 1, (size_t)len, f) == (size_t)len, "reading the snapshot");
    fclose(f);
    zn = (size_t)len;
    tar = gunzip_stored(z, zn, &n);
    FUZZ_CHECK(tar != NULL, "the snapshot is not gzip of stored deflate blocks with a right CRC-32 and size");
    free(z);
    FUZZ_CHECK(n % 512 == 0 && n >= 1024, "the archive is %zu bytes, not whole 512-byte blocks", n);
    mkdir(into, 0755);
    for (;;) {
        const unsigned char *h = tar + at;
        char name[1200], link[1200], full[1400];
        unsigned long long size, sum = 0, i;
        int zero = 1;
        FUZZ_CHECK(at + 512 <= n, "the archive ends without its two zero blocks");
        for (i = 0; i < 512; i++) zero &= h[i] == 0;
        if (zero) {
            FUZZ_CHECK(at + 1024 <= n, "one zero block at the end, not two");
            break;
        }
        for (i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? ' ' : h[i];
        FUZZ_CHECK(sum == octal(h + 148, 8), "header at %zu: checksum %llo, the field says %llo", at, sum,
                   octal(h + 148, 8));
        FUZZ_CHECK(!memcmp(h + 257, "ustar", 6) && !memcmp(h + 263, "00", 2), "header at %zu is not ustar", at);
        size = octal(h + 124, 12);
        FUZZ_CHECK(at + 512 + size <= n, "member at %zu runs past the archive", at);
        snprintf(name, sizeof name, "%.100s", (const char *)h);
        snprintf(link, sizeof link, "%.100s", (const char *)h + 157);
        if (h[156] == 'x') { /* pax: "LEN key=value\n" records */
            const char *r = (const char *)h + 512, *end = r + size;
            while (r < end) {
                char *sp;
                unsigned long rl = strtoul(r, &sp, 10);
                FUZZ_CHECK(*sp == ' ' && rl > 0 && r + rl <= end && r[rl - 1] == '\n', "pax record at %zu", at);
                if (!strncmp(sp + 1, "path=", 5)) snprintf(pax_path, sizeof pax_path, "%.*s", (int)(r + rl - 1 - (sp + 6)), sp + 6);
                if (!strncmp(sp + 1, "linkpath=", 9))
                    snprintf(pax_link, sizeof pax_link, "%.*s", (int)(r + rl - 1 - (sp + 10)), sp + 10);
                r += rl;
            }
            at += 512 + (size + 511) / 512 * 512;
            continue;
        }
        if (pax_path[0]) snprintf(name, sizeof name, "%s", pax_path);
        if (pax_link[0]) snprintf(link, sizeof link, "%s", pax_link);
        pax_path[0] = pax_link[0] = 0;
        FUZZ_CHECK(name[0] && inside(name), "an archive name leaves the archive: %s", name);
        snprintf(full, sizeof full, "%s/%s", into, name);
        if (h[156] == '5') {
            mkdir(full, 0755);
        } else if (h[156] == '2') {
            FUZZ_CHECK(link_inside(name, link), "the link %s -> %s leads out of the snapshot", name, link);
            FUZZ_CHECK(symlink(link, full) == 0, "unpacking the link %s", name);
        } else {
            FUZZ_CHECK(h[156] == '0' || h[156] == 0, "member %s of type %c", name, h[156]);
            FUZZ_CHECK(fuzz_write_file(full, h + 512, size) == 0, "unpacking %s", name);
        }
        entries++;
        at += 512 + (size + 511) / 512 * 512;
    }
    free(tar);
    return entries;
}

/* ---- the harness ------------------------------------------------------------------------ */

/* Every check, as the program runs them for --path all (host aside): the
 * first status that is not OK ends it. */
static gpumem_status run_all(gpumem_doctor_config *c, gpumem_doctor_report *rep) {
    gpumem_status st;
    memset(rep, 0, sizeof *rep);
    if ((st = gpumem_doctor_gpu(c, 1, rep)) != GPUMEM_OK) return st;
    if ((st = gpumem_doctor_ssd(c, rep)) != GPUMEM_OK) return st;
    if ((st = gpumem_doctor_p2p(c, rep)) != GPUMEM_OK) return st;
    return gpumem_doctor_uring(c, rep);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes in = {data, size, 0};
    options o = {SSD, 16, 1024, 0, 0, 0};
    gpumem_doctor_config c;
    gpumem_doctor_record rec;
    gpumem_doctor_report live, again;
    gpumem_status st;
    size_t i;
    if (!base[0]) {
        fuzz_tmpdir(base, sizeof base, "doctor");
        snprintf(root, sizeof root, "%s/machine", base);
        snprintf(into, sizeof into, "%s/unpacked", base);
        snprintf(tgz, sizeof tgz, "%s/snap.tgz", base);
    }
    fuzz_remove_tree(root);
    fuzz_remove_tree(into);
    unlink(tgz);
    mkdir(root, 0755);
    machine();
    while (fuzz_more(&in)) edit(&in, &o);
    c = gpumem_doctor_config_default();
    c.root = root;
    c.pci_addr = o.pci;
    c.pairs = o.pairs;
    c.depth = o.depth;
    c.noiommu = o.noiommu;
    c.uid = (uint32_t)getuid() + o.uid_delta;
    c.gid = (uint32_t)getgid() + o.uid_delta;
    c.build_arch = 90;
    c.build_cuda = 12020;
    memset(&rec, 0, sizeof rec);
    c.record = &rec;
    if (o.nothing) { /* a snapshot of nothing */
        memset(&live, 0, sizeof live);
        FUZZ_CHECK(gpumem_doctor_snapshot(&c, tgz, &live) == GPUMEM_OK, "snapshot of nothing: %s", live.error);
        FUZZ_CHECK(unpack(tgz) == 0, "a snapshot of nothing holds entries");
        gpumem_doctor_record_free(&rec);
        return 0;
    }
    st = run_all(&c, &live);
    check_json(&live);
    if (st != GPUMEM_OK) { /* a malformed snapshot file: named, with its line */
        FUZZ_CHECK(st == GPUMEM_EINVAL, "a check returned %s: %s", gpumem_status_str(st), live.error);
        FUZZ_CHECK((strstr(live.error, "gpumem-doctor/cuda:") || strstr(live.error, "gpumem-doctor/owners:")) &&
                       strstr(live.error, ": expected"),
                   "the error does not name the file, line and what was expected: %s", live.error);
        gpumem_doctor_record_free(&rec);
        gpumem_doctor_report_free(&live);
        return 0;
    }
    FUZZ_CHECK(gpumem_doctor_snapshot(&c, tgz, &live) == GPUMEM_OK, "snapshot: %s", live.error);
    gpumem_doctor_record_free(&rec);
    unpack(tgz);
    c.root = into;
    c.record = NULL;
    st = run_all(&c, &again);
    FUZZ_CHECK(st == GPUMEM_OK, "--root on the snapshot: %s (%s)", gpumem_status_str(st), again.error);
    FUZZ_CHECK(live.n == again.n, "%zu findings on the machine, %zu on its snapshot", live.n, again.n);
    for (i = 0; i < live.n; i++) {
        const gpumem_doctor_finding *x = &live.findings[i], *y = &again.findings[i];
        FUZZ_CHECK(!strcmp(x->check, y->check), "finding %zu: %s, on the snapshot %s", i, x->check, y->check);
        if (!strcmp(x->check, "vfio.open")) continue;
        FUZZ_CHECK(x->verdict == y->verdict && !strcmp(x->found, y->found) && !strcmp(x->fix, y->fix),
                   "%s: the machine says %s \"%s\" (fix \"%s\"), its snapshot %s \"%s\" (fix \"%s\")", x->check,
                   gpumem_doctor_verdict_str(x->verdict), x->found, x->fix, gpumem_doctor_verdict_str(y->verdict),
                   y->found, y->fix);
    }
    gpumem_doctor_report_free(&live);
    gpumem_doctor_report_free(&again);
    return 0;
}
