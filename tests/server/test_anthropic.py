"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API.

The model's output is scripted (`inkling_test_script`), so every assertion on content is exact.
Prompt-side checks compare token counts with the same conversation rendered through
/apply-template (a chat-completions body) and /tokenize: equal counts mean the Anthropic request
reached the chat template as that conversation.
"""
import json
import re
import time

import anthropic
import pytest
import requests

from conftest import REASONING_TEXT_TWO_CALLS, TOOLS, answer, script, wait_new_log, sse_events

MARKER = re.compile(r"<\|[a-z_]+\|>")
MODEL = "tiny"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
# TOOLS in the Anthropic shape: {name, description, input_schema}.
A_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"]} for t in TOOLS]
MALFORMED = '<|message_model|>f<|content_invoke_tool_json|>{"name": broken<|end_message|><|content_model_end_sampling|>'


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=60)


def body(**kw):
    out = {"model": MODEL, "max_tokens": 64, "messages": USER}
    out.update(kw)
    return out


def assert_no_markers(blocks):
    """No <|...|> special-token text in any visible text or thinking."""
    for b in blocks:
        b = b if isinstance(b, dict) else b.model_dump()
        for key in ("text", "thinking"):
            if key in b and b[key] is not None:
                assert not MARKER.search(b[key]), f"marker in {key}: {b[key]!r}"


def assert_anthropic_error(r, status=400, kind="invalid_request_error"):
    assert r.status_code == status, r.text
    data = r.json()
    assert data["type"] == "error"
    assert data["error"]["type"] == kind
    assert isinstance(data["error"]["message"], str) and data["error"]["message"]
    return data["error"]["message"]


def count_tokens(server, **kw):
    r = server.post("/v1/messages/count_tokens", {"model": MODEL, **kw})
    assert r.status_code == 200, r.text
    return r.json()["input_tokens"]


def chat_prompt_tokens(server, chat_body):
    """Tokens of a chat-completions conversation rendered by the server's template."""
    r = server.post("/apply-template", chat_body)
    assert r.status_code == 200, r.text
    prompt = r.json()["prompt"]
    t = server.post("/tokenize", {"content": prompt})
    assert t.status_code == 200, t.text
    return len(t.json()["tokens"])


# ---------------------------------------------------------------- non-streaming


def test_text_answer_end_turn(client):
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER,
                               extra_body={"temperature": 0, **script(answer("It is sunny in Paris."))})
    assert m.type == "message" and m.role == "assistant"
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == "It is sunny in Paris."
    assert m.stop_reason == "end_turn"
    assert m.stop_sequence is None
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert_no_markers(m.content)


def test_thinking_block_out(client):
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER,
                               extra_body=script(answer("Sunny.", reasoning="Paris is in France.")))
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == "Paris is in France."
    assert isinstance(m.content[0].signature, str)
    assert m.content[1].text == "Sunny."
    assert m.stop_reason == "end_turn"
    assert_no_markers(m.content)


def test_system_as_string_and_as_blocks(server, client):
    system = "You are a terse weather bot."
    as_string = count_tokens(server, messages=USER, system=system)
    as_blocks = count_tokens(server, messages=USER, system=[{"type": "text", "text": system}])
    without = count_tokens(server, messages=USER)
    assert as_string == as_blocks > without
    expected = chat_prompt_tokens(server, {"messages": [{"role": "system", "content": system}, *USER]})
    assert as_string == expected
    for s in (system, [{"type": "text", "text": system}]):
        m = client.messages.create(model=MODEL, max_tokens=32, messages=USER, system=s,
                                   extra_body=script(answer("Sunny.")))
        assert m.content[0].text == "Sunny."
        assert m.usage.input_tokens == as_string


def test_system_with_a_non_text_block_is_400(server):
    r = server.post("/v1/messages", body(system=[{"type": "image", "source": {}}]))
    assert_anthropic_error(r)


