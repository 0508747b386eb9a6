#!/usr/bin/env python3
"""Regenerates tests/data/templates/goldens.json: chat-template renders by Python
Jinja2 configured as HF transformers does (without importing transformers).

Usage: python3 tools/template_goldens.py   (from the repository root)
"""
import copy
import json
import os
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "templates")
FIXED_NOW = datetime(2024, 7, 26, 9, 30, 0)  # the C++ test passes the same date


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    try:
        return {"expected": env.from_string(source).render(**context)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e), "error_kind": "template"}
    except Exception as e:  # a template bug surfacing as a Python error is still an error
        return {"error": "%s: %s" % (type(e).__name__, e), "error_kind": "python"}


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
NESTED_TOOL = {
    "type": "function",
    "function": {
        "name": "book_flight",
        "description": "Book a flight — one way or return \"quoted\"",
        "parameters": {
            "type": "object",
            "properties": {
                "passengers": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                    "Zeta": {"type": "number", "default": 1.0}, "alpha": {"type": "boolean", "default": False}}}},
                "route": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                          "required": ["from", "to"]},
                "max_price": {"type": "number", "default": 0.1, "maximum": 1e16},
                "notes": {"type": ["string", "null"], "default": None},
            },
            "required": ["passengers", "route"],
        },
    },
}

# Command R+'s tool_use template requires a description on every parameter.
DESCRIBED_WEATHER_TOOL = copy.deepcopy(WEATHER_TOOL)
DESCRIBED_WEATHER_TOOL["function"]["parameters"]["properties"]["unit"]["description"] = "Temperature unit"


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **extra):
    return dict({"role": "assistant", "content": text}, **extra)


def call(name, arguments, call_id=None):
    c = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        c["id"] = call_id
    return c


