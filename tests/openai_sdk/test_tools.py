"""Tool calling against a real `ferrox serve` on SmolLM2, through the official
`openai` SDK, LangChain's `bind_tools` and LiteLLM: `tool_choice` required and
named give calls whose arguments validate against their function's schema, a
two-step loop (call, result, answer), streamed calls that reassemble to the
plain answer's, and the 400s for malformed tool fields (issue: apps and agents,
point 3). SmolLM2's template has no tools, so ferrox's built-in format is used.

Run: python3 tests/openai_sdk/test_tools.py PATH/TO/ferrox
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import jsonschema  # noqa: E402
import openai  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_server import check, run_suite  # noqa: E402

MODEL = "smollm2-135m"


def fn(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {"type": "object", "properties": properties, "required": required}}}


TOOLS = [
    fn("get_weather", "Current weather of a city", {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}}, ["city", "unit"]),
    fn("get_time", "Current time in a time zone", {"timezone": {"type": "string", "maxLength": 30}}, ["timezone"]),
    fn("search", "Search the web", {"query": {"type": "string", "maxLength": 60}, "limit": {"type": "integer", "minimum": 1, "maximum": 10}}, ["query", "limit"]),
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTIONS = ["What is the weather in Paris?", "What time is it in Tokyo?", "Find recent news about Mars.", "Is it raining in London?"]


def chat(s, messages, **kw):
    kw.setdefault("max_tokens", 200)
    kw.setdefault("temperature", 0)
    return s.client.chat.completions.create(model=MODEL, messages=messages, **kw)


def valid_calls(message):
    assert message.tool_calls, message
    for c in message.tool_calls:
        assert c.type == "function" and c.id, c
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])
    return message.tool_calls


@check("tool_choice required: every call parses and validates against its function")
def required(s):
    for q in QUESTIONS:
        r = chat(s, [{"role": "user", "content": q}], tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
        assert r.choices[0].finish_reason == "tool_calls", r
        assert len(valid_calls(r.choices[0].message)) == 1


@check("a named tool_choice calls that function with valid arguments")
def named(s):
    for name in SCHEMAS:
        r = chat(s, [{"role": "user", "content": QUESTIONS[0]}], tools=TOOLS, tool_choice={"type": "function", "function": {"name": name}})
        calls = valid_calls(r.choices[0].message)
        assert all(c.function.name == name for c in calls), calls


@check("a two-step loop: a call, its result, then an answer in text")
def loop(s):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = chat(s, messages, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False)
    call = valid_calls(r.choices[0].message)[0]
    messages.append(r.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "sunny"})})
    final = chat(s, messages, tools=TOOLS, tool_choice="none", max_tokens=40)
    text = final.choices[0].message.content
    assert text and not final.choices[0].message.tool_calls, final
    # The result reached the prompt: the answer was conditioned on it.
    plain = chat(s, messages[:1], max_tokens=40).choices[0].message.content
    assert text != plain, text


@check("streamed tool-call deltas reassemble to the plain answer's calls")
def streamed(s):
    for kw in ({"tool_choice": "required"}, {"tool_choice": {"type": "function", "function": {"name": "search"}}}):
        plain = chat(s, [{"role": "user", "content": QUESTIONS[2]}], tools=TOOLS, **kw).choices[0].message
        calls, finish = {}, None
        for chunk in chat(s, [{"role": "user", "content": QUESTIONS[2]}], tools=TOOLS, stream=True, **kw):
            if not chunk.choices:
                continue
            c = chunk.choices[0]
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                slot = calls.setdefault(d.index, {"name": "", "arguments": "", "id": None})
                if d.id:
                    slot["id"] = d.id
                if d.function and d.function.name:
                    slot["name"] += d.function.name
                if d.function and d.function.arguments:
                    slot["arguments"] += d.function.arguments
        assert finish == "tool_calls", finish
        got = [(v["name"], json.loads(v["arguments"])) for _, v in sorted(calls.items())]
        want = [(c.function.name, json.loads(c.function.arguments)) for c in plain.tool_calls]
        assert got == want and all(v["id"] for v in calls.values()), (got, want)


@check("tool_choice auto answers in text or with valid calls")
def auto(s):
    for q in QUESTIONS:
        m = chat(s, [{"role": "user", "content": q}], tools=TOOLS, max_tokens=120).choices[0].message
        if m.tool_calls:
            valid_calls(m)
        else:
            assert m.content, m


@check("malformed tool fields are refused with a 400 naming them")
def refusals(s):
    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{not json"}}
    cases = [
        (lambda: s.client.completions.create(model=MODEL, prompt="x", max_tokens=2, extra_body={"tools": TOOLS}), "tools"),
        (lambda: chat(s, [{"role": "user", "content": "x"}], tools=TOOLS, tool_choice="always"), "tool_choice"),
        (lambda: chat(s, [{"role": "user", "content": "x"}], tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
        (lambda: chat(s, [{"role": "user", "content": "x"}], tool_choice="required"), "tool_choice"),
        (lambda: chat(s, [{"role": "user", "content": "x"}], tools=[{"type": "code_interpreter"}]), "tools[0]"),
        (lambda: chat(s, [{"role": "user", "content": "x"}], tools=TOOLS, response_format={"type": "json_object"}), "tools"),
        (lambda: chat(s, [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]), "messages[1]"),
        (lambda: chat(s, [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}]), "messages[1].tool_calls[0]"),
    ]
    for make, param in cases:
        try:
            make()
            raise AssertionError(f"no 400 for {param}")
        except openai.BadRequestError as e:
            assert e.body["param"] == param, (param, e.body)


@check("LangChain bind_tools: required and named calls come back as validated tool_calls")
def langchain(s):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=s.base + "/v1", api_key="unused", temperature=0, max_tokens=200, max_retries=0)
    for choice in ("required", "get_time"):
        msg = llm.bind_tools(TOOLS, tool_choice=choice, parallel_tool_calls=False).invoke([HumanMessage("What time is it in Tokyo?")])
        assert msg.tool_calls, msg
        for c in msg.tool_calls:
            jsonschema.validate(c["args"], SCHEMAS[c["name"]])
            assert choice == "required" or c["name"] == choice, c
    answer = llm.invoke([HumanMessage("What time is it in Tokyo?"), msg, ToolMessage("10:42", tool_call_id=msg.tool_calls[0]["id"])])
    assert answer.content, answer


@check("LiteLLM completion with tools returns validated tool_calls")
def litellm_check(s):
    import litellm

    r = litellm.completion(model="openai/" + MODEL, api_base=s.base + "/v1", api_key="unused", messages=[{"role": "user", "content": QUESTIONS[0]}], tools=TOOLS, tool_choice="required", max_tokens=200, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert calls and r.choices[0].finish_reason == "tool_calls", r
    for c in calls:
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def main():
    run_suite((required, named, loop, streamed, auto, refusals, langchain, litellm_check))


if __name__ == "__main__":
    main()
