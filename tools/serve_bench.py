#!/usr/bin/env python3
"""Drives a running `inkling serve` with N concurrent streaming clients and reports time to first
token and decode speed, per client and in aggregate (a benchmark command, not a test).

    tools/serve_bench.py --url http://127.0.0.1:8080 --clients 1,4 --prompt-tokens 128 -n 64 --rounds 3

Each client sends POST /v1/completions with a distinct prompt of about --prompt-tokens tokens,
`ignore_eos` and `max_tokens` n, so every request generates exactly n tokens whatever the weights.
TTFT is measured from the request to the first streamed text; decode tok/s per client is
(n - 1) / (last token time - first token time); aggregate tok/s is all generated tokens over the
wall time from the first first-token to the last token (so it includes the prefills of clients that
start later); decode sum is the per-client rates added up. Medians over --rounds.
"""
import argparse
import json
import statistics
import threading
import time

import requests


def one_client(url, prompt, n, out, index):
    body = {"prompt": prompt, "max_tokens": n, "stream": True, "ignore_eos": True, "temperature": 0}
    start = time.perf_counter()
    first = last = None
    chunks = 0
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
                    last = now
    out[index] = dict(ttft=first - start, decode=(n - 1) / max(last - first, 1e-9), first=first, last=last, chunks=chunks)


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
    return dict(ttft=statistics.median(r["ttft"] for r in out.values()),
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
        row = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        row["clients"] = clients
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| clients | TTFT median (s) | TTFT max (s) | decode tok/s per client | decode sum tok/s | aggregate tok/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['clients']} | {r['ttft']:.3f} | {r['ttft_max']:.3f} | {r['per_client']:.2f} | {r['decode_sum']:.2f} "
              f"| {r['aggregate']:.2f} |")


if __name__ == "__main__":
    main()
