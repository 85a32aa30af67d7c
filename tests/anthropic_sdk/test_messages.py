"""The official `anthropic` Python SDK against a real `ferrox serve` on SmolLM2:
`POST /v1/messages`, plain and streamed, its event sequence, stop sequences,
usage, errors and the API key (issue: a person at the keyboard, point 4).

Run: python3 tests/anthropic_sdk/test_messages.py PATH/TO/ferrox
Starts its own servers on free loopback ports; prints "N passed, M failed".
"""

import json
import os
import sys

import anthropic
import openai

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "openai_sdk"))
from test_server import RESULTS, Server, check  # noqa: E402

MODEL = "smollm2-135m"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def client(s, key="unused"):
    return anthropic.Anthropic(base_url=s.base, api_key=key, max_retries=0, timeout=120)


@check("a plain message has Anthropic's shape and the greedy text of the OpenAI route")
def plain(s):
    m = client(s).messages.create(model=MODEL, max_tokens=12, messages=QUESTION, extra_body={"temperature": 0})
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_"), m
    assert m.model == MODEL, m.model
    assert len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text, m.content
    assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 12, m.usage
    o = s.client.chat.completions.create(model=MODEL, max_tokens=12, messages=QUESTION, temperature=0)
    assert o.choices[0].message.content == m.content[0].text, (o.choices[0].message.content, m.content[0].text)


@check("a stream follows the documented event sequence and adds up to the plain answer")
def streamed(s):
    c = client(s)
    plain_text = c.messages.create(model=MODEL, max_tokens=12, messages=QUESTION, extra_body={"temperature": 0}).content[0].text
    kinds, deltas = [], []
    with c.messages.stream(model=MODEL, max_tokens=12, messages=QUESTION, extra_body={"temperature": 0}) as st:
        for e in st:
            kinds.append(e.type)
            if e.type == "content_block_delta":
                deltas.append(e.delta.text)
        final = st.get_final_message()
    # The SDK yields its own `text` helper events and drops `ping`.
    sdk = [k for k in kinds if k != "text"]
    assert sdk[:2] == ["message_start", "content_block_start"], sdk
    assert sdk[-3:] == ["content_block_stop", "message_delta", "message_stop"], sdk
    assert set(sdk[2:-3]) <= {"content_block_delta"}, sdk
    # On the wire, every event's name equals its data's type, ping included.
    body = json.dumps({"model": MODEL, "max_tokens": 12, "messages": QUESTION, "temperature": 0, "stream": True}).encode()
    status, headers, raw = s.raw("/v1/messages", body)
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), (status, headers)
    names, datas = [], []
    for line in raw.decode().splitlines():
        if line.startswith("event: "):
            names.append(line[7:])
        elif line.startswith("data: "):
            datas.append(json.loads(line[6:])["type"])
    assert names == datas, (names, datas)
    assert names[:3] == ["message_start", "content_block_start", "ping"], names
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"], names
    assert "".join(deltas) == plain_text == final.content[0].text, (deltas, plain_text)
    assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0, final


