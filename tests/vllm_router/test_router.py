"""vLLM's own router (`vllm-router`, the Rust binary on PyPI) in front of two
real `ferrox serve` workers on SmolLM2, unmodified (issue 31, point 2): every
policy that applies to a single-role pool routes chat and completions, whole
and streamed, and the answers are the ones a worker gives directly. Fields the router adds
to a request (issue 31 lists `no_stop_trim`, `skip_special_tokens`, ...) go
through ferrox's field policy like any client's.

`kv_aware` runs in test_scale_out.py, on replicas publishing their KV events.

Run: python3 tests/vllm_router/test_router.py PATH/TO/ferrox
Prints "N passed, M failed".
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "openai_sdk"))
from test_server import RESULTS, Server, check, finish  # noqa: E402

MODEL = "smollm2-135m"
POLICIES = ["random", "round_robin", "cache_aware", "power_of_two", "consistent_hash", "sticky_least_loaded"]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    def __init__(self, policy, workers, *extra):
        self.port = free_port()
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [shutil.which("vllm-router"), "--host", "127.0.0.1", "--port", str(self.port), "--policy", policy,
             "--worker-urls", *[w.base for w in workers], "--prometheus-port", str(free_port()), *extra],
            stdout=self.log, stderr=subprocess.STDOUT, text=True)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(self.base + "/health", timeout=2)
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.time() > deadline or self.proc.poll() is not None:
                    self.log.seek(0)
                    raise RuntimeError("the router did not start: " + self.log.read()[-2000:])
                time.sleep(0.2)
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key="unused", max_retries=0, timeout=120)

    def remove_worker(self, worker):
        """Takes `worker` out of the router's rotation (its scale-in call)."""
        req = urllib.request.Request(self.base + "/remove_worker?url=" + worker.base, data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def direct(worker):
    chat = worker.client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=12, temperature=0)
    text = worker.client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    return chat.choices[0].message.content, text.choices[0].text


def served(workers):
    """Finished requests per worker, whatever their finish reason."""
    def count(w, reason):
        try:
            return w.metric("ferrox_requests_total", finish_reason=reason)
        except KeyError:
            return 0.0
    return [count(w, "length") + count(w, "stop") for w in workers]


def routed(policy, workers, want):
    @check(f"vllm-router --policy {policy}: chat and completions, whole and streamed, as a worker answers")
    def run(_):
        before = served(workers)
        r = Router(policy, workers)
        try:
            for _ in range(2):
                chat = r.client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=12, temperature=0)
                assert chat.choices[0].message.content == want[0], chat
                text = r.client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
                assert text.choices[0].text == want[1], text
            parts = r.client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=12, temperature=0, stream=True)
            streamed = "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
            assert streamed == want[0], streamed
        finally:
            r.stop()
        after = served(workers)
        assert sum(after) - sum(before) == 5, (before, after)
        if policy == "round_robin":
            assert all(a - b >= 2 for a, b in zip(after, before)), ("both workers serve", before, after)
    return run


def main():
    if shutil.which("vllm-router") is None:
        raise SystemExit("vllm-router is not installed (pip install vllm-router)")
    workers = [Server(), Server()]
    try:
        want = direct(workers[0])
        assert direct(workers[1]) == want
        for policy in POLICIES:
            routed(policy, workers, want)(None)
    finally:
        for w in workers:
            w.stop()
    finish()


if __name__ == "__main__":
    main()
