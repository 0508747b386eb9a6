"""ggml's own C (de)quantizers through ctypes, from a llama.cpp built here (LLAMA_CPP_LIB, default
/work/llama-build/llama.cpp/build/bin/libggml-base.so), for test_quantize.py and
test_dequantize.py to compare the engine's with, bit for bit."""
import ctypes
import os

import pytest

LIB = os.environ.get("LLAMA_CPP_LIB", "/work/llama-build/llama.cpp/build/bin/libggml-base.so")


class TypeTraits(ctypes.Structure):
    """The head of ggml's struct ggml_type_traits (ggml.h), as far as the tests read it."""
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p), ("from_float_ref", ctypes.c_void_p)]


# Both function pointers take (source, destination, elements).
RowFunction = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def ggml_library(compared):
    """The loaded library, or the test skipped, saying that `compared` ("quantizers") were not."""
    if not os.path.exists(LIB):
        pytest.skip(f"SKIPPED: no llama.cpp library at {LIB} (set LLAMA_CPP_LIB): ggml's C {compared} not compared")
    lib = ctypes.CDLL(LIB)
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    return lib
