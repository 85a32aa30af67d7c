"""The official `openai` Python SDK and raw HTTP clients against a real `ferrox serve`
on SmolLM2 (issue: `ferrox serve`, SPEC S10, S11, S13, S17, S18, S19).

Run: python3 tests/openai_sdk/test_server.py PATH/TO/ferrox
Starts its own servers on free loopback ports; prints "N passed, M failed".
"""

import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai

FERROX = sys.argv[1] if len(sys.argv) > 1 else "target/debug/ferrox"
RESULTS = []


class Server:
    def __init__(self, *args):
        # The log goes to a file: a pipe nobody reads would fill and stall the server.
        self.log_file = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([FERROX, "serve", "--port", "0", *args], stdout=subprocess.PIPE, stderr=self.log_file, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://([0-9.]+:[0-9]+)", line)
        if not m:
            raise RuntimeError("server did not start: " + line + self.log())
        self.addr = m.group(1)
        self.base = f"http://{self.addr}"
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key="unused", max_retries=0, timeout=120)

    def log(self):
        """What the server has logged so far."""
        self.log_file.seek(0)
        return self.log_file.read()

    def metric(self, name, **labels):
        """The value of series `name` with these labels (every series carries `model`)."""
        text = urllib.request.urlopen(self.base + "/metrics").read().decode()
        for line in text.splitlines():
            if (line.startswith(name + " ") or line.startswith(name + "{")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.split()[-1])
        raise KeyError(name)

    def raw(self, path, body, headers=None):
        req = urllib.request.Request(self.base + path, data=body, headers=headers or {"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def raw_get(self, path):
        with urllib.request.urlopen(self.base + path) as r:
            return r.read()

    def stop(self):
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = -9
        return code


def check(name):
    def wrap(fn):
        def run(*a):
            try:
                fn(*a)
                RESULTS.append((name, None))
                print(f"PASS {name}", flush=True)
            except Exception as e:  # noqa: BLE001 - report every failure
                RESULTS.append((name, e))
                print(f"FAIL {name}: {e!r}", flush=True)
        return run
    return wrap


def run_suite(checks, *server_args):
    """Runs `checks` against one server started with `server_args`, stops it,
    prints the tally and exits non-zero when any failed."""
    s = Server(*server_args)
    try:
        for t in checks:
            t(s)
    finally:
        s.stop()
    finish()


def finish():
    """Prints the tally of every check run and exits non-zero when any failed."""
    failed = [r for r in RESULTS if r[1] is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


def wait_for(cond, what, timeout=60):
    t = time.time()
    while time.time() - t < timeout:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


@check("chat completion, non-streaming")
def chat_plain(s):
    r = s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "What is the capital of France?"}], temperature=0, max_tokens=24)
    c = r.choices[0]
    assert c.message.role == "assistant" and "Paris" in c.message.content, c
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


@check("chat completion, streaming with the usage chunk")
def chat_stream(s):
    chunks = list(s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Say hi."}], temperature=0, max_tokens=12, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0, chunks[-1]
    assert text, "no text streamed"


@check("text completion, streaming and not, same greedy text")
def completions(s):
    r = s.client.completions.create(model="smollm2-135m", prompt="The capital of France is", temperature=0, max_tokens=6)
    streamed = "".join(c.choices[0].text for c in s.client.completions.create(model="smollm2-135m", prompt="The capital of France is", temperature=0, max_tokens=6, stream=True) if c.choices)
    assert r.choices[0].text.startswith(" Paris"), r.choices[0].text
    assert streamed == r.choices[0].text, (streamed, r.choices[0].text)
    assert r.choices[0].finish_reason == "length"


@check("logprobs: chat top_logprobs and legacy completions logprobs")
def logprobs(s):
    r = s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}], temperature=0, max_tokens=4, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens and all(len(c.top_logprobs) == 2 for c in content)
    assert all(c.logprob <= 0 and c.token == c.top_logprobs[0].token for c in content), content
    t = s.client.completions.create(model="smollm2-135m", prompt="The capital of France is", temperature=0, max_tokens=3, logprobs=2)
    lp = t.choices[0].logprobs
    assert "".join(lp.tokens) == t.choices[0].text and len(lp.token_logprobs) == 3 and len(lp.top_logprobs[0]) == 2, lp
    chunks = list(s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}], temperature=0, max_tokens=3, logprobs=True, stream=True))
    assert sum(len(c.choices[0].logprobs.content) for c in chunks if c.choices and c.choices[0].logprobs) == 3


