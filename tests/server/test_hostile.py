"""Hostile requests (issue 21): each gets a precise 4xx (or a documented clamp) and the server
keeps serving everyone else. A stream runs through the whole module and must finish intact."""
import json
import socket
import threading
import time

import pytest
import requests

from conftest import Server, answer

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def hostile(checkpoint):
    s = Server(checkpoint, "--parallel", "4", "--ctx", "512", "--max-body", "65536")
    yield s
    s.stop()


def error_of(r):
    body = r.json()
    return body["error"]["message"] if "error" in body and isinstance(body["error"], dict) else body


def expect_400(server, path, body, needle, param=None):
    r = server.post(path, body)
    assert r.status_code == 400, (path, body if len(json.dumps(body)) < 300 else "...", r.status_code, r.text[:300])
    message = error_of(r)
    assert needle in message, message
    if param is not None:
        assert r.json()["error"].get("param") == param, r.text
    return message


def still_serving(server):
    r = server.post(CHAT, {"messages": USER, "max_tokens": 2, "inkling_test_script": answer("ok")})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok"


def test_sampling_fields_out_of_range(hostile):
    expect_400(hostile, CHAT, {"messages": USER, "n": 10**9}, "n = 1", "n")
    expect_400(hostile, CHAT, {"messages": USER, "max_tokens": -1}, "max_tokens", "max_tokens")
    expect_400(hostile, CHAT, {"messages": USER, "max_tokens": 2**63}, "max_tokens", "max_tokens")
    expect_400(hostile, CHAT, {"messages": USER, "max_completion_tokens": 2**64 + 5}, "max_completion_tokens")
    expect_400(hostile, CHAT, {"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "top_logprobs")
    expect_400(hostile, CHAT, {"messages": USER, "temperature": -1}, "temperature", "temperature")
    expect_400(hostile, CHAT, {"messages": USER, "top_p": 7}, "top_p", "top_p")
    expect_400(hostile, "/v1/messages", {"model": "m", "max_tokens": -5, "messages": USER}, "max_tokens")
    expect_400(hostile, "/v1/responses", {"input": "hi", "max_output_tokens": 2**63}, "max_output_tokens")
    still_serving(hostile)


def test_malformed_messages(hostile):
    expect_400(hostile, CHAT, {"messages": []}, "messages")
    expect_400(hostile, CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, "wizard")
    expect_400(hostile, CHAT, {"messages": [{"role": "user", "content": 42}]}, "content")
    expect_400(hostile, CHAT, {"messages": [{"role": "user", "content": {"a": 1}}]}, "content")
    expect_400(hostile, CHAT, {"messages": "hello"}, "messages")
    expect_400(hostile, "/v1/messages", {"model": "m", "max_tokens": 5, "messages": []}, "messages")
    expect_400(hostile, "/v1/messages", {"model": "m", "max_tokens": 5,
                                          "messages": [{"role": "system", "content": "x"}]}, "role")
    expect_400(hostile, "/v1/responses", {"input": 17}, "input")
    still_serving(hostile)


def test_invalid_utf8_and_broken_json(hostile):
    for data in (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
                 b'{"messages": [{"role": "user", "content": "\xc3"}]}'):
        r = requests.post(hostile.url + CHAT, data=data, headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 400, r.text
        assert "UTF-8" in error_of(r) or "JSON" in error_of(r), r.text
    for data in (b'{"messages": [', b'{"messages": [{"role": "user", "content": "x"}]', b"\x00\x01", b"null"):
        r = requests.post(hostile.url + CHAT, data=data, headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 400, (data, r.text)
    still_serving(hostile)


def test_json_nested_ten_thousand_deep(hostile):
    deep = "[" * 10000 + "]" * 10000
    for path in (CHAT, "/v1/messages", "/v1/responses", "/v1/completions"):
        data = '{"messages": [{"role": "user", "content": "x", "extra": ' + deep + '}], "input": "x", "prompt": "x"}'
        r = requests.post(hostile.url + path, data=data, headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 400, (path, r.text[:200])
        assert "nests deeper than 64 levels" in error_of(r), r.text[:300]
    still_serving(hostile)


def test_body_size_limit_is_exact(hostile):
    limit = 65536
    base = {"messages": [{"role": "user", "content": ""}], "max_tokens": 1, "inkling_test_script": answer("k")}
    empty_len = len(json.dumps(base).encode())
    at_limit = dict(base, messages=[{"role": "user", "content": "x" * (limit - empty_len)}])
    data = json.dumps(at_limit).encode()
    assert len(data) == limit
    r = requests.post(hostile.url + CHAT, data=data, headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code != 413, r.text[:200]
    over = json.dumps(dict(base, messages=[{"role": "user", "content": "x" * (limit - empty_len + 1)}])).encode()
    assert len(over) == limit + 1
    r = requests.post(hostile.url + CHAT, data=over, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 413, r.text[:200]
    assert "--max-body" in error_of(r)
    still_serving(hostile)


def raw_request(server, payload, close_after=True, wait=0.3):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(payload)
    time.sleep(wait)
    if close_after:
        sock.close()
        return None
    return sock


def test_truncated_and_abandoned_requests(hostile):
    body = b'{"messages": [{"role": "user", "content": "hello"}]}'
    # Content-Length promises more than arrives, then the client vanishes.
    raw_request(hostile, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 5000\r\n\r\n" + body[:20])
    # Half the headers, then gone.
    raw_request(hostile, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    # Headers only, then silence while holding the socket open: others must not wait on it.
    idle = [raw_request(hostile, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
                        close_after=False, wait=0) for _ in range(3)]
    started = time.time()
    still_serving(hostile)
    assert time.time() - started < 10
    for s in idle:
        s.close()
    slots = hostile.get("/slots").json()
    deadline = time.time() + 10
    while any(s["busy"] for s in slots) and time.time() < deadline:
        time.sleep(0.05)
        slots = hostile.get("/slots").json()
    assert not any(s["busy"] for s in slots), slots


def test_template_kwargs_cannot_override_the_request(hostile):
    for key in ("messages", "add_generation_prompt", "tools", "bos_token", "eos_token"):
        msg = expect_400(hostile, CHAT, {"messages": USER, "chat_template_kwargs": {key: []}}, key, "chat_template_kwargs")
        assert "chat_template_kwargs" in msg
    expect_400(hostile, CHAT, {"messages": USER, "chat_template_kwargs": [1, 2]}, "chat_template_kwargs")
    # An ordinary template variable still passes through.
    r = hostile.post("/apply-template", {"messages": USER, "chat_template_kwargs": {"reasoning_effort": "low"}})
    assert r.status_code == 200, r.text


def test_huge_lists(hostile):
    expect_400(hostile, CHAT, {"messages": USER, "stop": ["s%d" % i for i in range(1000)]}, "stop", "stop")
    tools = [{"type": "function", "function": {"name": "f%d" % i, "parameters": {"type": "object"}}}
             for i in range(10000)]
    r = hostile.post(CHAT, {"messages": USER, "tools": tools})
    assert r.status_code in (400, 413), r.text[:300]
    still_serving(hostile)


def test_prompt_that_fills_the_context(hostile):
    system = "word " * 5000
    msg = expect_400(hostile, CHAT, {"messages": [{"role": "system", "content": system}] + USER}, "context")
    assert "512" in msg, msg
    msg = expect_400(hostile, "/v1/messages", {"model": "m", "max_tokens": 5, "system": system, "messages": USER},
                     "context")
    still_serving(hostile)


def test_a_stream_survives_the_hostile_traffic(hostile):
    results = {}

    def stream():
        r = requests.post(hostile.url + CHAT, json={"messages": USER, "stream": True, "max_tokens": 100,
                                                     "inkling_test_script": answer(" ".join(["steady"] * 60))},
                          stream=True, timeout=60)
        text = ""
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                chunk = json.loads(line[6:])
                if chunk["choices"]:
                    text += chunk["choices"][0]["delta"].get("content") or ""
        results["text"] = text

    t = threading.Thread(target=stream)
    t.start()
    test_sampling_fields_out_of_range(hostile)
    test_json_nested_ten_thousand_deep(hostile)
    test_truncated_and_abandoned_requests(hostile)
    t.join(60)
    assert results["text"] == " ".join(["steady"] * 60)
    assert hostile.get("/health").json() == {"status": "ok"}


def test_a_dead_inference_loop_turns_health_to_503(checkpoint):
    s = Server(checkpoint, "--parallel", "2", "--ctx", "512")
    try:
        assert s.get("/health").status_code == 200
        r = s.post(CHAT, {"messages": USER, "max_tokens": 4, "inkling_test_stop_loop": True})
        assert r.status_code == 500, r.text
        assert "inference loop" in error_of(r)
        health = s.get("/health")
        assert health.status_code == 503
        assert health.json() == {"status": "error", "error": "the inference loop has stopped"}
        # Later requests fail at once with the same cause instead of waiting forever.
        started = time.time()
        r = s.post(CHAT, {"messages": USER, "max_tokens": 4})
        assert r.status_code >= 500 and "inference loop has stopped" in error_of(r), r.text
        assert time.time() - started < 5
        assert s.proc.poll() is None  # the process itself keeps answering
    finally:
        s.stop()


def test_the_stop_loop_hook_needs_test_mode(hostile, keyed_server):
    r = keyed_server.post(CHAT, {"messages": USER, "inkling_test_stop_loop": True},
                          headers={"Authorization": "Bearer sekrit-key"})
    assert r.status_code == 400 and "test-only" in error_of(r)
