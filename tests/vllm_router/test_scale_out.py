"""Three ferrox replicas behind vLLM's router on loopback (issue 31, point 5).

* 16 clients in multi-turn chats over 4 system prompts, greedy, through
  `round_robin`, `cache_aware` and `kv_aware` (the last fed by each replica's
  `--kv-events`, tokenizing with a Hugging Face tokenizer folder built from the
  GGUF): every answer is served, every transcript is the same under every
  policy (greedy answers do not depend on the replica or the cache, SPEC S3),
  and a prefix-aware policy continues at least 3/4 of the follow-up turns
  from the cache of the replica that served the turn before, and at least
  1.5x as many as round_robin does.
* A follower of each replica's KV events holds exactly that replica's cached
  pages (`GET /kv/blocks`) after each load.
* A replica killed (SIGKILL) mid-load costs only the requests it held, and
  the router routes the rest around it.
* A replica taken out of the router's rotation and sent SIGTERM mid-load
  drains: no request is lost, with the router's retries off.

Run: python3 tests/vllm_router/test_scale_out.py PATH/TO/ferrox
Prints "N passed, M failed" and the cached-token figures.
"""

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.request

import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "openai_sdk"))
from test_server import RESULTS, Server, check, finish  # noqa: E402
from test_router import Router, free_port  # noqa: E402

MODEL = "smollm2-135m"
CLIENTS = 16
TURNS = 4
ANSWER = 16
SYSTEMS = [
    "You are the help desk of a harbour. You answer questions about ships, tides, moorings and cargo, "
    "briefly and politely, and you never guess a timetable you do not know.",
    "You are a gardening assistant. You give short, practical advice about soil, seeds, watering and pests, "
    "and you say so when a plant needs a specialist.",
    "You are a tutor of arithmetic for children. You explain sums step by step with small numbers, "
    "and you praise every honest attempt.",
    "You are a travel agent for train journeys in Europe. You suggest routes, tickets and connections, "
    "and you always mention the need to check the current timetable.",
]
TOPICS = ["the weather", "a long trip", "a small boat", "an old clock", "the night sky", "a red apple"]


class Replica(Server):
    """A ferrox worker publishing its KV events, with a follower of them."""

    def __init__(self):
        self.events_at = f"tcp://127.0.0.1:{free_port()}"
        super().__init__("--threads", "1", "--kv-events", self.events_at, "--shutdown-grace", "60")
        self.view, self.seq, self.gaps = set(), -1, 0
        self.lock = threading.Lock()
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.connect(self.events_at)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.running = True
        self.thread = threading.Thread(target=self.follow, daemon=True)
        self.thread.start()
        time.sleep(0.3)  # the subscription reaches the publisher

    def follow(self):
        while self.running:
            if not self.sub.poll(100):
                continue
            _topic, seq, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq, "big")
            ts, events = msgpack.unpackb(payload)[:2]
            with self.lock:
                self.gaps += seq != self.seq + 1
                self.seq = seq
                for e in events:
                    if e["type"] == "BlockStored":
                        assert len(e["token_ids"]) == len(e["block_hashes"]) * e["block_size"], e
                        self.view |= set(e["block_hashes"])
                    elif e["type"] == "BlockRemoved":
                        self.view -= set(e["block_hashes"])
                    else:
                        self.view.clear()

    def cached(self):
        return json.loads(self.raw_get("/kv/blocks"))["blocks"]

    def held(self):
        return self.metric("vllm:num_requests_running") + self.metric("vllm:num_requests_waiting")

    def close(self):
        self.running = False
        self.thread.join()
        self.sub.close(0)
        self.ctx.term()
        if self.proc.poll() is None:
            self.stop()


