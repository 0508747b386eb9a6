#!/usr/bin/env python3
"""Prompt-cache benchmark against a running `inkling serve`: an agent-style conversation of
--turns turns, each adding a user message of about --new-tokens tokens and an answer of -n tokens
(a benchmark command, not a test).

    tools/prompt_cache_bench.py --url http://127.0.0.1:8080 --turns 8 --new-tokens 300 -n 32

Per turn it reports the prompt tokens, the tokens the server took from its cache
(usage.prompt_tokens_details.cached_tokens), the tokens it computed (the difference), the tokens
that are new since the previous turn's prompt and answer, and the time to first token (streamed).
At the end it sends the last turn again with "cache_prompt": false (a cold run) and reports
computed / new tokens over the conversation and the last turn's TTFT against the cold one.
"""
import argparse
import json
import time

import requests


# Common English words that are one o200k token each with their leading space, so the text has
# about one token per word.
COMMON = ("the of and to in is was for on that with as by at from his her they this have had not are but "
          "were which one all their there been has when who will more no if out so said what up its about into "
          "than them can only other new some time could these two may then do first any my now such like our over "
          "man me even most made after also did many before must through back years where much your way well down "
          "should because each just those people how too little state good very make world still own see men work "
          "long get here between both life being under never day same another know while last might us great old "
          "year off come since against go came right used take three").split()


def words(turn, count):
    # Distinct, fixed text per turn.
    return " ".join(COMMON[(turn * 131 + i * 7) % len(COMMON)] for i in range(count))


def ask(url, messages, n, cache_prompt=True):
    body = {"messages": messages, "max_tokens": n, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}, "cache_prompt": cache_prompt}
    start = time.perf_counter()
    first = None
    text, usage = "", None
    with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage = data["usage"]
            for choice in data.get("choices", []):
                delta = choice.get("delta", {})
                piece = (delta.get("content") or "") + (delta.get("reasoning") or "")
                if piece and first is None:
                    first = time.perf_counter()
                text += delta.get("content") or ""
    return dict(ttft=(first or time.perf_counter()) - start, text=text, usage=usage)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=300, help="about this many new user tokens per turn")
    parser.add_argument("-n", type=int, default=32, help="tokens answered per turn")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    messages = [{"role": "system", "content": "You are a coding agent. " + words(999, 40)}]
    rows, held = [], 0
    for turn in range(1, args.turns + 1):
        messages.append({"role": "user", "content": f"Turn {turn}: " + words(turn, args.new_tokens)})
        r = ask(args.url, messages, args.n)
        u = r["usage"]
        cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        rows.append(dict(turn=turn, prompt=u["prompt_tokens"], cached=cached, computed=u["prompt_tokens"] - cached,
                         new=u["prompt_tokens"] - held, ttft=r["ttft"]))
        held = u["prompt_tokens"] + u["completion_tokens"]
        messages.append({"role": "assistant", "content": r["text"]})
    last_messages = messages[:-1]
    cold = ask(args.url, last_messages, args.n, cache_prompt=False)
    computed = sum(r["computed"] for r in rows)
    new = sum(r["new"] for r in rows)
    summary = dict(computed=computed, new=new, ratio=computed / max(new, 1), last_ttft=rows[-1]["ttft"],
                   cold_ttft=cold["ttft"], ttft_fraction=rows[-1]["ttft"] / max(cold["ttft"], 1e-9))
    if args.json:
        print(json.dumps(dict(turns=rows, summary=summary), indent=2))
        return
    print("| turn | prompt tokens | cached | computed | new since last turn | TTFT (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['turn']} | {r['prompt']} | {r['cached']} | {r['computed']} | {r['new']} | {r['ttft']:.3f} |")
    print(f"\ncomputed {computed} of {new} new tokens ({summary['ratio']:.3f}x); turn {args.turns} TTFT "
          f"{summary['last_ttft']:.3f} s against {summary['cold_ttft']:.3f} s cold ({summary['ttft_fraction']:.3f} of it)")


if __name__ == "__main__":
    main()
