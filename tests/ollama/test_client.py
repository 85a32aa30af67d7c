"""The official `ollama` Python client against a real `ferrox serve` on SmolLM2:
chat, generate, list, show, ps, pull and delete; its answers equal the OpenAI
route's for the same greedy request; embed and embeddings give the OpenAI
route's vectors (issue 29); bad input gets a clear 4xx (issue 28).

Run: python3 tests/ollama/test_client.py PATH/TO/ferrox
Starts its own servers on free loopback ports; prints "N passed, M failed".
"""

import json
import math
import os
import shutil
import sys
import tempfile

import ollama

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "openai_sdk"))
from test_server import RESULTS, Server, check  # noqa: E402

MODEL = "smollm2-135m"
QUESTION = "What is the capital of France?"
# Ollama's defaults add a repeat penalty of 1.1; the OpenAI route's is off.
GREEDY = {"temperature": 0, "repeat_penalty": 1.0, "num_predict": 16}
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def client(s):
    return ollama.Client(host=s.base, timeout=120)


def openai_answer(s, messages, max_tokens=16, model=MODEL):
    r = s.client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, temperature=0)
    return r.choices[0].message.content


def refused(fn, status, says):
    try:
        fn()
    except ollama.ResponseError as e:
        assert e.status_code == status, (e.status_code, e.error)
        assert says in e.error, e.error
        return
    raise AssertionError(f"no {status}")


