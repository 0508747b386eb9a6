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


def test_token_id_prompt_is_the_same_prompt_as_its_text(client, server):
    ids = server.post("/tokenize", {"content": "Once upon a time"}).json()["tokens"]
    kw = dict(model="m", max_tokens=6, temperature=0, logprobs=2, extra_body={"cache_prompt": False})
    by_text = client.completions.create(prompt="Once upon a time", **kw)
    by_ids = client.completions.create(prompt=ids, **kw)
    nested = client.completions.create(prompt=[ids], **kw)
    assert by_ids.usage.prompt_tokens == nested.usage.prompt_tokens == by_text.usage.prompt_tokens == len(ids)
    assert by_ids.choices[0].text == nested.choices[0].text == by_text.choices[0].text
    assert by_ids.choices[0].logprobs.token_logprobs == by_text.choices[0].logprobs.token_logprobs
    # Ids the tokenizer would never produce from text still go in as given (here: the first id twice).
    doubled = client.completions.create(prompt=[ids[0]] + ids, **kw)
    assert doubled.usage.prompt_tokens == len(ids) + 1


def test_errors(server):
    assert server.post("/v1/completions", {"max_tokens": 3}).status_code == 400
    assert server.post("/v1/completions", {"prompt": ["a", "b"]}).status_code == 400
    assert server.post("/v1/completions", {"prompt": []}).status_code == 400
    assert server.post("/v1/completions", {"prompt": [[1, 2], [3]]}).status_code == 400
    r = server.post("/v1/completions", {"prompt": [5, "x"]})
    assert r.status_code == 400 and "prompt[1]" in r.json()["error"]["message"]
    r = server.post("/v1/completions", {"prompt": [5, 10 ** 9]})
    assert r.status_code == 400 and "prompt[1]" in r.json()["error"]["message"] and "vocabulary" in r.json()["error"]["message"]
    assert server.post("/v1/completions", {"prompt": [-1]}).status_code == 400
    assert server.post("/v1/completions", {"prompt": "a", "echo": True}).status_code == 400
    r = server.post("/v1/completions", {"prompt": "a " * 2000})
    assert r.status_code == 400 and r.json()["error"]["n_ctx"] == 512
