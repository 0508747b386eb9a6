#!/usr/bin/env python3
"""A/B two builds of bench_kernels on a noisy host: alternate them, report median ratios.

Shared hosts move their memory bandwidth by tens of percent within minutes, so two separate runs
of a cold (DRAM-bound) benchmark cannot tell a 10% kernel change from drift. This runs A, then B,
then A, ... and reports, per benchmark, each side's median and the median of the per-round B/A
ratios of bytes/s (or FLOPS where there are no bytes).

  cp build/bench_kernels /tmp/bench_a; (change, rebuild); \\
  python3 tools/ab_kernels.py /tmp/bench_a build/bench_kernels '^matvec/q4g64/' --rounds 8
"""
import argparse
import json
import statistics
import subprocess


def run(binary, pattern, min_time):
    out = subprocess.run([binary, f"--benchmark_filter={pattern}", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    speeds = {}
    for bench in json.loads(out)["benchmarks"]:
        speeds[bench["name"]] = bench.get("bytes_per_second") or bench.get("FLOPS") or 1.0 / bench["real_time"]
    return speeds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("pattern", help="--benchmark_filter regex")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--min-time", type=float, default=0.2)
    args = parser.parse_args()
    rounds = [(run(args.a, args.pattern, args.min_time), run(args.b, args.pattern, args.min_time))
              for _ in range(args.rounds)]
    if not rounds[0][0]:
        parser.error(f"no benchmark matches {args.pattern!r}")
    print(f"| benchmark | A median | B median | B/A (median of {args.rounds} rounds) |")
    print("|---|---|---|---|")
    for name in rounds[0][0]:
        a = [r[0][name] for r in rounds]
        b = [r[1][name] for r in rounds]
        ratio = statistics.median(y / x for x, y in zip(a, b))
        print(f"| {name} | {statistics.median(a) / 1e9:.2f} G | {statistics.median(b) / 1e9:.2f} G | {ratio:.3f} |")


if __name__ == "__main__":
    main()
