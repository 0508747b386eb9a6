"""Batched steps, the KV budget and the prompt cache, seen from the HTTP side."""
import threading
import time

import pytest

from conftest import TIME_SCALE, Server


def metric(server, name):
    text = server.get("/metrics").text
    return float(text.split(f"\n{name} ")[1].split()[0])


def complete(server, prompt, n, **extra):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "logprobs": 3, **extra}
    r = server.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def run_concurrently(fns):
    results = [None] * len(fns)
    errors = []

    def call(i):
        try:
            results[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120 * TIME_SCALE)
    assert not errors, errors
    return results


@pytest.fixture(scope="module")
def batch_server(checkpoint):
    s = Server(checkpoint, "--parallel", "4", "--ctx", "1024", "--test-step-delay-ms", "15")
    yield s
    s.stop()


PROMPTS = ["The first of four prompts", "A second, longer prompt about rivers and the sea, " * 6,
           "three", "Four: " + "tokens " * 40]


def test_concurrent_requests_share_batched_steps(batch_server):
    steps0 = metric(batch_server, "inkling_batch_steps_total")
    seqs0 = metric(batch_server, "inkling_batch_sequences_total")
    run_concurrently([lambda p=p: complete(batch_server, p, 24) for p in PROMPTS])
    steps = metric(batch_server, "inkling_batch_steps_total") - steps0
    seqs = metric(batch_server, "inkling_batch_sequences_total") - seqs0
    # Four requests of 24 tokens, one step each per token: about 25 steps with four sequences in
    # most of them, against ~100 steps if they ran one after another.
    assert steps > 0 and seqs / steps > 2.5, (steps, seqs)


def test_batched_sequences_get_what_they_get_alone(batch_server):
    alone = [complete(batch_server, p, 12, cache_prompt=False) for p in PROMPTS]
    together = run_concurrently([lambda p=p: complete(batch_server, p, 12, cache_prompt=False) for p in PROMPTS])
    for a, b in zip(alone, together):
        la, lb = a["choices"][0]["logprobs"], b["choices"][0]["logprobs"]
        assert la["tokens"] == lb["tokens"]
        assert a["choices"][0]["text"] == b["choices"][0]["text"]
        # Bit for bit: every row takes the kernels its own sequence's share of the step picks.
        assert la["token_logprobs"] == lb["token_logprobs"]
        assert la["top_logprobs"] == lb["top_logprobs"]


@pytest.fixture(scope="module")
def tight_server(checkpoint):
    """A KV budget of 0.2 MiB: one 200-token request at a time, and no request without max_tokens."""
    s = Server(checkpoint, "--parallel", "2", "--ctx", "4096", "--kv-budget", "0.2", "--test-step-delay-ms", "10")
    yield s
    s.stop()


def test_a_request_that_can_never_fit_is_a_clear_400(tight_server):
    r = tight_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "no max_tokens at all"}]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert "KV budget" in error["message"] and "--kv-budget" in error["message"] and error["param"] == "max_tokens"
    assert tight_server.get("/health").status_code == 200


def test_a_request_waits_for_memory_then_runs(tight_server):
    # Each reserves ~0.12 MiB (the sliding rings plus 64 bytes a token for 200 tokens): two do not
    # fit in 0.2 MiB at once, so the second waits for the first although a slot is free.
    results = {}
    first = threading.Thread(target=lambda: results.update(first=complete(tight_server, "the first", 200, logprobs=None)))
    first.start()
    time.sleep(0.3)
    second = threading.Thread(target=lambda: results.update(second=complete(tight_server, "the second", 200, logprobs=None)))
    second.start()
    seen_waiting = False
    deadline = time.time() + 5
    while time.time() < deadline and not seen_waiting:
        seen_waiting = metric(tight_server, "inkling_requests_waiting_for_memory") >= 1
        time.sleep(0.02)
    first.join(120 * TIME_SCALE)
    second.join(120 * TIME_SCALE)
    assert seen_waiting, "no request was seen waiting for KV budget"
    assert results["first"]["usage"]["completion_tokens"] == 200
    assert results["second"]["usage"]["completion_tokens"] == 200
    assert metric(tight_server, "inkling_kv_reserved_bytes") == 0
    assert metric(tight_server, "inkling_kv_budget_bytes") == pytest.approx(0.2 * 1048576, rel=1e-6)


@pytest.fixture(scope="module")
def cache_server(checkpoint):
    """One slot, so a kept state is always replaced by the next request: reuse comes from snapshots."""
    s = Server(checkpoint, "--parallel", "1", "--ctx", "2048", "--checkpoint-every", "64", "--cache-ram", "16")
    yield s
    s.stop()


