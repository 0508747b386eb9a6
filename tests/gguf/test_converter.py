"""GGUF files made by llama.cpp's own tools (the Inkling branch's convert_hf_to_gguf.py, then
llama-quantize) from a synthetic checkpoint: our logits from each file against the same
checkpoint's safetensors logits.

Needs a llama.cpp checkout built here (LLAMA_CPP_DIR, default /work/llama-build/llama.cpp, with
build/bin/llama-quantize) and a Python with torch for its converter (LLAMA_CPP_PYTHON, default
/tmp/llama-venv/bin/python3). Without them every test here is SKIPPED, saying which is missing:
CI has neither, and covers the same binding with GGUF files our own writer lays out the
converter's way (tests/model/gguf_model_test.cpp).

The checkpoint is the `small` preset (hidden 1024: K and IQ types need rows that are multiples of
256, which the tiny preset's 64 columns are not), in original-f32, written once under
GGUF_E2E_DIR (default build/gguf-e2e, about 8 GB with the five files) and reused; the first run
took 25 minutes here (two shared cores), later ones about 8 (the twins are written each time).

Two checks per file:
- exactness: our logits from the quantized file equal, bit for bit, those from its "dequantized
  twin", an F32 GGUF (a split set, written by gguf-py's GGUFWriter) holding gguf-py's numpy
  dequantization of every tensor, both runs on the scalar kernels (INKLING_ISA=scalar), where
  both read the same f32 values in the same order: the binding and the dequantizers of the files
  llama.cpp's tools write are right, and a split set from gguf-py's writer loads;
- quantization error: the logits of every generated position up to the first greedy token on
  which the runs part (the contexts differ after it) against the safetensors checkpoint's, three
  prompts of 24 random ids and 6 new tokens. This random-weight model routes on near-tied router
  scores, so rounding a weight flips expert choices and the error is far above the weights' own
  (measured here, rms relative: BF16 0.063, Q8_0 0.12, Q4_K_M 0.33, while the weight errors are
  ~0.1%, ~0.4% and ~3%); the bounds are about twice the measured values: they catch a binding or
  type gone wrong (errors of order 1), not a small loss of accuracy, which the exactness check
  and the bit-exact dequantizer tests cover."""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
LLAMA = Path(os.environ.get("LLAMA_CPP_DIR", "/work/llama-build/llama.cpp"))
PYTHON = Path(os.environ.get("LLAMA_CPP_PYTHON", "/tmp/llama-venv/bin/python3"))
QUANTIZE = LLAMA / "build" / "bin" / "llama-quantize"
INKLING = os.environ.get("INKLING_BINARY", str(ROOT / "build" / "inkling"))
WORK = Path(os.environ.get("GGUF_E2E_DIR", ROOT / "build" / "gguf-e2e"))
PRESET = "small"

# file -> (how it is made, its type argument, bound on the logit error against the safetensors
# checkpoint: max relative for F32, which is the same numbers; rms relative for the rest, see above).
# Weight errors: BF16 rounds to 8 mantissa bits (2^-9 relative, ~0.1% RMS); Q8_0 has 127 steps of
# max|w| per 32 weights (~0.4%); Q4_K_M 4-bit K blocks (15 steps per 32, 6-bit scales and mins)
# with Q6_K for some tensors (~3%); IQ4_XS a 16-value non-uniform grid per 32 (~3%).
CASES = {
    "F32": ("convert", "f32", 1e-5),
    "BF16": ("convert", "bf16", 0.15),
    "Q8_0": ("convert", "q8_0", 0.25),
    "Q4_K_M": ("quantize", "Q4_K_M", 0.6),
    "IQ4_XS": ("quantize", "IQ4_XS", 0.6),
}


def missing_tools():
    if not (LLAMA / "convert_hf_to_gguf.py").exists():
        return f"no llama.cpp checkout at {LLAMA} (set LLAMA_CPP_DIR)"
    if not QUANTIZE.exists():
        return f"no {QUANTIZE} (build llama.cpp's llama-quantize)"
    if not PYTHON.exists() or subprocess.run([str(PYTHON), "-c", "import torch, numpy, safetensors"],
                                             capture_output=True).returncode != 0:
        return f"no Python with torch, numpy and safetensors at {PYTHON} (set LLAMA_CPP_PYTHON)"
    if not Path(INKLING).exists():
        return f"no inkling binary at {INKLING} (set INKLING_BINARY)"
    return None


