#!/usr/bin/env python3
"""Structured outputs against independent references (issue 20).

validity:     every schema in tests/data/grammar/schemas, N generations each: tokens drawn uniformly
              from our allowed-token mask (after a budget, closed by the grammar's shortest
              completion); every output must decode as UTF-8, parse as JSON and validate under
              Python's `jsonschema` with format checking.
differential: for schemas and GBNF grammars, along random valid token paths, our allowed-token set
              must equal llguidance's for the same GBNF text and tokenizer.
generate:     `inkling generate --json-schema` on a random-weight tiny checkpoint validates.
speed:        mask and compile times beside llguidance's (a report, not part of "all").

Usage: structured_outputs.py [validity|differential|generate|all|speed] [--runs N]; INKLING_BINARY names the binary.
"""
import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import jsonschema
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "tests/data/grammar/schemas"
GRAMMARS = ROOT / "tests/data/grammar/gbnf"
TOKENIZER = ROOT / "data/tokenizer.json"
EOS = 200006
VOCAB = 200058


def binary():
    path = os.environ.get("INKLING_BINARY", str(ROOT / "build/inkling"))
    if not Path(path).exists():
        sys.exit(f"no inkling binary at {path} (set INKLING_BINARY)")
    return path


def bench(inputs, out, *extra):
    cmd = [binary(), "bench-grammar", *map(str, inputs), "--json", "--emit", str(out), *map(str, extra)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def byte_decoder():
    """GPT-2's byte-level alphabet, inverted: token text character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes_table():
    """Bytes of every id, from tokenizer.json itself (independent of the engine's tokenizer)."""
    data = json.loads(TOKENIZER.read_text(encoding="utf-8"))
    decoder = byte_decoder()
    table = {}
    for text, i in data["model"]["vocab"].items():
        table[i] = bytes(decoder[c] for c in text)
    for added in data.get("added_tokens", []):
        table[added["id"]] = None  # special: never part of an output
    return table


def validity(runs, budget):
    table = token_bytes_table()
    failures, counts = [], Counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "validity.jsonl"
        report = bench([SCHEMAS], out, "--runs", runs, "--tokens", budget + 10, "--budget", budget)
        for line in out.read_text().splitlines():
            run = json.loads(line)
            name = run["file"]
            schema = json.loads((SCHEMAS / name).read_text())
            tokens = run["tokens"]
            problem = None
            if not run["finished"] or tokens[-1] != EOS:
                problem = "did not end with EOS"
            elif any(table.get(t) is None for t in tokens[:-1]):
                problem = "a special token inside the output"
            else:
                raw = b"".join(table[t] for t in tokens[:-1])
                try:
                    value = json.loads(raw.decode("utf-8"))
                    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
                    errors = list(validator.iter_errors(value))
                    if errors:
                        problem = f"invalid: {errors[0].message[:200]}"
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    problem = f"not JSON: {e}"
                if problem:
                    problem += f"\n      output: {raw[:300]!r}"
            counts[(name, problem is None)] += 1
            if problem:
                failures.append(f"{name} run {run['run']}: {problem}")
    names = sorted({n for n, _ in counts})
    total_ok = sum(v for (n, ok), v in counts.items() if ok)
    total = sum(counts.values())
    print(f"validity: {len(names)} schemas x {runs} generations: {total_ok}/{total} outputs parse and validate")
    print(f"  mask time median {report['mask_median_ms']:.4f} ms, p90 {report['mask_p90_ms']:.4f} ms")
    for f in failures[:20]:
        print("  FAIL", f)
    return not failures and len(names) >= 30 and total == len(names) * runs


def compare_masks(ours, theirs, table):
    """Classifies our token mask against another engine's: "equal", "canonical" or "different",
    with the token ids only ours and only theirs allow.

    Where the grammar forces the next bytes (a literal), llguidance and xgrammar allow only the
    token the tokenizer itself would produce there; we allow every token that stays valid. Then
    their set is one token and ours are all prefixes of the one forced text: "canonical"."""
    only_ours = np.nonzero(ours & ~theirs)[0]
    only_theirs = np.nonzero(theirs & ~ours)[0]
    if not len(only_ours) and not len(only_theirs):
        return "equal", only_ours, only_theirs
    ours_ids = np.nonzero(ours)[0]
    ours_bytes = [table.get(int(t)) or b"" for t in ours_ids[:64]]
    longest = max(ours_bytes, key=len, default=b"")
    if (not len(only_theirs) and int(theirs.sum()) == 1 and len(ours_ids) < 64
            and all(longest.startswith(b) for b in ours_bytes)):
        return "canonical", only_ours, only_theirs
    return "different", only_ours, only_theirs


def differential(runs, tokens):
    import llguidance
    import llguidance.numpy as llnp

    tokenizer = llguidance.LLTokenizer(str(TOKENIZER), n_vocab=VOCAB, eos_token=EOS)
    table = token_bytes_table()
    inputs = sorted(SCHEMAS.glob("*.json"))[::3] + sorted(GRAMMARS.glob("*.gbnf"))
    agree = canonical = disagree = 0
    notes = Counter()
    examples = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "differential.jsonl"
        bench(inputs, out, "--runs", runs, "--tokens", tokens, "--emit-masks", 12, "--budget", tokens - 1)
        grammars = {}
        for line in out.read_text().splitlines():
            run = json.loads(line)
            if "gbnf" in run:
                grammars[run["file"]] = llguidance.grammar_from("gbnf", run["gbnf"])
            matcher = llguidance.LLMatcher(tokenizer, grammars[run["file"]], log_level=0)
            if matcher.is_error():
                notes[f"llguidance refused {run['file']}: {matcher.get_error()[:120]}"] += 1
                continue
            masks = {m["step"]: m["bits"] for m in run["masks"]}
            for step, token in enumerate(run["tokens"]):
                if step in masks:
                    ours = np.unpackbits(np.frombuffer(base64.b64decode(masks[step]), dtype=np.uint8), bitorder="little")[:VOCAB]
                    theirs_words = llnp.allocate_token_bitmask(1, VOCAB)
                    llnp.fill_next_token_bitmask(matcher, theirs_words)
                    theirs = np.unpackbits(theirs_words.view(np.uint8), bitorder="little")[:VOCAB]
                    verdict, only_ours, only_theirs = compare_masks(ours, theirs, table)
                    theirs_bytes = [table.get(int(t)) or b"" for t in np.nonzero(theirs)[0][:64]]
                    if verdict == "equal":
                        agree += 1
                    elif verdict == "canonical":
                        canonical += 1
                    else:
                        disagree += 1
                        prefix = b"".join(table[t] or b"<special>" for t in run["tokens"][:step])
                        examples.append(
                            f"{run['file']} run {run['run']} step {step} after {prefix[-60:]!r}: "
                            f"{int(ours.sum())} ours vs {int(theirs.sum())} llguidance; only ours "
                            f"{[table.get(int(t)) for t in only_ours[:6]]}, only llguidance {[table.get(int(t)) for t in only_theirs[:6]]}, "
                            f"llguidance allows {theirs_bytes[:4]}")
                if not matcher.consume_token(token):
                    notes[f"llguidance refused a token we allowed ({run['file']})"] += 1
                    break
    total = agree + canonical + disagree
    print(f"differential: {agree}/{total} masks equal to llguidance {llguidance.__version__}, {canonical} more equal "
          f"but for llguidance's canonical token in forced text, {disagree} different ({len(inputs)} grammars x {runs} runs)")
    for note, n in notes.items():
        print(f"  note ({n}x): {note}")
    for e in examples[:10]:
        print("  DIFF", e)
    # A grammar llguidance cannot read is a failure too: our GBNF text must be one every reader
    # takes (it once used \\u escapes llguidance misreads, and every schema went unchecked).
    return disagree == 0 and not any(k.startswith("llguidance refused") for k in notes)


def generate(seeds):
    """`inkling generate --json-schema` on a random-weight tiny checkpoint: every output validates,
    max_tokens included (the grammar's shortest completion closes it)."""
    table = token_bytes_table()
    schemas = ["02_weather_tool_args.json", "10_classification.json", "13_tuple.json", "26_expression_tree.json"]
    ok = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "tiny"
        subprocess.run([binary(), "synth", str(ckpt), "--preset", "tiny", "--layout", "original-bf16"],
                       check=True, capture_output=True)
        for name in schemas:
            schema = json.loads((SCHEMAS / name).read_text())
            for seed in range(seeds):
                done = subprocess.run([binary(), "generate", "-m", str(ckpt), "-p", "JSON:", "-n", "96", "--temp", "1",
                                       "--seed", str(seed), "--json-schema", str(SCHEMAS / name), "--print-ids"],
                                      capture_output=True, text=True)
                total += 1
                if done.returncode != 0:
                    print(f"  FAIL generate {name} seed {seed}: {done.stderr.strip()[-300:]}")
                    continue
                ids = [int(x) for x in done.stdout.strip().splitlines()[-1].split(",") if x]
                raw = b"".join(table[t] for t in ids if t != EOS and table.get(t) is not None)
                try:
                    jsonschema.validate(json.loads(raw.decode("utf-8")), schema,
                                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
                    ok += 1
                except Exception as e:  # noqa: BLE001 - any failure is reported with the output
                    print(f"  FAIL generate {name} seed {seed}: {e}: {raw[:200]!r}")
    print(f"generate: {ok}/{total} outputs of a random-weight model (-n 96) validate")
    return ok == total


def speed(runs, tokens):
    """Mask time per token, ours and llguidance's, on the same token paths (not a test: a report)."""
    import time
    import llguidance
    import llguidance.numpy as llnp

    tokenizer = llguidance.LLTokenizer(str(TOKENIZER), n_vocab=VOCAB, eos_token=EOS)
    ours_ms, theirs_ms, compile_ours, compile_theirs = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speed.jsonl"
        report = bench([SCHEMAS], out, "--runs", runs, "--tokens", tokens, "--budget", tokens - 1)
        for row in report["schemas"]:
            compile_ours.append(row["compile_ms"])
        gbnf, grammar = {}, {}
        bitmask = llnp.allocate_token_bitmask(1, VOCAB)
        for line in out.read_text().splitlines():
            run = json.loads(line)
            if "gbnf" in run:
                t0 = time.perf_counter()
                grammar[run["file"]] = llguidance.grammar_from("gbnf", run["gbnf"])
                llguidance.LLMatcher(tokenizer, grammar[run["file"]], log_level=0)
                compile_theirs.append((time.perf_counter() - t0) * 1e3)
            matcher = llguidance.LLMatcher(tokenizer, grammar[run["file"]], log_level=0)
            for step, token in enumerate(run["tokens"]):
                t0 = time.perf_counter()
                llnp.fill_next_token_bitmask(matcher, bitmask)
                if step > 0:
                    theirs_ms.append((time.perf_counter() - t0) * 1e3)
                if not matcher.consume_token(token):
                    break
        ours_ms = None
    med = lambda v: float(np.median(v)) if len(v) else float("nan")
    p90 = lambda v: float(np.percentile(v, 90)) if len(v) else float("nan")
    print(f"speed ({len(compile_ours)} schemas x {runs} runs, same token paths):")
    print(f"  ours:       mask median {report['mask_median_ms']:.4f} ms, p90 {report['mask_p90_ms']:.4f} ms, "
          f"mean {report['mask_mean_ms']:.4f} ms, max {report['mask_max_ms']:.2f} ms; "
          f"compile median {med(compile_ours):.2f} ms")
    print(f"  llguidance: mask median {med(theirs_ms):.4f} ms, p90 {p90(theirs_ms):.4f} ms, mean {float(np.mean(theirs_ms)):.4f} ms, max {float(np.max(theirs_ms)):.2f} ms; "
          f"compile (GBNF to matcher) median {med(compile_theirs):.2f} ms")
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", default="all", choices=["validity", "differential", "generate", "all", "speed"])
    parser.add_argument("--runs", type=int, default=200, help="generations per schema (validity)")
    parser.add_argument("--budget", type=int, default=300, help="sampled tokens before the output is closed")
    parser.add_argument("--diff-runs", type=int, default=3)
    parser.add_argument("--diff-tokens", type=int, default=80)
    args = parser.parse_args()
    ok = True
    if args.what in ("validity", "all"):
        ok &= validity(args.runs, args.budget)
    if args.what in ("differential", "all"):
        ok &= differential(args.diff_runs, args.diff_tokens)
    if args.what in ("generate", "all"):
        ok &= generate(3)
    if args.what == "speed":
        ok &= speed(args.diff_runs, args.diff_tokens * 4)
    print("structured outputs:", "1 passed, 0 failed" if ok else "0 passed, 1 failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
