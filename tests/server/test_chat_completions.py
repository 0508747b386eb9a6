"""POST /v1/chat/completions through the official openai client and raw HTTP."""
import json

import openai
import pytest
import requests

from conftest import REASONING_TEXT_TWO_CALLS, TOOLS, answer

MARKER = "<|"


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def chat(client, script, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    kw.setdefault("model", "inkling")
    kw.setdefault("max_tokens", 128)
    return client.chat.completions.create(extra_body={"inkling_test_script": script, **kw.pop("extra", {})}, **kw)


def collect_stream(stream):
    content, reasoning, reasoning_alt, calls, finish, usage = "", "", "", {}, None, None
    fragments = {}
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        extra = delta.model_extra or {}
        reasoning += extra.get("reasoning_content") or ""
        reasoning_alt += extra.get("reasoning") or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
            if call.id:
                assert entry["id"] is None, "id sent twice"
                entry["id"] = call.id
            if call.function and call.function.name:
                assert entry["name"] is None, "name sent twice"
                entry["name"] = call.function.name
            if call.function and call.function.arguments:
                entry["arguments"] += call.function.arguments
                fragments[call.index] = fragments.get(call.index, 0) + 1
        if choice.finish_reason:
            finish = choice.finish_reason
    return dict(content=content, reasoning=reasoning, reasoning_alt=reasoning_alt, calls=calls, finish=finish,
                usage=usage, fragments=fragments)


def test_plain_answer_with_reasoning_split(client):
    r = chat(client, answer("Paris is the capital.", reasoning="Easy question."))
    m = r.choices[0].message
    assert m.content == "Paris is the capital."
    assert m.model_extra["reasoning_content"] == "Easy question."
    assert m.model_extra["reasoning"] == "Easy question."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0
    assert r.usage.completion_tokens_details.reasoning_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streaming_matches_non_streaming(client):
    script = REASONING_TEXT_TWO_CALLS
    full = chat(client, script, tools=TOOLS)
    got = collect_stream(chat(client, script, tools=TOOLS, stream=True, stream_options={"include_usage": True}))
    m = full.choices[0].message
    assert got["content"] == m.content == "Let me check."
    assert got["reasoning"] == got["reasoning_alt"] == m.model_extra["reasoning_content"] == "The user wants weather."
    assert [c.function.name for c in m.tool_calls] == ["get_weather", "get_time"]
    assert [got["calls"][i]["name"] for i in (0, 1)] == ["get_weather", "get_time"]
    for i, call in enumerate(m.tool_calls):
        assert json.loads(call.function.arguments) == json.loads(got["calls"][i]["arguments"])
        assert call.type == "function" and call.id
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris"}
    # The arguments arrive in fragments as they are generated, not in one piece at the end.
    assert got["fragments"][0] > 1 and got["fragments"][1] > 1
    assert full.choices[0].finish_reason == got["finish"] == "tool_calls"
    assert got["usage"].completion_tokens == full.usage.completion_tokens


def test_markers_never_visible(client):
    scripts = [
        REASONING_TEXT_TWO_CALLS,
        "<|content_text|>no reasoning here<|end_message|><|content_model_end_sampling|>",
        'before<|end_message|><|message_model|>get_weather<|content_invoke_tool_json|>{"name":"get_weather","args":{}}'
        "<|end_message|><|message_model|><|content_text|>after<|end_message|><|content_model_end_sampling|>",
    ]
    for script in scripts:
        for effort in ("none", "high"):
            full = chat(client, script, tools=TOOLS, reasoning_effort=effort)
            m = full.choices[0].message
            assert MARKER not in (m.content or "") and MARKER not in m.model_extra.get("reasoning_content", "")
            got = collect_stream(chat(client, script, tools=TOOLS, stream=True, reasoning_effort=effort))
            assert MARKER not in got["content"] and MARKER not in got["reasoning"]


def test_text_before_and_after_a_call_is_kept(client):
    script = ('before<|end_message|><|message_model|>get_weather<|content_invoke_tool_json|>'
              '{"name":"get_weather","args":{"city":"Oslo"}}<|end_message|>'
              "<|message_model|><|content_text|> after<|end_message|><|content_model_end_sampling|>")
    m = chat(client, script, tools=TOOLS).choices[0].message
    assert m.content == "before after"
    assert m.tool_calls[0].function.name == "get_weather"


def test_malformed_call_comes_back_as_content(client, server):
    script = ('<|content_text|>ok<|end_message|><|message_model|>get_weather<|content_invoke_tool_json|>'
              '{"name": "get_weather", "args": {"city": <|end_message|><|content_model_end_sampling|>')
    r = chat(client, script, tools=TOOLS)
    m = r.choices[0].message
    assert not m.tool_calls
    assert m.content.startswith("ok") and '"city":' in m.content
    assert server.wait_log(r"warning: request \d+: malformed tool call to get_weather")


def test_html_quote_entity_in_call_is_repaired(client):
    script = ('<|message_model|>get_weather<|content_invoke_tool_json|>{&quot;name&quot;:&quot;get_weather&quot;,'
              '&quot;args&quot;:{&quot;city&quot;:&quot;Rome&quot;}}<|end_message|><|content_model_end_sampling|>')
    m = chat(client, script, tools=TOOLS).choices[0].message
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Rome"}


def test_parallel_tool_calls_false_stops_after_first(client):
    r = chat(client, REASONING_TEXT_TWO_CALLS, tools=TOOLS, parallel_tool_calls=False)
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather"]
    assert r.choices[0].finish_reason == "tool_calls"
    got = collect_stream(chat(client, REASONING_TEXT_TWO_CALLS, tools=TOOLS, parallel_tool_calls=False, stream=True))
    assert list(got["calls"]) == [0]


def test_tool_choice_none_turns_calls_into_text(client):
    m = chat(client, REASONING_TEXT_TWO_CALLS, tools=TOOLS, tool_choice="none").choices[0].message
    assert not m.tool_calls
    assert '"get_weather"' in m.content


def test_tool_round_trip_renders_history(client, server):
    first = chat(client, REASONING_TEXT_TWO_CALLS, tools=TOOLS).choices[0].message
    history = [{"role": "user", "content": "weather and time?"},
               {"role": "assistant", "content": first.content, "reasoning_content": first.model_extra["reasoning_content"],
                "tool_calls": [c.model_dump() for c in first.tool_calls]},
               {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "sunny"},
               {"role": "tool", "tool_call_id": first.tool_calls[1].id, "content": "12:00"}]
    second = chat(client, answer("Sunny at noon."), tools=TOOLS, messages=history)
    assert second.choices[0].message.content == "Sunny at noon."
    prompt = server.post("/apply-template", {"messages": history, "tools": TOOLS}).json()["prompt"]
    assert "<|message_tool|>get_weather<|content_text|>sunny<|end_message|>" in prompt
    assert "<|message_tool|>get_time<|content_text|>12:00<|end_message|>" in prompt
    assert '<|message_model|>get_weather<|content_invoke_tool_json|>{"name":"get_weather","args":{"city":"Paris"}}' in prompt
    assert "<|content_thinking|>The user wants weather.<|end_message|>" in prompt


def test_both_reasoning_names_render_the_same_prompt(server):
    base = [{"role": "user", "content": "q"}]
    a = server.post("/apply-template", {"messages": base + [{"role": "assistant", "content": "x", "reasoning_content": "r"}]})
    b = server.post("/apply-template", {"messages": base + [{"role": "assistant", "content": "x", "reasoning": "r"}]})
    assert a.status_code == b.status_code == 200
    assert a.json()["prompt"] == b.json()["prompt"]
    assert "<|content_thinking|>r<|end_message|>" in a.json()["prompt"]


def test_multi_turn_prompt_extends_previous_output(client, server):
    """The next turn's prompt starts with the previous prompt plus exactly the tokens generated."""
    msgs = [{"role": "user", "content": "hello"}]
    script = answer("Hi there.", reasoning="Greeting.")
    r = chat(client, script, messages=msgs, reasoning_effort="low")
    m = r.choices[0].message
    p1 = server.post("/apply-template", {"messages": msgs, "reasoning_effort": "low"}).json()["prompt"]
    msgs2 = msgs + [{"role": "assistant", "content": m.content, "reasoning": m.model_extra["reasoning"]}]
    p2 = server.post("/apply-template", {"messages": msgs2 + [{"role": "user", "content": "more"}],
                                         "reasoning_effort": "low"}).json()["prompt"]
    assert p2.startswith(p1 + script)


def test_effort_sources_and_invalid_effort(client, server):
    prompts = {}
    for name, body in {
        "reasoning_effort": {"reasoning_effort": "minimal"},
        "reasoning.effort": {"reasoning": {"effort": "minimal"}},
        "kwargs": {"chat_template_kwargs": {"reasoning_effort": "minimal"}},
    }.items():
        r = server.post("/apply-template", {"messages": [{"role": "user", "content": "q"}], **body})
        assert r.status_code == 200, r.text
        prompts[name] = r.json()["prompt"]
    assert len(set(prompts.values())) == 1
    assert "Thinking effort level: 0.1" in prompts["kwargs"]
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}], "reasoning_effort": "ultra"})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    for level in ("none", "minimal", "low", "medium", "high", "xhigh", "max"):
        assert level in message