pytestmark = pytest.mark.skipif(missing_tools() is not None,
                                reason=f"SKIPPED, llama.cpp's converter is not available: {missing_tools()}")


def run(args, **kwargs):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def checkpoint():
    ckpt = WORK / f"{PRESET}-f32"
    if not (ckpt / "config.json").exists():
        shutil.rmtree(ckpt, ignore_errors=True)
        run([INKLING, "synth", ckpt, "--layout", "original-f32", "--preset", PRESET, "--seed", "1"])
    return ckpt


def gguf_file(checkpoint, name):
    """The converter's (or llama-quantize's) file of type `name` from `checkpoint`, made once
    beside it (CHECKPOINT_DIR-NAME.gguf)."""
    step, what, _ = CASES[name]
    out = checkpoint.with_name(f"{checkpoint.name.removesuffix('-f32')}-{name}.gguf")
    if out.exists():
        return out
    partial = out.with_suffix(".partial")
    if step == "convert":
        run([PYTHON, Path(__file__).with_name("llama_convert.py"), LLAMA, checkpoint, partial, what])
    else:
        run([QUANTIZE, gguf_file(checkpoint, "F32"), partial, what])
    partial.rename(out)
    return out


def logits(model, prompt, tmp_path, label, env=None):
    out = tmp_path / f"{label}.npy"
    result = run([INKLING, "generate", "-m", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", "6",
                  "--temp", "0", "--print-ids", "--mmap", "-t", "2", "--logits-out", out],
                 env={**os.environ, **(env or {})})
    ids = [int(i) for i in result.stdout.strip().splitlines()[-1].split(",")]
    return ids, np.load(out)


PROMPTS = [list(np.random.default_rng(seed).integers(0, 200000, size=24)) for seed in (1, 2, 3)]


@pytest.mark.parametrize("name", list(CASES))
def test_logits_agree(checkpoint, name, tmp_path):
    model = gguf_file(checkpoint, name)
    bound = CASES[name][2]
    diff2 = want2 = 0.0
    worst = peak = 0.0
    rows = 0
    for p, prompt in enumerate(PROMPTS):
        want_ids, want = logits(checkpoint, prompt, tmp_path, f"st-{p}")
        got_ids, got = logits(model, prompt, tmp_path, f"{name}-{p}")
        same = next((i for i, (a, b) in enumerate(zip(want_ids, got_ids)) if a != b), len(want_ids))
        keep = min(same + 1, len(want))  # row i's context is the prompt + tokens 0..i-1
        d = got[:keep].astype(np.float64) - want[:keep]
        diff2 += float((d * d).sum())
        want2 += float((want[:keep].astype(np.float64) ** 2).sum())
        worst = max(worst, float(np.abs(d).max()))
        peak = max(peak, float(np.abs(want[:keep]).max()))
        rows += keep
    rms_relative, max_relative = (diff2 / want2) ** 0.5, worst / peak
    print(f"\n{name}: {rows} positions, rms relative {rms_relative:.3g}, max relative {max_relative:.3g}")
    if name == "F32":
        assert max_relative <= bound
    else:
        assert rms_relative <= bound


def dequantized_twin(model):
    """An F32 split set holding gguf-py's dequantization of every tensor of `model`, written by
    gguf-py's GGUFWriter; returns its first file."""
    gguf = pytest.importorskip("gguf")
    out = WORK / f"{model.stem}-dequantized"
    done = out / "done"
    if not done.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        reader = gguf.GGUFReader(model)
        writer = gguf.GGUFWriter(out / "twin.gguf", arch="inkling", split_max_size=1 << 30)
        for field in reader.fields.values():
            if field.name.startswith(("GGUF.", "split.")) or field.name in ("general.architecture", "general.alignment"):
                continue
            vtype = field.types[0]
            sub_type = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), vtype, sub_type)
        for tensor in reader.tensors:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
            writer.add_tensor(tensor.name, values.reshape([int(d) for d in reversed(tensor.shape)]))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        done.touch()
    firsts = sorted(out.glob("twin-00001-of-*.gguf")) or [out / "twin.gguf"]
    return firsts[0]


