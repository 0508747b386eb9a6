"""POST /v1/responses: the OpenAI Responses API (input items in, output items out).

The model's output is scripted (`inkling_test_script`), so every assertion on content is exact.
Prompt-side checks compare usage.input_tokens with the same conversation rendered through
/apply-template (a chat-completions body) and /tokenize.
"""
import json
import re
import time

import openai
import pytest
import requests

from conftest import REASONING_TEXT_TWO_CALLS, TOOLS, answer, script, wait_new_log, sse_events

MARKER = re.compile(r"<\|[a-z_]+\|>")
MODEL = "tiny"
QUESTION = "What is the weather in Paris?"
# TOOLS in the Responses (flat) shape: {type: function, name, description, parameters}.
R_TOOLS = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
            "parameters": t["function"]["parameters"]} for t in TOOLS]
EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)


def chat_prompt_tokens(server, chat_body):
    """Tokens of a chat-completions conversation rendered by the server's template."""
    r = server.post("/apply-template", chat_body)
    assert r.status_code == 200, r.text
    t = server.post("/tokenize", {"content": r.json()["prompt"]})
    assert t.status_code == 200, t.text
    return len(t.json()["tokens"])


def assert_openai_error(r, status=400, param=None):
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    return error["message"]


def assert_no_markers(response):
    for item in response.output:
        if item.type == "message":
            for part in item.content:
                assert not MARKER.search(part.text), part.text
        elif item.type == "reasoning":
            for part in item.content or []:
                assert not MARKER.search(part.text), part.text


# ---------------------------------------------------------------- input shapes


def test_input_as_string(server, client):
    r = client.responses.create(model=MODEL, input=QUESTION, temperature=0, extra_body=script(answer("Sunny.")))
    assert r.object == "response"
    assert r.id.startswith("resp_")
    assert r.status == "completed"
    assert [item.type for item in r.output] == ["message"]
    message = r.output[0]
    assert message.role == "assistant"
    assert [p.type for p in message.content] == ["output_text"]
    assert message.content[0].text == "Sunny."
    assert r.output_text == "Sunny."
    assert r.usage.input_tokens == chat_prompt_tokens(server, {"messages": [{"role": "user", "content": QUESTION}]})
    assert r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_input_as_items_and_instructions(server, client):
    items = [
        {"role": "user", "content": QUESTION},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Which unit?"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Celsius."}]},
    ]
    r = client.responses.create(model=MODEL, input=items, instructions="Be brief.", extra_body=script(answer("21 C.")))
    assert r.status == "completed"
    assert r.output_text == "21 C."
    assert r.instructions == "Be brief."
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION},
                         {"role": "assistant", "content": "Which unit?"}, {"role": "user", "content": "Celsius."}]}
    assert r.usage.input_tokens == chat_prompt_tokens(server, chat)
    # The instructions are in the prompt.
    without = client.responses.create(model=MODEL, input=items, extra_body=script(answer("21 C.")))
    assert without.usage.input_tokens < r.usage.input_tokens


def test_input_missing_is_400(server):
    assert_openai_error(server.post("/v1/responses", {"model": MODEL}), param="input")


def test_output_text_property_equals_the_scripted_answer(client):
    text = "Paris: sunny, 21 \u00b0C, light wind."
    r = client.responses.create(model=MODEL, input=QUESTION, extra_body=script(answer(text, reasoning="Look it up.")))
    assert r.output_text == text
    assert_no_markers(r)


# ---------------------------------------------------------------- reasoning


def test_reasoning_item_out(client):
    r = client.responses.create(model=MODEL, input=QUESTION,
                                extra_body=script(answer("Sunny.", reasoning="Paris is in France.")))
    assert [item.type for item in r.output] == ["reasoning", "message"]
    reasoning = r.output[0]
    assert reasoning.id.startswith("rs_")
    assert reasoning.content[0].text == "Paris is in France."
    assert r.output_text == "Sunny."  # the reasoning is not part of the answer
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    assert_no_markers(r)


