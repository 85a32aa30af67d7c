"""Reliability runs against a real `ferrox serve` (issue 15): load held, faults
survived, bad inputs tried, nothing lost, duplicated or cross-wired.

Run: python3 tests/reliability/run.py PATH/TO/ferrox [--full] [--json OUT]

Every client checks its own answers against the greedy reference of its own
prompt (computed first, one request at a time; SPEC S3 makes a batched answer
bit-identical), so an answer delivered to the wrong client is caught.

Scenarios (short / full sizes):
  soak      C clients, mixed streaming and plain, some aborting mid-stream;
            afterwards nothing runs and no KV block is held.
  storm     a burst far over --max-seqs + --max-queue: each request is served
            correctly or refused with 503 + Retry-After, never anything else.
  turnover  11 clients that resend at once under --max-seqs 4 --max-queue 8:
            0 refusals (F2).
  hostile   malformed, oversized, slow and half-sent requests: 4xx or closed,
            and the server serves normally afterwards.
  shutdown  SIGTERM with streams running past the grace period: every stream
            ends complete or with an error event (never a bare [DONE]), plain
            requests get 503 + Retry-After, the exit code is 0 (F1).
"""

import concurrent.futures
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import openai

FERROX = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "target/debug/ferrox"
FULL = "--full" in sys.argv
JSON_OUT = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
SIZE = {
    "soak_clients": 32 if FULL else 8,
    "soak_seconds": 480 if FULL else 40,
    "storm_requests": 2000 if FULL else 300,
    "turnover_requests": 150,
}
FIGURES = {}
FAILURES = []

PROMPTS = [f"Write one short sentence about the number {i}." for i in range(24)]
MAX_TOKENS = 12


class Server:
    def __init__(self, *args):
        # The log goes to a file: a pipe nobody reads would fill and stall the server.
        self.log_file = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([FERROX, "serve", "--port", "0", *args], stdout=subprocess.PIPE, stderr=self.log_file, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://([0-9.]+):([0-9]+)", line)
        if not m:
            raise RuntimeError("server did not start: " + line + self.log())
        self.host, self.port = m.group(1), int(m.group(2))
        self.client = openai.OpenAI(base_url=f"http://{self.host}:{self.port}/v1", api_key="unused", max_retries=0, timeout=300)

    def log(self):
        """What the server has logged so far."""
        self.log_file.seek(0)
        return self.log_file.read()

    def metric(self, name):
        c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split()[-1])
        raise KeyError(name)

    def post(self, body, path="/v1/chat/completions"):
        c = http.client.HTTPConnection(self.host, self.port, timeout=300)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL", what, flush=True)


def ask(client, i, stream):
    msgs = [{"role": "user", "content": PROMPTS[i]}]
    if not stream:
        r = client.chat.completions.create(model="smollm2-135m", messages=msgs, temperature=0, max_tokens=MAX_TOKENS)
        return r.choices[0].message.content
    text = ""
    for ch in client.chat.completions.create(model="smollm2-135m", messages=msgs, temperature=0, max_tokens=MAX_TOKENS, stream=True):
        if ch.choices:
            text += ch.choices[0].delta.content or ""
    return text


def references(s):
    return [ask(s.client, i, False) for i in range(len(PROMPTS))]


def wait_idle(s):
    for _ in range(500):
        if s.metric("ferrox_requests_running") == 0:
            return
        time.sleep(0.02)


