#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets that take structured input (tools/fuzz/corpus/).

Usage: tools/fuzz/make_seeds.py SYNTH_DIR
SYNTH_DIR holds tiny checkpoints written by `inkling synth D/LAYOUT --layout LAYOUT --preset tiny`
for original-bf16, nvfp4 and mlx-4bit; the inkling binary at build/inkling tokenizes the outputs.
The safetensors and front-door targets write their own seeds (-seed_corpus=1)."""
import json
import os
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
synth = sys.argv[1]
corpus = os.path.join(root, "tools", "fuzz", "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(corpus, target), exist_ok=True)
    with open(os.path.join(corpus, target, name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(*parts), "rb") as f:
        return f.read()


# config: byte 0 selects config.json alone (0) or config.json NUL hf_quant_config.json (1).
for layout in ("original-bf16", "nvfp4", "mlx-4bit"):
    write("config", layout, b"\0" + read(synth, layout, "config.json"))
write("config", "nvfp4-hf-quant", b"\1" + read(synth, "nvfp4", "config.json") + b"\0" +
      read(synth, "nvfp4", "hf_quant_config.json"))

# tokenizer: a small byte-level BPE file (0), texts (1), id pairs (2).
alphabet = {}
for b in list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256)):
    alphabet[b] = chr(b)
n = 0
for b in range(256):
    if b not in alphabet:
        alphabet[b] = chr(256 + n)
        n += 1
vocab = {alphabet[b]: i for i, b in enumerate(range(256))}
merges = []
for a, b in (("h", "e"), ("l", "l"), ("he", "ll"), ("\u0120", "w")):
    vocab[a + b] = len(vocab)
    merges.append(a + " " + b)
small = {"version": "1.0", "added_tokens": [{"id": len(vocab), "content": "<|end|>", "special": True}],
         "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": "\\s+|\\w+|[^\\s\\w]+"}, "behavior": "Isolated", "invert": False},
             {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
         "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "vocab": vocab, "merges": merges}}
write("tokenizer", "small-bpe", b"\0" + json.dumps(small).encode())
write("tokenizer", "small-bpe-with-config", b"\0" + json.dumps(small).encode() + b"\0" +
      json.dumps({"eos_token": "<|end|>", "added_tokens_decoder": {str(len(vocab)): {"content": "<|end|>", "special": True}}}).encode())
for i, text in enumerate(["Hello, world!", "héllo wörld 日本語 🎉", "<|message_user|>hi<|end_message|>",
                          "  spaces\n\n\ttabs 12345 3.14", "x" * 300]):
    write("tokenizer", "text-%d" % i, b"\1" + text.encode())
write("tokenizer", "ids", b"\2" + bytes(range(0, 200)))

# jinja: templates, some with a render context after a NUL.
messages = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello", "reasoning_content": "greet"},
                         {"role": "user", "content": "Weather?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            "add_generation_prompt": True, "reasoning_effort": "low"}
templates = [
    "{% for m in messages %}{{ m.role }}: {{ m.content|trim }}\n{% endfor %}",
    "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
    "{% set ns = namespace(a=0) %}{% for i in range(10) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}",
    "{{ '%5.2f|%-4d|%s'|format(3.14159, 7, 'x') }} {{ [3,1,2]|sort|join(',') }} {{ {'b':1,'a':2}|dictsort }}",
    "{{ 'abc'|truncate(5) }}{{ 'a b'|title }}{{ x|default('d') }}{{ 'x' * 3 }}{{ 7 // 2 }}{{ 2 ** 10 }}",
    "{% for x in [[1,[2]],[3]] recursive %}[{{ loop.depth }}{% if x is iterable %}{{ loop(x) }}{% endif %}]{% endfor %}",
    "{{ messages|tojson(indent=2) }}{{ messages[0]['content'][1:3] }}{{ messages|selectattr('role','equalto','user')|list|length }}",
]
for i, t in enumerate(templates):
    write("jinja", "template-%d" % i, t.encode() + b"\0" + json.dumps(messages).encode())
write("jinja", "inkling-template", read(root, "data", "inkling_chat_template.jinja") + b"\0" + json.dumps(messages).encode())

# output_parser: real outputs as ids, 3 bytes each (specials: top bit of the third byte).
outputs = [
    "<|content_thinking|>Let me think.<|end_message|><|message_model|><|content_text|>Hello **there**!<|end_message|>"
    "<|content_model_end_sampling|>",
    "get_weather<|content_invoke_tool_json|>{\"name\":\"get_weather\",\"args\":{\"city\":\"Paris\",\"n\":[1,2,{\"a\":null}]}}"
    "<|end_message|><|message_model|>f<|content_invoke_tool_json|>{\"name\": \"f\", \"args\": \"{\\\"x\\\": 1}\"}"
    "<|end_message|><|content_model_end_sampling|>",
    "<|content_text|>Partial answer without an end",
]
for i, text in enumerate(outputs):
    ids = subprocess.run([os.path.join(root, "build", "inkling"), "tokenize", "-m", os.path.join(synth, "original-bf16"), text],
                         check=True, capture_output=True, text=True).stdout.replace(",", " ").split()
    data = bytearray([i % 2])
    for tok in map(int, ids):
        if tok >= 199998:
            data += bytes([tok - 199998, 0, 0x80])
        else:
            data += bytes([tok & 0xFF, (tok >> 8) & 0xFF, tok >> 16])
    write("output_parser", "output-%d" % i, bytes(data))
