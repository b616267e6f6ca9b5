#!/usr/bin/env python3
# The bench boot's report (tests/qemu/run.sh, make qemu-bench): reads the
# guest console, prints a Markdown table of the three ways to read the same
# disk (the io_uring forwarder, fio with ioengine=io_uring_cmd, the VFIO
# shim) and the ratios. Exit 2, naming the console and what is missing, when
# a part left no figures.
#
#   bench_report.py CONSOLE
#
# Console lines it reads: "BENCH <what> key=value ..." (guest_test bench-*),
# and fio's JSON between "GPUMEM_FIO_BEGIN <name> rc=N" and
# "GPUMEM_FIO_END <name>".
import json
import sys


def fail(console, why):
    print(f"bench_report: {console}: {why}", file=sys.stderr)
    sys.exit(2)


def main():
    if len(sys.argv) != 2:
        print("usage: bench_report.py CONSOLE", file=sys.stderr)
        sys.exit(2)
    console = sys.argv[1]
    try:
        with open(console, "rb") as f:
            lines = [l.decode("utf-8", "replace").rstrip("\r\n").rstrip("\r") for l in f]
    except OSError as e:
        fail(console, str(e))
    bench = {}  # what -> list of dicts (the forwarder runs twice)
    fio = {}    # name -> (rc, json text)
    in_fio, buf, rc = None, [], None
    for n, line in enumerate(lines, 1):
        if in_fio is not None:
            if line.startswith("GPUMEM_FIO_END"):
                fio[in_fio] = (rc, "\n".join(buf), n)
                in_fio = None
            else:
                buf.append(line)
            continue
        if line.startswith("GPUMEM_FIO_BEGIN "):
            parts = line.split()
            in_fio, buf = parts[1], []
            rc = parts[2].split("=", 1)[1] if len(parts) > 2 and "=" in parts[2] else "?"
            continue
        if line.startswith("BENCH "):
            parts = line.split()
            fields = {}
            for p in parts[2:]:
                if "=" in p:
                    k, v = p.split("=", 1)
                    fields[k] = v
            fields["line"] = n
            bench.setdefault(parts[1], []).append(fields)

    def fio_job(name):
        if name not in fio:
            return None, f"no fio output for '{name}'"
        rc, text, n = fio[name]
        if rc != "0":
            return None, f"fio '{name}' exited {rc} (line {n})"
        try:
            start = text.index("{")
            job = json.loads(text[start:])["jobs"][0]["read"]
        except (ValueError, KeyError, IndexError) as e:
            return None, f"fio '{name}' (ending at line {n}): expected its JSON with jobs[0].read, found: {e}"
        return job, None

    fio_iops, why = fio_job("fio")
    fio_lat, why_lat = fio_job("fio-lat")
    if "uring" not in bench:
        fail(console, "no 'BENCH uring' line")

    def mean(xs):
        return sum(xs) / len(xs)

    uring = mean([float(r["iops"]) for r in bench["uring"]])
    shim = bench.get("vfio") or bench.get("uio")
    print("| path | IOPS | | latency run: IOPS | p50 us | p90 us | p99 us | p99.9 us |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for what, name in (("uring", "forwarder (1 forwarder thread + 1 client thread)"),
                       ("vfio", "VFIO shim (1 client thread polling the CQ)"),
                       ("uio", "uio shim (1 client thread polling the CQ)")):
        for i, r in enumerate(bench.get(what, [])):
            lat = bench.get(what + "-lat", [])
            l = lat[i] if i < len(lat) else None
            lat_cols = (f"{float(l['iops']):.0f} | {l['lat_us_p50']} | {l['p90']} | {l['p99']} | {l['p999']}"
                        if l else "- | - | - | - | -")
            run = f" run {i + 1}" if len(bench[what]) > 1 else ""
            print(f"| {name}{run} | {float(r['iops']):.0f} | | {lat_cols} |")
    if fio_iops is not None:
        if fio_lat is not None:
            pct = fio_lat.get("lat_ns", {}).get("percentile") or fio_lat.get("clat_ns", {}).get("percentile") or {}
            def p(k):
                v = pct.get(k)
                return f"{v / 1000:.0f}" if v is not None else "-"
            lat_cols = (f"{float(fio_lat['iops']):.0f} | {p('50.000000')} | {p('90.000000')} | {p('99.000000')} | "
                        f"{p('99.900000')}")
        else:
            lat_cols = "- | - | - | - | -"
        print(f"| fio io_uring_cmd, batched (gtod_reduce=1; latency run without it) | {float(fio_iops['iops']):.0f} "
              f"| | {lat_cols} |")
    print()
    print(f"forwarder IOPS (mean of {len(bench['uring'])} run(s)): {uring:.0f}")
    if fio_iops is not None:
        print(f"forwarder / fio: {uring / float(fio_iops['iops']):.2f}x (target >= 0.8x)")
    else:
        print(f"forwarder / fio: not measured: {why}")
    if fio_lat is None and fio_iops is not None:
        print(f"fio latency run: not measured: {why_lat}")
    if shim:
        print(f"forwarder / {'VFIO' if bench.get('vfio') else 'uio'} shim: {uring / float(shim[0]['iops']):.2f}x")
    else:
        print("forwarder / VFIO shim: not measured (no 'BENCH vfio' line)")


if __name__ == "__main__":
    main()
