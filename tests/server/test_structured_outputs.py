"""response_format and grammar in Chat Completions, enforced on the random-weight checkpoint: the
answer parses and validates every time, the reasoning span is left free, bad schemas are a 400."""
import json

import anthropic
import jsonschema
import openai
import pytest

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["C", "F"]},
        "when": {"type": "string", "format": "date"},
    },
    "required": ["city", "days", "unit"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": SCHEMA, "strict": True}}


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def ask(client, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "weather?"}])
    kw.setdefault("model", "inkling")
    kw.setdefault("max_tokens", 400)
    kw.setdefault("temperature", 1.0)
    kw.setdefault("reasoning_effort", "none")
    return client.chat.completions.create(**kw)


def valid(text, schema=SCHEMA):
    jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.mark.parametrize("seed", range(4))
def test_json_schema_answers_validate(client, seed):
    reply = ask(client, response_format=FORMAT, seed=seed)
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", choice
    valid(choice.message.content)


def test_json_schema_streamed(client):
    stream = ask(client, response_format=FORMAT, seed=11, stream=True)
    content = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    valid(content)


def test_constraint_starts_after_the_reasoning(client):
    # The script writes a reasoning block that is not JSON; the answer after it is constrained.
    reasoning = "I think {this is not json"
    reply = ask(client, response_format=FORMAT, seed=3, reasoning_effort="high",
                extra_body={"inkling_test_script": f"<|content_thinking|>{reasoning}<|end_message|>"})
    message = reply.choices[0].message
    assert (message.model_extra or {}).get("reasoning_content") == reasoning
    valid(message.content)


def test_json_object_and_gbnf(client):
    # Free JSON rarely ends by itself on a random model: max_tokens closes it, and it still parses.
    for seed in range(3):
        reply = ask(client, response_format={"type": "json_object"}, seed=seed, max_tokens=120)
        assert isinstance(json.loads(reply.choices[0].message.content), dict)
        assert reply.usage.completion_tokens <= 120
    reply = ask(client, seed=6, extra_body={"grammar": 'root ::= ("yes" | "no") " because " [a-z ]{1,20} "."'})
    text = reply.choices[0].message.content
    assert text.startswith(("yes because ", "no because ")) and text.endswith("."), text


@pytest.mark.parametrize("schema, word", [
    ({"type": "object", "not": {"required": ["a"]}}, '"not"'),
    ({"type": "string", "format": "uri"}, '"uri"'),
    ({"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]}, "cannot terminate"),
])
def test_unsupported_schema_is_a_400_naming_it(client, schema, word):
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert word in str(error.value)


def test_responses_text_format(client):
    reply = client.responses.create(model="inkling", input="weather?", max_output_tokens=400, temperature=1.0,
                                    reasoning={"effort": "none"},
                                    text={"format": {"type": "json_schema", "name": "forecast", "schema": SCHEMA}})
    valid(reply.output_text)


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
OTHER_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "time in a zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                   "required": ["zone"], "additionalProperties": False}}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_tool_call_arguments_follow_the_schema(client, choice):
    for seed in range(3):
        reply = ask(client, tools=[WEATHER_TOOL, OTHER_TOOL], tool_choice=choice, seed=seed)
        calls = reply.choices[0].message.tool_calls
        assert calls and len(calls) == 1, reply
        tool = {"get_weather": WEATHER_TOOL, "get_time": OTHER_TOOL}[calls[0].function.name]
        if isinstance(choice, dict):
            assert calls[0].function.name == "get_time"
        jsonschema.validate(json.loads(calls[0].function.arguments), tool["function"]["parameters"])


def test_tool_schema_we_cannot_enforce_is_a_400(client):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "minProperties": 2}}}
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, tools=[tool], tool_choice="required")
    assert "minProperties" in str(error.value)


# ------------------------------------------------ streaming, and the other front doors

