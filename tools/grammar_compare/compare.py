#!/usr/bin/env python3
"""Our grammar engine beside llguidance and xgrammar on the same tokenizer (data/tokenizer.json) and
the same GBNF text (what `inkling bench-grammar --emit` writes for each schema and grammar):

  compile: ours (schema to GBNF to matcher, from bench-grammar), llguidance (GBNF to matcher),
           xgrammar (GBNF to compiled grammar, its token-mask cache included);
  mask:    time per token on the same random valid token paths (ours: bench-grammar's own
           timing; theirs: the call that fills the bitmask, through Python);
  agree:   at the masks bench-grammar emits along those paths, our allowed-token set against
           xgrammar's (and llguidance's), with the differences classified and shown.

xgrammar imports torch and transformers when it loads (its bitmask helpers and Hugging Face
constructors); the compiler and matcher used here need neither: the bitmask is a numpy array
(DLPack) and the tokenizer info is built from the token bytes. So the two modules are given as
stand-ins that fail loudly if anything calls them, instead of a multi-gigabyte torch install.
"""
import argparse
import base64
import json
import sys
import tempfile
import time
import types
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/grammar"))
import structured_outputs as so  # noqa: E402 - the bench-grammar driver and tokenizer table


class _StandIn(types.ModuleType):
    """A module whose every attribute is a placeholder class: enough for annotations and
    isinstance checks at import time; calling or instantiating one raises."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def refuse(*_args, **_kwargs):
            raise RuntimeError(f"{self.__name__}.{name} is a stand-in (tools/grammar_compare/compare.py)")

        placeholder = type(name, (), {"__init__": refuse, "__call__": refuse})
        setattr(self, name, placeholder)
        return placeholder


def load_xgrammar():
    import tvm_ffi  # noqa: F401 - first, so that it finds no torch and takes none of its paths
    for name in ("torch", "transformers"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = _StandIn(name)
    # Module-level constants xgrammar builds with torch (a dtype and a -1 tensor).
    torch = sys.modules["torch"]
    if isinstance(torch, _StandIn):
        torch.int32 = "int32"
        torch.tensor = lambda *a, **k: None
    import xgrammar
    return xgrammar


def xgrammar_version():
    from importlib.metadata import version
    return version("xgrammar")


def unpack(words):
    return np.unpackbits(np.ascontiguousarray(words).view(np.uint8), bitorder="little")[:so.VOCAB]


def stats(values):
    v = np.asarray(values, dtype=float)
    if not len(v):
        return "n/a"
    return f"median {np.median(v):.4f} ms, p90 {np.percentile(v, 90):.4f} ms, max {v.max():.2f} ms"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="random token paths per grammar")
    parser.add_argument("--tokens", type=int, default=160, help="tokens per path")
    parser.add_argument("--masks", type=int, default=12, help="masks compared per path")
    parser.add_argument("--threads", type=int, default=1, help="xgrammar compiler threads")
    parser.add_argument("--every", type=int, default=2, help="every Nth schema (all GBNF grammars)")
    args = parser.parse_args()

    xgr = load_xgrammar()
    import llguidance
    import llguidance.numpy as llnp

    table = so.token_bytes_table()
    # Special tokens as empty strings: xgrammar then counts them special and never allows them.
    encoded = [table.get(i) or b"" for i in range(so.VOCAB)]
    t0 = time.perf_counter()
    xg_info = xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=so.VOCAB, stop_token_ids=[so.EOS])
    xg_compiler = xgr.GrammarCompiler(xg_info, max_threads=args.threads, cache_enabled=False)
    xg_setup_ms = (time.perf_counter() - t0) * 1e3
    ll_tokenizer = llguidance.LLTokenizer(str(so.TOKENIZER), n_vocab=so.VOCAB, eos_token=so.EOS)

    inputs = sorted(so.SCHEMAS.glob("*.json"))[::args.every] + sorted(so.GRAMMARS.glob("*.gbnf"))
    compile_ms = {"ours": [], "llguidance": [], "xgrammar": []}
    mask_ms = {"llguidance": [], "xgrammar": []}
    agree = Counter()
    notes, examples = Counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "paths.jsonl"
        report = so.bench(inputs, out, "--runs", args.runs, "--tokens", args.tokens, "--emit-masks", args.masks,
                          "--budget", args.tokens - 1)
        compile_ms["ours"] = [row["compile_ms"] for row in report["schemas"]]
        ll_grammar, xg_grammar = {}, {}
        xg_bits = np.zeros((1, (so.VOCAB + 31) // 32), dtype=np.int32)
        ll_bits = llnp.allocate_token_bitmask(1, so.VOCAB)
        for line in out.read_text().splitlines():
            run = json.loads(line)
            name = run["file"]
            if "gbnf" in run:
                t0 = time.perf_counter()
                ll_grammar[name] = llguidance.grammar_from("gbnf", run["gbnf"])
                llguidance.LLMatcher(ll_tokenizer, ll_grammar[name], log_level=0)
                compile_ms["llguidance"].append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                try:
                    xg_grammar[name] = xg_compiler.compile_grammar(run["gbnf"])
                    compile_ms["xgrammar"].append((time.perf_counter() - t0) * 1e3)
                    print(f"  {name}: compiled, llguidance {compile_ms['llguidance'][-1]:.1f} ms, "
                          f"xgrammar {compile_ms['xgrammar'][-1]:.1f} ms", file=sys.stderr, flush=True)
                except Exception as e:  # noqa: BLE001 - a grammar xgrammar refuses is reported
                    xg_grammar[name] = None
                    notes[f"xgrammar refused {name}: {str(e)[:160]}"] += 1
            ll = llguidance.LLMatcher(ll_tokenizer, ll_grammar[name], log_level=0)
            xg = xgr.GrammarMatcher(xg_grammar[name]) if xg_grammar[name] is not None else None
            masks = {m["step"]: m["bits"] for m in run["masks"]}
            for step, token in enumerate(run["tokens"]):
                t0 = time.perf_counter()
                llnp.fill_next_token_bitmask(ll, ll_bits)
                if step > 0:  # the first call of a matcher also sets it up
                    mask_ms["llguidance"].append((time.perf_counter() - t0) * 1e3)
                if xg is not None:
                    t0 = time.perf_counter()
                    xg.fill_next_token_bitmask(xg_bits)
                    if step > 0:
                        mask_ms["xgrammar"].append((time.perf_counter() - t0) * 1e3)
                if step in masks:
                    ours = np.unpackbits(np.frombuffer(base64.b64decode(masks[step]), dtype=np.uint8),
                                         bitorder="little")[:so.VOCAB]
                    for engine, theirs in (("llguidance", unpack(ll_bits)), ("xgrammar", unpack(xg_bits) if xg else None)):
                        if theirs is None:
                            continue
                        verdict, only_ours, only_theirs = so.compare_masks(ours, theirs, table)
                        agree[(engine, verdict)] += 1
                        if verdict != "different":
                            continue
                        prefix = b"".join(table.get(t) or b"<special>" for t in run["tokens"][:step])
                        examples.append(
                            f"{engine}: {name} run {run['run']} step {step} after {prefix[-50:]!r}: {int(ours.sum())} ours vs "
                            f"{int(theirs.sum())}; only ours {[table.get(int(t)) for t in only_ours[:5]]}, "
                            f"only {engine} {[table.get(int(t)) for t in only_theirs[:5]]}")
                if not ll.consume_token(token):
                    notes[f"llguidance refused a token we allowed ({name})"] += 1
                    break
                if xg is not None and not xg.accept_token(token):
                    notes[f"xgrammar refused a token we allowed ({name})"] += 1
                    xg = None

    print(f"grammar compare: {len(inputs)} grammars ({len(report['schemas'])} compiled by us) x {args.runs} paths "
          f"of up to {args.tokens} tokens; llguidance {llguidance.__version__}, xgrammar {xgrammar_version()} "
          f"(tokenizer info + compiler setup {xg_setup_ms:.0f} ms, {args.threads} thread(s))")
    print("  | engine | compile median | compile p90 | compile max | mask per token |")
    print("  |---|---|---|---|---|")
    ours_mask = (f"median {report['mask_median_ms']:.4f} ms, p90 {report['mask_p90_ms']:.4f} ms, "
                 f"max {report['mask_max_ms']:.2f} ms")
    for engine, mask in (("ours", ours_mask), ("llguidance", stats(mask_ms["llguidance"])),
                         ("xgrammar", stats(mask_ms["xgrammar"]))):
        c = np.asarray(compile_ms[engine], dtype=float)
        row = (f"{np.median(c):.2f} ms | {np.percentile(c, 90):.2f} ms | {c.max():.2f} ms" if len(c) else "n/a | n/a | n/a")
        print(f"  | {engine} | {row} | {mask} |")
    for engine in ("xgrammar", "llguidance"):
        total = sum(v for (e, _), v in agree.items() if e == engine)
        print(f"  masks vs {engine}: {agree[(engine, 'equal')]}/{total} equal, {agree[(engine, 'canonical')]} "
              f"differ only by the tokenizer's canonical token in forced text, {agree[(engine, 'different')]} other")
    for note, n in notes.items():
        print(f"  note ({n}x): {note}")
    for e in examples[:12]:
        print("  DIFF", e)
    # A check too: a mask that differs beyond the canonical-token case, or a token we allowed
    # that a reference refused, fails the run.
    refused = any("refused a token" in note for note in notes)
    return 1 if refused or agree[("xgrammar", "different")] or agree[("llguidance", "different")] else 0


if __name__ == "__main__":
    sys.exit(main())