def test_stop_reason_max_tokens(client):
    m = client.messages.create(model=MODEL, max_tokens=3, messages=USER,
                               extra_body=script(answer("one two three four five six seven")))
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 3
    # <|content_text|> then two words.
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == "one two"


def test_stop_reason_stop_sequence(client):
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER, stop_sequences=["NEVER", "STOP"],
                               extra_body=script(answer("alpha beta STOP gamma")))
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == "STOP"
    assert m.content[0].text == "alpha beta "


def test_stop_sequence_not_matched_is_end_turn(client):
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER, stop_sequences=["ZZZ"],
                               extra_body=script(answer("alpha beta")))
    assert m.stop_reason == "end_turn"
    assert m.stop_sequence is None
    assert m.content[0].text == "alpha beta"


def test_two_tool_use_blocks_stop_reason_tool_use(client):
    m = client.messages.create(model=MODEL, max_tokens=128, messages=USER, tools=A_TOOLS,
                               extra_body=script(REASONING_TEXT_TWO_CALLS))
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert m.content[0].thinking == "The user wants weather."
    assert m.content[1].text == "Let me check."
    weather, time_ = m.content[2], m.content[3]
    assert (weather.name, weather.input) == ("get_weather", {"city": "Paris"})
    assert (time_.name, time_.input) == ("get_time", {"zone": "CET"})
    assert weather.id and time_.id and weather.id != time_.id
    assert m.stop_reason == "tool_use"
    assert_no_markers(m.content)


def test_tool_round_trip(server, client):
    first = client.messages.create(model=MODEL, max_tokens=128, messages=USER, tools=A_TOOLS,
                                   extra_body=script(REASONING_TEXT_TWO_CALLS))
    assert first.stop_reason == "tool_use"
    calls = [b for b in first.content if b.type == "tool_use"]
    assistant = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]}
    results = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": calls[0].id, "content": "sunny, 21 degrees"},
        {"type": "tool_result", "tool_use_id": calls[1].id, "content": [{"type": "text", "text": "14:05"}]},
    ]}
    conversation = [*USER, assistant, results]

    second = client.messages.create(model=MODEL, max_tokens=64, messages=conversation, tools=A_TOOLS,
                                    extra_body=script(answer("It is sunny and 14:05 in Paris.")))
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == "It is sunny and 14:05 in Paris."

    # The second prompt holds the first turn and both results: longer, and exactly the chat form.
    n_first = count_tokens(server, messages=USER, tools=A_TOOLS)
    n_second = count_tokens(server, messages=conversation, tools=A_TOOLS)
    assert n_first == first.usage.input_tokens
    # Anthropic counts cache reads apart: the kept state of turn 1 served most of turn 2.
    assert n_second == second.usage.input_tokens + second.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens > 0
    assert n_second > n_first
    chat = {"tools": TOOLS, "messages": [
        *USER,
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "The user wants weather.",
         "tool_calls": [{"id": c.id, "type": "function",
                         "function": {"name": c.name, "arguments": json.dumps(c.input, separators=(",", ":"))}}
                        for c in calls]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny, 21 degrees"},
        {"role": "tool", "tool_call_id": calls[1].id, "content": "14:05"},
    ]}
    assert n_second == chat_prompt_tokens(server, chat)
    # A longer result makes a longer prompt: the result's text is in it.
    longer = [*USER, assistant, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": calls[0].id, "content": "sunny, 21 degrees, light wind from the west"},
        results["content"][1]]}]
    assert count_tokens(server, messages=longer, tools=A_TOOLS) > n_second


def test_tool_choice_undeclared_name_is_400(server, client):
    r = server.post("/v1/messages", body(tools=A_TOOLS, tool_choice={"type": "tool", "name": "get_stock_price"}))
    message = assert_anthropic_error(r)
    assert "get_stock_price" in message
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=16, messages=USER, tools=A_TOOLS,
                               tool_choice={"type": "tool", "name": "get_stock_price"})


