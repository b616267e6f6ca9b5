#!/usr/bin/env python3
"""Markdown report of a `policy_sim table` run (build/results/policy-sim.tsv):
misses of every policy and OPT per workload at 50% and 75% of the footprint,
ratios to OPT and LRU, and the papers' claims checked against the numbers."""
import math
import sys
from collections import defaultdict

rows = []
with open(sys.argv[1]) as f:
    head = f.readline().rstrip("\n").split("\t")
    for line in f:
        rows.append(dict(zip(head, line.rstrip("\n").split("\t"))))

one = [r for r in rows if r["placement"] == "-" and "+" not in r["policy"]]
two = [r for r in rows if r["placement"] != "-"]
pre = [r for r in rows if "+" in r["policy"]]
policies = []
for r in one:
    if r["policy"] not in policies:
        policies.append(r["policy"])
workloads = []
for r in one:
    if r["workload"] not in workloads:
        workloads.append(r["workload"])
miss = defaultdict(dict)  # (workload, frac) -> policy -> misses
opt = {}
for r in one:
    key = (r["workload"], r["frac"])
    miss[key][r["policy"]] = int(r["misses"])
    opt[key] = int(r["opt_misses"])
# (the two-tier and prefetch runs add an LRU row at their own capacity: not a full case)
for k in [k for k in miss if len(miss[k]) < len(policies)]:
    del miss[k]
fracs = sorted({k[1] for k in miss})
# The hinted policies (hinted, hinted-rrip) replay the traces' hints (issue 43); "best" is the best of the others.
unhinted = [p for p in policies if not p.startswith("hinted")]


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


out = []
out.append("# Replacement policies against Belady's OPT (bench/policy_sim)\n")
out.append("Capacity as a fraction of each trace's footprint (distinct lines). Every policy sees every access "
           "(full-hit information model). `make policy-sim` regenerates this file, the TSV and the plot.\n")
for title, fn in (("Misses", lambda k, p: "%d" % miss[k][p]),
                  ("Misses / OPT", lambda k, p: "%.3f" % (miss[k][p] / max(opt[k], 1))),
                  ("Misses / LRU", lambda k, p: "%.3f" % (miss[k][p] / max(miss[k]["lru"], 1)))):
    out.append("\n## %s\n" % title)
    out.append("| workload | cap | " + " | ".join(policies) + (" | opt | best |" if title == "Misses" else " | best |"))
    out.append("|" + "---|" * (len(policies) + (4 if title == "Misses" else 3)))
    for w in workloads:
        for fr in fracs:
            k = (w, fr)
            if k not in miss:
                continue
            best = min(unhinted, key=lambda p: miss[k][p])
            cells = [fn(k, p) for p in policies]
            extra = (" | %d" % opt[k]) if title == "Misses" else ""
            out.append("| %s | %s | %s%s | %s |" % (w, fr, " | ".join(cells), extra, best))

out.append("\n## The papers' claims, checked\n")
for fr in fracs:
    ratios = [min(miss[(w, fr)][p] for p in unhinted) / max(opt[(w, fr)], 1) for w in workloads if (w, fr) in miss]
    out.append("- Best policy per workload vs OPT at %s of the footprint: mean %.3fx, worst %.3fx "
               "(goal at 0.75: within 1.10x on average)." % (fr, sum(ratios) / len(ratios), max(ratios)))
for fr in fracs:
    r = [miss[(w, fr)]["lru"] / max(miss[(w, fr)]["hpe"], 1) for w in workloads if (w, fr) in miss]
    out.append("- HPE: LRU misses / HPE misses at %s: geometric mean %.2fx, arithmetic %.2fx, range %.2f-%.2fx "
               "(paper: 1.34x at 0.75, 1.16x at 0.50, as speedup over LRU in GPGPU-Sim)." %
               (fr, geomean(r), sum(r) / len(r), min(r), max(r)))