@pytest.mark.parametrize("name", [name for name in CASES if name != "F32"])
def test_quantized_file_equals_its_dequantized_twin(checkpoint, name, tmp_path):
    model = gguf_file(checkpoint, name)
    twin = dequantized_twin(model)
    scalar = {"INKLING_ISA": "scalar"}
    got_ids, got = logits(model, PROMPTS[0], tmp_path, f"{name}-scalar", scalar)
    want_ids, want = logits(twin, PROMPTS[0], tmp_path, f"{name}-twin", scalar)
    worst = float(np.abs(got.astype(np.float64) - want).max()) / float(np.abs(want).max())
    shutil.rmtree(twin.parent)  # 2.5 GB; written again (a minute or two) when next needed
    print(f"\n{name} vs its dequantized twin ({twin.name}): max relative {worst:.3g}")
    assert got_ids == want_ids
    assert worst <= 1e-6


# ---- against llama.cpp itself: the same file through both engines ----
#
# Our libllama client (tools/llama_logits, built here against LLAMA_CPP_DIR) and tools/gguf_vs_llama.py's
# comparison: greedy 32 tokens from PROMPTS[0], both KV caches f32.
# - F32: the same numbers in a different summation order. The tokens must be equal, or part only at
#   a near tie (llama.cpp's margin between its token and ours under twice the largest logit
#   difference of that row: the random model has near-tied logits), and the logits before the
#   parting agree within 1e-3 relative (measured 2.6e-4).
# - Quantized types: llama.cpp's CPU kernels round the activations too (to Q8_0 before a Q8_0
#   matmul, to Q8_K before a K or IQ one: ggml-cpu's vec_dot_type), which we do not; on this
#   random model that flips near-tied expert choices, and the runs part within a few tokens (even
#   at the first). The logits before the parting must then agree within the type's bound against
#   the safetensors logits (CASES): a wrong binding or type gives errors of order 1.

import sys  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
import gguf_vs_llama  # noqa: E402

LLAMA_BOUND = 1e-3


@pytest.fixture(scope="module")
def llama_logits():
    out = WORK / "llama_logits"
    run([ROOT / "tools" / "llama_logits" / "build.sh", LLAMA, out])
    return out


def assert_agrees_with_llama(model, client, tmp_path, name):
    ours_ids, ours_logits = gguf_vs_llama.ours(INKLING, model, PROMPTS[0], 32, 2, tmp_path / "ours.npy")
    llama_ids, llama_logits_ = gguf_vs_llama.llama(client, model, PROMPTS[0], 32, 2, tmp_path / "llama.npy")
    r = gguf_vs_llama.compare(ours_ids, ours_logits, llama_ids, llama_logits_)
    rel = r["max_abs"] / r["peak"]
    print(f"\n{model.name} vs llama.cpp: tokens {'equal' if r['equal_tokens'] else 'part at ' + str(r['first_difference'])}"
          f" (margin {r['margin']}), {r['positions']} positions, max relative {rel:.3g}")
    rms = (r["diff2"] / r["ref2"]) ** 0.5
    print(f"  rms relative {rms:.3g}")
    if name == "F32":
        assert r["equal_tokens"] or r["near_tie"], f"greedy tokens part at {r['first_difference']}: {ours_ids} vs {llama_ids}"
        assert rel <= LLAMA_BOUND
    else:
        assert rms <= CASES[name][2]


@pytest.mark.parametrize("name", ["F32", "Q8_0", "Q4_K_M", "IQ4_XS"])
def test_logits_agree_with_llama_cpp(checkpoint, llama_logits, name, tmp_path):
    assert_agrees_with_llama(gguf_file(checkpoint, name), llama_logits, tmp_path, name)


