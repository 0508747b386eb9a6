#!/usr/bin/env python3
"""Our greedy continuation and logits of a GGUF file against llama.cpp's on the same file.

  python3 tools/gguf_vs_llama.py --llama-logits build/llama_logits FILE.gguf [FILE.gguf ...] \
      [--prompt-ids 1,2,3 | --prompts 3] [-n 32] [--checkpoint DIR] [--json]

build/llama_logits is our libllama client (tools/llama_logits/build.sh LLAMA_CPP_DIR builds it).
For each file and prompt both engines generate -n tokens greedily (stopping at EOS) and write the
logits that chose each token; the report gives, per file:
- whether the greedy tokens are equal, else the first position where they part, with llama.cpp's
  margin there between its token and ours (a "near tie" when it is under twice the largest logit
  difference of that row: the two runs agree on the logits and a rounding broke a tie);
- the logits of the positions up to and including that one (after it the contexts differ):
  max |ours - llama.cpp| / max |llama.cpp| and rms(ours - llama.cpp) / rms(llama.cpp);
- with --checkpoint (the safetensors checkpoint the file was made from), the same two figures
  for our GGUF run against our run of the checkpoint: the quantization error, for scale.
Without --prompt-ids, --prompts random prompts of 24 ids (seeds 1, 2, ...) are used. Both KV caches
are f32 by default (--kv), so what differs is the weights' handling and the float order of the math.

--llama-self puts llama.cpp with flash attention off in our run's place: llama.cpp against itself
under one setting of its own (its banded flash attention rounds Q, K and V to f16, the other path
does not), the spread a difference from llama.cpp is to be read against.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def run(args, env=None):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def ours(inkling, model, prompt, n, threads, out, isa=None, kv="f32", flags=()):
    env = {**os.environ, **({"INKLING_ISA": isa} if isa else {})}
    stdout = run([inkling, "generate", "-m", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", n, "--temp", "0",
                  "--print-ids", "--mmap", "-t", threads, "--kv-dtype", kv, "--logits-out", out] + list(flags),
                 env)
    return [int(i) for i in stdout.strip().splitlines()[-1].split(",")], np.load(out)


def llama(client, model, prompt, n, threads, out, kv="f32", flash="auto"):
    stdout = run([client, model, ",".join(map(str, prompt)), n, out, threads, kv, flash])
    return [int(i) for i in stdout.strip().splitlines()[-1].split(",")], np.load(out)


def compare(ids_a, logits_a, ids_b, logits_b):
    """Figures of run a against run b (the reference), over the positions with equal contexts."""
    part = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), None)
    if part is None and len(ids_a) != len(ids_b):
        part = min(len(ids_a), len(ids_b))
    keep = min(len(ids_a), len(ids_b)) if part is None else min(part + 1, len(ids_a), len(ids_b))
    cols = min(logits_a.shape[1], logits_b.shape[1])
    a = logits_a[:keep, :cols].astype(np.float64)
    b = logits_b[:keep, :cols].astype(np.float64)
    # llama.cpp writes -inf for the padded vocabulary's rows (ours stops at the unpadded vocab):
    # the figures are over the columns both runs give finite values.
    finite = np.isfinite(a).all(axis=0) & np.isfinite(b).all(axis=0)
    a, b = np.where(finite, a, 0.0), np.where(finite, b, 0.0)
    d = a - b
    # Where the tokens part, llama.cpp's own margin between its token and ours, against the two
    # runs' largest logit difference on that row: a margin below twice it is a near tie, which
    # any float reordering may break (the random synthetic models have many).
    near_tie, margin = None, None
    if part is not None and part < keep and ids_a[part] < cols and ids_b[part] < cols:
        margin = float(b[part, ids_b[part]] - b[part, ids_a[part]])
        near_tie = margin <= 2 * float(np.abs(d[part]).max())
    return {"equal_tokens": part is None, "first_difference": part, "positions": keep,
            "margin": margin, "near_tie": near_tie,
            "max_abs": float(np.abs(d).max()), "peak": float(np.abs(b).max()),
            "diff2": float((d * d).sum()), "ref2": float((b * b).sum())}


def summary(parts):
    return {"prompts": len(parts), "tokens_equal": sum(p["equal_tokens"] for p in parts),
            "first_differences": [p["first_difference"] for p in parts],
            "margins": [p["margin"] for p in parts],
            "parted_at_near_ties": sum(bool(p["near_tie"]) for p in parts),
            "positions": sum(p["positions"] for p in parts),
            "max_relative": max(p["max_abs"] for p in parts) / max(p["peak"] for p in parts),
            "max_abs": max(p["max_abs"] for p in parts),
            "rms_relative": (sum(p["diff2"] for p in parts) / sum(p["ref2"] for p in parts)) ** 0.5}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--llama-logits", required=True, type=Path, help="our libllama client (tools/llama_logits)")
    parser.add_argument("--inkling", default=str(ROOT / "build" / "inkling"))
    parser.add_argument("--prompt-ids", help="one prompt, comma-separated ids")
    parser.add_argument("--prompts", type=int, default=3, help="random prompts of 24 ids, without --prompt-ids")
    parser.add_argument("-n", type=int, default=32)
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("--checkpoint", type=Path, help="the safetensors checkpoint the files came from")
    parser.add_argument("--isa", help="INKLING_ISA for our runs (e.g. scalar)")
    parser.add_argument("--kv", default="f32", choices=["f32", "bf16"],
                        help="KV cache type: f32 on both sides (default), or ours bf16 and llama.cpp's f16 (their defaults)")
    parser.add_argument("--fast", action="store_true",
                        help="our GGUF runs with --fast: activations rounded to int8 per 32 columns before the ggml "
                             "products, near llama.cpp's rounding but not it (the safetensors reference stays exact)")
    parser.add_argument("--llama-rounding", action="store_true",
                        help="our GGUF runs with --llama-rounding: activations rounded exactly as llama.cpp's CPU "
                             "kernels round them for each weight type (Q8_0, Q8_1, Q8_K)")
    parser.add_argument("--llama-self", action="store_true",
                        help="compare llama.cpp with flash attention off (in our run's place) against llama.cpp "
                             "with its default (flash attention on): llama.cpp's own spread")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.prompt_ids:
        prompts = [[int(i) for i in args.prompt_ids.split(",")]]
    else:
        prompts = [[int(i) for i in np.random.default_rng(seed).integers(0, 200000, size=24)]
                   for seed in range(1, args.prompts + 1)]
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        reference = []
        if args.checkpoint:
            reference = [ours(args.inkling, args.checkpoint, p, args.n, args.t, tmp / f"st-{i}.npy", args.isa, args.kv)
                         for i, p in enumerate(prompts)]
        for model in args.files:
            vs_llama, vs_checkpoint = [], []
            for i, prompt in enumerate(prompts):
                if args.llama_self:
                    our_ids, our_logits = llama(args.llama_logits, model, prompt, args.n, args.t, tmp / "ours.npy",
                                                "f32" if args.kv == "f32" else "f16", "off")
                else:
                    our_ids, our_logits = ours(args.inkling, model, prompt, args.n, args.t, tmp / "ours.npy", args.isa,
                                               args.kv, (["--fast"] if args.fast else []) +
                                               (["--llama-rounding"] if args.llama_rounding else []))
                llama_ids, llama_logits = llama(args.llama_logits, model, prompt, args.n, args.t, tmp / "llama.npy",
                                              "f32" if args.kv == "f32" else "f16")
                vs_llama.append(compare(our_ids, our_logits, llama_ids, llama_logits))
                if reference:
                    vs_checkpoint.append(compare(our_ids, our_logits, *reference[i]))
                print(f"{model.name} prompt {i + 1}: ours {our_ids[:8]}... llama.cpp {llama_ids[:8]}... "
                      f"{'equal' if vs_llama[-1]['equal_tokens'] else 'part at ' + str(vs_llama[-1]['first_difference'])}",
                      file=sys.stderr, flush=True)
            report[model.name] = {"vs_llama": summary(vs_llama)}
            if vs_checkpoint:
                report[model.name]["vs_checkpoint"] = summary(vs_checkpoint)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    who = "llama.cpp flash off vs on" if args.llama_self else "ours vs llama.cpp"
    print(f"| file | greedy {args.n} tokens equal ({who}) | parted at near ties | max rel | rms rel | max abs |"
          + (" vs safetensors: max rel | rms rel |" if args.checkpoint else ""))
    print("|---|---|---|---|---|---|" + ("---|---|" if args.checkpoint else ""))
    for name, r in report.items():
        v = r["vs_llama"]
        margins = ", ".join("-" if m is None else f"{m:.2g}" for m in v["margins"])
        line = (f"| {name} | {v['tokens_equal']}/{v['prompts']} (first differences {v['first_differences']}) | "
                f"{v['parted_at_near_ties']} (margins {margins}) | "
                f"{v['max_relative']:.3g} | {v['rms_relative']:.3g} | {v['max_abs']:.3g} |")
        if "vs_checkpoint" in r:
            c = r["vs_checkpoint"]
            line += f" {c['max_relative']:.3g} | {c['rms_relative']:.3g} |"
        print(line)


if __name__ == "__main__":
    main()