def inkling_cases():
    cases = []

    def add(name, messages, **kw):
        ctx = {"messages": messages, "bos_token": "", "eos_token": "<|content_model_end_sampling|>"}
        ctx.update(kw)
        cases.append((name, ctx))

    add("plain", [user("Hello!")], add_generation_prompt=True)
    add("plain_no_gen", [user("Hello!")], add_generation_prompt=False)
    add("plain_gen_undefined", [user("Hello!")])
    add("system", [{"role": "system", "content": "You are terse."}, user("Hi")], add_generation_prompt=True)
    add("developer", [{"role": "developer", "content": "Be exact."}, user("2+2?")], add_generation_prompt=True)
    add("system_and_developer", [{"role": "system", "content": "S"}, {"role": "developer", "content": "D"}, user("q")],
        add_generation_prompt=True)
    add("multi_turn", [user("Hi"), assistant("Hello, how can I help?"), user("Tell me a joke.")],
        add_generation_prompt=True)
    add("reasoning", [user("What is 2+2?"), assistant("4", reasoning_content="Add two and two."), user("And 3+3?")],
        add_generation_prompt=True)
    add("reasoning_empty", [user("Q"), assistant("A", reasoning_content=""), user("Q2")], add_generation_prompt=True)
    add("reasoning_preserve_false", [user("Q1"), assistant("A1", reasoning_content="think1"), user("Q2"),
                                     assistant("A2", reasoning_content="think2")], preserve_thinking=False)
    add("reasoning_preserve_true", [user("Q1"), assistant("A1", reasoning_content="think1"), user("Q2")],
        preserve_thinking=True, add_generation_prompt=True)
    add("assistant_empty", [user("Q"), assistant(""), user("again")], add_generation_prompt=True)
    add("assistant_none_content", [user("Q"), assistant(None, tool_calls=[call("get_weather", {"city": "Paris"})])])
    add("unicode", [user("Grüße, 世界! 🎉 \"quotes\" and \\backslash\\")], add_generation_prompt=True)
    add("newlines", [user("line1\nline2\r\n\ttabbed")], add_generation_prompt=True)
    add("tools_simple", [user("Weather in Paris?")], tools=[WEATHER_TOOL], add_generation_prompt=True)
    add("tools_nested", [user("Book it")], tools=[NESTED_TOOL, WEATHER_TOOL], add_generation_prompt=True)
    add("tools_empty_list", [user("hi")], tools=[], add_generation_prompt=True)
    add("tools_no_description", [user("hi")], tools=[{"type": "function", "function": {"name": "ping"}}],
        add_generation_prompt=True)
    add("tools_bad_function", [user("hi")], tools=[{"type": "function", "function": "nope"}])
    add("tool_call_dict", [user("Weather?"), assistant("", tool_calls=[call("get_weather", {"unit": "celsius", "city": "Paris"})])])
    add("tool_call_string", [user("Weather?"), assistant("", tool_calls=[call("get_weather", '{"unit": "celsius", "city": "Paris"}')])])
    add("tool_call_string_escapes", [user("x"), assistant("", tool_calls=[call("echo", '{"text": "a\\"b\\\\c\\n\\t\\/d"}')])])
    add("tool_call_string_unicode_escape", [user("x"), assistant("", tool_calls=[call("echo", '{"text": "caf\\u00e9 \\u4e16 \\ud83c\\udf89"}')])])
    add("tool_call_string_raw_unicode", [user("x"), assistant("", tool_calls=[call("echo", '{"text": "café 世界"}')])])
    add("tool_call_duplicate_keys", [user("x"), assistant("", tool_calls=[call("echo", '{"a": 1, "b": 2, "a": 3}')])])
    add("tool_call_nested_string", [user("x"), assistant("", tool_calls=[call("f", '{"z": {"y": [1, 2.5, {"b": true, "a": null}], "x": "s"}, "a": []}')])])
    add("tool_call_numbers_string", [user("x"), assistant("", tool_calls=[call("f", '{"i": 10, "f": 1.0, "e": 1e3, "neg": -0.5, "big": 12345678901234}')])])
    add("tool_call_whitespace_string", [user("x"), assistant("", tool_calls=[call("f", '  {\n  "b" : 1 ,\n "a" : [ 1 , 2 ] }  ')])])
    add("tool_call_empty_string", [user("x"), assistant("", tool_calls=[call("f", "")])])
    add("tool_call_non_object_string", [user("x"), assistant("", tool_calls=[call("f", "[1, 2]")])])
    add("tool_call_empty_object_string", [user("x"), assistant("", tool_calls=[call("f", "{}")])])
    add("tool_call_dict_nested", [user("x"), assistant("", tool_calls=[call("f", {"b": {"d": 1.0, "c": [True, None, "é"]}, "a": 0.1, "C": 2})])])
    add("tool_call_dict_float", [user("x"), assistant("", tool_calls=[call("f", {"x": 3.0, "y": 1e-7, "z": 2.5e20})])])
    add("tool_call_multiple", [user("x"), assistant("Let me check.", tool_calls=[call("get_weather", {"city": "Paris"}, "c1"),
                                                                                  call("get_weather", {"city": "Rome"}, "c2")])])
    add("tool_call_with_reasoning", [user("x"), assistant("", reasoning_content="Need weather.", tool_calls=[call("get_weather", {"city": "Oslo"})])])
    add("tool_call_no_name", [user("x"), assistant("", tool_calls=[{"type": "function", "function": {"arguments": {}}}])])
    add("tool_call_arguments_none", [user("x"), assistant("", tool_calls=[call("f", None)])])
    add("tool_result_text", [user("x"), assistant("", tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]),
                             {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 21C"}], add_generation_prompt=True)
    add("tool_result_named", [user("x"), {"role": "tool", "name": "get_weather", "content": "Rain"}], add_generation_prompt=True)
    add("tool_result_dict", [user("x"), assistant("", tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]),
                             {"role": "tool", "tool_call_id": "c1", "content": {"temp": 21.0, "sky": "clear", "Alerts": []}}])
    add("tool_result_list", [user("x"), {"role": "tool", "tool_call_id": "zz", "content": [1, "two", {"b": 3, "a": None}]}])
    add("tool_result_none", [user("x"), {"role": "tool", "name": "f", "content": None}])
    add("tool_result_number", [user("x"), {"role": "tool", "name": "f", "content": 42}])
    add("tool_result_unresolved_id", [user("x"), {"role": "tool", "tool_call_id": "missing", "content": "?"}])
    add("multipart_text", [{"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}],
        add_generation_prompt=True)
    add("multipart_image", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "What is this?"}]}],
        add_generation_prompt=True)
    add("multipart_audio", [{"role": "user", "content": [{"type": "input_audio"}, "plain string part", {"type": "unknown"}]}])
    add("multipart_no_type", [{"role": "user", "content": [{"text": "untyped"}, {"type": "input_text", "text": 5}]}])
    add("media_marker", [user("see <__media_abc123> here and <__media_x>")], add_generation_prompt=True)
    add("unknown_role", [user("x"), {"role": "robot", "content": "beep"}])
    for effort in ["none", "minimal", "low", "medium", "high", "xhigh", "max", " HIGH ", "Medium"]:
        add("effort_" + effort.strip().lower() + ("_padded" if effort != effort.strip() else "") + ("_cap" if effort != effort.lower() else ""),
            [user("hi")], reasoning_effort=effort, add_generation_prompt=True)
    for i, effort in enumerate([0, 0.0, 0.5, 0.99, 0.25, 0.125, 0.015, 0.005, 0.994, 0.995, 0.105, 0.335, 0.675, 1e-9, "0.3", "0.30", "0.045"]):
        add("effort_num_%d" % i, [user("hi")], reasoning_effort=effort, add_generation_prompt=True)
    for i, effort in enumerate([1.0, -0.1, 2, "ultra", "", True]):
        add("effort_invalid_%d" % i, [user("hi")], reasoning_effort=effort)
    add("effort_none_value", [user("hi")], reasoning_effort=None, add_generation_prompt=True)
    add("effort_system_first", [{"role": "system", "content": "S"}, user("hi")], reasoning_effort="low")
    add("only_system", [{"role": "system", "content": "S"}])
    add("empty_messages", [], add_generation_prompt=True)
    return cases