@check("a too-long request raises BadRequestError with code context_length_exceeded")
def too_long(s):
    try:
        s.client.completions.create(model="smollm2-135m", prompt="hello", max_tokens=100000)
    except openai.BadRequestError as e:
        assert e.code == "context_length_exceeded", e.code
        body = e.body
        for k in ("positions", "positions_limit", "estimated_bytes", "limit_bytes", "n_prompt_tokens", "n_ctx"):
            assert k in body, (k, body)
        return
    raise AssertionError("no error")


@check("32 concurrent clients get exactly their one-at-a-time outputs; KV blocks back to 0")
def concurrent_clients(s):
    prompts = [f"Count from {i} to {i + 5}:" for i in range(32)]

    def one(p):
        return s.client.completions.create(model="smollm2-135m", prompt=p, temperature=0, max_tokens=8).choices[0].text

    alone = [one(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        together = list(ex.map(one, prompts))
    assert alone == together, [(a, b) for a, b in zip(alone, together) if a != b][:3]
    wait_for(lambda: s.metric("ferrox_kv_blocks_in_use") == 0, "blocks to come back")


def open_request(s, body):
    sock = socket.create_connection(tuple([s.addr.split(":")[0], int(s.addr.split(":")[1])]))
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return sock


@check("clients that drop mid-prefill and mid-stream are cancelled and their blocks come back")
def disconnects(s):
    before = s.metric("ferrox_aborted_requests_total")
    sock = open_request(s, {"prompt": "word " * 2000, "max_tokens": 4})
    wait_for(lambda: s.metric("ferrox_requests_running") >= 1, "the long prompt to be admitted")
    sock.close()
    sock = open_request(s, {"prompt": "Tell me a long story.", "max_tokens": 3000, "stream": True})
    sock.recv(200)
    sock.close()
    wait_for(lambda: s.metric("ferrox_aborted_requests_total") >= before + 2, "both cancellations")
    wait_for(lambda: s.metric("ferrox_kv_blocks_in_use") == 0, "blocks to come back")


@check("hostile bodies get a 4xx naming the problem, and the server keeps serving")
def hostile(s):
    cases = [
        (b"{not json", "invalid JSON"),
        (b'{"prompt": 5}', "prompt"),
        (b'{"prompt": "x", "max_tokens": -3}', "max_tokens"),
        (b'{"prompt": "x", "temperature": "warm"}', "temperature"),
        (b'{"prompt": "x", "temperature": NaN}', "invalid JSON"),
        (b'{"prompt": "x", "max_tokens": 99999999999}', "context"),
        (b'{"prompt": "\xff\xfe"}', "invalid JSON"),
        (b'{"prompt": "x", "n": 17}', "n must be between 1 and 16"),
        (b'{"prompt": [99999999]}', "vocabulary"),
        (b'[]', "JSON object"),
        (b'{"prompt": "' + b"a" * (10 * 1024 * 1024) + b'"}', "too large"),
    ]
    for body, want in cases:
        status, _, out = s.raw("/v1/completions", body)
        assert 400 <= status < 500, (body[:40], status)
        msg = json.loads(out)["error"]["message"]
        assert want.lower() in msg.lower(), (body[:40], msg)
    # One model served: any model name is answered, by the served model.
    status, _, out = s.raw("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "model": "gpt-9", "max_tokens": 2}')
    assert status == 200 and json.loads(out)["model"] == "smollm2-135m", out
    r = s.client.completions.create(model="smollm2-135m", prompt="Still alive?", temperature=0, max_tokens=2)
    assert r.choices[0].text


@check("a full queue answers 503 with Retry-After and is counted apart")
def queue_full(_):
    s = Server("--max-seqs", "1", "--max-queue", "1")
    try:
        long_body = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": True}
        first = open_request(s, long_body)
        wait_for(lambda: s.metric("ferrox_requests_running") == 1, "the first request to run")
        second = open_request(s, long_body)
        wait_for(lambda: s.metric("ferrox_queue_depth") == 1, "the second request to wait")
        try:
            s.client.completions.create(model="smollm2-135m", prompt="third", max_tokens=2)
            raise AssertionError("no 503")
        except openai.APIStatusError as e:
            assert e.status_code == 503, e.status_code
            assert e.response.headers.get("retry-after") == "1", e.response.headers
            assert e.code == "queue_full", e.code
        assert s.metric("ferrox_refused_requests_total", code="queue_full") == 1
        first.close()
        second.close()
    finally:
        s.stop()


@check("an API key is required when set")
def api_key(_):
    s = Server("--api-key", "sesame")
    try:
        status, _, out = s.raw("/v1/models", b"{}")
        req = urllib.request.Request(s.base + "/v1/models")
        try:
            urllib.request.urlopen(req)
            raise AssertionError("no 401")
        except urllib.error.HTTPError as e:
            assert e.code == 401 and json.loads(e.read())["error"]["code"] == "invalid_api_key"
        ok = openai.OpenAI(base_url=s.base + "/v1", api_key="sesame", max_retries=0).models.list()
        assert ok.data[0].id == "smollm2-135m"
        assert urllib.request.urlopen(s.base + "/health").status == 200
    finally:
        assert s.stop() == 0, "SIGTERM exits 0"


@check("model identity: a file's id is its stem, --alias names it too, models.retrieve finds both, any name is answered")
def model_identity(_):
    listing = subprocess.run([FERROX, "models"], capture_output=True, text=True, check=True).stdout
    path = re.search(r"cached\s+(\S+SmolLM2\S+\.gguf)", listing).group(1)
    s = Server("-m", path, "--alias", "my-model", "--alias", "second")
    try:
        ids = [m.id for m in s.client.models.list().data]
        assert ids == ["SmolLM2-135M-Instruct.Q4_1"], ids
        assert s.client.models.retrieve("my-model").id == ids[0]
        assert s.client.models.retrieve(ids[0]).id == ids[0]
        try:
            s.client.models.retrieve("nope")
            raise AssertionError("no 404")
        except openai.NotFoundError as e:
            assert e.body["code"] == "model_not_found", e.body
        for name in ("second", "llama3.2:latest"):
            r = s.client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
            assert r.model == ids[0], r.model
    finally:
        assert s.stop() == 0, "SIGTERM exits 0"


@check("the log: one JSON line per request and refusal, prompts only with --log-prompts, a summary at shutdown")
def log_lines(_):
    for extra, prompts in (([], False), (["--log-prompts"], True)):
        s = Server("--log-format", "json", *extra)
        try:
            r = s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Say the word pelican."}], max_tokens=4)
            try:
                s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "x"}], top_p=9)
            except openai.BadRequestError:
                pass
        finally:
            assert s.stop() == 0
        lines = [json.loads(l) for l in s.log().splitlines()]
        req = [l for l in lines if l.get("message") == "request"]
        assert len(req) == 1 and req[0]["id"] == r.id, (r.id, lines)
        line = req[0]
        assert line["route"] == "/v1/chat/completions" and line["status"] == 200 and line["outcome"] == "finished", line
        assert line["prompt_tokens"] == r.usage.prompt_tokens and line["generated_tokens"] == r.usage.completion_tokens, line
        assert line["finish"] == r.choices[0].finish_reason and line["ttft_ms"] <= line["duration_ms"], line
        assert ("pelican" in line.get("prompt", "")) == prompts, line
        assert not prompts or "<|im_start|>user" in line["prompt"], line
        refused = [l for l in lines if l.get("message") == "refused"]
        assert len(refused) == 1 and refused[0]["status"] == 400 and "top_p" in refused[0]["error"], refused
        end = lines[-1]
        assert end["message"] == "ferrox stopped" and end["finished"] == 1 and end["refused"] == 1 and end["aborted"] == 0, end
    # The default is text, and RUST_LOG filters it.
    s = Server()
    s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    s.stop()
    text = s.log()
    assert "INFO ferrox::request: request" in text and "outcome=\"finished\"" in text, text
    os.environ["RUST_LOG"] = "warn"
    try:
        s = Server()
        s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        s.stop()
    finally:
        del os.environ["RUST_LOG"]
    assert "request" not in s.log(), s.log()


def main():
    s = Server()
    try:
        for t in (chat_plain, chat_stream, completions, logprobs, too_long, concurrent_clients, disconnects, hostile):
            t(s)
    finally:
        code = s.stop()
    RESULTS.append(("graceful shutdown exits 0", None if code == 0 else AssertionError(f"exit {code}")))
    queue_full(None)
    api_key(None)
    model_identity(None)
    log_lines(None)
    finish()


if __name__ == "__main__":
    main()