def hf_tokenizer_folder(gguf_path, out):
    """A Hugging Face tokenizer folder for the router's kv_aware policy: SmolLM2's
    BPE (vocabulary, merges, special tokens) and chat template, from the GGUF."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(gguf_path)

    def field(name):
        f = r.fields[name]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode() for i in f.data]
            return [int(f.parts[i][0]) for i in f.data]
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else int(v[0])

    tokens, types = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {"chat_template": field("tokenizer.chat_template"), "add_bos_token": False,
              "bos_token": tokens[field("tokenizer.ggml.bos_token_id")],
              "eos_token": tokens[field("tokenizer.ggml.eos_token_id")], "tokenizer_class": "GPT2Tokenizer"}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, f)
    return out


class Load:
    """16 clients' multi-turn chats through `base`, greedy; transcripts kept."""

    def __init__(self, base, pause=0.0):
        self.base, self.pause = base, pause
        self.transcripts = {}
        self.failures, self.started = [], []
        self.requests = []  # (client, turn, prompt tokens, cached tokens) of each answer
        self.lock = threading.Lock()

    def post(self, body):
        req = urllib.request.Request(self.base + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.load(r)

    def client(self, c):
        messages = [{"role": "system", "content": SYSTEMS[c % 4]}]
        said = []
        for turn in range(TURNS):
            topic = TOPICS[(c + turn) % len(TOPICS)]
            messages.append({"role": "user", "content": (
                f"Visitor {c}, question {turn}: my family and I have been talking about {topic} all week, "
                f"and we could not agree. Please tell us about {topic}, in a few plain words a child understands.")})
            with self.lock:
                self.started.append(time.time())
            try:
                r = self.post({"model": MODEL, "messages": messages, "max_tokens": ANSWER, "temperature": 0})
            except Exception as e:  # noqa: BLE001 - counted, the chat goes on
                with self.lock:
                    self.failures.append((c, turn, time.time(), repr(e)))
                said.append(None)
                messages.append({"role": "assistant", "content": "(no answer)"})
                continue
            answer = r["choices"][0]["message"]["content"]
            assert answer, r
            with self.lock:
                self.requests.append((c, turn, r["usage"]["prompt_tokens"],
                                      r["usage"]["prompt_tokens_details"]["cached_tokens"]))
            said.append(answer)
            messages.append({"role": "assistant", "content": answer})
            time.sleep(self.pause)
        self.transcripts[c] = said

    def run(self, during=None):
        threads = [threading.Thread(target=self.client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
            time.sleep(0.05)
        if during:
            during(self)
        for t in threads:
            t.join()
        return self


def replicas(n=3):
    return [Replica() for _ in range(n)]


def close(rs):
    for r in rs:
        r.close()


def events_match(rs):
    time.sleep(0.5)  # the last step's batch reaches the followers
    for i, r in enumerate(rs):
        with r.lock:
            view, gaps = sorted(r.view), r.gaps
        assert gaps == 0, f"replica {i}: {gaps} gaps in the sequence"
        cached = r.cached()
        assert view == cached, f"replica {i}: the events hold {len(view)} pages, the cache {len(cached)}"


FIGURES = {}
PAGE = 16  # the engine's default KV page size: prefix hits come in whole pages


def continued(load):
    """How many follow-up turns reused the whole previous turn from the cache,
    that is, landed on the replica that served the turn before. The sum of
    cached tokens says less: every policy hits the shared system prompts."""
    prompt = {(c, turn): p for c, turn, p, _ in load.requests}
    return sum(1 for c, turn, _, cached in load.requests
               if turn > 0 and cached + PAGE > prompt[(c, turn - 1)])


def policy_run(policy, tokenizer_dir):
    rs = replicas()
    try:
        extra = []
        if policy == "kv_aware":
            for r in rs:
                extra += ["--kv-event-source", f"{r.base}={r.events_at}"]
            extra += ["--kv-event-model", tokenizer_dir]
        router = Router(policy, rs, *extra)
        try:
            load = Load(router.base).run()
        finally:
            router.stop()
        events_match(rs)
        return load
    finally:
        close(rs)


def tail(file, n):
    """The last `n` lines of a log file."""
    file.seek(0)
    return file.read().splitlines()[-n:]


def busiest(rs, wait=30):
    """The index of the replica of `rs` holding the most requests, and how
    many: a policy may leave one replica idle for a while, so this waits up to
    `wait` seconds for one to hold any."""
    deadline = time.time() + wait
    while True:
        held = [r.held() for r in rs]
        if max(held) >= 1 or time.time() > deadline:
            return held.index(max(held)), max(held)
        time.sleep(0.02)


def main():
    if shutil.which("vllm-router") is None:
        raise SystemExit("vllm-router is not installed (pip install vllm-router)")
    probe = Server()
    try:
        gguf_path = json.loads(probe.raw_get("/props"))["model_path"]
    finally:
        probe.stop()
    tmp = tempfile.mkdtemp(prefix="ferrox-hf-tokenizer-")
    tokenizer_dir = hf_tokenizer_folder(gguf_path, tmp)
    loads = {}

    for policy in ["round_robin", "cache_aware", "kv_aware"]:
        @check(f"3 replicas, 16 multi-turn clients, vllm-router --policy {policy}: every answer served, "
               "the events' view equals each replica's cache")
        def run(_, policy=policy):
            load = policy_run(policy, tokenizer_dir)
            assert not load.failures, load.failures[:3]
            assert len(load.transcripts) == CLIENTS and all(None not in t for t in load.transcripts.values())
            loads[policy] = load
            FIGURES[policy] = (sum(r[3] for r in load.requests), sum(r[2] for r in load.requests))
        run(None)

    @check("every policy gives the same greedy transcripts")
    def same(_):
        base = loads["round_robin"].transcripts
        for policy in ["cache_aware", "kv_aware"]:
            assert loads[policy].transcripts == base, policy
    same(None)

    @check("cache_aware or kv_aware continues 3/4 of follow-up turns from the cache, 1.5x round_robin's count")
    def hits(_):
        counts = {p: continued(load) for p, load in loads.items()}
        FIGURES["continued"] = counts
        follow_ups = CLIENTS * (TURNS - 1)
        best = max(counts["cache_aware"], counts["kv_aware"])
        assert best >= 0.75 * follow_ups and best >= 1.5 * counts["round_robin"], FIGURES
    hits(None)

    @check("a replica killed mid-load costs only the requests it held; the router routes around it")
    def killed(_):
        rs = replicas()
        try:
            router = Router("cache_aware", rs)
            kill = {}

            def during(load):
                while len(load.started) < CLIENTS + 8:
                    time.sleep(0.02)
                kill["started_before"] = len(load.started)
                kill["victim"], kill["held"] = busiest(rs)
                rs[kill["victim"]].proc.kill()
                kill["at"] = time.time()
                kill["started_after"] = len(load.started)
            try:
                load = Load(router.base, pause=0.2).run(during)
            finally:
                router.stop()
            # Requests that started between reading the gauge and the kill may
            # have gone to the victim too.
            assert kill["held"] >= 1, ("the victim held nothing when killed", kill)
            slack = kill["started_after"] - kill["started_before"]
            assert len(load.failures) <= kill["held"] + slack, (load.failures, kill)
            late = [f for f in load.failures if f[2] > kill["at"] + 5]
            assert not late, ("failures long after the kill", late)
            FIGURES["killed"] = (len(load.failures), kill["held"])
        finally:
            close(rs)
    killed(None)

    @check("a replica taken out of the router, then sent SIGTERM mid-load, drains without losing a request")
    def drained(_):
        rs = replicas()
        try:
            # No retries: a request the drain lost would reach the client.
            router = Router("round_robin", rs, "--disable-retries")
            stopped = []

            def during(load):
                while len(load.started) < CLIENTS + 4:
                    time.sleep(0.02)
                victim, _ = busiest(rs)
                stopped.append(rs[victim])
                # Scale-in as vllm-router takes it: out of the rotation, then
                # the drain. A SIGTERM alone leaves the replica in the rotation
                # until the router's health check (every 60 s) or circuit
                # breaker (10 failures) drops it, and a request whose 5
                # attempts all land on it fails (SCALE-OUT.md, "Scale-in").
                router.remove_worker(rs[victim])
                time.sleep(0.05)  # requests routed before the removal reach it
                FIGURES["drain_held"] = rs[victim].held()
                rs[victim].proc.send_signal(signal.SIGTERM)
            try:
                load = Load(router.base, pause=0.2).run(during)
            finally:
                router.stop()
            assert FIGURES["drain_held"] >= 1, "the replica held nothing when told to stop"
            assert not load.failures, (load.failures[:3], "router log:", tail(router.log, 30),
                                       "drained replica's log:", stopped[0].log()[-3000:])
            assert stopped[0].proc.wait(timeout=60) == 0
        finally:
            close(rs)
    drained(None)

    for name, v in FIGURES.items():
        print(f"figure {name}: {v}")
    finish()


if __name__ == "__main__":
    main()