# Real chat templates, byte-exact copies of the upstream files (see tests/data/templates/SOURCES.md):
# (file stem, special tokens the model's tokenizer_config.json passes, how tool-call arguments are given
# in the OpenAI format the model's own template expects: a dict, or a JSON string).
REAL_TEMPLATES = [
    ("llama3_1", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "dict"),
    ("llama3_2", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "dict"),
    ("qwen3", {"bos_token": None, "eos_token": "<|im_end|>"}, "dict"),
    ("deepseek_r1_distill", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}, "string"),
    ("deepseek_v3_1", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}, "string"),
    ("gemma3", {"bos_token": "<bos>", "eos_token": "<eos>"}, "dict"),
    ("gpt_oss", {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"}, "dict"),
    ("mistral_nemo", {"bos_token": "<s>", "eos_token": "</s>"}, "dict"),
    ("phi3_5", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}, "dict"),
    ("qwen2_5", {"bos_token": None, "eos_token": "<|im_end|>"}, "dict"),
    ("hermes3_tool_use", {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}, "dict"),
    ("command_r_plus_tool_use", {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"}, "dict"),
    ("functionary_v3_2", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "string"),
    ("granite3_3", {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"}, "dict"),
    ("kimi_k2", {"bos_token": "[BOS]", "eos_token": "[EOS]"}, "dict"),
    ("seed_oss", {"bos_token": "<seed:bos>", "eos_token": "<seed:eos>"}, "dict"),
    ("nemotron_nano_v2", {"bos_token": "<SPECIAL_10>", "eos_token": "<SPECIAL_12>"}, "dict"),
]

# Templates whose tool-call turns need content "" (they test or concatenate content); the others get None.
EMPTY_STRING_CONTENT = {"qwen3", "gpt_oss", "phi3_5", "gemma3"}


def shared_cases(args_kind):
    def args(d):
        return d if args_kind == "dict" else json.dumps(d)

    paris = {"city": "Paris", "unit": "celsius"}
    call1 = call("get_weather", args(paris), "abcdefghi")
    call2 = call("get_weather", args({"city": "Rome"}), "jklmnopqr")
    sysmsg = {"role": "system", "content": "You are helpful."}
    return [
        ("basic", {"messages": [user("Hello")], "add_generation_prompt": True}),
        ("no_gen", {"messages": [user("Hello")], "add_generation_prompt": False}),
        ("gen_undefined", {"messages": [user("Hello")]}),
        ("system", {"messages": [sysmsg, user("Hi")], "add_generation_prompt": True}),
        ("system_no_gen", {"messages": [sysmsg, user("Hi"), assistant("Hello.")], "add_generation_prompt": False}),
        ("multi_turn", {"messages": [user("Hi"), assistant("Hello! How can I help?"), user("Weather?")], "add_generation_prompt": True}),
        ("multi_turn_system", {"messages": [sysmsg, user("Hi"), assistant("Hello!"), user("Joke?"), assistant("No."), user("Why?")],
                               "add_generation_prompt": True}),
        ("ends_with_assistant", {"messages": [user("Hi"), assistant("Hello! How can I help?")], "add_generation_prompt": False}),
        ("unicode", {"messages": [user("Grüße 世界 🎉 \"q\" \\ {{ x }} {% y %}"), assistant("  padded  "), user("ok\n\tnext")],
                     "add_generation_prompt": True}),
        ("think", {"messages": [user("2+2?"), assistant("<think>\nadd\n</think>\n\n4"), user("3+3?")], "add_generation_prompt": True}),
        ("think_last", {"messages": [user("2+2?"), assistant("<think>\nadd\n</think>\n\n4")], "add_generation_prompt": False}),
        ("reasoning_field", {"messages": [user("2+2?"), assistant("4", reasoning_content="add them", thinking="add them")],
                             "add_generation_prompt": False}),
        ("tools", {"messages": [user("Weather in Paris?")], "tools": [WEATHER_TOOL], "add_generation_prompt": True}),
        ("tools_system", {"messages": [sysmsg, user("Book a flight")], "tools": [NESTED_TOOL, WEATHER_TOOL], "add_generation_prompt": True}),
        ("tool_call", {"messages": [user("Weather in Paris?"), assistant(None, tool_calls=[call1])],
                       "tools": [WEATHER_TOOL], "add_generation_prompt": False}),
        ("tool_result", {"messages": [user("Weather in Paris?"), assistant(None, tool_calls=[call1]),
                                      {"role": "tool", "tool_call_id": "abcdefghi", "name": "get_weather", "content": "Sunny"}],
                         "tools": [WEATHER_TOOL], "add_generation_prompt": True}),
        ("tool_round_trip", {"messages": [sysmsg, user("Paris and Rome?"), assistant(None, tool_calls=[call1, call2]),
                                          {"role": "tool", "tool_call_id": "abcdefghi", "name": "get_weather", "content": "Sunny"},
                                          {"role": "tool", "tool_call_id": "jklmnopqr", "name": "get_weather", "content": "Rain"},
                                          assistant("Paris is sunny, Rome is rainy."), user("Thanks")],
                             "tools": [WEATHER_TOOL], "add_generation_prompt": True}),
        ("tool_call_with_content", {"messages": [user("Weather?"), assistant("Let me check.", tool_calls=[call1]),
                                                 {"role": "tool", "tool_call_id": "abcdefghi", "name": "get_weather", "content": "{\"temp\": 21}"}],
                                    "tools": [WEATHER_TOOL], "add_generation_prompt": True}),
        ("alternation_error", {"messages": [user("a"), user("b")], "add_generation_prompt": True}),
        ("multipart", {"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe "}]}],
                       "add_generation_prompt": True}),
        ("empty_messages", {"messages": [], "add_generation_prompt": True}),
    ]


