#!/usr/bin/env python3
"""Regenerates tests/data/golden/*.json: greedy ids and logits from HF transformers for the
engine's own synthetic tiny checkpoints (seed 0), so the C++ tests compare against an
independent implementation.

    python3 tools/make_goldens.py --inkling build/inkling

Each golden holds the prompt ids, the 64 greedy ids, and the logits of every step at a fixed
set of vocabulary columns (128 seeded random ids plus each row's top 5), to stay small.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = [9906, 11, 1917, 0, 200000, 200004, 17, 58, 2017, 100, 3, 4, 5, 1234, 99999, 200001]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inkling", required=True, help="path of the built inkling binary")
    parser.add_argument("--out", default=os.path.join(HERE, "..", "tests", "data", "golden"))
    parser.add_argument("-n", type=int, default=64)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for layout, dtype in [("original-f32", "float32"), ("original-bf16", "float32")]:
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "model")
            subprocess.run([args.inkling, "synth", model, "--layout", layout, "--preset", "tiny", "--seed", "0"],
                           check=True)
            ids_path = os.path.join(tmp, "ids.txt")
            logits_path = os.path.join(tmp, "logits.npy")
            subprocess.run([sys.executable, os.path.join(HERE, "hf_reference.py"), "--model", model,
                            "--prompt-ids", ",".join(map(str, PROMPT)), "-n", str(args.n), "--dtype", dtype,
                            "--out-ids", ids_path, "--out-logits", logits_path], check=True)
            ids = [int(x) for x in open(ids_path).read().strip().split(",")]
            logits = np.load(logits_path)
        rng = np.random.default_rng(0)
        columns = set(rng.choice(logits.shape[1], 128, replace=False).tolist())
        for row in logits:
            columns.update(np.argsort(-row)[:5].tolist())
        columns = sorted(columns)
        golden = {
            "source": "HF transformers InklingForConditionalGeneration (tools/hf_reference.py), "
                      f"compute dtype {dtype}, checkpoint: inkling synth --layout {layout} --preset tiny --seed 0",
            "layout": layout,
            "prompt_ids": PROMPT,
            "ids": ids,
            "columns": columns,
            "logits": [[float(f"{v:.7g}") for v in row[columns]] for row in logits],
            "logits_std": float(logits.std()),
        }
        path = os.path.join(args.out, f"tiny-{layout}.json")
        with open(path, "w") as f:
            json.dump(golden, f)
        print(f"wrote {path}: {len(ids)} ids, {len(columns)} columns")


if __name__ == "__main__":
    main()
