"""lm-eval-harness against a real `ferrox serve` on SmolLM2 (issue 29,
evaluation): its `local-completions` model scores a loglikelihood task kept in
the repository (`tests/lm_eval/tasks`, no download), tokenizing through the
server's vLLM-shaped `/tokenize` (`tokenizer_backend=remote`). Each of its
requests is `echo` with `logprobs` and `max_tokens: 1`.

Checks: the run ends with an accuracy for the task; the model picks the
sensible answer of (nearly) every item, which a misaligned or wrong score
would not; and each answer's summed log-probability equals the one ferrox's
own `echo` scoring gives for the same text.

Run: python3 tests/lm_eval/test_lm_eval.py PATH/TO/ferrox
Prints "N passed, M failed".
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "openai_sdk"))
from test_server import RESULTS, Server, check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = "smollm2-135m"
# Of twelve items, a 135M model gets the sensible choice of all but a few; a
# wrong alignment of scores to tokens gives about a third.
MIN_CORRECT = 10


def run_lm_eval(s, out):
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    args = [
        sys.executable, "-m", "lm_eval",
        "--model", "local-completions",
        "--model_args",
        f"base_url={s.base}/v1/completions,model={MODEL},tokenizer_backend=remote,"
        "tokenized_requests=True,num_concurrent=4,max_retries=1,timeout=120",
        "--tasks", "ferrox_facts",
        "--include_path", "tests/lm_eval/tasks",
        "--output_path", out,
        "--log_samples",
    ]
    p = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def results(out):
    [path] = glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True)
    with open(path) as f:
        return json.load(f)


def samples(out):
    [path] = glob.glob(os.path.join(out, "**", "samples_ferrox_facts_*.jsonl"), recursive=True)
    with open(path) as f:
        return [json.loads(line) for line in f]


def echo_score(s, context, continuation):
    """The continuation's summed log-probability, by ferrox's own echo scoring
    of the whole text (the tokens past the context's)."""
    def tokens(text):
        status, _, body = s.raw("/tokenize", json.dumps({"prompt": text}).encode())
        assert status == 200, body
        return json.loads(body)["tokens"]
    ctx, whole = tokens(context), tokens(context + continuation)
    assert whole[: len(ctx)] == ctx, (ctx, whole)
    r = s.client.completions.create(model=MODEL, prompt=whole, max_tokens=0, echo=True, logprobs=0, temperature=0)
    return sum(r.choices[0].logprobs.token_logprobs[len(ctx):])


@check("lm-eval: local-completions scores the task and picks the sensible answers")
def task(s, out):
    acc = results(out)["results"]["ferrox_facts"]["acc,none"]
    correct = round(acc * 12)
    assert correct >= MIN_CORRECT, f"{correct}/12 correct"


@check("lm-eval: each answer's log-likelihood is ferrox's own echo score of it")
def scores(s, out):
    rows = samples(out)
    assert len(rows) == 12, len(rows)
    for row in rows[:4]:
        for args, resp in zip(row["arguments"].values(), row["resps"]):
            context, continuation = args["arg_0"], args["arg_1"]
            got = float(resp[0][0])
            want = echo_score(s, context, continuation)
            assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (context, continuation, got, want)


def main():
    s = Server()
    out = tempfile.mkdtemp(prefix="ferrox-lm-eval-")
    try:
        run_lm_eval(s, out)
        task(s, out)
        scores(s, out)
    finally:
        s.stop()
        shutil.rmtree(out, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