def streamed_calls(stream):
    """{index: [name, arguments]} from Chat Completions chunks."""
    calls = {}
    for chunk in stream:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(delta.index, ["", ""])
            if delta.function.name:
                entry[0] += delta.function.name
            entry[1] += delta.function.arguments or ""
    return calls


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_tool_call_streamed(client, choice):
    for seed in range(1):
        calls = streamed_calls(ask(client, tools=[WEATHER_TOOL, OTHER_TOOL], tool_choice=choice, seed=seed, stream=True))
        assert len(calls) == 1, calls
        name, arguments = calls[0]
        if isinstance(choice, dict):
            assert name == "get_time"
        tool = {"get_weather": WEATHER_TOOL, "get_time": OTHER_TOOL}[name]
        jsonschema.validate(json.loads(arguments), tool["function"]["parameters"])


def test_responses_text_format_streamed(client):
    stream = client.responses.create(model="inkling", input="weather?", max_output_tokens=400, temperature=1.0,
                                     reasoning={"effort": "none"}, stream=True, extra_body={"seed": 8},
                                     text={"format": {"type": "json_schema", "name": "forecast", "schema": SCHEMA}})
    events = list(stream)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    valid(deltas)
    final = next(e.response for e in events if e.type == "response.completed")
    assert final.output_text == deltas


A_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"]} for t in (WEATHER_TOOL, OTHER_TOOL)]
A_SCHEMAS = {t["name"]: t["input_schema"] for t in A_TOOLS}


@pytest.fixture()
def anthropic_client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=60)


def messages_ask(client, **kw):
    kw.setdefault("model", "tiny")
    kw.setdefault("max_tokens", 400)
    kw.setdefault("messages", [{"role": "user", "content": "weather?"}])
    kw.setdefault("tools", A_TOOLS)
    return kw


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_time"}])
def test_messages_forced_tool_input_follows_the_schema(anthropic_client, choice):
    for seed in range(2):
        message = anthropic_client.messages.create(**messages_ask(anthropic_client, tool_choice=choice,
                                                                  extra_body={"seed": seed, "temperature": 1.0}))
        assert message.stop_reason == "tool_use", message
        calls = [b for b in message.content if b.type == "tool_use"]
        assert len(calls) == 1, message.content
        if choice["type"] == "tool":
            assert calls[0].name == "get_time"
        jsonschema.validate(calls[0].input, A_SCHEMAS[calls[0].name])


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_messages_forced_tool_streamed(anthropic_client, choice):
    for seed in range(1):
        with anthropic_client.messages.stream(**messages_ask(anthropic_client, tool_choice=choice,
                                                             extra_body={"seed": 10 + seed, "temperature": 1.0})) as stream:
            partial = "".join(e.delta.partial_json for e in stream
                              if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use", final
        calls = [b for b in final.content if b.type == "tool_use"]
        assert len(calls) == 1, final.content
        if choice["type"] == "tool":
            assert calls[0].name == "get_weather"
        # The streamed fragments add up to the input the final message carries.
        assert json.loads(partial) == calls[0].input
        jsonschema.validate(calls[0].input, A_SCHEMAS[calls[0].name])


BAD_TOOL = {"type": "object", "properties": {"a": {"type": "string"}}, "minProperties": 1}


def test_unsupported_schema_is_a_400_at_every_front_door(server, anthropic_client, client):
    with pytest.raises(anthropic.BadRequestError) as error:
        anthropic_client.messages.create(**messages_ask(anthropic_client, tool_choice={"type": "any"},
                                                        tools=[{"name": "f", "input_schema": BAD_TOOL}]))
    assert "minProperties" in str(error.value)
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="inkling", input="x",
                                text={"format": {"type": "json_schema", "name": "x",
                                                 "schema": {"type": "string", "format": "uri"}}})
    assert '"uri"' in str(error.value)
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="inkling", input="x", tool_choice="required",
                                tools=[{"type": "function", "name": "f", "parameters": BAD_TOOL}])
    assert "minProperties" in str(error.value)
    # The server goes on serving.
    reply = ask(client, response_format=FORMAT, seed=0)
    valid(reply.choices[0].message.content)