def test_stop_strings_non_streaming_and_streaming(client):
    script = answer("one two STOP three")
    r = chat(client, script, stop=["STOP"])
    assert r.choices[0].message.content == "one two "
    assert r.choices[0].finish_reason == "stop"
    got = collect_stream(chat(client, script, stop=["STOP", "zzz"], stream=True))
    assert got["content"] == "one two "
    # A partial match that never completes is released.
    got = collect_stream(chat(client, answer("abc ST end"), stop=["STOP"], stream=True))
    assert got["content"] == "abc ST end"


def test_seed_reproducible_streaming_or_not(client):
    kw = dict(temperature=1.0, top_p=0.9, seed=1234, max_tokens=24)
    a = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], **kw)
    b = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], **kw)
    s = collect_stream(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                      stream=True, **kw))
    assert a.usage.completion_tokens == 24 or a.choices[0].finish_reason != "length"
    assert a.choices[0].message.content == b.choices[0].message.content == s["content"]
    c = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                       **{**kw, "seed": 99})
    # A different seed over a random model diverges somewhere in 24 tokens.
    assert (c.choices[0].message.content, c.usage.completion_tokens) != (a.choices[0].message.content, -1)


def test_logprobs(client):
    r = chat(client, answer("Hello world"), logprobs=True, top_logprobs=5)
    entries = r.choices[0].logprobs.content
    assert "".join(e.token for e in entries) == "Hello world"
    for e in entries:
        assert e.logprob <= 0.0
        assert len(e.top_logprobs) == 5
        values = [t.logprob for t in e.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert e.logprob <= values[0] + 1e-6
    greedy = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=6,
                                            temperature=0, logprobs=True, top_logprobs=3)
    for e in greedy.choices[0].logprobs.content:  # greedy picks the most likely token
        assert abs(e.logprob - e.top_logprobs[0].logprob) < 1e-5
    bad = requests.post(client.base_url.__str__().rstrip("/") + "/chat/completions",
                        json={"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21})
    assert bad.status_code == 400


def test_max_tokens_finish_length(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=3,
                                       temperature=0, extra_body={"inkling_test_script": "<|content_text|>a b c d e f"})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_completion_tokens=2,
                                       temperature=0)
    assert r.usage.completion_tokens <= 2


def test_context_end_is_finish_length(server):
    # ctx 512: a prompt of ~500 tokens leaves room for a few tokens only.
    words = " ".join(["hello"] * 480)
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": words}], "temperature": 0,
                                             "inkling_test_script": "<|content_text|>" + "la " * 100})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] == 512