def template_extra_cases(tname, args_kind):
    """Template-specific switches each model's documentation names."""
    multi = [user("Hi"), assistant("<think>\nhm\n</think>\n\nHello"), user("Bye")]
    if tname == "qwen3":
        return [("thinking_disabled", {"messages": [user("Hi")], "add_generation_prompt": True, "enable_thinking": False}),
                ("thinking_enabled", {"messages": multi, "add_generation_prompt": True, "enable_thinking": True}),
                ("reasoning_multi", {"messages": [user("Q1"), assistant("A1", reasoning_content="r1"), user("Q2"),
                                                  assistant("A2", reasoning_content="r2")], "add_generation_prompt": False})]
    if tname == "deepseek_v3_1":
        return [("thinking_true", {"messages": multi, "add_generation_prompt": True, "thinking": True}),
                ("prefix_thinking", {"messages": [user("Q"), assistant("<think>", prefix=True)], "thinking": True})]
    if tname.startswith("llama3"):
        return [("date_string", {"messages": [user("Hi")], "date_string": "01 Jan 2025", "add_generation_prompt": True}),
                ("builtin_tools", {"messages": [user("Search")], "builtin_tools": ["brave_search", "wolfram_alpha"],
                                   "tools": [WEATHER_TOOL], "add_generation_prompt": True}),
                ("tools_in_system", {"messages": [user("Weather?")], "tools": [WEATHER_TOOL], "tools_in_user_message": False,
                                     "add_generation_prompt": True}),
                ("tools_no_user_error", {"messages": [{"role": "system", "content": "S"}], "tools": [WEATHER_TOOL]}),
                ("ipython_result", {"messages": [user("x"), assistant(None, tool_calls=[call("get_weather", {"city": "Oslo"})]),
                                                 {"role": "ipython", "content": {"temp": 3}}], "add_generation_prompt": True}),
                ("multi_call_error", {"messages": [user("x"), assistant(None, tool_calls=[call("a", {}), call("b", {})])]})]
    if tname == "gpt_oss":
        return [("effort_high", {"messages": [user("Hi")], "reasoning_effort": "high", "add_generation_prompt": True}),
                ("developer", {"messages": [{"role": "developer", "content": "Answer in French."}, user("Hi")], "add_generation_prompt": True}),
                ("builtin_tools", {"messages": [user("Find it")], "builtin_tools": ["browser", "python"], "tools": [NESTED_TOOL],
                                   "add_generation_prompt": True}),
                ("model_identity", {"messages": [user("Who?")], "model_identity": "You are Bob.", "add_generation_prompt": True}),
                ("thinking_history", {"messages": [user("Q1"), assistant("A1", thinking="t1"), user("Q2"), assistant("A2", thinking="t2")]}),
                ("thinking_tool_call", {"messages": [user("Weather?"), assistant(None, thinking="need tool", tool_calls=[call("get_weather", {"city": "Oslo"})]),
                                                     {"role": "tool", "content": "Cold"}], "tools": [WEATHER_TOOL], "add_generation_prompt": True})]
    if tname == "granite3_3":
        docs = [{"doc_id": 1, "title": "Doc", "text": "Paris is sunny."}, {"text": "Rome is rainy."}]
        return [("thinking", {"messages": [user("Why?")], "thinking": True, "add_generation_prompt": True}),
                ("documents_citations", {"messages": [user("Weather?")], "documents": docs,
                                         "controls": {"citations": True, "hallucinations": True, "length": "short"},
                                         "add_generation_prompt": True}),
                ("controls_length", {"messages": [user("Hi")], "controls": {"length": "long", "originality": "extractive"},
                                     "add_generation_prompt": True})]
    if tname == "command_r_plus_tool_use":
        return [("system_tools", {"messages": [{"role": "system", "content": "Be brief."}, user("Weather?")], "tools": [WEATHER_TOOL, NESTED_TOOL],
                                  "add_generation_prompt": True})]
    if tname in ("hermes3_tool_use", "qwen2_5", "kimi_k2", "seed_oss", "nemotron_nano_v2", "functionary_v3_2"):
        return [("tools_nested_multi", {"messages": [{"role": "system", "content": "Be brief."}, user("Book")],
                                        "tools": [NESTED_TOOL, WEATHER_TOOL], "add_generation_prompt": True})]
    if tname == "mistral_nemo":
        return [("bad_call_id_error", {"messages": [user("x"), assistant(None, tool_calls=[call("get_weather", {"city": "Oslo"}, "short")])]}),
                ("tools_multi_user", {"messages": [user("a"), assistant("b"), user("c")], "tools": [WEATHER_TOOL]})]
    return []


