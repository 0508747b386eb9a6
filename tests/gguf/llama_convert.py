#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py (the Inkling branch) on a checkpoint written by
`inkling synth`, for tests/gguf/test_converter.py.

Usage: llama_convert.py LLAMA_CPP_DIR CHECKPOINT_DIR OUTFILE OUTTYPE

The synthetic checkpoints carry the release tokenizer.json but not always a pre-tokenizer hash
the converter knows; its Inkling model names the pre-tokenizer "inkling" whatever the hash, so an
unknown hash is answered with that instead of stopping the conversion."""
import runpy
import sys
from pathlib import Path

llama, checkpoint, outfile, outtype = sys.argv[1:5]
llama = Path(llama).resolve()
sys.path[:0] = [str(llama), str(llama / "gguf-py")]

import conversion.base as base  # noqa: E402  (llama.cpp's, from the path above)

known_pre_tokenizer = base.TextModel.get_vocab_base_pre


def pre_tokenizer_or_inkling(self, tokenizer):
    try:
        return known_pre_tokenizer(self, tokenizer)
    except NotImplementedError:
        return "inkling"


base.TextModel.get_vocab_base_pre = pre_tokenizer_or_inkling
sys.argv = [str(llama / "convert_hf_to_gguf.py"), checkpoint, "--outfile", outfile, "--outtype", outtype]
runpy.run_path(str(llama / "convert_hf_to_gguf.py"), run_name="__main__")