def test_tool_choice_declared_name_is_accepted(client):
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=A_TOOLS,
                               tool_choice={"type": "tool", "name": "get_weather"},
                               extra_body=script('<|message_model|>get_weather<|content_invoke_tool_json|>'
                                                 '{"name":"get_weather","args":{"city":"Oslo"}}<|end_message|>'
                                                 '<|content_model_end_sampling|>'))
    assert m.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in m.content] == [("tool_use", "get_weather", {"city": "Oslo"})]


def test_max_tokens_missing_is_400(server):
    r = server.post("/v1/messages", {"model": MODEL, "messages": USER})
    message = assert_anthropic_error(r)
    assert "max_tokens" in message


def test_malformed_json_body_is_400(server):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = requests.post(server.url + path, data=b'{"model": "tiny", "messages": [', timeout=30,
                          headers={"content-type": "application/json"})
        assert_anthropic_error(r)


def test_messages_missing_is_400(server):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = server.post(path, {"model": MODEL, "max_tokens": 16})
        message = assert_anthropic_error(r)
        assert "messages" in message


# ---------------------------------------------------------------- thinking parameter


def test_thinking_param_changes_the_prompt(server, client):
    default = count_tokens(server, messages=USER)
    disabled = count_tokens(server, messages=USER, thinking={"type": "disabled"})
    enabled = count_tokens(server, messages=USER, thinking={"type": "enabled", "budget_tokens": 1024})
    assert disabled != enabled
    # disabled -> effort none; budget 1024 -> low; no thinking -> the template's default.
    assert disabled == chat_prompt_tokens(server, {"messages": USER, "reasoning_effort": "none"})
    assert enabled == chat_prompt_tokens(server, {"messages": USER, "reasoning_effort": "low"})
    assert default == chat_prompt_tokens(server, {"messages": USER})
    # The SDK's count_tokens and /v1/messages agree.
    assert client.messages.count_tokens(model=MODEL, messages=USER, thinking={"type": "disabled"}).input_tokens == disabled
    m = client.messages.create(model=MODEL, max_tokens=2048, messages=USER,
                               thinking={"type": "enabled", "budget_tokens": 1024},
                               extra_body=script(answer("Sunny.", reasoning="Check.")))
    assert m.usage.input_tokens == enabled
    assert [b.type for b in m.content] == ["thinking", "text"]
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER, thinking={"type": "disabled"},
                               extra_body=script(answer("Sunny.")))
    assert m.usage.input_tokens == disabled


def test_thinking_budget_below_1024_is_400(server):
    thinking = {"type": "enabled", "budget_tokens": 1023}
    assert_anthropic_error(server.post("/v1/messages", body(max_tokens=4096, thinking=thinking)))
    assert_anthropic_error(server.post("/v1/messages/count_tokens", {"model": MODEL, "messages": USER, "thinking": thinking}))


def test_thinking_budget_not_below_max_tokens_is_400(server):
    r = server.post("/v1/messages", body(max_tokens=1024, thinking={"type": "enabled", "budget_tokens": 1024}))
    assert "max_tokens" in assert_anthropic_error(r)


# ---------------------------------------------------------------- streaming


def test_stream_with_the_sdk(client):
    with client.messages.stream(model=MODEL, max_tokens=64, messages=USER,
                                extra_body=script(answer("Sunny and warm.", reasoning="Easy."))) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "Sunny and warm."
    assert len(pieces) > 1  # token by token
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Easy."
    assert final.content[1].text == "Sunny and warm."
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0
    assert_no_markers(final.content)


def test_stream_sdk_tool_use(client):
    with client.messages.stream(model=MODEL, max_tokens=128, messages=USER, tools=A_TOOLS,
                                extra_body=script(REASONING_TEXT_TWO_CALLS)) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [
        ("thinking", None), ("text", None), ("tool_use", {"city": "Paris"}), ("tool_use", {"zone": "CET"})]


