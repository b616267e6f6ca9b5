/* fuzz_uring_prp: the io_uring forwarder's translation of a fetched command
 * (gpumem__uring_translate, gpumem_uring.h, on gpumem_target_check and
 * gpumem_target_prp_walk_* of gpumem_target.h) against a hostile client.
 *
 * The input is one command (opcode, NSID, starting LBA, block count, PRP1,
 * PRP2, each address aimed at the client's data window, the pair's list
 * pages, near them, or anywhere), the namespace's LBA size and MDTS, the
 * contents of the pair's two PRP-list pages and of the client's window (a
 * list may sit there too), and whether a translator is set: one that maps
 * the fake bus addresses [WIN_BASE, WIN_BASE + WIN_BYTES) onto a host
 * buffer and refuses everything else. Without one, PRPs are host addresses
 * (never dereferenced here, except a list in the pair's list pages).
 *
 * Properties, for every input:
 *   - no crash, no undefined behaviour, no read outside the list pages or
 *     the window's buffer (both allocated to the byte: ASan);
 *   - the command is either refused with a status (bad_prp counted, or
 *     *untranslatable set, for a PRP refusal; the check's status for the
 *     opcode, NSID, range, MDTS) or translated: iovecs whose lengths sum to
 *     the command's bytes, each inside the window's buffer (translator) or
 *     equal to the PRP addresses (none), adjacent segments joined (no iovec
 *     ends where the next begins), n_iov <= max_iov;
 *   - a list outside the list pages is asked of the translator exactly as
 *     [PRP2, PRP2 + 8 * (pages - 1)), and no list is followed past its page
 *     (no chain pointer);
 *   - a reference written here from the NVMe PRP rules (PRP1 dword aligned
 *     with its offset; two pages: PRP2 the second page, page aligned; more:
 *     PRP2 a qword-aligned list pointer, entries non-null and page aligned,
 *     the whole list on PRP2's page) and the forwarder's (a list read in
 *     the list pages or through the translator; segments translated in
 *     order, the first refusal deciding) agrees on the status, the kind of
 *     refusal, and the segment list. */
#define _GNU_SOURCE
#define GPUMEM_IMPLEMENTATION
#include "tests/fuzz/fuzz.h"
static void fuzz_quiet(const char *fmt, ...) { (void)fmt; }
#define GPUMEM_LOG(...) fuzz_quiet(__VA_ARGS__)
#include "gpumem_uring.h"

#define PG 4096ull
#define LIST_PAGES 2u
#define LIST_BYTES (LIST_PAGES * PG)
#define WIN_BASE 0x00c0ffee00000000ull /* fake bus addresses: not the host's */
#define WIN_BYTES (16u * PG + 1024u)   /* a partial page at the end */
#define MAX_SEGS 70000u

static uint64_t *list_mem; /* the pair's list pages, allocated to the byte */
static unsigned char *win; /* the window's host buffer, allocated to the byte */
static uint64_t list_lo, list_hi;
static struct iovec iov[MAX_SEGS];
static struct {
    uint64_t prp, len;
} asked[MAX_SEGS + 1];
static uint32_t n_asked;

static int in_win(uint64_t a, uint64_t len) { return a >= WIN_BASE && a - WIN_BASE <= WIN_BYTES && len <= WIN_BYTES - (a - WIN_BASE); }

static int translator(void *ctx, uint64_t prp, uint64_t len, void **host) {
    (void)ctx;
    FUZZ_CHECK(n_asked <= MAX_SEGS, "translator asked %u times", n_asked);
    asked[n_asked].prp = prp;
    asked[n_asked].len = len;
    n_asked++;
    if (!in_win(prp, len)) return -1;
    *host = win + (prp - WIN_BASE);
    return 0;
}

/* An address the input aims: at the window, the list pages, near either, a
 * small number, or any 64 bits. */
