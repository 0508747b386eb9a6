"""Fixtures for the server suite: the real `inkling serve` binary on a tiny synthetic checkpoint.

The checkpoint has random weights, so the tests drive what the model "writes" with the server's
test-only scripted output (`--test-scripts` plus the request field `inkling_test_script`: the
text's tokens replace sampling one by one, then sampling resumes).
"""
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("INKLING_BINARY", ROOT / "build" / "inkling"))
# scripts/test_sanitizers.sh runs this suite against a sanitizer build, several times slower:
# bounds on how soon something happens are multiplied by TIME_SCALE, and SANITIZED turns off the
# RSS verdict (ASan's quarantine holds freed memory back on purpose).
TIME_SCALE = float(os.environ.get("INKLING_TEST_TIME_SCALE", "1"))
SANITIZED = os.environ.get("INKLING_TEST_SANITIZED") == "1"

# A full assistant turn in the Inkling wire format: reasoning, text, two tool calls.
REASONING_TEXT_TWO_CALLS = (
    "<|content_thinking|>The user wants weather.<|end_message|>"
    "<|message_model|><|content_text|>Let me check.<|end_message|>"
    '<|message_model|>get_weather<|content_invoke_tool_json|>{"name":"get_weather","args":{"city":"Paris"}}<|end_message|>'
    '<|message_model|>get_time<|content_invoke_tool_json|>{"name":"get_time","args":{"zone":"CET"}}<|end_message|>'
    "<|content_model_end_sampling|>"
)
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "weather for a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "description": "time in a zone",
                                      "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}},
]


def answer(text, reasoning=None):
    """A scripted turn: optional reasoning, then `text`, then the end of the turn."""
    out = ""
    if reasoning is not None:
        out += f"<|content_thinking|>{reasoning}<|end_message|><|message_model|>"
    return out + f"<|content_text|>{text}<|end_message|><|content_model_end_sampling|>"


def script(text):
    """extra_body for a client call whose output is `text` (see the module docstring)."""
    return {"inkling_test_script": text}


def wait_new_log(server, before, pattern, timeout=5.0):
    """Whether a log line written after line `before` matches `pattern` (waits for it)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(re.search(pattern, line) for line in server.lines[before:]):
            return True
        time.sleep(0.02)
    return False


def sse_events(response):
    """[(event name, data dict)] of a raw SSE body (always UTF-8); each data's type names its event."""
    events, name = [], None
    for line in response.content.decode("utf-8").splitlines():
        if line.startswith("event:"):
            name = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data = json.loads(line[len("data:"):].strip())
            assert name == data["type"], f"event name {name!r} vs data type {data['type']!r}"
            events.append((name, data))
            name = None
    return events


class Server:
    def __init__(self, checkpoint, *extra, scripts=True):
        self.args = [str(BINARY), "serve", "-m", str(checkpoint), "--port", "0", *extra]
        if scripts:
            self.args.append("--test-scripts")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                if line.startswith("ready:"):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or self.proc.poll() is not None:
            raise RuntimeError("server did not start:\n" + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self.port}"

    def log(self):
        return "\n".join(self.lines)

    def wait_log(self, pattern, timeout=5.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(re.search(pattern, line) for line in self.lines):
                return True
            time.sleep(0.02)
        return False

    def get(self, path, **kw):
        return requests.get(self.url + path, timeout=30, **kw)

    def post(self, path, body=None, **kw):
        return requests.post(self.url + path, json=body, timeout=60, **kw)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    subprocess.run([str(BINARY), "synth", str(out), "--layout", "original-bf16", "--preset", "tiny"],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def server(checkpoint):
    s = Server(checkpoint, "--parallel", "8", "--ctx", "512")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def slow_server(checkpoint):
    """Every step of a sequence sleeps 40 ms: long enough to disconnect mid-prefill or mid-stream."""
    s = Server(checkpoint, "--parallel", "2", "--ctx", "4096", "--test-step-delay-ms", "40")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def keyed_server(checkpoint):
    """Without --test-scripts: also checks that the scripted output is refused there."""
    s = Server(checkpoint, "--api-key", "sekrit-key", "--cors-origins", "http://ui.example", "--max-body", "4096",
               scripts=False)
    yield s
    s.stop()