def test_stream_raw_event_order(server):
    r = server.post("/v1/messages", body(max_tokens=128, tools=A_TOOLS, stream=True,
                                         **script(REASONING_TEXT_TWO_CALLS)))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in sse_events(r) if e[0] != "ping"]
    names = [n for n, _ in events]

    assert names[0] == "message_start"
    start = events[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
    assert names[-2:] == ["message_delta", "message_stop"]
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["delta"]["stop_sequence"] is None
    assert delta["usage"]["output_tokens"] > 0

    # Between them: per block, exactly start, deltas, stop, with indexes 0, 1, 2, ...
    blocks, i = [], 1
    while i < len(events) - 2:
        name, data = events[i]
        assert name == "content_block_start", names
        index = data["index"]
        assert index == len(blocks)
        block = dict(data["content_block"])
        i += 1
        deltas = []
        while events[i][0] == "content_block_delta":
            assert events[i][1]["index"] == index
            deltas.append(events[i][1]["delta"])
            i += 1
        assert events[i] == ("content_block_stop", {"type": "content_block_stop", "index": index})
        i += 1
        blocks.append((block, deltas))

    assert [b["type"] for b, _ in blocks] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, weather, time_ = blocks
    assert {d["type"] for d in thinking[1]} <= {"thinking_delta", "signature_delta"}
    assert "".join(d.get("thinking", "") for d in thinking[1]) == "The user wants weather."
    assert {d["type"] for d in text[1]} == {"text_delta"}
    assert "".join(d["text"] for d in text[1]) == "Let me check."
    for (block, deltas), name, args in ((weather, "get_weather", {"city": "Paris"}), (time_, "get_time", {"zone": "CET"})):
        assert block["name"] == name and block["input"] == {} and block["id"]
        assert {d["type"] for d in deltas} == {"input_json_delta"}
        assert json.loads("".join(d["partial_json"] for d in deltas)) == args
    assert weather[0]["id"] != time_[0]["id"]
    for _, deltas in blocks:
        for d in deltas:
            for key in ("text", "thinking"):
                assert not MARKER.search(d.get(key, ""))


def test_stream_input_json_delta_fragments(server, client):
    args = {"city": "Saint-\u00c9tienne", "days": [1, 2, 3], "detail": {"wind": True, "note": "a \"quoted\" word"}}
    call = json.dumps({"name": "get_weather", "args": args}, ensure_ascii=False)
    s = f"<|message_model|>get_weather<|content_invoke_tool_json|>{call}<|end_message|><|content_model_end_sampling|>"
    r = server.post("/v1/messages", body(max_tokens=256, tools=A_TOOLS, stream=True, **script(s)))
    assert r.status_code == 200, r.text
    events = sse_events(r)
    fragments = [d["delta"]["partial_json"] for n, d in events
                 if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"]
    assert len(fragments) > 1
    assert json.loads("".join(fragments)) == args
    assert [d["delta"]["stop_reason"] for n, d in events if n == "message_delta"] == ["tool_use"]
    m = client.messages.create(model=MODEL, max_tokens=256, messages=USER, tools=A_TOOLS, extra_body=script(s))
    assert [b.input for b in m.content if b.type == "tool_use"] == [args]


def test_stream_stop_sequence(server):
    r = server.post("/v1/messages", body(stream=True, stop_sequences=["STOP"], **script(answer("alpha beta STOP gamma"))))
    events = sse_events(r)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "alpha beta "
    delta = [d for n, d in events if n == "message_delta"]
    assert len(delta) == 1
    assert delta[0]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "STOP"}
    assert events[-1][0] == "message_stop"


def test_stream_max_tokens(server):
    r = server.post("/v1/messages", body(max_tokens=4, stream=True, **script(answer("one two three four five six"))))
    events = sse_events(r)
    delta = [d for n, d in events if n == "message_delta"]
    assert delta[0]["delta"]["stop_reason"] == "max_tokens"
    assert delta[0]["usage"]["output_tokens"] == 4


def test_stream_error_before_the_stream_is_a_json_400(server):
    r = server.post("/v1/messages", {"model": MODEL, "messages": USER, "stream": True})
    assert_anthropic_error(r)


# ---------------------------------------------------------------- malformed calls, markers


def test_malformed_tool_call_comes_back_as_text(server, client):
    before = len(server.lines)
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=A_TOOLS, extra_body=script(MALFORMED))
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == '{"name": broken'
    assert m.stop_reason == "end_turn"
    assert_no_markers(m.content)
    assert wait_new_log(server, before, r"warning.*malformed tool call to f\b"), server.log()


