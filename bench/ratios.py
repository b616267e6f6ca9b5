#!/usr/bin/env python3
"""Turn a Google Benchmark JSON of bench_queue into a table of rates and ratios."""
import json, re, sys

data = json.load(open(sys.argv[1]))
ctx = data["context"]
rates = {}
for b in data["benchmarks"]:
    m = re.match(r"(\w+)/(?:min_time:[\d.]+/)?(?:real_time/)?threads:(\d+)", b["name"])
    if m and "items_per_second" in b:
        rates.setdefault(int(m.group(2)), {})[m.group(1)] = b["items_per_second"]
print(f"# Queue pair: submissions per second (submit + complete), instant software controller\n")
print(f"Machine: {ctx.get('host_name')}, {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz, "
      f"run {ctx.get('date')}, library build type {ctx.get('library_build_type')}.\n")
print("| threads | lock-free (ops/s) | mutex baseline (ops/s) | ratio |")
print("|---:|---:|---:|---:|")
for t in sorted(rates):
    r = rates[t]
    lf, mx = r.get("lockfree"), r.get("mutex")
    ratio = f"{lf / mx:.2f}x" if lf and mx else "n/a"
    print(f"| {t} | {lf:,.0f} | {mx:,.0f} | {ratio} |" if lf and mx else f"| {t} | {lf} | {mx} | n/a |")