FEATURE_SNIPPETS = [
    ("loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('o','e') }};{% endfor %}", {}),
    ("loop_else_filter", "{% for x in [1,2,3,4,5,6] if x is even %}{{ x }}{{ ',' if not loop.last }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("loop_controls", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("recursive_loop", "{% for item in tree recursive %}[{{ item.name }}{% if item.children %}:{{ loop(item.children) }}{% endif %}@{{ loop.depth }}]{% endfor %}",
     {"tree": [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c", "children": [{"name": "d"}]}]}, {"name": "e"}]}),
    ("scoping", "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{{ x }}{% endfor %}|{{ x }}{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}|{{ ns.n }}", {}),
    ("set_block", "{% set greeting | upper %}  hello {{ name }}  {% endset %}[{{ greeting }}]{% set b %}x{{ 1 + 1 }}{% endset %}{{ b ~ b }}", {"name": "bob"}),
    ("macros", "{% macro hello(name, punct='!', times=1) %}{% for _ in range(times) %}Hi {{ name }}{{ punct }}{% endfor %}{% endmacro %}{{ hello('a') }}|{{ hello('b', '?') }}|{{ hello(name='c', times=2) }}|{{ hello }}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(10) }}", {}),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 2 }}{% endcall %}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}", {}),
    ("whitespace", "<ul>\n  {% for x in xs %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n  {%- if true %} tight {% endif -%}  \n  end {#- c -#} .\n{%+ if true %}keep{% endif +%}\nX{# comment #}\nY", {"xs": [1, 2]}),
    ("literals_repr", "{{ [1, 2.0, 'a', none, true, (1,), {'k': [False]}] }}|{{ (1, 'x') }}|{{ {'q': \"it's\"} }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 0.0001 }}|{{ 123456789012345678.0 }}|{{ 0.1 + 0.2 }}", {}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 / 2 }} {{ 4 / 2 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 1 + 2.0 }} {{ -(3) }} {{ 1 == 1.0 }} {{ true + 1 }}", {}),
    ("compare_logic", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ none or 'x' }} {{ 0 and 1 }} {{ not [] }} {{ 'y' if 0 else 'n' }} {{ [1, 2] == [1, 2.0] }} {{ 'b' > 'a' }}", {}),
    ("percent_format", "{{ '%s|%d|%5.1f|%-4d|%r|%c|%x|%05d|%%' % ('s', 3.9, 3.14159, 7, 'a', 233, 255, 42) }} {{ '%(a)s-%(b)03d' % {'a': 'x', 'b': 5} }} {{ '%s' % [1, 'a'] }} {{ '%.2f' % 0.125 }}", {}),
    ("tests", "{% for v in [none, true, 1, 1.5, 'Ab', 'ab', [1], {'a': 1}, undefined_thing] %}{{ v is defined }}{{ v is none }}{{ v is string }}{{ v is mapping }}{{ v is sequence }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is iterable }}{{ v is callable }}{{ v is lower }};{% endfor %}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is eq 2 }}{{ 1 is lt 2 }}{{ 'a' is in 'abc' }}{{ none is sameas none }}{{ true is true }}{{ 1 is true }}{{ range is callable }}{{ lipsum is defined }}", {}),
    ("string_filters", "{{ '  Hello World  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world-foo(bar)' | title }}|{{ 'hELLO' | capitalize }}|{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'héllo' | length }}|{{ 'one two  three' | wordcount }}|{{ 'ab' | center(6) }}|{{ 'a<b>&\"' | e }}|{{ 'hello world, this is long' | truncate(12) }}|{{ 'abc' | reverse }}|{{ 'x' | string }}{{ 5 | string }}", {}),
    ("list_filters", "{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ users | sort(attribute='age') | map(attribute='name') | join(', ') }}|{{ [1, 2, 2, 'a', 'A'] | unique | list }}|{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}|{{ [1, 2, 3] | sum }}|{{ [1.5, 2] | sum }}|{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}|{{ [1, 2, 3] | reverse | list }}|{{ 'abc' | list }}|{{ [1,2,3,4,5] | batch(2) | list }}|{{ users | selectattr('admin') | map(attribute='name') | list }}|{{ users | rejectattr('age', 'gt', 30) | map(attribute='name') | join }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|{{ ['a', 'b'] | map('upper') | join('-') }}|{{ users | join(',', attribute='name') }}",
     {"users": [{"name": "ann", "age": 40, "admin": True}, {"name": "bob", "age": 25, "admin": False}, {"name": "cy", "age": 31}]}),
    ("dict_ops", "{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d.items() %}{{ k }}{% endfor %}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('missing', 'dflt') }}|{{ d.get('b') }}|{{ d['a'] }}{{ d.a }}|{{ d | dictsort(reverse=true) }}|{{ d | items | list }}|{{ d | length }}|{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true, separators=(',', ':')) }}",
     {"d": {"b": 2, "a": [1, {"z": None}], "C": "é"}}),
    ("numbers", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.99 | int }} {{ '1.5' | float }} {{ 'x' | float }} {{ 'x' | float(-1.0) }} {{ 2 | float }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ -3 | abs }} {{ 1.0 }} {{ 10 / 4 }} {{ '  12  ' | int }} {{ '1e3' | float }}", {}),
    ("str_methods", "{{ s.split(',') }}|{{ s.split(',', 1) }}|{{ s.rsplit(',', 1) }}|{{ '  a  b '.split() }}|{{ s.startswith('a') }}{{ s.endswith('c') }}|{{ s.upper() }}|{{ '--x--'.strip('-') }}{{ '--x--'.lstrip('-') }}{{ '--x--'.rstrip('-') }}|{{ s.replace(',', ';') }}|{{ s.find('b') }}{{ s.find('z') }}|{{ s.count(',') }}|{{ '{} and {}'.format('x', 'y') }}|{{ '-'.join(['a', 'b']) }}|{{ 'hello world'.title() }}|{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}|{{ [1, 2, 3, 4][1:] }}{{ [1, 2, 3, 4][-2:] }}{{ [1,2,3][5] is defined }}",
     {"s": "a,b,c"}),
    ("undefined", "[{{ missing }}]{{ missing is defined }}{{ missing | default('d') }}{{ '' | default('e', true) }}{{ none | default('f') }}{{ missing | length }}{% for x in missing %}never{% endfor %}{{ d.nope is defined }}{{ (missing or 'g') }}{{ missing ~ 'h' }}", {"d": {}}),
    ("undefined_in", "{{ 'a' in nope }}|{{ 'a' not in nope }}|{{ nope in [1] }}|{{ nope in {} }}", {}),
    ("undefined_attr_error", "{{ missing.attr }}", {}),
    ("globals", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}|{% set j = joiner('+') %}{% for x in range(3) %}{{ j() }}{{ x }}{% endfor %}|{{ dict(a=1, b=2) }}|{{ range(5) | list }}{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}|{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ namespace(a=1).a }}", {}),
    ("raise", "{% if x > 1 %}{{ raise_exception('x too big: ' ~ x) }}{% endif %}", {"x": 5}),
    ("indent_filter", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}", {}),
    ("tojson_kwargs", "{{ v | tojson }}|{{ v | tojson(ensure_ascii=true) }}|{{ v | tojson(indent=4, sort_keys=true) }}|{{ [] | tojson(indent=2) }}|{{ 'é\\u0001\\n' | tojson }}",
     {"v": {"k": "é🎉", "n": [1, 2.5, None, True], "e": {}}}),
    ("with_and_ternary", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}|{{ 'yes' if x else 'no' }}{{ 'only' if x }}[{{ 'only' if not x }}]", {"x": True}),
    ("string_concat", "{{ 'a' ~ 1 ~ none ~ true }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 'a' 'b' }}|{{ \"it's\" }}|{{ 'tab\\there' }}|{{ '\\u00e9\\x41' }}", {}),
]


