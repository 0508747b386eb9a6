"""The reasoning budget (runtime/serve/reasoning_budget.h, docs/server.md "Reasoning budget"): the
reasoning span of a turn stays within the budget its effort gives, then the answer is forced and,
when it follows a schema, still validates; at effort none the turn starts with its answer.

The random-weight model almost never closes a reasoning block by itself, so a turn whose script
opens one (<|content_thinking|>, then sampling) reasons until the budget closes it: the counts are
checked from both sides."""
import json
import re

import anthropic
import jsonschema
import openai
import pytest

from conftest import Server, wait_new_log

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": SCHEMA, "strict": True}}
OPEN_REASONING = {"inkling_test_script": "<|content_thinking|>"}
# The documented table (docs/server.md); the larger levels and the numbers between levels are
# checked by tests/serve/reasoning_budget_test.cpp (here each reasoning token is a model step).
EFFORT_BUDGETS = [("minimal", 256)]


@pytest.fixture(scope="module")
def long_server(checkpoint):
    """Room for a forced tool's reasoning (up to 600 tokens) and its answer."""
    s = Server(checkpoint, "--parallel", "4", "--ctx", "1536")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(long_server):
    return openai.OpenAI(base_url=long_server.url + "/v1", api_key="unused", max_retries=0)


def ask(client, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "weather?"}])
    kw.setdefault("model", "inkling")
    kw.setdefault("temperature", 1.0)
    return client.chat.completions.create(**kw)


def valid(text):
    jsonschema.validate(json.loads(text), SCHEMA)


def reasoning_tokens(reply):
    return reply.usage.completion_tokens_details.reasoning_tokens


@pytest.mark.parametrize("effort, budget", EFFORT_BUDGETS)
def test_constrained_reasoning_stays_within_the_effort_budget(client, effort, budget):
    # max_tokens leaves the budget whole (a constrained answer keeps half of max_tokens).
    reply = ask(client, response_format=FORMAT, seed=1, max_tokens=2 * budget + 100,
                extra_body={"reasoning_effort": effort, **OPEN_REASONING})
    used = reasoning_tokens(reply)
    assert budget // 2 < used <= budget, (effort, used)
    assert reply.choices[0].finish_reason == "stop"
    valid(reply.choices[0].message.content)


def test_effort_none_goes_straight_to_the_answer(client):
    # Unforced, the first token of a constrained turn is <|content_thinking|> or <|content_text|>
    # about evenly on this model: at effort none it is always the answer.
    for seed in range(6):
        reply = ask(client, response_format=FORMAT, seed=seed, max_tokens=300, reasoning_effort="none")
        assert reasoning_tokens(reply) == 0, seed
        assert (reply.choices[0].message.model_extra or {}).get("reasoning_content") in (None, "")
        valid(reply.choices[0].message.content)


def test_a_constrained_answer_keeps_half_of_max_tokens(client):
    # high is 16384 tokens: here max_tokens / 2 is the smaller bound.
    reply = ask(client, response_format=FORMAT, seed=2, max_tokens=300, reasoning_effort="high",
                extra_body=OPEN_REASONING)
    assert 75 < reasoning_tokens(reply) <= 150
    valid(reply.choices[0].message.content)


def test_an_unconstrained_turn_gets_the_effort_budget_but_not_the_half(client):
    reply = ask(client, seed=3, max_tokens=300, reasoning_effort="minimal", extra_body=OPEN_REASONING)
    used = reasoning_tokens(reply)
    assert 128 < used <= 256
    # The answer goes on after the forced close (the random model rarely ends its turn).
    assert reply.usage.completion_tokens > used


def test_responses_reasoning_effort_bounds_the_reasoning(client):
    reply = client.responses.create(
        model="inkling", input="weather?", max_output_tokens=700, temperature=1.0, reasoning={"effort": "minimal"},
        text={"format": {"type": "json_schema", "name": "forecast", "schema": SCHEMA}},
        extra_body={"seed": 4, **OPEN_REASONING})
    used = reply.usage.output_tokens_details.reasoning_tokens
    assert 128 < used <= 256
    valid(reply.output_text)


TOOL = {"name": "get_weather", "description": "weather for a city", "input_schema": SCHEMA}


def test_messages_budget_tokens_bounds_the_reasoning_of_a_forced_tool(long_server):
    # Messages has no usage field for reasoning: the server's log line counts it. A forced tool is
    # constrained, so its reasoning is at most half of max_tokens, here below budget_tokens.
    budget_tokens, max_tokens, bound = 1024, 1200, 600
    client = anthropic.Anthropic(base_url=long_server.url, api_key="x", max_retries=0, timeout=120)
    before = len(long_server.lines)
    message = client.messages.create(
        model="tiny", max_tokens=max_tokens, messages=[{"role": "user", "content": "weather?"}], tools=[TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
        thinking={"type": "enabled", "budget_tokens": budget_tokens}, extra_body={"seed": 5, "temperature": 1.0, **OPEN_REASONING})
    assert message.stop_reason == "tool_use", message
    calls = [b for b in message.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(calls[0].input, SCHEMA)
    assert any(b.type == "thinking" for b in message.content)
    assert wait_new_log(long_server, before, r"^POST /v1/messages 200 .* reasoning=\d+")
    line = next(l for l in long_server.lines[before:] if l.startswith("POST /v1/messages 200"))
    used = int(re.search(r"reasoning=(\d+)", line).group(1))
    assert bound // 2 < used <= bound, line