@pytest.mark.parametrize("effort", ["none", "low", "high"])
def test_reasoning_effort(server, client, effort):
    r = client.responses.create(model=MODEL, input=QUESTION, reasoning={"effort": effort},
                                extra_body=script(answer("Sunny.")))
    assert r.status == "completed"
    assert r.output_text == "Sunny."
    expected = chat_prompt_tokens(server, {"messages": [{"role": "user", "content": QUESTION}], "reasoning_effort": effort})
    assert r.usage.input_tokens == expected


def test_reasoning_effort_none_shortens_the_prompt(client):
    low = client.responses.create(model=MODEL, input=QUESTION, reasoning={"effort": "low"}, extra_body=script(answer("x")))
    none = client.responses.create(model=MODEL, input=QUESTION, reasoning={"effort": "none"}, extra_body=script(answer("x")))
    assert none.usage.input_tokens < low.usage.input_tokens


def test_invalid_effort_is_400_listing_the_valid_values(server, client):
    r = server.post("/v1/responses", {"model": MODEL, "input": QUESTION, "reasoning": {"effort": "extreme"}})
    message = assert_openai_error(r, param="reasoning.effort")
    for name in EFFORTS:
        assert re.search(rf"\b{name}\b", message), (name, message)
    assert "extreme" in message
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=QUESTION, reasoning={"effort": "extreme"})
    assert "xhigh" in str(e.value)


# ---------------------------------------------------------------- tools


def test_function_tools_and_a_skipped_web_search(server, client):
    tools = [*R_TOOLS, {"type": "web_search"}]
    r = client.responses.create(model=MODEL, input=QUESTION, tools=tools, extra_body=script(REASONING_TEXT_TWO_CALLS))
    assert r.status == "completed"
    assert [t.type for t in r.tools] == ["function", "function"]
    assert [t.name for t in r.tools] == ["get_weather", "get_time"]
    only_functions = client.responses.create(model=MODEL, input=QUESTION, tools=R_TOOLS,
                                             extra_body=script(REASONING_TEXT_TWO_CALLS))
    assert r.usage.input_tokens == only_functions.usage.input_tokens
    chat = {"messages": [{"role": "user", "content": QUESTION}], "tools": TOOLS}
    assert r.usage.input_tokens == chat_prompt_tokens(server, chat)
    # Only a web search: nothing declared, still no error.
    r = client.responses.create(model=MODEL, input=QUESTION, tools=[{"type": "web_search"}],
                                extra_body=script(answer("Sunny.")))
    assert r.output_text == "Sunny."
    assert r.usage.input_tokens == chat_prompt_tokens(server, {"messages": [{"role": "user", "content": QUESTION}]})


def test_function_call_output_items(client):
    r = client.responses.create(model=MODEL, input=QUESTION, tools=R_TOOLS, extra_body=script(REASONING_TEXT_TWO_CALLS))
    assert [item.type for item in r.output] == ["reasoning", "message", "function_call", "function_call"]
    assert r.output[0].content[0].text == "The user wants weather."
    assert r.output_text == "Let me check."
    weather, time_ = r.output[2], r.output[3]
    assert weather.name == "get_weather" and json.loads(weather.arguments) == {"city": "Paris"}
    assert time_.name == "get_time" and json.loads(time_.arguments) == {"zone": "CET"}
    assert weather.call_id and time_.call_id and weather.call_id != time_.call_id
    assert weather.id != time_.id
    assert weather.status == time_.status == "completed"
    ids = [item.id for item in r.output]
    assert len(set(ids)) == len(ids)
    assert_no_markers(r)


