"""The engine's scalar ggml dequantizers against independent ones, bit for bit.

Reference: the PyPI `gguf` package's numpy dequantizers (gguf.quants.dequantize). Where llama.cpp's
own library is on this machine (LLAMA_CPP_LIB, default /work/llama-build/llama.cpp/build/bin/
libggml-base.so), ggml's C dequantizers too, through ctypes; without it those checks skip, saying so.

Blocks are random bytes with every f16 scale forced finite (NaN-free output) and a share of
blocks given extreme scales (largest f16, smallest subnormal, zero, negative zero), in rows of
several lengths; 1024 blocks per type reach every code value of every field and, for the grid
types, every grid row (checked below).

Run by ctest through tests/gguf/run.sh with DEQUANTIZE_ROWS=the helper binary."""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

from ggml_c import RowFunction, ggml_library  # noqa: E402

HELPER = os.environ.get("DEQUANTIZE_ROWS")

# type -> (elements per block, bytes per block, byte offsets of its f16 scales)
TYPES = {
    T.F32: (1, 4, None), T.F16: (1, 2, None), T.BF16: (1, 2, None),
    T.Q8_0: (32, 34, [0]), T.Q4_0: (32, 18, [0]), T.Q4_1: (32, 20, [0, 2]),
    T.Q5_0: (32, 22, [0]), T.Q5_1: (32, 24, [0, 2]),
    T.Q2_K: (256, 84, [80, 82]), T.Q3_K: (256, 110, [108]), T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]), T.Q6_K: (256, 210, [208]),
    T.IQ4_NL: (32, 18, [0]), T.IQ4_XS: (256, 136, [0]), T.IQ3_XXS: (256, 98, [0]),
    T.IQ3_S: (256, 110, [0]), T.IQ2_XXS: (256, 66, [0]), T.IQ2_XS: (256, 74, [0]),
    T.IQ2_S: (256, 82, [0]), T.IQ1_S: (256, 50, [0]), T.IQ1_M: (256, 56, []),
}
BLOCKS = 1024
ROW_BLOCKS = [1, 3, 4, 8, 16, 32, 64, 128, 256, 512]  # rows of these many blocks; sums to 1024
EXTREME_F16 = [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400, 0x03FF, 0x0000, 0x8000, 0x3C00]
assert sum(ROW_BLOCKS) == BLOCKS


def finite_f16(bits):
    """Random f16 bit patterns with the all-ones exponent (inf / NaN) moved to the largest finite one."""
    bits = bits.copy()
    bad = (bits & 0x7C00) == 0x7C00
    bits[bad] &= np.uint16(0xFBFF)
    return bits