@check("a stop sequence ends the answer before it and is reported")
def stop_sequence(s):
    c = client(s)
    text = c.messages.create(model=MODEL, max_tokens=24, messages=QUESTION, extra_body={"temperature": 0}).content[0].text
    assert len(text) > 8, text
    stop = text[4:7]
    m = c.messages.create(model=MODEL, max_tokens=24, messages=QUESTION, extra_body={"temperature": 0}, stop_sequences=["zzzz", stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop, (m.stop_reason, m.stop_sequence)
    assert m.content[0].text == text[: text.index(stop)], (m.content[0].text, text)


@check("a system prompt and an assistant prefill are taken")
def system_and_prefill(s):
    c = client(s)
    a = c.messages.create(model=MODEL, max_tokens=8, messages=QUESTION, extra_body={"temperature": 0}, system="Answer in French.")
    b = c.messages.create(model=MODEL, max_tokens=8, messages=QUESTION, extra_body={"temperature": 0})
    assert a.usage.input_tokens > b.usage.input_tokens, (a.usage, b.usage)
    p = c.messages.create(model=MODEL, max_tokens=8, extra_body={"temperature": 0},
                          messages=QUESTION + [{"role": "assistant", "content": "The capital of France is"}])
    assert p.content[0].text and p.usage.input_tokens > b.usage.input_tokens, p


@check("count_tokens counts what a message's prompt takes, system prompt and tools included")
def count_tokens(s):
    c = client(s)
    for extra in ({}, {"system": "Answer in one word."}, {"tools": [WEATHER]}):
        n = c.messages.count_tokens(model=MODEL, messages=QUESTION, **extra).input_tokens
        m = c.messages.create(model=MODEL, max_tokens=1, messages=QUESTION, **extra)
        assert n == m.usage.input_tokens + m.usage.cache_read_input_tokens, (extra, n, m.usage)
    try:
        c.messages.count_tokens(model=MODEL, messages=QUESTION, extra_body={"max_tokens": 4})
        raise AssertionError("max_tokens accepted by count_tokens")
    except anthropic.BadRequestError as e:
        assert "max_tokens" in e.body["error"]["message"], e.body


@check("any model name is answered by the served model; errors have Anthropic's types: bad max_tokens, server tools, temperature")
def errors(s):
    c = client(s)
    m = c.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=QUESTION)
    assert m.model == MODEL, m.model
    for kwargs in ({"max_tokens": 0}, {"max_tokens": 4, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
                   {"max_tokens": 4, "extra_body": {"temperature": 1.5}}):
        try:
            c.messages.create(model=MODEL, messages=QUESTION, **kwargs)
            raise AssertionError(f"{kwargs} accepted")
        except anthropic.BadRequestError as e:
            assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body


@check("thinking: taken, with earlier thinking blocks in the history; a model that does not think answers in text alone")
def thinking(s):
    c = client(s)
    on = {"type": "enabled", "budget_tokens": 16}
    m = c.messages.create(model=MODEL, max_tokens=48, thinking=on, messages=QUESTION, extra_body={"temperature": 0})
    off = c.messages.create(model=MODEL, max_tokens=48, messages=QUESTION, extra_body={"temperature": 0})
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == off.content[0].text, (m, off)
    history = QUESTION + [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Paris, surely.", "signature": ""},
                                          {"type": "text", "text": "Paris."}]},
        {"role": "user", "content": "And of Italy?"},
    ]
    n = c.messages.count_tokens(model=MODEL, messages=history, thinking=on).input_tokens
    plain = [dict(history[1], content=[history[1]["content"][1]])]
    assert n == c.messages.count_tokens(model=MODEL, messages=QUESTION + plain + history[2:]).input_tokens, n
    try:
        c.messages.create(model=MODEL, max_tokens=16, messages=QUESTION, thinking={"type": "enabled", "budget_tokens": 0})
        raise AssertionError("budget_tokens 0 accepted")
    except anthropic.BadRequestError as e:
        assert "budget_tokens" in e.body["error"]["message"], e.body


WEATHER = {"name": "get_weather", "description": "Current weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}}


@check("tool use: a forced call is a valid tool_use block, streamed alike, and a tool_result loop ends in text")
def tool_use(s):
    import jsonschema

    c = client(s)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice in ({"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "get_weather"}):
        m = c.messages.create(model=MODEL, max_tokens=100, messages=ask, tools=[WEATHER], tool_choice=choice, extra_body={"temperature": 0})
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and uses and uses[0].id.startswith("toolu_"), m
        for u in uses:
            assert u.name == "get_weather", u
            jsonschema.validate(u.input, WEATHER["input_schema"])
    with c.messages.stream(model=MODEL, max_tokens=100, messages=ask, tools=[WEATHER], tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body={"temperature": 0}) as st:
        final = st.get_final_message()
    streamed = [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed == [(u.name, u.input) for u in uses[:1]], (final, uses)
    history = ask + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "18 C and sunny"}]}]
    answer = c.messages.create(model=MODEL, max_tokens=30, messages=history, tools=[WEATHER], tool_choice={"type": "none"}, extra_body={"temperature": 0})
    assert answer.stop_reason in ("end_turn", "max_tokens") and answer.content[0].type == "text" and answer.content[0].text, answer


@check("the API key is taken from x-api-key; a wrong one is an authentication_error")
def api_key(_):
    s = Server("--api-key", "sesame")
    try:
        m = client(s, "sesame").messages.create(model=MODEL, max_tokens=2, messages=QUESTION)
        assert m.content[0].text is not None
        try:
            client(s, "wrong").messages.create(model=MODEL, max_tokens=2, messages=QUESTION)
            raise AssertionError("no 401")
        except anthropic.AuthenticationError as e:
            assert e.body["error"]["type"] == "authentication_error", e.body
        # The OpenAI routes take the Bearer form of the same key.
        openai.OpenAI(base_url=s.base + "/v1", api_key="sesame", max_retries=0).models.list()
    finally:
        assert s.stop() == 0, "SIGTERM exits 0"


def main():
    s = Server()
    try:
        for t in (plain, streamed, stop_sequence, system_and_prefill, count_tokens, errors, tool_use, thinking):
            t(s)
    finally:
        s.stop()
    api_key(None)
    failed = [r for r in RESULTS if r[1] is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