@check("chat: the greedy answer equals the OpenAI route's, whole and streamed")
def chat(s):
    c = client(s)
    msgs = [{"role": "user", "content": QUESTION}]
    r = c.chat(model=MODEL, messages=msgs, options=GREEDY, stream=False)
    assert r.message.role == "assistant" and r.done and r.done_reason in ("stop", "length"), r
    assert r.model == MODEL, r.model
    assert r.prompt_eval_count > 0 and 0 < r.eval_count <= 16, r
    assert r.total_duration >= r.eval_duration > 0, r
    assert r.message.content == openai_answer(s, msgs), (r.message.content, openai_answer(s, msgs))
    parts = list(c.chat(model=MODEL, messages=msgs, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done, parts
    assert "".join(p.message.content for p in parts) == r.message.content, parts
    assert parts[-1].eval_count == r.eval_count, parts[-1]


@check("generate: the prompt goes through the chat template; raw skips it; streams add up")
def generate(s):
    c = client(s)
    r = c.generate(model=MODEL, prompt=QUESTION, options=GREEDY, stream=False)
    assert r.response == openai_answer(s, [{"role": "user", "content": QUESTION}]), r.response
    assert r.context and len(r.context) == r.prompt_eval_count + r.eval_count, r
    streamed = list(c.generate(model=MODEL, prompt=QUESTION, options=GREEDY, stream=True))
    assert "".join(p.response for p in streamed) == r.response and streamed[-1].done, streamed
    system = c.generate(model=MODEL, prompt=QUESTION, system="Answer in French.", options=GREEDY, stream=False)
    status, _, text = s.raw("/detokenize", json.dumps({"tokens": system.context[:system.prompt_eval_count]}).encode())
    prompt = json.loads(text)["content"]
    assert status == 200 and "system\nAnswer in French.<|im_end|>" in prompt and QUESTION in prompt, prompt
    raw = c.generate(model=MODEL, prompt="The capital of France is", raw=True, options=GREEDY, stream=False)
    completion = s.client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=16, temperature=0)
    assert raw.response == completion.choices[0].text, (raw.response, completion.choices[0].text)
    # Continuing from `context` sends the history again.
    more = c.generate(model=MODEL, prompt="And of Spain?", context=r.context, options=GREEDY, stream=False)
    assert more.prompt_eval_count > len(r.context), (more.prompt_eval_count, len(r.context))
    loaded = c.generate(model=MODEL, prompt="", stream=False)
    assert loaded.done and loaded.done_reason == "load", loaded


@check("options reach the sampler: stop strings, seeds, num_predict")
def options(s):
    c = client(s)
    msgs = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    r = c.chat(model=MODEL, messages=msgs, options={"temperature": 0, "num_predict": 60, "stop": ["5"]}, stream=False)
    assert "5" not in r.message.content and r.done_reason == "stop", r.message.content
    seeded = {"temperature": 1.0, "seed": 42, "num_predict": 12}
    a = c.chat(model=MODEL, messages=msgs, options=seeded, stream=False).message.content
    b = c.chat(model=MODEL, messages=msgs, options=seeded, stream=False).message.content
    assert a == b, (a, b)
    # The runner's settings are the server's: accepted, they change nothing.
    r = c.chat(model=MODEL, messages=msgs, options={**GREEDY, "num_thread": 8, "use_mmap": True, "num_gpu": 99}, keep_alive="5m", stream=False)
    assert r.message.content == c.chat(model=MODEL, messages=msgs, options=GREEDY, stream=False).message.content


@check("format: json and a schema constrain the answer")
def formats(s):
    c = client(s)
    msgs = [{"role": "user", "content": "Describe a cat as JSON."}]
    r = c.chat(model=MODEL, messages=msgs, format="json", options={"temperature": 0, "num_predict": 60}, stream=False)
    assert isinstance(json.loads(r.message.content), dict), r.message.content
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"], "additionalProperties": False}
    r = c.chat(model=MODEL, messages=msgs, format=schema, options={"temperature": 0, "num_predict": 30}, stream=False)
    v = json.loads(r.message.content)
    assert list(v) == ["age"] and isinstance(v["age"], int), v


def weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
      city: The city's name
    """
    return "18 C and sunny"


@check("tools: offered, and a call's result answered in the conversation")
def tools(s):
    c = client(s)
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "weather", "content": "18 C and sunny"},
    ]
    r = c.chat(model=MODEL, messages=history, tools=[weather], options={"temperature": 0, "num_predict": 30}, stream=False)
    assert r.done and (r.message.content or r.message.tool_calls), r
    for call in r.message.tool_calls or []:
        assert call.function.name == "weather" and isinstance(call.function.arguments, dict), call


@check("list, show and ps describe the served model from its file")
def models(s):
    c = client(s)
    listed = c.list().models
    assert [m.model for m in listed] == [MODEL], listed
    m = listed[0]
    assert m.digest == SMOLLM2_SHA256 and m.size > 50_000_000, m
    assert (m.details.format, m.details.family, m.details.quantization_level) == ("gguf", "llama", "Q4_1"), m.details
    assert m.details.parameter_size == "135M", m.details
    shown = c.show(MODEL)
    assert shown.details.family == "llama" and "completion" in shown.capabilities, shown
    assert shown.modelinfo["general.architecture"] == "llama", shown.modelinfo
    assert shown.modelinfo["general.parameter_count"] > 100_000_000, shown.modelinfo
    assert "im_start" in shown.template, shown.template[:80]
    running = c.ps().models
    assert [r.model for r in running] == [MODEL] and running[0].context_length > 0, running


@check("pull fetches catalog models (progress streamed); unknown names are a 404 with a hint")
def pull(s):
    c = client(s)
    statuses = [p.status for p in c.pull(MODEL, stream=True)]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success", statuses
    assert c.pull(MODEL).status == "success"
    refused(lambda: c.pull("llama3.2"), 404, "hf.co/USER/REPO")
    refused(lambda: list(c.pull("no-such-model", stream=True)), 404, "unknown model")


@check("pull into an empty cache streams each file's download: total and completed bytes, to the end")
def pull_progress(_):
    cache = tempfile.mkdtemp()
    os.environ["FERROX_MODELS_DIR"] = cache
    try:
        s = Server("-m", os.path.join(os.path.expanduser("~/.cache/ferrox/models"), "SmolLM2-135M-Instruct.Q4_1.gguf"))
    finally:
        del os.environ["FERROX_MODELS_DIR"]
    try:
        lines = list(client(s).pull(MODEL, stream=True))
        moving = [p for p in lines if p.total]
        assert lines[0].status == "pulling manifest" and lines[-1].status == "success", lines
        assert len(moving) > 2 and moving[0].completed == 0 and moving[-1].completed == moving[-1].total, moving
        assert all(a.completed <= b.completed for a, b in zip(moving, moving[1:])), moving
        assert os.path.isfile(os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")), os.listdir(cache)
    finally:
        s.stop()
        shutil.rmtree(cache)


@check("delete removes a cached model, never the served one; a missing one is a 404")
def delete(_):
    served = os.path.join(os.path.expanduser("~/.cache/ferrox/models"), "SmolLM2-135M-Instruct.Q4_1.gguf")
    cache = tempfile.mkdtemp()
    gemma = os.path.join(os.path.expanduser("~/.cache/ferrox/models"), "gemma-3-270m-q4_k_m.gguf")
    os.link(gemma, os.path.join(cache, "gemma-3-270m-q4_k_m.gguf"))
    shutil.copy(served, os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    os.environ["FERROX_MODELS_DIR"] = cache
    try:
        s = Server("-m", MODEL)
    finally:
        del os.environ["FERROX_MODELS_DIR"]
    try:
        c = client(s)
        refused(lambda: c.delete(MODEL), 409, "this server serves")
        assert c.delete("gemma3-270m").status == "success"
        assert not os.path.exists(os.path.join(cache, "gemma-3-270m-q4_k_m.gguf"))
        refused(lambda: c.delete("gemma3-270m"), 404, "not found")
        assert c.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2}, stream=False).done
    finally:
        s.stop()
        shutil.rmtree(cache)


def models_dir():
    """A folder holding both real models (hard links: no copies)."""
    folder = tempfile.mkdtemp()
    cache = os.path.expanduser("~/.cache/ferrox/models")
    for f in ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"):
        os.link(os.path.join(cache, f), os.path.join(folder, f))
    return folder


SMOL, GEMMA = "SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m"


@check("one server holds both real models, switching per request, unloading on keep_alive: 0 (the started one too)")
def several_models(_):
    folder = models_dir()
    s = Server("--models-dir", folder)
    try:
        c = client(s)
        assert [m.model for m in c.list().models] == [SMOL, GEMMA], c.list()
        assert [m.model for m in c.ps().models] == [SMOL], c.ps()
        first = c.generate(model=GEMMA, prompt="The capital of France is", raw=True, options=GREEDY, stream=False)
        assert first.model == GEMMA and first.response, first
        chat = c.chat(model=SMOL, messages=[{"role": "user", "content": QUESTION}], options=GREEDY, stream=False)
        assert chat.model == SMOL and chat.message.content == openai_answer(s, [{"role": "user", "content": QUESTION}], model=SMOL), chat
        again = c.generate(model=GEMMA + ":latest", prompt="The capital of France is", raw=True, options=GREEDY, stream=False)
        assert again.response == first.response, (again.response, first.response)
        assert [m.model for m in c.ps().models] == [SMOL, GEMMA], c.ps()
        # The OpenAI route picks the model by name too.
        o = s.client.completions.create(model=GEMMA, prompt="The capital of France is", max_tokens=16, temperature=0)
        assert o.model == GEMMA and o.choices[0].text == first.response, (o.model, o.choices[0].text)
        unloaded = c.generate(model=GEMMA, prompt="", keep_alive=0)
        assert unloaded.done_reason == "unload", unloaded
        assert [m.model for m in c.ps().models] == [SMOL], c.ps()
        refused(lambda: c.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}]), 404, GEMMA)
        # The cache's routes name a model to fetch, not one to serve.
        assert c.pull(MODEL).status == "success"
        listed = json.loads(s.raw_get("/v1/models"))
        assert [(m["id"], m["status"]["value"]) for m in listed["data"]] == [(SMOL, "loaded"), (GEMMA, "unloaded")], listed
        status, _, body = s.raw("/models/load", json.dumps({"model": GEMMA}).encode())
        assert status == 200 and [m.model for m in c.ps().models] == [SMOL, GEMMA], (status, body)
        status, _, body = s.raw("/models/unload", json.dumps({"model": GEMMA}).encode())
        assert status == 200 and [m.model for m in c.ps().models] == [SMOL], (status, body)
        # The started model unloads as the others do; /health still answers,
        # and the next request loads it again.
        unloaded = c.chat(model=SMOL, messages=[], keep_alive=0)
        assert unloaded.done_reason == "unload" and c.ps().models == [], (unloaded, c.ps())
        assert json.loads(s.raw_get("/health")) == {"status": "ok"}
        back = c.chat(model=SMOL, messages=[{"role": "user", "content": QUESTION}], options=GREEDY, stream=False)
        assert back.message.content == chat.message.content and [m.model for m in c.ps().models] == [SMOL], back
        status, _, _ = s.raw("/models/unload", json.dumps({"model": SMOL}).encode())
        tokens = json.loads(s.raw("/tokenize", json.dumps({"content": "hi"}).encode())[2])["tokens"]
        assert status == 200 and tokens and [m.model for m in c.ps().models] == [SMOL], c.ps()
    finally:
        s.stop()
    # A model that does not fit the memory budget is refused, naming what is loaded.
    s = Server("--models-dir", folder, "--models-memory", "1.1GB")
    try:
        refused(lambda: client(s).chat(model=GEMMA, messages=[{"role": "user", "content": "hi"}]), 507, "does not fit")
        assert client(s).chat(model=SMOL, messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2}, stream=False).done
    finally:
        s.stop()
        shutil.rmtree(folder)


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@check("embed gives the OpenAI route's normalized vectors; embeddings the same direction, unnormalized")
def embed(s):
    c = client(s)
    texts = ["The quick brown fox.", "Embeddings are vectors."]
    r = c.embed(model=MODEL, input=texts)
    want = [d.embedding for d in s.client.embeddings.create(model=MODEL, input=texts, encoding_format="float").data]
    assert len(r.embeddings) == 2 and r.prompt_eval_count > 0 and r.model == MODEL, r
    for got, w in zip(r.embeddings, want):
        assert cos(got, w) > 0.9999999 and abs(math.sqrt(sum(x * x for x in got)) - 1) < 1e-5
    one = c.embed(model=MODEL, input=texts[0], dimensions=32).embeddings[0]
    assert len(one) == 32 and cos(one, want[0][:32]) > 0.9999999
    legacy = c.embeddings(model=MODEL, prompt=texts[0]).embedding
    assert cos(legacy, want[0]) > 0.9999999 and abs(math.sqrt(sum(x * x for x in legacy)) - 1) > 1e-3
    # Too long: cut to the context by default, refused with truncate off.
    long = "word " * 3000
    assert len(c.embed(model=MODEL, input=long, options={"num_ctx": 512}).embeddings[0]) == 576
    refused(lambda: c.embed(model=MODEL, input=long, truncate=False, options={"num_ctx": 512}), 400, "truncate")


@check("bad input is a clear 4xx naming the problem")
def errors(s):
    c = client(s)
    msgs = [{"role": "user", "content": "hi"}]
    refused(lambda: c.chat(model=MODEL, messages=msgs, options={"mirostat": 2}), 400, "mirostat")
    refused(lambda: c.chat(model=MODEL, messages=msgs, options={"nonsense": 1}), 400, "options.nonsense")
    refused(lambda: c.chat(model=MODEL, messages=msgs, think=True), 400, "does not think")
    refused(lambda: c.chat(model=MODEL, messages=[{"role": "user", "content": "hi", "images": [b"\x89PNG"]}]), 400, "images")
    refused(lambda: c.generate(model=MODEL, prompt="def f(", suffix="return 1"), 400, "suffix")
    refused(lambda: c.chat(model=MODEL, messages=msgs, options={"num_ctx": 8}), 400, "options.num_ctx")
    refused(lambda: c.embed(model=MODEL, input=[]), 400, "input")
    # The server still answers.
    assert c.chat(model=MODEL, messages=msgs, options={"num_predict": 2}, stream=False).done


def main():
    s = Server()
    try:
        for t in (chat, generate, options, formats, tools, models, pull, embed, errors):
            t(s)
    finally:
        s.stop()
    pull_progress(None)
    delete(None)
    several_models(None)
    failed = [r for r in RESULTS if r[1] is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
