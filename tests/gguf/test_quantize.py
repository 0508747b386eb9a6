"""The engine's ggml block encoders (src/tensor/ggml_quantize.cpp) against independent ones, bit
for bit: Q8_0, Q4_0, Q5_0 and Q5_1 against the PyPI `gguf` package's numpy quantizers (always);
all of them (Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) against ggml's own C reference
quantizers (quantize_row_*_ref, what llama-quantize runs without an importance matrix) through
ctypes where llama.cpp is built here (ggml_c.py; skipped, saying so, without it). And the
blocks decode (the engine's dequantizers, themselves checked bit for bit in test_dequantize.py)
to within each type's error of the input.

Run by ctest through tests/gguf/run.sh with DEQUANTIZE_ROWS=the helper binary."""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

from ggml_c import RowFunction, ggml_library  # noqa: E402

HELPER = os.environ.get("DEQUANTIZE_ROWS")
TYPES = [T.Q8_0, T.Q4_0, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K]
# Bound on rms(decoded - x) / rms(x) for the rows below (Gaussian with 30x outliers, which set
# their blocks' scales, and the edge blocks), measured: Q8_0 (127 steps of the block's max per
# side) 1.7%, Q6_K (31) 2.7%, Q5_K (31 steps over the range) 4.9%, Q5_1 (31, no search) 4.9%,
# Q5_0 (16 of the max) 7.9%, Q4_K (15 steps over the range) 10%, Q4_0 (8 of the max) 16%; the
# bounds are about twice those.
RMS_BOUND = {T.Q8_0: 0.035, T.Q6_K: 0.06, T.Q5_K: 0.1, T.Q5_1: 0.1, T.Q5_0: 0.16, T.Q4_K: 0.2, T.Q4_0: 0.3}

pytestmark = pytest.mark.skipif(not HELPER, reason="DEQUANTIZE_ROWS (the helper binary) is not set; run through ctest")


def rows(seed, n=4096):
    """Weights as checkpoints have them, plus blocks that test the edges: outliers, an all-zero
    block, a constant block, one of all-positive and one of all-negative values, tiny magnitudes,
    and a Q8_0 block of halves (scale 1: ties, which Q8_0 rounds away from zero)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32) * 0.02
    x[rng.integers(0, n, 16)] *= 30
    x[256:512] = 0
    x[512:768] = 0.013
    x[768:1024] = np.abs(x[768:1024])
    x[1024:1280] = -np.abs(x[1024:1280])
    x[1280:1536] *= 1e-6
    x[1536:1568] = np.concatenate([[127.0], np.arange(31) * (-1.0) ** np.arange(31) + 0.5]).astype(np.float32)
    return x


def ours(qtype, x, mode="--quantize"):
    result = subprocess.run([HELPER, mode, qtype.name, str(x.size)], input=x.astype("<f4").tobytes(),
                            capture_output=True, check=True)
    return np.frombuffer(result.stdout, dtype=np.uint8)


def decoded(qtype, blocks, n):
    result = subprocess.run([HELPER, qtype.name, str(n)], input=blocks.tobytes(), capture_output=True, check=True)
    return np.frombuffer(result.stdout, dtype="<f4")


def first_difference(a, b, qtype):
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    where = int(np.flatnonzero(a != b)[0])
    return f"first differing byte {where} (block {where // size}, byte {where % size} of {size})"


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_0, T.Q5_0, T.Q5_1], ids=lambda t: t.name)
def test_equals_gguf_py(qtype, seed):
    x = rows(seed)
    got = ours(qtype, x)
    want = gguf.quants.quantize(x.reshape(1, -1), qtype).reshape(-1)
    assert got.size == want.size
    assert np.array_equal(got, want), first_difference(got, want, qtype)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_decodes_within_the_types_error(qtype):
    x = rows(3)
    y = decoded(qtype, ours(qtype, x), x.size).astype(np.float64)
    assert np.all(y[256:512] == 0), "an all-zero block must decode to zeros"
    rms = float(np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x.astype(np.float64) ** 2)))
    print(f"\n{qtype.name}: rms relative error {rms:.3g}")
    assert rms <= RMS_BOUND[qtype]


def test_refuses_what_it_cannot_encode():
    x = rows(4)[:100]
    result = subprocess.run([HELPER, "--quantize", "Q4_K", "100"], input=x.tobytes(), capture_output=True)
    assert result.returncode != 0
    result = subprocess.run([HELPER, "--quantize", "IQ2_XXS", "256"], input=rows(4)[:256].tobytes(),
                            capture_output=True)
    assert result.returncode != 0 and b"no quantizer for type IQ2_XXS" in result.stderr


@pytest.mark.parametrize("seed", [1, 2, 5])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_equals_ggml_c(qtype, seed):
    lib = ggml_library("quantizers")
    traits = lib.ggml_get_type_traits(int(qtype)).contents
    from_float = RowFunction(traits.from_float_ref)
    x = np.ascontiguousarray(rows(seed))
    want = np.zeros(x.size // traits.blck_size * traits.type_size, dtype=np.uint8)
    from_float(x.ctypes.data, want.ctypes.data, x.size)
    got = ours(qtype, x)
    assert got.size == want.size
    assert np.array_equal(got, want), first_difference(got, want, qtype)