def soak(refs):
    s = Server()
    counts = {"served": 0, "aborted": 0, "wrong": 0}
    lock = threading.Lock()
    end = time.time() + SIZE["soak_seconds"]

    def client(c):
        n = 0
        while time.time() < end:
            i = (c * 7 + n) % len(PROMPTS)
            n += 1
            if n % 5 == 0:
                stream = s.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": PROMPTS[i]}], temperature=0, max_tokens=200, stream=True)
                for _ in zip(range(2), stream):
                    pass
                stream.close()
                with lock:
                    counts["aborted"] += 1
                continue
            got = ask(s.client, i, n % 2 == 0)
            with lock:
                counts["served"] += 1
                if got != refs[i]:
                    counts["wrong"] += 1

    with concurrent.futures.ThreadPoolExecutor(SIZE["soak_clients"]) as ex:
        list(ex.map(client, range(SIZE["soak_clients"])))
    wait_idle(s)
    held = s.metric("ferrox_kv_blocks_in_use")
    FIGURES["soak"] = {**counts, "clients": SIZE["soak_clients"], "seconds": SIZE["soak_seconds"], "kv_blocks_in_use_after": held}
    expect(counts["wrong"] == 0, f"soak: {counts['wrong']} answers differ from their greedy reference")
    expect(held == 0, f"soak: {held} KV blocks still in use after the run")
    expect(s.stop() == 0, "soak: exit code")


def storm(refs):
    s = Server("--max-seqs", "4", "--max-queue", "8")
    tally = {"served": 0, "refused_503": 0, "wrong": 0, "other": 0, "no_retry_after": 0}
    lock = threading.Lock()

    def one(k):
        i = k % len(PROMPTS)
        status, headers, body = s.post({"messages": [{"role": "user", "content": PROMPTS[i]}], "temperature": 0, "max_tokens": MAX_TOKENS})
        with lock:
            if status == 200:
                tally["served"] += 1
                if json.loads(body)["choices"][0]["message"]["content"] != refs[i]:
                    tally["wrong"] += 1
            elif status == 503:
                tally["refused_503"] += 1
                if "retry-after" not in headers:
                    tally["no_retry_after"] += 1
            else:
                tally["other"] += 1

    with concurrent.futures.ThreadPoolExecutor(64) as ex:
        list(ex.map(one, range(SIZE["storm_requests"])))
    wait_idle(s)
    FIGURES["storm"] = {**tally, "requests": SIZE["storm_requests"]}
    expect(tally["served"] + tally["refused_503"] == SIZE["storm_requests"], f"storm: lost requests {tally}")
    expect(tally["wrong"] == 0 and tally["other"] == 0 and tally["no_retry_after"] == 0, f"storm: {tally}")
    expect(s.metric("ferrox_kv_blocks_in_use") == 0, "storm: KV blocks held after the run")
    expect(s.stop() == 0, "storm: exit code")


def turnover(refs):
    s = Server("--max-seqs", "4", "--max-queue", "8")
    per = SIZE["turnover_requests"] // 11 + 1
    tally = {"served": 0, "refused": 0, "wrong": 0}
    lock = threading.Lock()

    def client(c):
        for n in range(per):
            i = (c + n) % len(PROMPTS)
            status, _, body = s.post({"messages": [{"role": "user", "content": PROMPTS[i]}], "temperature": 0, "max_tokens": MAX_TOKENS})
            with lock:
                if status == 200:
                    tally["served"] += 1
                    tally["wrong"] += json.loads(body)["choices"][0]["message"]["content"] != refs[i]
                else:
                    tally["refused"] += 1

    with concurrent.futures.ThreadPoolExecutor(11) as ex:
        list(ex.map(client, range(11)))
    FIGURES["turnover"] = {**tally, "clients": 11, "max_seqs": 4, "max_queue": 8}
    expect(tally["refused"] == 0 and tally["wrong"] == 0, f"turnover: {tally}")
    expect(s.stop() == 0, "turnover: exit code")


HOSTILE = [
    b"{oops",
    b"[]",
    b'{"messages": "hi"}',
    b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}',
    b'{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}',
    b'{"messages": [{"role": "wizard", "content": "hi"}]}',
    b'{"messages": [{"role": "user", "content": "hi"}], "n": 99}',
    b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 99999999}',
    b'{"prompt": [[999999999]]}',
    b"\xff\xfe\x00garbage",
    b'{"messages": [{"role": "user", "content": "' + b"a" * (5 << 20) + b'"}]}',
]


def raw(s, data, timeout=20):
    c = socket.create_connection((s.host, s.port), timeout=timeout)
    c.sendall(data)
    out = b""
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        out += b"<timeout>"
    c.close()
    return out