def test_malformed_tool_call_streamed_as_text(server):
    r = server.post("/v1/messages", body(tools=A_TOOLS, stream=True, **script(MALFORMED)))
    events = [e for e in sse_events(r) if e[0] != "ping"]
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["text"]
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == '{"name": broken'
    assert [d["delta"]["stop_reason"] for n, d in events if n == "message_delta"] == ["end_turn"]


def test_malformed_call_after_its_args_is_text_only(server, client):
    """The call's "args" object is complete (and was streamed) before the JSON breaks: the whole
    call is still malformed, so it must come back as text only, not as a tool_use block too."""
    s = ('<|message_model|>get_weather<|content_invoke_tool_json|>{"name":"get_weather","args":{"city":"Paris"}} oops'
         '<|end_message|><|content_model_end_sampling|>')
    before = len(server.lines)
    m = client.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=A_TOOLS, extra_body=script(s))
    assert wait_new_log(server, before, r"warning.*malformed tool call to get_weather"), server.log()
    assert m.stop_reason == "end_turn"
    assert [b.type for b in m.content] == ["text"], m.content
    assert m.content[0].text == '{"name":"get_weather","args":{"city":"Paris"}} oops'


def test_markers_never_in_visible_text(client):
    # Scripted: markers the parser must swallow (an xml block, a user block, a stray end marker).
    s = ("<|content_thinking|>think<|end_message|><|message_model|><|content_text|>shown<|end_message|>"
         "<|message_model|><|content_xml|><x>hidden</x><|end_message|>"
         "<|message_user|><|content_text|>not mine<|end_message|>"
         "<|message_model|><|content_text|> too<|end_message|><|content_model_end_sampling|>")
    m = client.messages.create(model=MODEL, max_tokens=128, messages=USER, extra_body=script(s))
    assert_no_markers(m.content)
    assert "".join(b.text for b in m.content if b.type == "text") == "shown too"
    # Unscripted: random weights write whatever ids they like, special ones included.
    for seed in range(4):
        m = client.messages.create(model=MODEL, max_tokens=48, messages=USER,
                                   extra_body={"seed": seed, "temperature": 1.0})
        assert m.usage.output_tokens > 0
        assert_no_markers(m.content)


# ---------------------------------------------------------------- usage vs count_tokens


def test_usage_input_tokens_equals_count_tokens(server, client):
    request = dict(messages=[*USER, {"role": "assistant", "content": "Which unit?"},
                             {"role": "user", "content": [{"type": "text", "text": "Celsius."}]}],
                   system=[{"type": "text", "text": "Be brief."}], tools=A_TOOLS)
    counted = client.messages.count_tokens(model=MODEL, **request).input_tokens
    assert counted == count_tokens(server, **request)
    m = client.messages.create(model=MODEL, max_tokens=32, extra_body=script(answer("21 C.")), **request)
    assert m.usage.input_tokens == counted
    r = server.post("/v1/messages", body(max_tokens=32, stream=True, **request, **script(answer("21 C."))))
    events = sse_events(r)
    assert events[0][1]["message"]["usage"]["input_tokens"] == counted
    assert [d["usage"]["input_tokens"] for n, d in events if n == "message_delta"] == [counted]