def test_function_call_round_trip(server, client):
    first = client.responses.create(model=MODEL, input=QUESTION, tools=R_TOOLS,
                                    extra_body=script(REASONING_TEXT_TWO_CALLS))
    calls = [item for item in first.output if item.type == "function_call"]
    items = [{"role": "user", "content": QUESTION},
             *[item.model_dump(exclude_none=True) for item in first.output],
             {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 degrees"},
             {"type": "function_call_output", "call_id": calls[1].call_id, "output": "14:05"}]
    second = client.responses.create(model=MODEL, input=items, tools=R_TOOLS,
                                     extra_body=script(answer("Sunny, 21 degrees, at 14:05.")))
    assert second.status == "completed"
    assert [item.type for item in second.output] == ["message"]
    assert second.output_text == "Sunny, 21 degrees, at 14:05."
    # The second prompt holds the first turn and both results, exactly as the chat form does.
    chat = {"tools": TOOLS, "messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "The user wants weather.",
         "tool_calls": [{"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in calls]},
        {"role": "tool", "tool_call_id": calls[0].call_id, "content": "sunny, 21 degrees"},
        {"role": "tool", "tool_call_id": calls[1].call_id, "content": "14:05"},
    ]}
    assert second.usage.input_tokens == chat_prompt_tokens(server, chat)
    assert second.usage.input_tokens > first.usage.input_tokens


def test_hand_written_round_trip(client):
    items = [{"role": "user", "content": QUESTION},
             {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'},
             {"type": "function_call_output", "call_id": "call_a", "output": "rain"}]
    r = client.responses.create(model=MODEL, input=items, tools=R_TOOLS, extra_body=script(answer("It rains.")))
    assert r.output_text == "It rains."
    items[2]["output"] = "rain, 9 degrees, strong wind from the north"
    longer = client.responses.create(model=MODEL, input=items, tools=R_TOOLS, extra_body=script(answer("It rains.")))
    assert longer.usage.input_tokens > r.usage.input_tokens


def test_parallel_tool_calls_false_is_echoed(client):
    r = client.responses.create(model=MODEL, input=QUESTION, tools=R_TOOLS, parallel_tool_calls=False,
                                extra_body=script(REASONING_TEXT_TWO_CALLS))
    # One call only, and the response says what was asked.
    assert [item.type for item in r.output if item.type == "function_call"] == ["function_call"]
    assert r.parallel_tool_calls is False


def test_malformed_call_comes_back_as_text(server, client):
    s = '<|message_model|>f<|content_invoke_tool_json|>{"name": broken<|end_message|><|content_model_end_sampling|>'
    before = len(server.lines)
    r = client.responses.create(model=MODEL, input=QUESTION, tools=R_TOOLS, extra_body=script(s))
    assert [item.type for item in r.output] == ["message"]
    assert r.output_text == '{"name": broken'
    assert wait_new_log(server, before, r"warning.*malformed tool call to f\b"), server.log()


def test_malformed_call_after_its_args_streamed(server):
    """A call whose args were streamed before its JSON broke is withdrawn: the final response has
    the text only, and every item in it has the id its stream events used."""
    s = ('<|message_model|>get_weather<|content_invoke_tool_json|>{"name":"get_weather","args":{"city":"Paris"}} oops'
         '<|end_message|><|content_model_end_sampling|>')
    r = server.post("/v1/responses", {"model": MODEL, "input": QUESTION, "tools": R_TOOLS, "stream": True, **script(s)})
    events = sse_events(r)
    final = events[-1][1]["response"]
    assert events[-1][0] == "response.completed"
    assert [item["type"] for item in final["output"]] == ["message"]
    assert final["output"][0]["content"][0]["text"] == '{"name":"get_weather","args":{"city":"Paris"}} oops'
    streamed_message_ids = {d["item"]["id"] for n, d in events if n == "response.output_item.added"
                            and d["item"]["type"] == "message"}
    assert {item["id"] for item in final["output"]} == streamed_message_ids
    body = server.post("/v1/responses", {"model": MODEL, "input": QUESTION, "tools": R_TOOLS, **script(s)}).json()
    assert [item["type"] for item in body["output"]] == ["message"]


# ---------------------------------------------------------------- streaming


def test_stream_events(client):
    stream = client.responses.create(model=MODEL, input=QUESTION, tools=R_TOOLS, stream=True,
                                     extra_body=script(REASONING_TEXT_TWO_CALLS))
    events = list(stream)
    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    for t in ("response.in_progress", "response.output_item.added", "response.output_text.delta",
              "response.function_call_arguments.delta", "response.output_item.done"):
        assert t in types
    numbers = [e.sequence_number for e in events]
    assert all(b > a for a, b in zip(numbers, numbers[1:])), numbers

    final = events[-1].response
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == "Let me check."
    for call in (item for item in final.output if item.type == "function_call"):
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta" and e.item_id == call.id]
        assert len(deltas) > 1
        assert "".join(deltas) == call.arguments
        done = [e for e in events if e.type == "response.function_call_arguments.done" and e.item_id == call.id]
        assert [d.arguments for d in done] == [call.arguments]
    # Items announced while streaming are the items of the final response, in order.
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert added == [item.id for item in final.output]
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1, 2, 3]
    for e in events:
        if e.type in ("response.output_text.delta", "response.reasoning_text.delta"):
            assert not MARKER.search(e.delta)


def test_stream_raw_sequence_numbers(server):
    r = server.post("/v1/responses", {"model": MODEL, "input": QUESTION, "stream": True, **script(answer("Sunny."))})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r)
    assert [n for n, _ in events[:2]] == ["response.created", "response.in_progress"]
    numbers = [d["sequence_number"] for _, d in events]
    assert numbers == list(range(len(events))), numbers
    assert events[-1][0] == "response.completed"


def test_stream_max_output_tokens_incomplete(client):
    stream = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=4, stream=True,
                                     extra_body=script(answer("one two three four five six")))
    events = list(stream)
    assert events[-1].type == "response.incomplete"
    final = events[-1].response
    assert final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 4


