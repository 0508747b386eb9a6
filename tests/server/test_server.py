"""Routes around generation, auth, limits, concurrency and disconnects."""
import json
import socket
import threading
import time

import openai
import requests

from conftest import TIME_SCALE, answer

KEY = {"Authorization": "Bearer sekrit-key"}


def slots(server, **kw):
    return server.get("/slots", **kw).json()


def wait_all_free(server, timeout, **kw):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(s["busy"] for s in slots(server, **kw)):
            return True
        time.sleep(0.01)
    return False


def test_health_models_metrics(server):
    assert server.get("/health").json() == {"status": "ok"}
    models = server.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny"
    server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
    text = server.get("/metrics").text
    assert 'inkling_requests_total{route="/v1/chat/completions",status="200"}' in text
    for name in ("inkling_prompt_tokens_total", "inkling_generated_tokens_total", "inkling_queue_depth",
                 "inkling_slots_busy", "inkling_time_to_first_token_seconds_avg",
                 "inkling_generated_tokens_per_second"):
        assert f"\n{name} " in text, name
    generated = float(text.split("\ninkling_generated_tokens_total ")[1].split()[0])
    assert generated >= 2


def test_one_log_line_per_request(server):
    server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "log me"}], "max_tokens": 3,
                                         "temperature": 0})
    assert server.wait_log(r"^POST /v1/chat/completions 200 prompt=\d+ generated=3 [\d.]+ ms")
    server.get("/nope")
    assert server.wait_log(r"^GET /nope 404 ")


def test_tokenize_detokenize(server):
    ids = server.post("/tokenize", {"content": "Hello world<|end_message|>"}).json()["tokens"]
    assert ids[-1] == 200010
    assert server.post("/detokenize", {"tokens": ids}).json()["content"] == "Hello world<|end_message|>"
    assert server.post("/detokenize", {"tokens": [10 ** 9]}).status_code == 400
    assert server.post("/tokenize", {"content": 5}).status_code == 400


def test_unknown_route_is_404_json(server):
    r = server.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_auth(keyed_server):
    s = keyed_server
    assert s.get("/health").status_code == 200  # always public
    missing = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1})
    wrong = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
                   headers={"Authorization": "Bearer nope"})
    assert missing.status_code == wrong.status_code == 401
    assert missing.content == wrong.content  # one body for both
    assert s.get("/v1/models").status_code == 401
    assert s.get("/v1/models", headers=KEY).status_code == 200
    assert s.get("/v1/models", headers={"x-api-key": "sekrit-key"}).status_code == 200
    anthropic_401 = s.post("/v1/messages", {"model": "m", "max_tokens": 1, "messages": []})
    assert anthropic_401.status_code == 401 and anthropic_401.json()["type"] == "error"
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit-key")
    assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2)


def test_oversize_body_is_413(keyed_server):
    big = {"messages": [{"role": "user", "content": "x" * 10000}]}
    r = keyed_server.post("/v1/chat/completions", big, headers=KEY)
    assert r.status_code == 413
    assert "--max-body" in r.json()["error"]["message"]
    assert keyed_server.get("/health").status_code == 200


def test_cors(keyed_server, server):
    r = requests.options(keyed_server.url + "/v1/chat/completions",
                         headers={"Origin": "http://ui.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == "http://ui.example"
    r = keyed_server.get("/health", headers={"Origin": "http://evil.example"})
    assert "Access-Control-Allow-Origin" not in r.headers
    r = server.get("/health", headers={"Origin": "http://ui.example"})  # CORS off by default
    assert "Access-Control-Allow-Origin" not in r.headers


def stream_chat(server, script, results, index, max_tokens=64):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    text, first = "", None
    start = time.time()
    for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"client {index}"}],
                                                max_tokens=max_tokens, stream=True,
                                                extra_body={"inkling_test_script": script}):
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = time.time() - start
            text += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].finish_reason:
            results[index] = (text, chunk.choices[0].finish_reason, first)


