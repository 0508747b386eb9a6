#!/usr/bin/env python3
"""Batched prefill and decode, side by side with llama.cpp's llama-batched-bench.

Host bandwidth on shared machines drifts by tens of percent within minutes, so one run of each
engine proves little. This alternates them: every round runs llama-batched-bench once (all the
batch sizes in one process) and `inkling bench --batch` once (likewise), back to back, the order
swapped every other round. The report gives, per batch size B, each engine's median over the rounds
and the median of the per-round ratios (ours / llama.cpp), which cancels most of the drift.

  python3 tools/bench_batched_vs_llama.py \\
      --llama-batched-bench /path/to/llama.cpp/build/bin/llama-batched-bench \\
      --gguf /path/to/bench-Q4_0-mlpq.gguf --ckpt /tmp/bench-mlx4 \\
      --npl 1,2,4,8,16 -p 128 -n 64 -t 2 --rounds 5 [--json-out results.json]

What each side runs, per round:
  llama.cpp: llama-batched-bench -m GGUF -c CTX -b 2048 -ub 512 -npp P -ntg N -npl LIST -t T
             --output-format jsonl [--llama-args ...]
  ours:      build/inkling bench -m CKPT --batch LIST -p P -n N -t T --reps 1 --json [--inkling-flags, default --fast]

What is compared:
  tg: llama.cpp's S_TG (B*N / time of N steps of B tokens, one per sequence) against our tg_tok_s
      (the same: B sequences decode N tokens together, one batched step per token).
  pp: llama.cpp's S_PP (B*P / time to prefill B different prompts of P random tokens, fed as one
      batch split into -b / -ub chunks; with -pps in --llama-args it prefills ONE shared prompt and
      S_PP is P / time, so leave -pps out for a like-for-like row) against our pp_tok_s (B different
      prompts of P tokens, chunks of every prompt packed into steps of up to 512 tokens).
Small differences remain: llama.cpp decodes random token ids and samples nothing; we take the argmax
of each sequence's logits between steps (cheap next to a step). llama.cpp's first row follows a
16-token warm-up, ours a pp64 / tg4 warm-up. Neither side counts model load time.

CTX defaults to the larger of 8192 and max(B)*(P+N) rounded up to 256: llama-batched-bench
silently skips any B whose B*(P+N) exceeds -c (and, with the default non-unified KV cache, each
sequence gets CTX / max(B) cells), so a missing B here is reported as an error.

Weights: compare checkpoints with the same shapes and bytes per token (the random values need not
match for a speed test). Our mlx-4bit checkpoint (`inkling synth DIR --layout mlx-4bit`, recipe
"experts_only") has every MLP 4-bit (routed and shared experts and the dense MLP, 4.5 bits a weight
with the group-64 scales and biases) and attention, embeddings and unembedding in bf16. A plain
`llama-quantize BF16.gguf Q4_0.gguf Q4_0` also quantizes attention and the embeddings (output.weight
to Q6_K), so it reads far fewer bytes per token than ours. The byte-matched GGUF (4.5 bits a weight
in Q4_0 too; 2571.7 MiB against 2570.2 MiB on the bench preset) is:
  llama-quantize --token-embedding-type bf16 --output-tensor-type bf16 \\
      --tensor-type 'attn_(q|k|v|r|output)\\.weight=bf16' BF16.gguf Q4_0-mlpq.gguf Q4_0
Say which GGUF was used when quoting the numbers.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_list(text):
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of positive integers, got {text!r}")
    return values


def run_llama(args, ctx):
    cmd = [args.llama_batched_bench, "-m", args.gguf, "-c", str(ctx), "-b", str(args.llama_batch),
           "-ub", str(args.llama_ubatch), "-npp", str(args.p), "-ntg", str(args.n),
           "-npl", ",".join(map(str, args.npl)), "-t", str(args.t), "--output-format", "jsonl"]
    cmd += shlex.split(args.llama_args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"llama-batched-bench failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-4000:]}")
    rows = {}
    # jsonl rows come through llama.cpp's log; look in both streams.
    for line in (proc.stdout + "\n" + proc.stderr).splitlines():
        line = line.strip()
        if not (line.startswith("{") and '"speed_tg"' in line):
            continue
        row = json.loads(line)
        rows[int(row["pl"])] = {"pp": float(row["speed_pp"]), "tg": float(row["speed_tg"]),
                                "shared_pp": bool(row.get("is_pp_shared", 0))}
    missing = [b for b in args.npl if b not in rows]
    if missing:
        sys.exit(f"llama-batched-bench printed no row for B={missing} (ctx {ctx} too small?): {shlex.join(cmd)}\n"
                 f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return rows, cmd


def run_ours(args):
    cmd = [args.inkling, "bench", "-m", args.ckpt, "--batch", ",".join(map(str, args.npl)), "-p", str(args.p),
           "-n", str(args.n), "-t", str(args.t), "--reps", "1", "--json"] + shlex.split(args.inkling_flags)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"inkling bench failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout)
    rows = {int(r["batch"]): {"pp": float(r["pp_tok_s"]), "tg": float(r["tg_tok_s"]),
                              "tg_seq": float(r["tg_per_sequence_tok_s"])} for r in result["batches"]}
    missing = [b for b in args.npl if b not in rows]
    if missing:
        sys.exit(f"inkling bench printed no row for B={missing}: {shlex.join(cmd)}")
    return rows, cmd, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-batched-bench", required=True, help="path of llama.cpp's llama-batched-bench")
    parser.add_argument("--gguf", required=True, help="GGUF for llama.cpp")
    parser.add_argument("--ckpt", required=True, help="our checkpoint directory (same shapes and bytes per token)")
    parser.add_argument("--inkling", default=str(ROOT / "build" / "inkling"), help="our binary (default: build/inkling)")
    parser.add_argument("--npl", type=parse_list, default=[1, 2, 4, 8, 16], help="batch sizes B (default 1,2,4,8,16)")
    parser.add_argument("-p", type=int, default=128, help="prompt tokens per sequence (llama.cpp -npp; default 128)")
    parser.add_argument("-n", type=int, default=64, help="generated tokens per sequence (llama.cpp -ntg; default 64)")
    parser.add_argument("-t", type=int, default=2, help="threads for both engines (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--ctx", type=int, default=0,
                        help="llama.cpp -c (default: max(8192, max(B)*(P+N)) rounded up to 256)")
    parser.add_argument("--llama-batch", type=int, default=2048, help="llama.cpp -b (default 2048)")
    parser.add_argument("--llama-ubatch", type=int, default=512, help="llama.cpp -ub (default 512)")
    parser.add_argument("--llama-args", default="", help="extra llama-batched-bench flags, one string (e.g. '-fa on')")
    parser.add_argument("--inkling-flags", default="--fast", help="extra `inkling bench` flags, one string (default --fast)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed for one engine's run")
    parser.add_argument("--json-out", help="also write every round's numbers here")
    args = parser.parse_args()
    if args.p <= 0 or args.n <= 0 or args.t <= 0 or args.rounds <= 0:
        parser.error("-p, -n, -t and --rounds must be positive")

    need = max(args.npl) * (args.p + args.n)
    ctx = args.ctx or max(8192, -(-need // 256) * 256)
    if ctx < need:
        parser.error(f"--ctx {ctx} < max(B)*(P+N) = {need}: llama-batched-bench would skip the largest B")

    rounds = []
    llama_cmd = ours_cmd = None
    ours_meta = {}
    for r in range(args.rounds):
        order = ("llama", "ours") if r % 2 == 0 else ("ours", "llama")
        got = {}
        for side in order:
            if side == "llama":
                got["llama"], llama_cmd = run_llama(args, ctx)
            else:
                got["ours"], ours_cmd, ours_meta = run_ours(args)
        rounds.append(got)
        line = "  ".join(f"B={b}: tg {got['llama'][b]['tg']:.2f}/{got['ours'][b]['tg']:.2f} "
                         f"pp {got['llama'][b]['pp']:.1f}/{got['ours'][b]['pp']:.1f}" for b in args.npl)
        print(f"round {r + 1}/{args.rounds} (llama.cpp/ours tok/s) {line}", file=sys.stderr, flush=True)

    med = statistics.median
    shared = any(rows["llama"][b]["shared_pp"] for rows in rounds for b in args.npl)
    print(f"pp{args.p} x B prompts, tg{args.n} x B sequences, {args.t} threads, {args.rounds} round(s); "
          f"llama.cpp: {Path(args.gguf).name}, -c {ctx} -b {args.llama_batch} -ub {args.llama_ubatch}"
          f"{' ' + args.llama_args if args.llama_args else ''}; ours: {Path(args.ckpt).name} "
          f"({ours_meta.get('layout', '?')}, {ours_meta.get('precision', '?')}, {ours_meta.get('isa', '?')})")
    if shared:
        print("NOTE: llama.cpp ran with a shared prompt (-pps): its S_PP counts one prompt, not B; pp rows differ in kind.")
    print()
    print("| B | llama.cpp S_TG tok/s | ours tg tok/s | tg ours/llama | ours tg per seq | "
          "llama.cpp S_PP tok/s | ours pp tok/s | pp ours/llama |")
    print("|---|---|---|---|---|---|---|---|")
    summary = []
    for b in args.npl:
        l_tg = [x["llama"][b]["tg"] for x in rounds]
        o_tg = [x["ours"][b]["tg"] for x in rounds]
        l_pp = [x["llama"][b]["pp"] for x in rounds]
        o_pp = [x["ours"][b]["pp"] for x in rounds]
        tg_ratio = med([o / l for o, l in zip(o_tg, l_tg)])
        pp_ratio = med([o / l for o, l in zip(o_pp, l_pp)])
        o_seq = med([x["ours"][b]["tg_seq"] for x in rounds])
        print(f"| {b} | {med(l_tg):.2f} | {med(o_tg):.2f} | {tg_ratio:.2f}x | {o_seq:.2f} | "
              f"{med(l_pp):.1f} | {med(o_pp):.1f} | {pp_ratio:.2f}x |")
        summary.append({"batch": b, "llama_tg": med(l_tg), "ours_tg": med(o_tg), "tg_ratio": tg_ratio,
                        "llama_pp": med(l_pp), "ours_pp": med(o_pp), "pp_ratio": pp_ratio})
    print()
    print("ratios: median over rounds of (ours / llama.cpp) within the same round; tok/s: median over rounds.")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "llama_cmd": llama_cmd, "ours_cmd": ours_cmd, "ctx": ctx, "summary": summary,
            "rounds": [{side: {str(b): v for b, v in rows[side].items()} for side in rows} for rows in rounds]},
            indent=2) + "\n")


if __name__ == "__main__":
    main()
