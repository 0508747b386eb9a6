#!/usr/bin/env python3
"""Side by side with a llama.cpp build that has the Inkling architecture, on the same weights.

Host bandwidth on shared machines drifts by tens of percent within minutes, so one run of each
engine proves little. This alternates them: every round runs llama-bench and `inkling bench`
once per comparison, back to back, and the report gives medians and the median of the per-round
ratios (ours / llama.cpp), which cancels most of the drift.

  python3 tools/bench_vs_llama.py --llama-bench PATH \
      --pair bf16:GGUF_BF16:CKPT_BF16:--fast --pair q4:GGUF_Q4_0:CKPT_MLX4:--fast [--rounds 5]

Each --pair is NAME:GGUF:CHECKPOINT[:EXTRA inkling bench flags, comma separated].
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_llama(llama_bench, gguf, pp, tg, threads):
    out = subprocess.run([llama_bench, "-m", gguf, "-p", str(pp), "-n", str(tg), "-t", str(threads), "-r", "1",
                          "-o", "json"], check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    speeds = {}
    for row in rows:
        key = "pp" if row["n_prompt"] > 0 else "tg"
        speeds[key] = row["avg_ts"]
    return speeds


def run_inkling(binary, ckpt, flags, pp, tg, threads):
    cmd = [str(binary), "bench", "-m", ckpt, "-p", str(pp), "-n", str(tg), "-t", str(threads), "--reps", "1",
           "--json"] + flags
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"pp": result["pp_tok_s"], "tg": result["tg_tok_s"], "bw": result["read_bandwidth_gb_s"],
            "eff": result["decode_efficiency"], "bytes": result["weight_bytes_per_token"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bench", required=True)
    parser.add_argument("--inkling", default=str(ROOT / "build" / "inkling"))
    parser.add_argument("--pair", action="append", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-p", type=int, default=512)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    pairs = []
    for spec in args.pair:
        parts = spec.split(":")
        if len(parts) < 3:
            parser.error(f"--pair {spec!r}: expected NAME:GGUF:CHECKPOINT[:FLAGS]")
        flags = parts[3].split(",") if len(parts) > 3 and parts[3] else []
        pairs.append((parts[0], parts[1], parts[2], flags))
    results = {name: {"llama": [], "ours": []} for name, *_ in pairs}
    for round_index in range(args.rounds):
        for name, gguf, ckpt, flags in pairs:
            llama = run_llama(args.llama_bench, gguf, args.p, args.n, args.t)
            ours = run_inkling(args.inkling, ckpt, flags, args.p, args.n, args.t)
            results[name]["llama"].append(llama)
            results[name]["ours"].append(ours)
            print(f"round {round_index + 1}/{args.rounds} {name}: llama.cpp pp {llama['pp']:.1f} tg {llama['tg']:.2f} | "
                  f"inkling pp {ours['pp']:.1f} tg {ours['tg']:.2f} (read {ours['bw']:.1f} GB/s, eff {100 * ours['eff']:.0f}%)",
                  file=sys.stderr, flush=True)
    print(f"| comparison | llama.cpp pp{args.p} | inkling pp{args.p} | pp ratio | llama.cpp tg{args.n} | inkling tg{args.n} | "
          f"tg ratio | inkling GB/token | read GB/s | inkling decode eff | llama.cpp decode eff (at inkling's GB/token) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, gguf, ckpt, flags in pairs:
        llama, ours = results[name]["llama"], results[name]["ours"]
        med = statistics.median
        pp_ratio = med([o["pp"] / l["pp"] for o, l in zip(ours, llama)])
        tg_ratio = med([o["tg"] / l["tg"] for o, l in zip(ours, llama)])
        # Meaningful where llama.cpp reads the same bytes per token (same weights and formats); it
        # uses the bandwidth measured in the same round. For pairs of different formats (NVFP4
        # against Q4_0) it is not llama.cpp's efficiency.
        llama_eff = med([l["tg"] * o["bytes"] / (o["bw"] * 1e9) for o, l in zip(ours, llama)])
        print(f"| {name} {' '.join(flags)} | {med([l['pp'] for l in llama]):.1f} | {med([o['pp'] for o in ours]):.1f} | "
              f"{pp_ratio:.2f}x | {med([l['tg'] for l in llama]):.2f} | {med([o['tg'] for o in ours]):.2f} | {tg_ratio:.2f}x | "
              f"{ours[0]['bytes'] / 1e9:.3f} | {med([o['bw'] for o in ours]):.1f} | {100 * med([o['eff'] for o in ours]):.0f}% | "
              f"{100 * llama_eff:.0f}% |")


if __name__ == "__main__":
    main()
