#!/usr/bin/env python3
"""Scores continuations against a reference as tests/golden's bars do: greedy
continuations identical, and the mean absolute top-5 log-prob error over the
steps where the prefix still agrees (top-5 ids matched by id).

    compare.py REFERENCE.jsonl OTHER.jsonl LABEL
"""
import json
import sys


def entry(e):
    return e if isinstance(e, dict) else {"id": e[0], "logprob": e[1]}


def rows(p):
    out = [json.loads(l) for l in open(p) if l.strip()]
    for r in out:
        r["top5"] = [[entry(e) for e in step] for step in r["top5"]]
    return out


def main():
    ref, other, label = sys.argv[1:]
    same, err, n = 0, 0.0, 0
    a, b = rows(ref), rows(other)
    for x, y in zip(a, b):
        assert x["prompt_ids"] == y["prompt_ids"], "prompts differ"
        same += x["ids"] == y["ids"]
        for step, (tx, ty) in enumerate(zip(x["top5"], y["top5"])):
            if x["ids"][:step] != y["ids"][:step]:
                break
            got = {e["id"]: e["logprob"] for e in ty}
            for e in tx:
                if e["id"] in got:
                    err += abs(e["logprob"] - got[e["id"]])
                    n += 1
    print(f"{label}: {same}/{len(a)} identical, mean top-5 error {err / max(n, 1):.5f} nats over {n} values")


if __name__ == "__main__":
    main()
