#!/usr/bin/env python3
# The bench boot's report (tests/qemu/run.sh, make qemu-bench): reads the
# guest console and prints a Markdown table of the three ways to read the
# same disk (the io_uring forwarder in each of its variants, fio with
# ioengine=io_uring_cmd, the VFIO shim), the forwarder and fio over nvme-tcp
# and nvme-rdma, round by round, and the ratios of each round (each
# forwarder run against fio on the same device, and the local ones against
# the shim) and their medians.
# Exit 2, naming the console and what is missing, when a round left no
# figures.
#
#   bench_report.py CONSOLE
#
# Console lines it reads: "GPUMEM_BENCH_ROUND <n>", "BENCH <what> key=value
# ..." (guest_test bench-uring, bench-vfio), and fio's JSON between
# "GPUMEM_FIO_BEGIN <name> rc=N" and "GPUMEM_FIO_END <name>".
import json
import statistics
import sys


def fail(console, why):
    print(f"bench_report: {console}: {why}", file=sys.stderr)
    sys.exit(2)


def parse(console):
    try:
        with open(console, "rb") as f:
            lines = [l.decode("utf-8", "replace").rstrip("\r\n").rstrip("\r") for l in f]
    except OSError as e:
        fail(console, str(e))
    rounds = []  # each: {"bench": {what: fields}, "fio": {name: (rc, text, line)}}
    in_fio, buf, rc = None, [], None
    for n, line in enumerate(lines, 1):
        if in_fio is not None:
            if line.startswith("GPUMEM_FIO_END"):
                rounds[-1]["fio"][in_fio] = (rc, "\n".join(buf), n)
                in_fio = None
            else:
                buf.append(line)
            continue
        if line.startswith("GPUMEM_BENCH_ROUND "):
            rounds.append({"n": line.split()[1], "bench": {}, "fio": {}})
        elif not rounds:
            continue
        elif line.startswith("GPUMEM_FIO_BEGIN "):
            parts = line.split()
            in_fio, buf = parts[1], []
            rc = parts[2].split("=", 1)[1] if len(parts) > 2 and "=" in parts[2] else "?"
        elif line.startswith("BENCH "):
            parts = line.split()
            fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
            fields["line"] = n
            rounds[-1]["bench"][parts[1]] = fields
    return rounds


def fio_read(console, rnd, name):
    """fio's read figures of one job as (iops, {percentile: us}), or a reason."""
    if name not in rnd["fio"]:
        return None, f"round {rnd['n']}: no fio output for '{name}'"
    rc, text, n = rnd["fio"][name]
    if rc != "0":
        return None, f"round {rnd['n']}: fio '{name}' exited {rc} (line {n} of {console})"
    try:
        job = json.loads(text[text.index("{"):])["jobs"][0]["read"]
        iops = float(job["iops"])
    except (ValueError, KeyError, IndexError) as e:
        return None, (f"round {rnd['n']}: fio '{name}' (ending at line {n} of {console}): expected its JSON "
                      f"with jobs[0].read.iops, found: {e!r}")
    pct = (job.get("lat_ns") or {}).get("percentile") or {}
    return (iops, {k: pct.get(v) / 1000 if pct.get(v) is not None else None
                   for k, v in (("p50", "50.000000"), ("p90", "90.000000"), ("p99", "99.000000"),
                                ("p999", "99.900000"))}), None