def hostile(refs):
    s = Server("--header-timeout", "2", "--body-timeout", "2")
    statuses = []
    for body in HOSTILE:
        path = "/v1/completions" if b"prompt" in body else "/v1/chat/completions"
        c = http.client.HTTPConnection(s.host, s.port, timeout=60)
        try:
            c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            status = c.getresponse().status
        except (ConnectionError, http.client.HTTPException):
            status = "closed"
        statuses.append(status)
    slow = [
        raw(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"),
        raw(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"),
        raw(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n{"),
        raw(s, b"GARBAGE\r\n\r\n"),
    ]
    ok_4xx = all(isinstance(x, int) and 400 <= x < 500 for x in statuses)
    slow_ok = all(b"<timeout>" not in r and b"200 OK" not in r for r in slow)
    after = ask(s.client, 3, True)
    FIGURES["hostile"] = {"bodies": len(HOSTILE), "statuses": statuses, "slow_or_broken_connections": len(slow), "served_after": after == refs[3]}
    expect(ok_4xx, f"hostile: statuses {statuses}")
    expect(slow_ok, f"hostile: slow connections not closed: {[r[:60] for r in slow]}")
    expect(after == refs[3], "hostile: the server serves correctly afterwards")
    expect(s.stop() == 0, "hostile: exit code")


def shutdown(refs):
    s = Server("--shutdown-grace", "1")
    results = {}

    def stream(k):
        c = http.client.HTTPConnection(s.host, s.port, timeout=120)
        body = {"prompt": PROMPTS[k], "max_tokens": 400, "ignore_eos": True, "stream": True}
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        data = [l[6:] for l in c.getresponse().read().decode().splitlines() if l.startswith("data: ")]
        results[("stream", k)] = data

    def plain(k):
        status, headers, body = s.post({"prompt": PROMPTS[k], "max_tokens": 400, "ignore_eos": True}, "/v1/completions")
        results[("plain", k)] = (status, headers.get("retry-after"), body)

    threads = [threading.Thread(target=stream, args=(k,)) for k in range(3)] + [threading.Thread(target=plain, args=(k,)) for k in range(3, 5)]
    for t in threads:
        t.start()
    for _ in range(500):
        if s.metric("ferrox_requests_running") >= 5:
            break
        time.sleep(0.02)
    code = s.stop()
    for t in threads:
        t.join(60)
    log = s.log()
    cut_streams = sum(1 for k, v in results.items() if k[0] == "stream" and v and "[DONE]" not in v and "server_shutting_down" in v[-1])
    bare_done = sum(1 for k, v in results.items() if k[0] == "stream" and "[DONE]" in v and not any('"finish_reason":"' in e for e in v))
    cut_plain = sum(1 for k, v in results.items() if k[0] == "plain" and v[0] == 503 and v[1] == "1")
    FIGURES["shutdown"] = {"streams_cut_with_error_event": cut_streams, "streams_bare_done": bare_done, "plain_cut_503_retry_after": cut_plain, "exit_code": code, "log": [l for l in log.splitlines() if "cut off" in l or "shutting down" in l]}
    expect(cut_streams == 3 and bare_done == 0, f"shutdown: streams {results}")
    expect(cut_plain == 2, f"shutdown: plain {[(k, v[:2]) for k, v in results.items() if k[0] == 'plain']}")
    expect(code == 0, f"shutdown: exit code {code}")
    expect(any("cut off 5" in l for l in log.splitlines()), f"shutdown: the log counts the cut-offs: {log}")


def main():
    s = Server()
    refs = references(s)
    s.stop()
    for run in (turnover, storm, soak, hostile, shutdown):
        t = time.time()
        run(refs)
        print(f"{run.__name__}: {json.dumps(FIGURES.get(run.__name__), default=str)} ({time.time() - t:.0f} s)", flush=True)
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump(FIGURES, f, indent=1, default=str)
    print(f"{5 - len({f.split(':')[0] for f in FAILURES})} of 5 runs clean; {len(FAILURES)} failures", flush=True)
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
