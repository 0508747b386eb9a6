"""POST /v1/completions: a raw prompt, no chat template."""
import openai
import pytest

from conftest import answer


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def test_raw_prompt_non_streaming_and_streaming(client, server):
    script = "a quick reply<|content_model_end_sampling|>"
    r = client.completions.create(model="m", prompt="Once upon", max_tokens=20, extra_body={"inkling_test_script": script})
    assert r.choices[0].text == "a quick reply"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == len(server.post("/tokenize", {"content": "Once upon"}).json()["tokens"])
    text = ""
    for chunk in client.completions.create(model="m", prompt="Once upon", max_tokens=20, stream=True,
                                           extra_body={"inkling_test_script": script}):
        text += chunk.choices[0].text
    assert text == "a quick reply"


def test_default_max_tokens_is_16(client):
    r = client.completions.create(model="m", prompt="x", temperature=0,
                                  extra_body={"inkling_test_script": "word " * 40})
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


def test_stop_and_logprobs(client):
    r = client.completions.create(model="m", prompt="x", max_tokens=30, stop="END", logprobs=3,
                                  extra_body={"inkling_test_script": "alpha beta END gamma"})
    assert r.choices[0].text == "alpha beta "
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs)
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(len(t) == 3 for t in lp.top_logprobs)


def test_seed_reproducible(client):
    kw = dict(model="m", prompt="The", max_tokens=12, temperature=0.8, seed=7)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    s = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw))
    assert a == b == s


def test_errors(server):
    assert server.post("/v1/completions", {"max_tokens": 3}).status_code == 400
    assert server.post("/v1/completions", {"prompt": ["a", "b"]}).status_code == 400
    assert server.post("/v1/completions", {"prompt": "a", "echo": True}).status_code == 400
    r = server.post("/v1/completions", {"prompt": "a " * 2000})
    assert r.status_code == 400 and r.json()["error"]["n_ctx"] == 512
