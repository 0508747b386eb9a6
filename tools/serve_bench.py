#!/usr/bin/env python3
"""Drives a running `inkling serve` with N concurrent streaming clients and reports throughput, time
to first token and inter-token latency percentiles, as vLLM's serving benchmark does (a benchmark
command, not a test).

    tools/serve_bench.py --url http://127.0.0.1:8080 --clients 1,4,16 --prompt-tokens 128 -n 64 --rounds 3

Each client sends POST /v1/completions with a distinct prompt of about --prompt-tokens tokens,
`ignore_eos` and `max_tokens` n, so every request generates exactly n tokens whatever the weights.
TTFT is measured from the request to the first streamed text; decode tok/s per client is
(n - 1) / (last token time - first token time); aggregate tok/s is all generated tokens over the
wall time from the first first-token to the last token (so it includes the prefills of clients that
start later); decode sum is the per-client rates added up; throughput is all generated tokens over
the round's wall time from the first request sent. Those are medians over --rounds. TTFT and ITL
(the gap between consecutive streamed tokens of one request) p50 / p99 are over every request and
every gap of all rounds. The prompt set is fixed (the same text for the same client, round and
size), so runs are comparable.
"""
import argparse
import json
import statistics
import threading
import time

import requests


def percentile(values, q):
    """The q-th percentile with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def one_client(url, prompt, n, out, index):
    body = {"prompt": prompt, "max_tokens": n, "stream": True, "ignore_eos": True, "temperature": 0}
    start = time.perf_counter()
    first = last = None
    chunks = 0
    gaps = []
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("choices") and data["choices"][0].get("text") is not None:
                now = time.perf_counter()
                if data["choices"][0]["finish_reason"] is None:
                    chunks += 1
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last = now
    out[index] = dict(ttft=first - start, decode=(n - 1) / max(last - first, 1e-9), first=first, last=last,
                      chunks=chunks, gaps=gaps, start=start)


def round_of(url, clients, prompt_tokens, n, round_index):
    prompts = [f"Client {i} round {round_index}: " + " ".join(f"word{(i * 7 + j) % 97}" for j in range(prompt_tokens))
               for i in range(clients)]
    out = {}
    threads = [threading.Thread(target=one_client, args=(url, prompts[i], n, out, i)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = min(r["first"] for r in out.values())
    last = max(r["last"] for r in out.values())
    sent = min(r["start"] for r in out.values())
    return dict(ttfts=[r["ttft"] for r in out.values()], gaps=[g for r in out.values() for g in r["gaps"]],
                throughput=clients * n / max(last - sent, 1e-9),
                ttft=statistics.median(r["ttft"] for r in out.values()),
                ttft_max=max(r["ttft"] for r in out.values()),
                per_client=statistics.median(r["decode"] for r in out.values()),
                decode_sum=sum(r["decode"] for r in out.values()),
                aggregate=clients * (n - 1) / max(last - first, 1e-9))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--clients", default="1,4", help="comma-separated concurrency levels")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="about this many prompt tokens per client")
    parser.add_argument("-n", type=int, default=64, help="tokens generated per client")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    requests.post(args.url + "/v1/completions", json={"prompt": "warm up", "max_tokens": 4}, timeout=600).raise_for_status()
    rows = []
    for clients in [int(c) for c in args.clients.split(",")]:
        rounds = [round_of(args.url, clients, args.prompt_tokens, args.n, r) for r in range(args.rounds)]
        row = {k: statistics.median(r[k] for r in rounds) for k in rounds[0] if k not in ("ttfts", "gaps")}
        ttfts = [t for r in rounds for t in r["ttfts"]]
        gaps = [g for r in rounds for g in r["gaps"]]
        row.update(ttft_p50=percentile(ttfts, 50), ttft_p99=percentile(ttfts, 99),
                   itl_p50=percentile(gaps, 50), itl_p99=percentile(gaps, 99))
        row["clients"] = clients
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| clients | throughput tok/s | TTFT p50 (s) | TTFT p99 (s) | ITL p50 (ms) | ITL p99 (ms) "
          "| decode tok/s per client | decode sum tok/s | aggregate tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['clients']} | {r['throughput']:.2f} | {r['ttft_p50']:.3f} | {r['ttft_p99']:.3f} "
              f"| {1000 * r['itl_p50']:.1f} | {1000 * r['itl_p99']:.1f} | {r['per_client']:.2f} "
              f"| {r['decode_sum']:.2f} | {r['aggregate']:.2f} |")


if __name__ == "__main__":
    main()