static uint64_t aim(fuzz_bytes *b) {
    unsigned mode = fuzz_u8(b);
    uint64_t v = fuzz_u16(b) | (uint64_t)fuzz_u16(b) << 16;
    switch (mode % 6) {
    case 0: return WIN_BASE + v % (WIN_BYTES + 2 * PG) - PG;
    case 1: return list_lo + v % (LIST_BYTES + 2 * PG) - PG;
    case 2: return WIN_BASE + (v % 17) * PG;           /* a window page */
    case 3: return list_lo + (v % (LIST_BYTES / 8)) * 8; /* a list entry */
    case 4: return v;
    default: return v | (uint64_t)fuzz_u16(b) << 32 | (uint64_t)fuzz_u16(b) << 48;
    }
}

/* Fill n entries: a pattern (pages of the window in order, backwards, by
 * twos) and patches the input aims. */
static void fill(uint64_t *e, size_t n, fuzz_bytes *b) {
    unsigned pat = fuzz_u8(b), patches = fuzz_u8(b) % 16, k;
    size_t i;
    for (i = 0; i < n; i++) {
        uint64_t page = pat % 3 == 0 ? i : pat % 3 == 1 ? n - 1 - i : 2 * i;
        e[i] = WIN_BASE + (page % 17 + pat / 3 % 4) % 17 * PG;
    }
    for (k = 0; k < patches; k++) {
        size_t at = fuzz_u16(b) % n;
        e[at] = aim(b);
    }
}

/* The reference: the host address a segment maps to, or 0 when refused. */
static int ref_host(int xl, uint64_t a, uint64_t len, uint64_t *h) {
    if (!xl) return *h = a, 1;
    if (!in_win(a, len)) return 0;
    *h = (uint64_t)(uintptr_t)(win + (a - WIN_BASE));
    return 1;
}

enum { V_OK, V_CHECK, V_BAD, V_UNTR };

typedef struct ref_seg {
    uint64_t host, len;
} ref_seg;
static ref_seg segs[MAX_SEGS];
/* Two findings of this harness, fixed in gpumem__uring_translate and kept
 * as seeds (corpus/uring_prp/list-pointer-wraps, iov-join-wraps):
 *   - PRP2 in the last page of the address space made the "is the list in
 *     the list pages" test wrap to true, and the walk read the list at PRP2
 *     itself (SEGV); the reference's test below cannot wrap;
 *   - a segment whose host range runs to or past 2^64 (no translator, a PRP
 *     in the last page) overflowed a pointer in the joining of iovecs
 *     (UBSan); it is no memory the kernel can take: untranslatable. */

/* The reference's verdict on the PRPs of a checked len-byte transfer;
 * *n the joined segments. */