def test_snapshot_serves_a_conversation_after_another_ran_in_its_slot(cache_server):
    system = "You are a careful assistant. " * 30  # a long shared prefix
    first = complete(cache_server, system + "Question one?", 6)
    complete(cache_server, "an unrelated request that takes the only slot", 4)
    # The same conversation continued: the end-of-response snapshot of the first request.
    again = complete(cache_server, system + "Question one?" + first["choices"][0]["text"] + " And then?", 6)
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == first["usage"]["prompt_tokens"] + 6 - 1
    # Another conversation with the same system text: a snapshot from every 64 tokens of it.
    other = complete(cache_server, system + "A different question?", 6)
    other_cached = other["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert other_cached > 0 and other_cached % 64 == 0
    # The cached runs give the cold run's tokens and logprobs.
    for warm, prompt in ((again, system + "Question one?" + first["choices"][0]["text"] + " And then?"),
                         (other, system + "A different question?")):
        cold = complete(cache_server, prompt, 6, cache_prompt=False)
        assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert warm["choices"][0]["logprobs"]["tokens"] == cold["choices"][0]["logprobs"]["tokens"]
        # f32 rounding at most: the cold run prefills the positions the first request decoded
        # (bit for bit with --batch-invariant: test_batch_invariant_server_...).
        for x, y in zip(warm["choices"][0]["logprobs"]["token_logprobs"], cold["choices"][0]["logprobs"]["token_logprobs"]):
            assert abs(x - y) < 1e-3
    assert metric(cache_server, "inkling_prompt_cache_snapshot_hits_total") >= 2
    assert 0 < metric(cache_server, "inkling_prompt_cache_bytes") <= 16 * 1048576


def test_snapshots_stay_within_the_cache_budget(checkpoint):
    s = Server(checkpoint, "--parallel", "1", "--ctx", "2048", "--cache-ram", "0.2", "--checkpoint-every", "32")
    try:
        for i in range(12):
            complete(s, f"prompt number {i} " * 20, 3)
        assert metric(s, "inkling_prompt_cache_bytes") <= 0.2 * 1048576
        assert metric(s, "inkling_prompt_cache_evictions_total") > 0
        assert metric(s, "inkling_prompt_cache_snapshots") >= 1
    finally:
        s.stop()


@pytest.fixture(scope="module")
def invariant_server(checkpoint):
    s = Server(checkpoint, "--parallel", "4", "--ctx", "2048", "--batch-tokens", "64", "--batch-invariant",
               "--test-step-delay-ms", "5")
    yield s
    s.stop()


def test_batch_invariant_server_gives_a_cached_next_turn_the_cold_runs_bits(invariant_server):
    system = "You are a careful assistant who answers in full sentences. " * 12  # prompt chunks of 64
    # The model "writes" plain words (a test script), so its 40 decoded tokens come back as text
    # that tokenizes to the same 40 tokens.
    script = " Sure, here is a plain answer in many simple words that go on" * 4
    first = complete(invariant_server, system + "Question one?", 40, inkling_test_script=script)
    assert "batch-invariant precision" in "\n".join(invariant_server.lines)
    prompt = system + "Question one?" + first["choices"][0]["text"] + " And then?"
    # Warm while three other conversations run beside it, so its rows share steps with theirs.
    results = run_concurrently([lambda: complete(invariant_server, prompt, 12)] +
                               [lambda p=p: complete(invariant_server, p, 12, cache_prompt=False) for p in PROMPTS[:3]])
    warm = results[0]
    # The kept state holds the 40 decoded positions, which the cold run prefills in chunks of 64.
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] + 40 - 1
    cold = complete(invariant_server, prompt, 12, cache_prompt=False)
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    w, c = warm["choices"][0]["logprobs"], cold["choices"][0]["logprobs"]
    assert w["tokens"] == c["tokens"]
    assert w["token_logprobs"] == c["token_logprobs"]
    assert w["top_logprobs"] == c["top_logprobs"]


def test_a_paced_prompt_keeps_the_streams_going_and_its_bits(checkpoint):
    """--max-step-ms far below any step: a prompt that arrives while another request generates
    advances the minimum 16 tokens a step beside it, and still gets the bits it gets alone."""
    s = Server(checkpoint, "--parallel", "2", "--ctx", "2048", "--batch-invariant", "--max-step-ms", "0.001",
               "--test-step-delay-ms", "5")
    try:
        assert "prompts cut to keep steps under 0.001 ms" in "\n".join(s.lines)
        long_prompt = " ".join(f"word{i}" for i in range(200))
        alone = complete(s, long_prompt, 8, cache_prompt=False)
        prompt_tokens = alone["usage"]["prompt_tokens"]
        assert prompt_tokens > 200
        paced0 = metric(s, "inkling_batch_paced_steps_total")
        assert paced0 == 0  # nothing generated beside the prompt: it took whole chunks
        results = {}
        streamer = threading.Thread(target=lambda: results.update(a=complete(s, "a long answer", 120, logprobs=None)))
        streamer.start()
        deadline = time.time() + 30 * TIME_SCALE
        while time.time() < deadline and not any(slot["busy"] and slot["generated"] > 0 for slot in s.get("/slots").json()):
            time.sleep(0.01)
        steps0 = metric(s, "inkling_batch_steps_total")
        paced = complete(s, long_prompt, 8, cache_prompt=False)
        steps = metric(s, "inkling_batch_steps_total") - steps0
        streamer.join(120 * TIME_SCALE)
        assert results["a"]["usage"]["completion_tokens"] == 120
        # 16 prompt tokens a step beside the decodes: at least prompt_tokens / 16 steps.
        assert metric(s, "inkling_batch_paced_steps_total") - paced0 >= prompt_tokens // 16 - 1
        assert steps >= prompt_tokens // 16
        a, b = alone["choices"][0]["logprobs"], paced["choices"][0]["logprobs"]
        assert a["tokens"] == b["tokens"]
        assert a["token_logprobs"] == b["token_logprobs"]
        assert a["top_logprobs"] == b["top_logprobs"]
    finally:
        s.stop()