def test_prompt_longer_than_context_is_400(server):
    words = " ".join(["hello"] * 900)
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": words}]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["n_ctx"] == 512 and err["n_prompt_tokens"] > 512


def test_n_must_be_one_and_unknown_fields_ignored(server):
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                                             "some_future_field": {"a": 1}, "user": "me"})
    assert r.status_code == 200


def test_wrong_types_are_400_naming_the_field(server):
    cases = [
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": TOOLS,
          "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "x"}], "top_p": 7}, None),
    ]
    for body, param in cases:
        r = server.post("/v1/chat/completions", body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"]
        if param:
            assert err["param"] == param, (body, err)


def test_bad_json_and_not_an_object(server):
    for data in (b"{not json", b"[1, 2]", b""):
        r = requests.post(server.url + "/v1/chat/completions", data=data, headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "invalid_request_error"


def test_test_script_needs_flag(keyed_server):
    r = keyed_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                   "inkling_test_script": "x"},
                          headers={"Authorization": "Bearer sekrit-key"})
    assert r.status_code == 400
    assert "--test-scripts" in r.json()["error"]["message"]


def test_named_tool_choice_forces_the_call(client):
    # The script only writes the arguments; the header is forced.
    # The model "wants" to call get_weather; the header is forced to get_time, the model writes the JSON.
    r = chat(client, '<|message_model|>get_weather<|content_invoke_tool_json|>{"name":"get_time","args":{"city":"Oslo"}}'
             '<|end_message|><|content_model_end_sampling|>', tools=TOOLS,
             tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = r.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"]
    assert json.loads(calls[0].function.arguments) == {"city": "Oslo"}
    assert r.choices[0].finish_reason == "tool_calls"


def test_required_tool_choice_after_reasoning(client):
    # The script stops reasoning and would end the turn; the call header follows the reasoning.
    script = ('<|content_thinking|>I must call a tool.<|content_model_end_sampling|>'
              '{"name":"get_time","args":{"zone":"UTC"}}<|end_message|><|content_model_end_sampling|>')
    for stream in (False, True):
        if stream:
            got = collect_stream(chat(client, script, tools=TOOLS, tool_choice="required", stream=True))
            name, args, reasoning = got["calls"][0]["name"], got["calls"][0]["arguments"], got["reasoning"]
        else:
            m = chat(client, script, tools=TOOLS, tool_choice="required").choices[0].message
            name, args, reasoning = m.tool_calls[0].function.name, m.tool_calls[0].function.arguments, \
                m.model_extra["reasoning_content"]
        assert name in ("get_weather", "get_time")  # the header's name; the JSON then names get_time
        assert json.loads(args) == {"zone": "UTC"}
        assert reasoning == "I must call a tool."


def test_required_tool_choice_replaces_a_plain_answer(client, server):
    # The model "wants" to answer in text; the call header is written where the answer would
    # begin. This script then writes no JSON, so the started call is malformed and logged.
    r = chat(client, "<|content_text|>No tools today.<|end_message|><|content_model_end_sampling|>", tools=TOOLS,
             tool_choice="required", max_tokens=40)
    m = r.choices[0].message
    assert MARKER not in (m.content or "")
    assert server.wait_log(r"malformed tool call to get_(weather|time)")


def test_required_without_tools_is_400(server):
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"


def test_deeply_nested_body_is_400_and_server_lives(server):
    body = ('{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f",'
            '"parameters":' + '{"a":' * 5000 + "1" + "}" * 5000 + "}}]}")
    r = requests.post(server.url + "/v1/chat/completions", data=body)
    assert r.status_code == 400 and "nests deeper" in r.json()["error"]["message"]
    assert server.get("/health").status_code == 200


def test_prompt_cache_next_turn_reuses_state_and_matches_cold_logits(client, server):
    first_messages = [{"role": "user", "content": "hello, a cache test"}]
    first = chat(client, answer("Hi there.", reasoning="Greeting."), messages=first_messages, reasoning_effort="low")
    m = first.choices[0].message
    history = first_messages + [{"role": "assistant", "content": m.content, "reasoning": m.model_extra["reasoning"]},
                                {"role": "user", "content": "tell me more"}]
    kw = dict(model="m", messages=history, max_tokens=8, temperature=0, logprobs=True, top_logprobs=5,
              reasoning_effort="low")
    warm = client.chat.completions.create(**kw)
    cold = client.chat.completions.create(**kw, extra_body={"cache_prompt": False})
    # The kept state held turn 1's prompt and every generated token but the last (the end token,
    # sampled and never fed).
    assert warm.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens + first.usage.completion_tokens - 1
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    assert warm.usage.prompt_tokens == cold.usage.prompt_tokens
    w, c = warm.choices[0].logprobs.content, cold.choices[0].logprobs.content
    assert [e.token for e in w] == [e.token for e in c]
    # f32 rounding at most: the cold run prefills the positions turn 1 decoded, and the prefill
    # matmuls sum in another order (bit for bit with --batch-invariant, test_batching.py).
    for a, b in zip(w, c):
        assert abs(a.logprob - b.logprob) < 1e-3
        top_a = {t.token: t.logprob for t in a.top_logprobs}
        top_b = {t.token: t.logprob for t in b.top_logprobs}
        # Two near-tied alternatives may trade the last place; every token both lists hold agrees.
        assert len(top_a.keys() & top_b.keys()) >= len(top_a) - 1
        for token in top_a.keys() & top_b.keys():
            assert abs(top_a[token] - top_b[token]) < 1e-3, token
    metrics = server.get("/metrics").text
    assert float(metrics.split("\ninkling_prompt_cache_hits_total ")[1].split()[0]) >= 1


def test_prompt_cache_not_used_when_the_prefix_diverges(client):
    msgs = [{"role": "user", "content": "divergence test one"}]
    first = chat(client, answer("Alpha."), messages=msgs)
    edited = [{"role": "user", "content": "divergence test two"}, {"role": "assistant", "content": "Alpha."},
              {"role": "user", "content": "next"}]
    r = chat(client, answer("Beta."), messages=edited)
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    assert r.choices[0].message.content == "Beta."
    assert first.choices[0].message.content == "Alpha."