static int ref_walk(int xl, uint64_t prp1, uint64_t prp2, uint64_t len, uint32_t *n) {
    uint64_t first, pages, k, h, e;
    const uint64_t *list = NULL;
    *n = 0;
    if (prp1 == 0 || (prp1 & 3)) return V_BAD;
    first = PG - (prp1 & (PG - 1));
    pages = len <= first ? 1 : 1 + (len - first + PG - 1) / PG;
    if (pages == 2 && (prp2 == 0 || (prp2 & (PG - 1)))) return V_BAD;
    if (pages > 2) {
        uint64_t lb = 8 * (pages - 1);
        if (prp2 == 0 || (prp2 & 7)) return V_BAD;
        if ((prp2 & (PG - 1)) + lb > PG) return V_BAD; /* would chain */
        if (prp2 >= list_lo && prp2 < list_hi && lb <= list_hi - prp2) list = (const uint64_t *)(uintptr_t)prp2;
        else if (xl && in_win(prp2, lb)) list = (const uint64_t *)(void *)(win + (prp2 - WIN_BASE));
        else return V_UNTR;
    }
    for (k = 0; k < pages; k++) {
        uint64_t a = k == 0 ? prp1 : pages == 2 ? prp2 : list[k - 1];
        uint64_t off = k == 0 ? 0 : first + (k - 1) * PG;
        uint64_t seg = k == 0 ? (len < first ? len : first) : (len - off < PG ? len - off : PG);
        if (k > 0 && (a == 0 || (a & (PG - 1)))) return V_BAD;
        if (!ref_host(xl, a, seg, &h)) return V_UNTR;
        if (h > UINT64_MAX - seg) return V_UNTR; /* to or past 2^64 */
        e = *n ? segs[*n - 1].host + segs[*n - 1].len : 0;
        if (*n && e == h) segs[*n - 1].len += seg;
        else segs[(*n)++] = (ref_seg){h, seg};
    }
    return V_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes b = {data, size, 0};
    gpumem__uring_xlate x;
    gpumem_target_stats st, st0;
    gpumem_nvme_cmd cmd;
    gpumem__uring_io io;
    unsigned flags, opsel;
    uint32_t max_iov, n_ref = 0, i;
    uint64_t slba, nlb, len = 0, total;
    uint16_t status, want_status = 0;
    int untr = -1, xl, want = V_OK;

    if (!list_mem) {
        list_mem = (uint64_t *)aligned_alloc(PG, LIST_BYTES);
        win = (unsigned char *)malloc(WIN_BYTES);
        if (!list_mem || !win) abort();
        list_lo = (uint64_t)(uintptr_t)list_mem;
        list_hi = list_lo + LIST_BYTES;
    }
    flags = fuzz_u8(&b);
    xl = flags & 1;
    memset(&x, 0, sizeof x);
    x.ns.nsid = 1;
    x.ns.lba_shift = flags & 2 ? 12 : 9;
    x.ns.n_blocks = 1u << 20;
    x.ns.max_blocks = fuzz_u16(&b) % 65536 + 1;
    x.list_lo = list_lo;
    x.list_hi = list_hi;
    x.translate = xl ? translator : NULL;
    max_iov = (uint32_t)(((uint64_t)x.ns.max_blocks << x.ns.lba_shift) / PG + 2); /* the forwarder's */
    FUZZ_CHECK(max_iov <= MAX_SEGS, "max_iov %u", max_iov);

    memset(&cmd, 0, sizeof cmd);
    opsel = fuzz_u8(&b);
    cmd.cdw0 = (opsel % 8 < 3 ? GPUMEM_NVME_OP_READ : opsel % 8 < 6 ? GPUMEM_NVME_OP_WRITE
                : opsel % 8 == 6 ? GPUMEM_NVME_OP_FLUSH : opsel) | (uint32_t)fuzz_u16(&b) << 16;
    cmd.nsid = flags & 4 ? (flags & 8 ? 0xFFFFFFFFu : fuzz_u16(&b)) : 1;
    slba = flags & 16 ? (uint64_t)fuzz_u16(&b) << 32 | fuzz_u16(&b) << 16 | fuzz_u16(&b) : fuzz_u16(&b) % 64;
    cmd.cdw10 = (uint32_t)slba;
    cmd.cdw11 = (uint32_t)(slba >> 32);
    cmd.cdw12 = flags & 32 ? fuzz_u16(&b) : fuzz_u8(&b) % 80;
    cmd.prp1 = aim(&b);
    cmd.prp2 = aim(&b);
    fill(list_mem, LIST_BYTES / 8, &b);
    fill((uint64_t *)(void *)win, WIN_BYTES / 8, &b);

    /* The reference's check (gpumem_target.h's contract: opcode, NSID, range, MDTS). */
    nlb = (uint64_t)(cmd.cdw12 & 0xFFFF) + 1;
    switch (cmd.cdw0 & 0xFF) {
    case GPUMEM_NVME_OP_FLUSH:
        if (cmd.nsid != 1 && cmd.nsid != 0xFFFFFFFFu) want = V_CHECK, want_status = GPUMEM_NVME_STATUS(0, 0x0B);
        break;
    case GPUMEM_NVME_OP_READ:
    case GPUMEM_NVME_OP_WRITE:
        if (cmd.nsid != 1) want = V_CHECK, want_status = GPUMEM_NVME_STATUS(0, 0x0B);
        else if (slba >= x.ns.n_blocks || slba + nlb > x.ns.n_blocks) want = V_CHECK, want_status = GPUMEM_NVME_STATUS(0, 0x80);
        else if (nlb > x.ns.max_blocks) want = V_CHECK, want_status = GPUMEM_NVME_STATUS(0, 0x02);
        else len = nlb << x.ns.lba_shift;
        break;
    default: want = V_CHECK, want_status = GPUMEM_NVME_STATUS(0, 0x01);
    }
    if (want == V_OK && len) want = ref_walk(xl, cmd.prp1, cmd.prp2, len, &n_ref);
    if (want == V_BAD || want == V_UNTR) want_status = GPUMEM_NVME_STATUS(0, 0x13);

    memset(&st, 0, sizeof st);
    st0 = st;
    n_asked = 0;
    memset(&io, 0xA5, sizeof io);
    status = gpumem__uring_translate(&x, &st, &cmd, &io, iov, max_iov, &untr);

    FUZZ_CHECK(status == want_status, "status %#x, the reference %#x (verdict %d; prp1 %#llx prp2 %#llx len %llu)",
               status, want_status, want, (unsigned long long)cmd.prp1, (unsigned long long)cmd.prp2,
               (unsigned long long)len);
    FUZZ_CHECK(untr == (want == V_UNTR), "untranslatable %d, the reference's verdict %d", untr, want);
    FUZZ_CHECK(st.bad_prp - st0.bad_prp == (want == V_BAD), "bad_prp +%llu, the reference's verdict %d",
               (unsigned long long)(st.bad_prp - st0.bad_prp), want);
    FUZZ_CHECK(io.opcode == (cmd.cdw0 & 0xFF), "opcode %u", io.opcode);
    if (want != V_OK) return 0;
    FUZZ_CHECK(io.len == len && io.off == (len ? slba << x.ns.lba_shift : 0), "off %llu len %llu",
               (unsigned long long)io.off, (unsigned long long)io.len);
    FUZZ_CHECK(io.n_iov <= max_iov, "n_iov %u > max_iov %u", io.n_iov, max_iov);
    FUZZ_CHECK(io.n_iov == n_ref, "%u iovecs, the reference %u", io.n_iov, n_ref);
    total = 0;
    for (i = 0; i < io.n_iov; i++) {
        uint64_t h = (uint64_t)(uintptr_t)iov[i].iov_base;
        total += iov[i].iov_len;
        FUZZ_CHECK(h == segs[i].host && iov[i].iov_len == segs[i].len, "iovec %u: %#llx+%zu, the reference %#llx+%llu",
                   i, (unsigned long long)h, iov[i].iov_len, (unsigned long long)segs[i].host,
                   (unsigned long long)segs[i].len);
        FUZZ_CHECK(iov[i].iov_len > 0, "empty iovec %u", i);
        if (xl) FUZZ_CHECK(h >= (uint64_t)(uintptr_t)win && h - (uint64_t)(uintptr_t)win + iov[i].iov_len <= WIN_BYTES,
                           "iovec %u outside the window's buffer", i);
        if (i) FUZZ_CHECK((char *)iov[i - 1].iov_base + iov[i - 1].iov_len != (char *)iov[i].iov_base,
                          "iovecs %u and %u adjacent, not joined", i - 1, i);
    }
    FUZZ_CHECK(total == len, "iovecs sum to %llu, the command moves %llu", (unsigned long long)total,
               (unsigned long long)len);
    /* The translator saw the list (when outside the list pages) once, as a
     * whole, first, then one request per page. */
    if (xl && len) {
        uint64_t first = PG - (cmd.prp1 & (PG - 1));
        uint64_t pages = len <= first ? 1 : 1 + (len - first + PG - 1) / PG;
        int list_asked = pages > 2 && !(cmd.prp2 >= list_lo && cmd.prp2 < list_hi && 8 * (pages - 1) <= list_hi - cmd.prp2);
        FUZZ_CHECK(n_asked == pages + (uint64_t)list_asked, "translator asked %u times for %llu pages", n_asked,
                   (unsigned long long)pages);
        if (list_asked)
            FUZZ_CHECK(asked[0].prp == cmd.prp2 && asked[0].len == 8 * (pages - 1), "list asked as %#llx+%llu",
                       (unsigned long long)asked[0].prp, (unsigned long long)asked[0].len);
    }
    return 0;
}