def main():
    env = make_env()
    goldens = []
    inkling_path = os.path.join(ROOT, "data", "inkling_chat_template.jinja")
    with open(inkling_path, encoding="utf-8") as f:
        inkling = f.read()
    for name, ctx in inkling_cases():
        goldens.append(dict({"template": "data/inkling_chat_template.jinja", "name": name, "context": ctx},
                            **render(env, inkling, ctx)))
    for tname, tokens, args_kind in REAL_TEMPLATES:
        rel = "tests/data/templates/%s.jinja" % tname
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            source = f.read()
        for name, ctx in shared_cases(args_kind) + template_extra_cases(tname, args_kind):
            ctx = copy.deepcopy(ctx)
            if tname in EMPTY_STRING_CONTENT:  # these templates test `'</think>' in content`: pass "" not None
                for m in ctx["messages"]:
                    if "content" in m and m["content"] is None:
                        m["content"] = ""
            if tname == "command_r_plus_tool_use" and "tools" in ctx:
                ctx["tools"] = [DESCRIBED_WEATHER_TOOL if t == WEATHER_TOOL else t for t in ctx["tools"]]
            for k, v in tokens.items():
                if v is not None:
                    ctx.setdefault(k, v)
            goldens.append(dict({"template": rel, "name": name, "context": ctx}, **render(env, source, ctx)))
    for name, source, ctx in FEATURE_SNIPPETS:
        goldens.append(dict({"template": "inline", "source": source, "name": name, "context": ctx}, **render(env, source, ctx)))
    out = os.path.join(DATA, "goldens.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "fixed_now": FIXED_NOW.isoformat(), "cases": goldens},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for g in goldens if "error" in g)
    print("wrote %d cases (%d expected errors) to %s" % (len(goldens), errors, out))


if __name__ == "__main__":
    main()