# ---------------------------------------------------------------- limits and refusals


def test_max_output_tokens_reached_is_incomplete(client):
    r = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=3,
                                extra_body=script(answer("one two three four five six")))
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    assert r.output_text == "one two"
    assert r.max_output_tokens == 3


def test_max_output_tokens_not_reached_is_completed(client):
    r = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=50, extra_body=script(answer("one two")))
    assert r.status == "completed"
    assert r.incomplete_details is None


def test_unknown_previous_response_id_is_400(server, client):
    r = server.post("/v1/responses", {"model": MODEL, "input": QUESTION, "previous_response_id": "resp_123"})
    message = assert_openai_error(r, param="previous_response_id")
    assert "resp_123" in message and "not a stored response" in message
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=QUESTION, previous_response_id="resp_123")
    assert "previous_response_id" in str(e.value)


def test_previous_response_id_continues_the_conversation_from_the_cache(client):
    first = client.responses.create(model=MODEL, input="previous id test: hello", instructions="Be brief.",
                                    extra_body=script(answer("Hello there.")))
    assert first.store is True
    follow = client.responses.create(model=MODEL, input="and then?", previous_response_id=first.id,
                                     instructions="Be brief.", max_output_tokens=4, temperature=0)
    assert follow.previous_response_id == first.id
    # The same conversation sent whole renders the same prompt...
    whole = client.responses.create(
        model=MODEL, instructions="Be brief.", max_output_tokens=4, temperature=0,
        input=[{"role": "user", "content": "previous id test: hello"},
               {"role": "assistant", "content": "Hello there."},
               {"role": "user", "content": "and then?"}])
    assert follow.usage.input_tokens == whole.usage.input_tokens
    # ...whose start (the first request's prompt) came from the prompt cache.
    assert follow.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    # A chain: the follow-up is stored in turn.
    third = client.responses.create(model=MODEL, input="more", previous_response_id=follow.id, max_output_tokens=2)
    assert third.usage.input_tokens > follow.usage.input_tokens
    # "store": false keeps nothing to continue from.
    unstored = client.responses.create(model=MODEL, input="not kept", store=False, max_output_tokens=2)
    assert unstored.store is False
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="x", previous_response_id=unstored.id)


def test_malformed_json_body_is_400(server):
    r = requests.post(server.url + "/v1/responses", data=b'{"input": ', timeout=30,
                      headers={"content-type": "application/json"})
    assert_openai_error(r)


def test_markers_never_in_visible_text(client):
    for seed in range(4):
        r = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=48, temperature=1.0,
                                    extra_body={"seed": seed})
        assert r.usage.output_tokens > 0
        assert_no_markers(r)
