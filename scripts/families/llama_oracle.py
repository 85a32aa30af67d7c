#!/usr/bin/env python3
"""llama.cpp's tokens and greedy continuations on a family GGUF, through a real
llama-server (CPU, 2 threads, one slot): each prompt tokenized by its /tokenize
(special tokens added as the metadata asks), then /completion on the ids with
top-k 1, 32 tokens, and the top-5 log-probabilities of every step.

    llama_oracle.py LLAMA_SERVER MODEL.gguf PROMPTS.txt OUT.jsonl [--context N]

Rows: {"prompt", "prompt_ids", "ids", "top5"} as in tests/golden.
"""
import json
import socket
import subprocess
import sys
import time
import urllib.request

STEPS = 32


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main():
    args = sys.argv[1:]
    context = 4096
    if "--context" in args:
        i = args.index("--context")
        context = int(args[i + 1])
        del args[i : i + 2]
    server, model, prompts, out = args
    port = free_port()
    proc = subprocess.Popen(
        [server, "-m", model, "--port", str(port), "-t", "2", "-c", str(context), "--parallel", "1",
         "--no-warmup", "-fa", "off"],
        stdout=subprocess.DEVNULL, stderr=open(out + ".log", "w"),
    )
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.2)
        with open(prompts) as f, open(out, "w") as o:
            for text in (l.rstrip("\n") for l in f):
                if not text:
                    continue
                ids = post(port, "/tokenize", {"content": text, "add_special": True})["tokens"]
                r = post(port, "/completion", {
                    "prompt": ids, "n_predict": STEPS, "n_probs": 5, "top_k": 1, "samplers": ["top_k"],
                    "cache_prompt": False, "ignore_eos": True, "post_sampling_probs": False,
                })
                if "completion_probabilities" not in r:
                    raise SystemExit(f"{text!r}: {str(r)[:300]}")
                steps = r["completion_probabilities"]
                row = {
                    "prompt": text,
                    "prompt_ids": ids,
                    "ids": [s["id"] for s in steps],
                    "top5": [[[t["id"], t["logprob"]] for t in s["top_logprobs"]] for s in steps],
                }
                o.write(json.dumps(row) + "\n")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
