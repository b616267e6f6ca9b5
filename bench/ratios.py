#!/usr/bin/env python3
"""Turn a Google Benchmark JSON into a table of rates and ratios.

usage: ratios.py RESULT.json "TITLE" NUM:DEN [NUM:DEN ...]

Benchmarks are named VARIANT[/ARG]/.../threads:N. For each NUM:DEN pair, every
(ARG, threads) measured for both variants gets a row: both rates
(items_per_second) and NUM/DEN."""
import json, re, sys


def load_rates(path):
    """{variant: {(arg, threads): items_per_second}} and the run's context."""
    data = json.load(open(path))
    rates = {}
    for b in data["benchmarks"]:
        m = re.match(r"([a-z_]+)((?:/\d+)*)/(?:min_time:[\d.]+/)?(?:real_time/)?threads:(\d+)", b["name"])
        if m and "items_per_second" in b and not b.get("error_occurred"):
            arg = m.group(2).lstrip("/") or "-"
            rates.setdefault((m.group(1)), {})[(arg, int(m.group(3)))] = b["items_per_second"]
    return rates, data["context"]


def arg_order(key):
    return (int(key[0]) if key[0].isdigit() else 0, key[1])


def main():
    rates, ctx = load_rates(sys.argv[1])
    title, pairs = sys.argv[2], [p.split(":") for p in sys.argv[3:]]
    print(f"# {title}\n")
    # `machine` (CPU model, cores, GPU) is what make bench adds to the context.
    print(f"Machine: {ctx.get('machine') or ctx.get('host_name')}, {ctx.get('num_cpus')} CPUs at "
          f"{ctx.get('mhz_per_cpu')} MHz, run {ctx.get('date')}.\n")
    for num, den in pairs:
        a, b = rates.get(num, {}), rates.get(den, {})
        print(f"\n## {num} vs {den}\n")
        print(f"| arg | threads | {num} (/s) | {den} (/s) | ratio |")
        print("|---|---:|---:|---:|---:|")
        for key in sorted(set(a) & set(b), key=arg_order):
            print(f"| {key[0]} | {key[1]} | {a[key]:,.0f} | {b[key]:,.0f} | {a[key] / b[key]:.2f}x |")


if __name__ == "__main__":
    main()