def test_eight_concurrent_streams_all_complete(server):
    results = {}
    words = [" ".join(f"w{i}x{j}" for j in range(30)) for i in range(8)]
    threads = [threading.Thread(target=stream_chat, args=(server, answer(words[i]), results, i, 200)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == list(range(8))
    for i in range(8):
        assert results[i][0] == words[i] and results[i][1] == "stop"


def test_streams_interleave_not_serialize(slow_server):
    """Two slots: a long answer does not hold up a second request until it finishes."""
    results = {}
    long = answer(" ".join(["long"] * 60))
    a = threading.Thread(target=stream_chat, args=(slow_server, long, results, 0, 200))
    a.start()
    time.sleep(0.5)
    t0 = time.time()
    stream_chat(slow_server, answer("short"), results, 1, 20)
    short_done = time.time() - t0
    a.join(60)
    assert results[1][0] == "short"
    assert 0 in results
    # The long one takes >= 60 steps of 40 ms (2.4 s); the short one ~5 steps with both interleaved.
    assert short_done < 1.5 * TIME_SCALE, short_done


def raw_stream_then_close(server, body, read_events=0):
    """Sends a streaming request on a raw socket, reads `read_events` SSE events, then closes it."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    seen = b""
    while seen.count(b"data: ") < read_events:
        chunk = sock.recv(4096)
        if not chunk:
            break
        seen += chunk
    sock.close()
    return seen


def test_disconnect_mid_stream_frees_slot(slow_server):
    assert wait_all_free(slow_server, 10)
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 500,
            "inkling_test_script": "<|content_text|>" + "word " * 400}
    seen = raw_stream_then_close(slow_server, body, read_events=4)
    assert b"data: " in seen
    t0 = time.time()
    assert wait_all_free(slow_server, 2.0 * TIME_SCALE), slots(slow_server)
    # Freed within about one decode step (40 ms here) plus the 50 ms connection poll.
    assert time.time() - t0 < 0.5 * TIME_SCALE
    assert slow_server.wait_log(r"POST /v1/chat/completions 200 .*client disconnected")


def test_disconnect_mid_prefill_frees_slot(slow_server):
    assert wait_all_free(slow_server, 10)
    # ~3000 prompt tokens: 12 prefill chunks of 256 at >= 40 ms each.
    body = {"messages": [{"role": "user", "content": "hello " * 3000}], "stream": True, "max_tokens": 5}
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", slow_server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    deadline = time.time() + 5
    while time.time() < deadline:
        busy = [s for s in slots(slow_server) if s["busy"]]
        if busy and busy[0]["prompt_done"] > 0:
            break
        time.sleep(0.01)
    assert busy and 0 < busy[0]["prompt_done"] < busy[0]["prompt_tokens"], busy
    sock.close()
    t0 = time.time()
    assert wait_all_free(slow_server, 2.0 * TIME_SCALE)
    assert time.time() - t0 < 0.5 * TIME_SCALE
    after = slots(slow_server)
    assert all(not s["busy"] for s in after)


def test_disconnect_non_streaming_frees_slot(slow_server):
    assert wait_all_free(slow_server, 10)
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 500,
            "inkling_test_script": "<|content_text|>" + "word " * 400}
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", slow_server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    deadline = time.time() + 5
    while time.time() < deadline and not any(s["generated"] > 2 for s in slots(slow_server)):
        time.sleep(0.01)
    sock.close()
    t0 = time.time()
    assert wait_all_free(slow_server, 2.0 * TIME_SCALE)
    assert time.time() - t0 < 0.5 * TIME_SCALE


def test_queue_beyond_parallel_visible_in_metrics(slow_server):
    assert wait_all_free(slow_server, 10)
    results = {}
    script = answer(" ".join(["q"] * 20))
    threads = [threading.Thread(target=stream_chat, args=(slow_server, script, results, i, 100)) for i in range(4)]
    for t in threads:
        t.start()
    depth = 0
    deadline = time.time() + 3
    while time.time() < deadline and depth == 0:
        text = slow_server.get("/metrics").text
        depth = float(text.split("\ninkling_queue_depth ")[1].split()[0])
        time.sleep(0.02)
    for t in threads:
        t.join(60)
    assert depth >= 1  # 4 clients, 2 slots
    assert sorted(results) == [0, 1, 2, 3]


def test_bad_requests_do_not_disturb_a_running_stream(server):
    results = {}
    t = threading.Thread(target=stream_chat, args=(server, answer(" ".join(["steady"] * 40)), results, 0, 100))
    t.start()
    for data in (b"{", b"[]", b'{"messages": 3}', b'{"messages": [{"role": "user"}], "max_tokens": -1}'):
        assert requests.post(server.url + "/v1/chat/completions", data=data).status_code == 400
    t.join(30)
    assert results[0][0] == " ".join(["steady"] * 40)


def test_port_in_use_is_a_clear_error(server, checkpoint):
    import subprocess
    from conftest import BINARY
    r = subprocess.run([str(BINARY), "serve", "-m", str(checkpoint), "--port", str(server.port)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert f"cannot listen on 127.0.0.1:{server.port}" in r.stderr
    assert server.get("/health").status_code == 200


def test_a_type_field_of_the_wrong_kind_is_400_not_500(server):
    cases = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]},
        "/v1/messages": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": [], "text": "x"}]}]},
        "/v1/responses": {"input": [{"type": {"a": 1}, "role": "user", "content": "x"}]},
    }
    for path, body in cases.items():
        r = server.post(path, body)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["message"] == '"type" must be a string'
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                             "tools": [{"type": 1, "function": {"name": "f"}}]})
    assert r.status_code == 400


def test_a_burst_of_connections_waits_in_the_backlog(checkpoint):
    """While the server accepts nothing (stopped), the kernel must still complete the handshake of
    a burst of clients: with httplib's default backlog of 5, the rest had their SYNs dropped and
    waited out TCP's retransmission backoff (a 31 s stall seen in the 10-minute soak)."""
    import signal
    from conftest import Server
    s = Server(checkpoint, "--parallel", "2", "--ctx", "256")
    sockets = []
    try:
        s.proc.send_signal(signal.SIGSTOP)
        connected = 0
        for _ in range(64):
            sock = socket.socket()
            sock.settimeout(0.5)
            try:
                sock.connect(("127.0.0.1", s.port))
                connected += 1
            except OSError:
                pass
            sockets.append(sock)
        assert connected == 64, f"only {connected} of 64 connections completed while the server was busy"
    finally:
        s.proc.send_signal(signal.SIGCONT)
        for sock in sockets:
            sock.close()
        s.stop()
