#!/usr/bin/env python3
"""Soak test for `inkling serve` (issue 21): many streaming clients for minutes, then clients that
vanish mid-stream, while the server's memory, descriptors and threads are sampled.

  tools/load_test.py --binary build/inkling --minutes 10 --clients 32 [--json out.json]

Starts its own server on a tiny synthetic checkpoint (written to a temporary directory) unless
--model is given. Half the clients stream chat completions, half raw completions. Passes when
every request completes with a finish reason, no inter-token gap of a raw completion (between two
streamed tokens; the wait for the first token is reported apart, as time to first token) exceeds
--max-stall seconds, all slots are free after the cut-off clients, and descriptors and
threads return to their level before the load; prints the RSS curve so a plateau can be judged.
A chat stream's gaps are reported but not judged: the chat format's markup (a role token, then a
tool name) is held back until it resolves, and a random-weight model can write one that never
does, so a chat stream may rightly go quiet while its tokens are still being generated. Every
token of a raw completion is streamed, so its gaps are the server's.
The prompt cache is meant to fill up to --cache-ram (every request leaves snapshots), so the
verdict is on the RSS less the cache's bytes (from /metrics): in the last quarter it grows less
than --rss-slack MiB over the second quarter.
"""
import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def start_server(binary, model, clients, ctx, server_log, cache_ram=None):
    args = [binary, "serve", "-m", model, "--port", "0", "--parallel", str(clients), "--ctx", str(ctx)]
    if cache_ram is not None:
        args += ["--cache-ram", str(cache_ram)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if line.startswith("ready:"):
            break
    else:
        raise RuntimeError("server did not start:\n" + "".join(lines))
    # Keep draining the log (one line per request) so the pipe never fills; keep it when asked.
    def drain():
        sink = open(server_log, "w") if server_log else None
        for line in proc.stderr:
            if sink:
                sink.write(f"{time.time():.3f} {line}")
                sink.flush()
    threading.Thread(target=drain, daemon=True).start()
    return proc, port


def proc_figures(pid):
    status = open(f"/proc/{pid}/status").read()
    rss_kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kb / 1024.0, fds, threads


def stream_once(port, max_tokens, seed, cut_after=None, chat=True):
    """One streaming request over a raw socket: a chat completion, or a raw completion.

    Returns (finish_reason, visible tokens, time to the first token, the longest gap between two
    data lines after the first token, the generated tokens the usage reports)."""
    if chat:
        path = b"/v1/chat/completions"
        request = {"messages": [{"role": "user", "content": "Tell me a story number %d." % seed}]}
    else:
        path = b"/v1/completions"
        request = {"prompt": "Story number %d:" % seed}
    request.update({"stream": True, "max_tokens": max_tokens, "temperature": 0.8, "seed": seed,
                    "stream_options": {"include_usage": True}})
    body = json.dumps(request).encode()
    sent = time.time()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % path
                 + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    reader = sock.makefile("rb")
    finish, tokens, first_token_at, last, max_gap, generated = None, 0, None, None, 0.0, None
    try:
        for raw in reader:
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            now = time.time()
            if last is not None:
                max_gap = max(max_gap, now - last)
            if line == b"data: [DONE]":
                break
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                generated = chunk["usage"].get("completion_tokens")
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                if choice.get("text") or delta.get("content") or delta.get("reasoning_content"):
                    tokens += 1
                    if first_token_at is None:
                        first_token_at = now
                finish = choice.get("finish_reason") or finish
            if first_token_at is not None:
                last = now
            if cut_after is not None and tokens >= cut_after:
                return "cut", tokens, first_token_at - sent, max_gap, generated
    finally:
        reader.close()
        sock.close()
    return finish, tokens, (first_token_at or time.time()) - sent, max_gap, generated


def prompt_cache_mib(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        m = re.search(r"^inkling_prompt_cache_bytes (\S+)$", r.read().decode(), re.M)
    return float(m.group(1)) / 1048576.0 if m else 0.0


def get_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return json.loads(r.read())


def percentile(values, q):
    return round(sorted(values)[int(q * (len(values) - 1))], 3) if values else None


def run(binary, model, minutes, clients, ctx, max_stall, rss_slack, sample_every, server_log=None, cache_ram=None,
        log=print):
    proc, port = start_server(binary, model, clients, ctx, server_log, cache_ram)
    try:
        # Threads started on first use (the kernels' pool, the HTTP workers) are not a leak: the
        # baseline is taken after a few requests.
        for i in range(4):
            stream_once(port, 8, i)
        time.sleep(0.5)
        base_rss, base_fds, base_threads = proc_figures(proc.pid)
        log(f"server pid {proc.pid} on port {port}: RSS {base_rss:.1f} MiB, {base_fds} fds, {base_threads} threads")
        stop_at = time.time() + minutes * 60
        results, errors, gaps, chat_gaps, ttfts = [], [], [], [], []
        chat_longest = (0.0, 0, 0)  # (gap, visible tokens, generated tokens) of the chat stream with the longest gap
        lock = threading.Lock()

        def client(index):
            nonlocal chat_longest
            rng = random.Random(index)
            chat = index % 2 == 0
            while time.time() < stop_at:
                try:
                    asked_at = time.time()
                    finish, tokens, ttft, gap, generated = stream_once(port, rng.randint(8, 200),
                                                                       rng.randint(0, 1 << 30), chat=chat)
                    with lock:
                        results.append((finish, tokens))
                        if chat:
                            chat_gaps.append(gap)
                            chat_longest = max(chat_longest, (gap, tokens, generated), key=lambda g: g[0])
                        else:
                            gaps.append(gap)
                        ttfts.append((ttft, asked_at))
                        if finish not in ("stop", "length", "tool_calls"):
                            errors.append(f"client {index}: finish_reason {finish!r}")
                except Exception as e:  # a refused or broken connection is a failure to report
                    with lock:
                        errors.append(f"client {index}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
        started = time.time()
        for t in threads:
            t.start()
        curve = []
        while any(t.is_alive() for t in threads):
            time.sleep(sample_every)
            rss, fds, nthreads = proc_figures(proc.pid)
            cache = prompt_cache_mib(port)
            with lock:
                done = len(results)
            curve.append({"t": round(time.time() - started, 1), "rss_mib": round(rss, 1),
                          "prompt_cache_mib": round(cache, 1), "rss_less_cache_mib": round(rss - cache, 1),
                          "fds": fds, "threads": nthreads, "requests": done})
            log(f"  t={curve[-1]['t']:7.1f}s  RSS {rss:8.1f} MiB (prompt cache {cache:6.1f})  fds {fds:4d}  "
                f"threads {nthreads:4d}  requests {done}")
        for t in threads:
            t.join()

        # Clients that vanish mid-stream: every slot must come free.
        cut_errors = []

        def cutter(i):
            try:
                stream_once(port, 400, 1000 + i, cut_after=2)
            except Exception as e:
                cut_errors.append(f"{type(e).__name__}: {e}")

        cut_threads = [threading.Thread(target=cutter, args=(i,)) for i in range(100)]
        for i, t in enumerate(cut_threads):
            t.start()
            if i % clients == clients - 1:
                time.sleep(0.2)
        for t in cut_threads:
            t.join(120)
        deadline = time.time() + 15
        busy = None
        while time.time() < deadline:
            busy = [s for s in get_json(port, "/slots") if s["busy"]]
            if not busy:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        end_rss, end_fds, end_threads = proc_figures(proc.pid)
        health = get_json(port, "/health")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()

    quarter = max(1, len(curve) // 4)
    second_quarter = statistics.median(p["rss_less_cache_mib"] for p in curve[quarter:2 * quarter] or curve)
    last_quarter = statistics.median(p["rss_less_cache_mib"] for p in curve[-quarter:])
    report = {
        "minutes": minutes, "clients": clients, "requests": len(results), "errors": errors[:20],
        "error_count": len(errors), "max_inter_token_gap_s": round(max(gaps), 3) if gaps else None,
        "p99_inter_token_gap_s": percentile(gaps, 0.99),
        "chat_max_visible_gap_s": round(max(chat_gaps), 3) if chat_gaps else None,
        "chat_p99_visible_gap_s": percentile(chat_gaps, 0.99),
        "chat_longest_gap_stream": {"gap_s": round(chat_longest[0], 3), "visible_tokens": chat_longest[1],
                                    "generated_tokens": chat_longest[2]},
        "time_to_first_token_s": {"p50": percentile([t for t, _ in ttfts], 0.5),
                                  "p99": percentile([t for t, _ in ttfts], 0.99),
                                  "max": round(max(t for t, _ in ttfts), 3) if ttfts else None,
                                  "slowest_asked_at_unix": max(ttfts)[1] if ttfts else None},
        "cut_off_clients": 100, "cut_off_errors": cut_errors[:5], "busy_slots_after_cut_offs": len(busy or []),
        "rss_mib": {"start": round(base_rss, 1), "end": round(end_rss, 1)},
        "rss_less_prompt_cache_mib": {"second_quarter_median": second_quarter, "last_quarter_median": last_quarter},
        "prompt_cache_mib_at_end": curve[-1]["prompt_cache_mib"] if curve else None,
        "fds": {"start": base_fds, "end": end_fds}, "threads": {"start": base_threads, "end": end_threads},
        "health_after": health, "curve": curve,
    }
    failures = []
    if errors:
        failures.append(f"{len(errors)} requests failed")
    if gaps and max(gaps) > max_stall:
        failures.append(f"an inter-token gap of {max(gaps):.2f}s exceeds {max_stall}s")
    if busy:
        failures.append(f"{len(busy)} slots still busy after the cut-off clients")
    if end_fds > base_fds + 2:
        failures.append(f"descriptors grew from {base_fds} to {end_fds}")
    if end_threads > base_threads:
        failures.append(f"threads grew from {base_threads} to {end_threads}")
    if last_quarter - second_quarter > rss_slack:
        failures.append(f"RSS less the prompt cache still growing: {second_quarter:.1f} -> {last_quarter:.1f} MiB")
    if health != {"status": "ok"}:
        failures.append(f"/health after the load: {health}")
    report["failures"] = failures
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/inkling")
    ap.add_argument("--model", help="checkpoint directory (default: a tiny synthetic one)")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--max-stall", type=float, default=5.0)
    ap.add_argument("--rss-slack", type=float, default=16.0, help="MiB the RSS may still grow late in the run")
    ap.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS samples")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--cache-ram", type=int, help="the server's prompt-cache budget in MiB (a small one fills within "
                    "the run, so the whole RSS must level off; default: the server's)")
    ap.add_argument("--server-log", help="keep the server's log here, each line stamped with the Unix time")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if not model:
            model = os.path.join(tmp, "tiny")
            subprocess.run([a.binary, "synth", model, "--layout", "original-bf16", "--preset", "tiny"],
                           check=True, capture_output=True)
        report = run(a.binary, model, a.minutes, a.clients, a.ctx, a.max_stall, a.rss_slack, a.sample_every,
                     server_log=a.server_log, cache_ram=a.cache_ram)
    summary = {k: v for k, v in report.items() if k != "curve"}
    print(json.dumps(summary, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2)
    if report["failures"]:
        print("FAILED: " + "; ".join(report["failures"]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