members = ["lru", "lfu", "cp"]
for fr in fracs:
    bad, worst = [], 0
    for w in workloads:
        k = (w, fr)
        if k not in miss:
            continue
        best = min(miss[k][p] for p in members)
        r = miss[k]["tournament"] / max(best, 1)
        worst = max(worst, r)
        if r > 1.05:
            bad.append("%s %.3f" % (w, r))
    out.append("- Tournament vs the best of its members (LRU, LFU, CP) at %s: worst %.3fx; above 1.05x: %s "
               "(goal: within 5%% everywhere)." % (fr, worst, ", ".join(bad) if bad else "none"))

if "hinted" in policies:
    out.append("\n## Hinted: the application's next-use hints, against OPT and every unhinted policy\n")
    out.append("The traces' hint records (the graph workloads: what each round of examples/graph.c knows, "
               "`--hints on`) replayed into the hinted policy (fallback BRRIP); a trace without hints leaves it "
               "equal to its fallback. The targets (issue 43): hinted / OPT <= 1.10 on the graph traces.\n")
    out.append("| workload | cap | hinted | OPT | hinted / OPT | best unhinted | its misses / hinted | "
               "brrip / hinted |")
    out.append("|---|---|---|---|---|---|---|---|")
    for w in workloads:
        for fr in fracs:
            k = (w, fr)
            if k not in miss:
                continue
            h = miss[k]["hinted"]
            best = min(unhinted, key=lambda p: miss[k][p])
            out.append("| %s | %s | %d | %d | %.3f | %s | %.3f | %.3f |" % (
                w, fr, h, opt[k], h / max(opt[k], 1), best, miss[k][best] / max(h, 1), miss[k]["brrip"] / max(h, 1)))

if two:
    out.append("\n## Two tiers (GMT): tier 1 = CLOCK, host tier behind it\n")
    out.append("| workload | t1 lines | placement | t1 hits | host reads | SSD reads | modelled ms (50 us host, 130 us SSD) |")
    out.append("|---|---|---|---|---|---|---|")
    ssd = defaultdict(dict)
    for r in two:
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (r["workload"], r["lines"], r["placement"], r["t1_hits"],
                                                         r["host_reads"], r["ssd_reads"], r["model_ms"]))
        ssd[r["workload"]][r["placement"]] = (int(r["ssd_reads"]), float(r["model_ms"]))
    red = []
    for w, d in ssd.items():
        if "tier-order" in d and "gmt-reuse" in d and d["tier-order"][0]:
            red.append((w, 1 - d["gmt-reuse"][0] / d["tier-order"][0], d["tier-order"][1] / max(d["gmt-reuse"][1], 1e-9)))
    if red:
        out.append("\n- GMT-Reuse vs tier-order, SSD reads: mean reduction %.1f%% (paper: ~25%%); per workload: %s." %
                   (100 * sum(x[1] for x in red) / len(red),
                    ", ".join("%s %+.1f%%" % (w, -100 * x) for w, x, _ in red)))
        out.append("- Modelled time, tier-order / GMT-Reuse: geometric mean %.2fx." % geomean([t for _, _, t in red]))

if pre:
    out.append("\n## Prefetch (CLOCK, 50% of the footprint)\n")
    out.append("| workload | policy | demand misses | prefetch reads |")
    out.append("|---|---|---|---|")
    for w in workloads:
        k = (w, "0.50")
        if k in miss:
            out.append("| %s | clock | %d | 0 |" % (w, miss[k]["clock"]))
        for r in pre:
            if r["workload"] == w:
                out.append("| %s | %s | %s | %s |" % (w, r["policy"], r["misses"], r["prefetch_reads"]))

# The plot's data: one row per workload and capacity, misses / OPT per policy.
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write("case\t" + "\t".join(policies) + "\n")
        for fr in fracs:
            for w in workloads:
                k = (w, fr)
                if k in miss:
                    f.write("%s@%s\t%s\n" % (w, fr, "\t".join("%.4f" % (miss[k][p] / max(opt[k], 1)) for p in policies)))

speed = defaultdict(list)
for r in one:
    speed[r["policy"]].append(float(r["macc_per_s"]))
out.append("\n## Simulator speed on these traces (M accesses/s per simulation, median)\n")
out.append(", ".join("%s %.0f" % (p, sorted(v)[len(v) // 2]) for p, v in speed.items()))
print("\n".join(out))