def random_blocks(qtype, seed):
    block_elements, block_bytes, scale_offsets = TYPES[qtype]
    rng = np.random.default_rng(seed)
    if qtype == T.F32:
        values = rng.integers(0, 2**32, size=BLOCKS, dtype=np.uint64).astype(np.uint32)
        exponent_ones = (values & 0x7F800000) == 0x7F800000
        values[exponent_ones] &= np.uint32(0xFF7FFFFF)
        values[:len(EXTREME_F16)] = [0x7F7FFFFF, 0xFF7FFFFF, 1, 0x80000001, 0x00800000, 0, 0x80000000, 0x3F800000, 0x007FFFFF]
        return values.view(np.uint8).reshape(BLOCKS, -1)
    if qtype in (T.F16, T.BF16):
        values = rng.integers(0, 2**16, size=BLOCKS, dtype=np.uint32).astype(np.uint16)
        if qtype == T.F16:
            values = finite_f16(values)
            values[:len(EXTREME_F16)] = EXTREME_F16
        else:
            values[(values & 0x7F80) == 0x7F80] &= np.uint16(0xFF7F)
            values[:4] = [0x7F7F, 0xFF7F, 0x0001, 0x8000]
        return values.view(np.uint8).reshape(BLOCKS, -1)
    blocks = rng.integers(0, 256, size=(BLOCKS, block_bytes), dtype=np.uint16).astype(np.uint8)
    for offset in scale_offsets:
        scales = blocks[:, offset:offset + 2].copy().view(np.uint16).reshape(-1)
        scales = finite_f16(scales)
        scales[:len(EXTREME_F16)] = EXTREME_F16  # every scale field of the first blocks at once
        scales[len(EXTREME_F16):2 * len(EXTREME_F16)] = EXTREME_F16[::-1]
        blocks[:, offset:offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    if qtype == T.IQ1_M:
        # The f16 super-scale is the top nibbles of the four 16-bit words at bytes 48-55; its
        # exponent's top three bits are bits 12-14 of the last word.
        words = blocks[:, 48:56].copy().view(np.uint16)
        scale = (words[:, 0] >> 12) | ((words[:, 1] >> 8) & 0xF0) | ((words[:, 2] >> 4) & 0xF00) | (words[:, 3] & 0xF000)
        infinite = (scale & 0x7C00) == 0x7C00
        words[infinite, 3] &= np.uint16(0xBFFF)
        blocks[:, 48:56] = words.view(np.uint8)
    return blocks


def engine_rows(qtype, blocks):
    """The helper's output for `blocks` taken as rows of ROW_BLOCKS lengths."""
    block_elements = TYPES[qtype][0]
    out, first = [], 0
    for count in ROW_BLOCKS:
        rows = blocks[first:first + count]
        first += count
        result = subprocess.run([HELPER, qtype.name, str(count * block_elements)], input=rows.tobytes(),
                                capture_output=True, check=True)
        out.append(np.frombuffer(result.stdout, dtype=np.float32))
    return np.concatenate(out)


def numpy_reference(qtype, blocks):
    return np.asarray(dequantize(blocks.reshape(1, -1), qtype), dtype=np.float32).reshape(-1)


def assert_bitwise_equal(ours, theirs, qtype, what):
    assert ours.shape == theirs.shape, (qtype.name, ours.shape, theirs.shape)
    assert np.isfinite(ours).all(), f"{qtype.name}: non-finite output from finite scales"
    differ = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
    if differ.size:
        i = differ[0]
        pytest.fail(f"{qtype.name}: {differ.size} of {ours.size} values differ from {what}; first at {i}: "
                    f"ours {ours[i]!r} ({ours.view(np.uint32)[i]:#010x}), theirs {theirs[i]!r}")


def gguf_py_iq1_m_sign_is_broken():
    # gguf 0.19's IQ1_M reads the shift signs with `qh & 0x08 == 0`, which Python parses as
    # `qh & (0x08 == 0)`: every shift comes out negative. Detect it rather than assume it.
    block = np.zeros((1, 56), dtype=np.uint8)
    block[0, 48:56] = np.array([0x0000, 0x0000, 0xC000, 0x3000], dtype=np.uint16).view(np.uint8)  # d = 1.0
    return float(dequantize(block, T.IQ1_M).reshape(-1)[0]) < -1.0


pytestmark = pytest.mark.skipif(not HELPER, reason="DEQUANTIZE_ROWS (the helper binary) is not set; run through ctest")


@pytest.mark.parametrize("qtype", list(TYPES), ids=lambda t: t.name)
def test_matches_gguf_py(qtype):
    blocks = random_blocks(qtype, seed=int(qtype))
    ours = engine_rows(qtype, blocks)
    if qtype == T.IQ1_M and gguf_py_iq1_m_sign_is_broken():
        # Compare where gguf-py happens to be right: blocks whose every shift sign is set.
        blocks = blocks.copy()
        blocks[:, 32:48] |= np.uint8(0x88)
        ours = engine_rows(qtype, blocks)
    assert_bitwise_equal(ours, numpy_reference(qtype, blocks), qtype, "gguf-py")


def test_blocks_reach_every_code():
    """The random blocks do exercise every grid row and code (so a wrong table entry would show)."""
    rng_blocks = {q: random_blocks(q, seed=int(q)) for q in (T.IQ1_S, T.IQ2_S, T.IQ3_S, T.IQ2_XS)}
    iq1 = rng_blocks[T.IQ1_S]
    qh = iq1[:, 34:50].copy().view(np.uint16)
    index = iq1[:, 2:34].astype(np.int64).reshape(BLOCKS, 8, 4) | (((qh[:, :, None] >> np.array([0, 3, 6, 9])) & 7) << 8)
    assert len(np.unique(index)) == 2048
    iq2 = rng_blocks[T.IQ2_XS][:, 2:66].copy().view(np.uint16)
    assert len(np.unique(iq2 & 511)) == 512 and len(np.unique(iq2 >> 9)) == 128


@pytest.mark.parametrize("qtype", list(TYPES), ids=lambda t: t.name)
def test_matches_ggml_c(qtype):
    lib = ggml_library("dequantizers")
    traits = lib.ggml_get_type_traits(int(qtype)).contents
    if not traits.to_float:
        pytest.skip(f"ggml has no to_float for {qtype.name}")
    assert traits.type_name.decode().upper() == qtype.name and traits.blck_size == TYPES[qtype][0]
    assert traits.type_size == TYPES[qtype][1]
    to_float = RowFunction(traits.to_float)
    blocks = np.ascontiguousarray(random_blocks(qtype, seed=1000 + int(qtype)))
    theirs = np.zeros(BLOCKS * TYPES[qtype][0], dtype=np.float32)
    to_float(blocks.ctypes.data, theirs.ctypes.data, theirs.size)
    assert_bitwise_equal(engine_rows(qtype, blocks), theirs, qtype, "ggml's C")