# `inkling quantize --to gguf-*` from the same checkpoint: byte for byte the tensors (by name) of the
# converter's Q8_0 file (gguf-py's quantizer) and of llama-quantize's Q4_K_M file (ggml's), same
# names and types; and llama.cpp loads it and agrees with us on it.
@pytest.mark.parametrize("name", ["Q8_0", "Q4_K_M"])
def test_our_quantized_file_is_llama_cpps(checkpoint, llama_logits, name, tmp_path):
    gguf = pytest.importorskip("gguf")
    theirs = gguf_file(checkpoint, name)
    ours = WORK / f"{PRESET}-ours-{name}.gguf"
    if not ours.exists():
        run([INKLING, "quantize", "-m", checkpoint, "-o", ours, "--to", "gguf-" + name.lower()])
    a, b = gguf.GGUFReader(ours), gguf.GGUFReader(theirs)
    # (by name: the converter writes the layers in its safetensors names' order, blk.10 after blk.1)
    theirs_by_name = {t.name: t for t in b.tensors}
    assert sorted(t.name for t in a.tensors) == sorted(theirs_by_name)
    # Every tensor, the small preset's 8-expert attention types (llama-quantize's Q8_0 attn_k /
    # attn_v, Q5_K attn_output) included.
    differing = []
    for x in a.tensors:
        y = theirs_by_name[x.name]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape) or \
                not np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
            differing.append(f"{x.name} ({x.tensor_type.name}, theirs {y.tensor_type.name})")
    print(f"\n{name}: {len(a.tensors) - len(differing)} of {len(a.tensors)} tensors byte for byte llama.cpp's")
    assert not differing, f"{len(differing)} tensors differ: {differing[:8]}"
    for key in ("general.file_type", "inkling.block_count", "tokenizer.ggml.eos_token_id"):
        assert a.fields[key].contents() == b.fields[key].contents(), key
    assert a.fields["tokenizer.ggml.tokens"].contents() == b.fields["tokenizer.ggml.tokens"].contents()
    assert_agrees_with_llama(ours, llama_logits, tmp_path, name)


# ---- greedy tokens equal to llama.cpp's, on a model that is sure of its tokens ----
#
# On the random model above both engines part at near ties (a random head's top two logits are
# often a few hundredths apart, and llama.cpp's rounding of the activations moves logits by ~2%:
# llama.cpp parts from itself, flash attention off against on, as often; docs/gguf.md). A trained
# model is sure of most tokens; `synth --confident-head` gives the random model that: each regular
# token's head row also holds the embedding of the token it follows, so the successor leads by
# about 30 logits (the rest's std ~4). With `--separated-routing` no expert choice is near a tie
# either. Then every greedy token must be equal, 32 tokens from each of the three prompts, and the
# logits agree within a bound about twice the rms relative differences measured here (F32 2.2e-4,
# Q8_0 0.017, Q4_K_M 0.025, IQ4_XS 0.025; Q8_0 and Q4_K_M from the converter and llama-quantize).

CONFIDENT_BOUNDS = {"F32": 1e-3, "Q8_0": 0.04, "Q4_K_M": 0.06, "IQ4_XS": 0.06}


@pytest.fixture(scope="module")
def confident_checkpoint():
    ckpt = WORK / f"{PRESET}-confident-f32"
    if not (ckpt / "config.json").exists():
        shutil.rmtree(ckpt, ignore_errors=True)
        run([INKLING, "synth", ckpt, "--layout", "original-f32", "--preset", PRESET, "--seed", "1",
             "--separated-routing", "--confident-head"])
    return ckpt


@pytest.mark.parametrize("name", list(CONFIDENT_BOUNDS))
def test_greedy_tokens_equal_llama_cpps_on_a_confident_model(confident_checkpoint, llama_logits, name, tmp_path):
    model = gguf_file(confident_checkpoint, name)
    diff2 = ref2 = 0.0
    for p, prompt in enumerate(PROMPTS):
        ours_ids, ours_logits = gguf_vs_llama.ours(INKLING, model, prompt, 32, 2, tmp_path / "ours.npy")
        llama_ids, llama_logits_ = gguf_vs_llama.llama(llama_logits, model, prompt, 32, 2, tmp_path / "llama.npy")
        r = gguf_vs_llama.compare(ours_ids, ours_logits, llama_ids, llama_logits_)
        assert len(ours_ids) == 32 and ours_ids == llama_ids, \
            f"prompt {p}: greedy tokens part at {r['first_difference']} (llama.cpp's margin {r['margin']})"
        diff2 += r["diff2"]
        ref2 += r["ref2"]
    rms = (diff2 / ref2) ** 0.5
    print(f"\n{model.name} vs llama.cpp: 3 x 32 greedy tokens equal, rms relative {rms:.3g}")
    assert rms <= CONFIDENT_BOUNDS[name]
