#!/usr/bin/env python3
"""A/B two builds of `inkling` on whole-model decode, alternating them round by round.

This host's read bandwidth moves by tens of percent from one minute to the next, so two separate
benchmark runs cannot tell a 5% change from drift. Each round runs `inkling bench` once with
each binary (the order flips every round) and the report gives per-round tokens/s, the probe's
bandwidth of each run, and the median of the per-round B/A ratios.

  cp build/inkling /tmp/inkling_a; (change, rebuild); \\
  python3 tools/ab_inkling.py /tmp/inkling_a build/inkling --rounds 6 -m CKPT [-m CKPT2] [--exact]
"""
import argparse
import json
import statistics
import subprocess


def decode_speed(binary, ckpt, args):
    cmd = [binary, "bench", "-m", ckpt, "-p", str(args.p), "-n", str(args.n), "--reps", "1", "--json"]
    if not args.exact:
        cmd.append("--fast")
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return result["tg_tok_s"], result["read_bandwidth_gb_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("-m", dest="checkpoints", action="append", required=True, help="checkpoint directory")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--exact", action="store_true", help="default precision instead of --fast")
    parser.add_argument("-p", type=int, default=8, help="prompt tokens before decoding")
    parser.add_argument("-n", type=int, default=128, help="decoded tokens per run")
    args = parser.parse_args()
    for ckpt in args.checkpoints:
        ratios, speeds_a, speeds_b = [], [], []
        for round_index in range(args.rounds):
            order = [("a", args.a), ("b", args.b)]
            if round_index % 2:
                order.reverse()
            runs = {tag: decode_speed(binary, ckpt, args) for tag, binary in order}
            (tg_a, bw_a), (tg_b, bw_b) = runs["a"], runs["b"]
            speeds_a.append(tg_a)
            speeds_b.append(tg_b)
            ratios.append(tg_b / tg_a)
            print(f"{ckpt} round {round_index + 1}: A {tg_a:.2f} tok/s ({bw_a:.0f} GB/s) "
                  f"B {tg_b:.2f} tok/s ({bw_b:.0f} GB/s) B/A {ratios[-1]:.3f}", flush=True)
        print(f"{ckpt}: median A {statistics.median(speeds_a):.2f} B {statistics.median(speeds_b):.2f} "
              f"median B/A {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()
