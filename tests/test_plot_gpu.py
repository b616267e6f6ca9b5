#!/usr/bin/env python3
"""make test: bench/plot_gpu.py on made-up bench_gpu rows (no GPU needed).

What it draws is what `make gpu-bench` reports for issue 12's plot, so its
data path is checked here: which rows become which series, which are left
out and named (did not finish, failed checks, not run), the statistics
on/off ratios, the last row of a key winning, a file of two devices
refused, and the exit codes (3: nothing drawn, not a failure). The drawing
itself is left out (GPUMEM_PLOT_WITH=none): gnuplot and matplotlib may be
missing here."""
import json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "bench", "plot_gpu.py")
GPU = "Made-up GPU"
failures = []
checks = 0


def row(group, variant, threads, pairs, rate, ok=True, finished=True, stats=True, arg=0, gpu=GPU):
    return dict(gpu=gpu, group=group, variant=variant, threads=threads, pairs=pairs, arg=arg, rate=rate,
                unit="cmd/s", checks_ok=ok, finished=finished, stats=stats)


def run(rows, d, name):
    path = os.path.join(d, name + ".jsonl")
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    env = dict(os.environ, GPUMEM_PLOT_WITH="none")
    p = subprocess.run([sys.executable, PLOT, path, os.path.join(d, name + ".png")], env=env,
                       capture_output=True, text=True)
    dat = os.path.join(d, name + ".dat")
    return p.returncode, p.stdout + p.stderr, open(dat).read() if os.path.exists(dat) else ""


def expect(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)


with tempfile.TemporaryDirectory() as d:
    rows = [row("clients", "hostctl_gpu", t, 1, 1000.0 * t) for t in (1024, 16384)]
    rows += [row("clients", "hostctl_gpu", 65536, 1, 5.0, finished=False)]      # did not finish
    rows += [row("queue", "lockfree", 1024, 1, 7.0), row("queue", "lockfree", 1024, 1, 9e5)]  # last wins
    rows += [row("queue", "mutex", 1024, 1, 4e4), row("queue", "mutex", 16384, 1, 3e4, ok=False)]
    rows += [row("queue", "lockfree", 16384, 128, 5e7), row("queue", "lockfree", 1048576, 128, 0.0)]
    rows += [row("clients", "hostctl_host", 14, 1, 2e6)]
    rows += [row("hits", "coalesced", 65536, 1, 1.8e10), row("hits", "coalesced", 65536, 1, 2.0e10, stats=False)]
    rc, out, dat = run(rows, d, "full")
    expect(rc == 3, f"nothing drawn (GPUMEM_PLOT_WITH=none) should exit 3, got {rc}: {out}")
    blocks = [b.strip().splitlines() for b in dat.split("\n\n\n") if b.strip()]
    series = {b[0][2:]: [tuple(float(x) for x in line.split()) for line in b[1:]] for b in blocks}
    expect(series.get("host-thread controller, GPU clients") == [(1024, 1024000.0), (16384, 16384000.0)],
           f"host-controller series: {series.get('host-thread controller, GPU clients')}")
    expect(series.get("GPU controller, lock-free pair") == [(1024, 9e5)], "a key measured twice keeps its last row")
    expect(series.get("GPU controller, mutex queue (baseline)") == [(1024, 4e4)], "a failed row is not drawn")
    expect(series.get("GPU controller, lock-free, 128 pairs") == [(16384, 5e7)], "a row of rate 0 is not drawn")
    expect(len(series) == 4, f"four series, got {sorted(series)}")
    for why in ("did not finish", "its checks failed", "no rate (not run)"):
        expect(f"not drawn ({why})" in out, f"'{why}' named: {out}")
    expect("= 0.90x" in out, f"statistics on / off ratio 1.8e10 / 2.0e10: {out}")

    rc, out, _ = run([row("queue", "lockfree", 1024, 1, 1e6), row("queue", "lockfree", 2048, 1, 1e6, gpu="Other")],
                     d, "two")
    expect(rc not in (0, 3) and "several devices" in out, f"two devices in one file refused: {rc} {out}")

    rc, out, _ = run([row("hits", "coalesced", 65536, 1, 1e10)], d, "none")
    expect(rc == 3 and "no client-thread rows" in out, f"no row to draw: exit 3, got {rc}: {out}")

if failures:
    print("test_plot_gpu: FAILED\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"test_plot_gpu: {checks} checks passed (series, rows left out, ratios, exit codes)")