# The forwarder's runs (BENCH names) and what they are; each has the fio run
# it is compared with: on the same device, and next to it in time.
FORWARDER = (
    ("uring", "forwarder (1 forwarder + 1 client thread)", "fio"),
    ("uring-fixed", "forwarder, registered buffer", "fio-fixed"),
    ("uring-sqpoll", "forwarder, registered buffer + SQPOLL", "fio-sqpoll"),
    ("uring-nospin", "forwarder, registered buffer, idle_spin_ns GPUMEM_TARGET_NO_SPIN", "fio-nospin"),
    ("tcp", "forwarder over nvme-tcp (nvmet, same guest)", "fio-tcp"),
    ("rdma", "forwarder over nvme-rdma (soft-RoCE, same guest)", "fio-rdma"),
)
FIO = (("fio", "fio io_uring_cmd, batched (gtod_reduce=1; latency run without it)", "fio-lat"),
       ("fio-fixed", "fio, the run after the registered-buffer forwarder's", None),
       ("fio-sqpoll", "fio, the run after the SQPOLL forwarder's", None),
       ("fio-nospin", "fio, the run after the no-spin forwarder's", None),
       ("fio-tcp", "fio io_uring_cmd over nvme-tcp, batched", None),
       ("fio-rdma", "fio io_uring_cmd over nvme-rdma, batched", None))


def row(rnd, name, iops, lat):
    print(f"| {rnd['n']} | {name} | {iops:.0f} | {lat} |")


def main():
    if len(sys.argv) != 2:
        print("usage: bench_report.py CONSOLE", file=sys.stderr)
        sys.exit(2)
    console = sys.argv[1]
    rounds = parse(console)
    if not rounds:
        fail(console, "no GPUMEM_BENCH_ROUND line")
    print("| round | path | IOPS | latency run: IOPS | p50 us | p90 us | p99 us | p99.9 us |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    ratios, notes = {}, []  # ratios: label -> per-round values
    for rnd in rounds:
        b = rnd["bench"]
        if "uring" not in b:
            fail(console, f"round {rnd['n']}: no 'BENCH uring' line")
        for what, name in [(w, n) for w, n, _ in FORWARDER] + [("vfio", "VFIO shim (1 client thread)"),
                                                              ("uio", "uio shim (1 client thread)")]:
            if what not in b:
                continue
            l = b.get(what + "-lat")
            lat = (f"{float(l['iops']):.0f} | {l['lat_us_p50']} | {l['p90']} | {l['p99']} | {l['p999']}"
                   if l else "- | - | - | - | -")
            row(rnd, name, float(b[what]["iops"]), lat)
        fio = {}
        for job, name, lat_job in FIO:
            if job != "fio" and job not in rnd["fio"]:
                continue
            f, why = fio_read(console, rnd, job)
            if not f:
                notes.append(why)
                continue
            fio[job] = f[0]
            lat = "- | - | - | - | -"
            if lat_job:
                fl, why_lat = fio_read(console, rnd, lat_job)
                if fl:
                    q = fl[1]
                    lat = f"{fl[0]:.0f} | " + " | ".join("-" if q[k] is None else f"{q[k]:.0f}"
                                                          for k in ("p50", "p90", "p99", "p999"))
                else:
                    notes.append(why_lat)
            row(rnd, name, f[0], lat)
        shim = b.get("vfio") or b.get("uio")
        if not shim:
            notes.append(f"round {rnd['n']}: no 'BENCH vfio' line")
        for what, name, job in FORWARDER:
            if what not in b:
                continue
            u = float(b[what]["iops"])
            if job in fio:
                ratios.setdefault(f"{what} / {job}", []).append(u / fio[job])
            if shim and job.startswith("fio") and job not in ("fio-tcp", "fio-rdma"):
                ratios.setdefault(f"{what} / VFIO shim", []).append(u / float(shim["iops"]))
    print()
    fmt = lambda rs: ", ".join(f"{r:.2f}" for r in rs)
    if "uring / fio" not in ratios:
        print("forwarder / fio: not measured")
    for label, rs in ratios.items():
        target = " (target >= 0.9x)" if label.endswith("/ fio") and label.startswith("uring") else ""
        print(f"{label}, IOPS, per round: {fmt(rs)}; median {statistics.median(rs):.2f}x{target}")
    for n in notes:
        print(f"note: {n}")


if __name__ == "__main__":
    main()
