"""The official `openai` SDK's Responses API against a real `ferrox serve` on
SmolLM2: `POST /v1/responses`, plain and streamed with the documented event
sequence, structured output, function calls and their outputs, and refusals
(issue 28, point 3).

Run: python3 tests/openai_sdk/test_responses.py PATH/TO/ferrox
Starts its own server on a free loopback port; prints "N passed, M failed".
"""

import json
import os
import sys

import openai

sys.path.insert(0, os.path.dirname(__file__))
from test_server import RESULTS, Server, check  # noqa: E402

MODEL = "smollm2-135m"
QUESTION = "What is the capital of France?"
WEATHER = {"type": "function", "name": "weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def chat_answer(s, messages, max_tokens):
    r = s.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0)
    return r.choices[0].message.content


@check("a plain response has the documented shape and the chat route's greedy text")
def plain(s):
    r = s.client.responses.create(model=MODEL, input=QUESTION, instructions="Be brief.", max_output_tokens=40, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed", r
    assert [o.type for o in r.output] == ["message"] and r.output[0].role == "assistant", r.output
    assert r.output[0].content[0].type == "output_text", r.output[0]
    want = chat_answer(s, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}], 40)
    assert r.output_text == want, (r.output_text, want)
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 40, r.usage
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage
    assert r.instructions == "Be brief." and r.max_output_tokens == 40, r
    cut = s.client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=2, temperature=0)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens", cut


@check("a stream follows the documented event sequence and adds up to the plain response")
def streamed(s):
    plain_text = s.client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=40, temperature=0).output_text
    events = list(s.client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=40, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"], kinds
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"], kinds
    assert set(kinds[4:-4]) == {"response.output_text.delta"}, kinds
    assert [e.sequence_number for e in events] == list(range(len(events))), [e.sequence_number for e in events]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == plain_text == events[-1].response.output_text, (deltas, plain_text)
    with s.client.responses.stream(model=MODEL, input=QUESTION, max_output_tokens=40, temperature=0) as st:
        for _ in st:
            pass
        assert st.get_final_response().output_text == plain_text
    cut = [e.type for e in s.client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=2, temperature=0, stream=True)]
    assert cut[-1] == "response.incomplete", cut


@check("text.format constrains the answer to a schema")
def structured(s):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    r = s.client.responses.create(model=MODEL, input="Give me a number.", max_output_tokens=20, temperature=0,
                                  text={"format": {"type": "json_schema", "name": "number", "schema": schema, "strict": True}})
    v = json.loads(r.output_text)
    assert list(v) == ["n"] and isinstance(v["n"], int), v
    assert r.text.format.type == "json_schema", r.text


@check("function calls come back as items, whole and streamed, and their outputs are answered")
def tools(s):
    r = s.client.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER],
                                  tool_choice={"type": "function", "name": "weather"}, parallel_tool_calls=False, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "weather" and "city" in json.loads(calls[0].arguments), r.output
    assert calls[0].call_id and calls[0].status == "completed", calls[0]
    events = list(s.client.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER],
                                            tool_choice={"type": "function", "name": "weather"}, parallel_tool_calls=False,
                                            temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed", kinds
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == json.loads(calls[0].arguments), (args, calls[0].arguments)
    history = [{"role": "user", "content": "What is the weather in Paris?"},
               {"type": "function_call", "call_id": calls[0].call_id, "name": "weather", "arguments": calls[0].arguments},
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 C and sunny"}]
    answer = s.client.responses.create(model=MODEL, input=history, tools=[WEATHER], tool_choice="none", max_output_tokens=30, temperature=0)
    assert answer.status in ("completed", "incomplete") and answer.output_text, answer


@check("what cannot be served is refused by name")
def refusals(s):
    for kwargs, says in [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input[0].content"),
        ({"background": True}, "background"),
        ({"truncation": "auto"}, "truncation"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
    ]:
        body = {"model": MODEL, "input": QUESTION, **kwargs}
        try:
            s.client.responses.create(**body)
            raise AssertionError(f"no 400 for {kwargs}")
        except openai.BadRequestError as e:
            assert e.body["param"] == says, (kwargs, e.body)
    # Fields that change nothing here are accepted.
    r = s.client.responses.create(model=MODEL, input=QUESTION, store=False, metadata={"a": "b"}, user="u",
                                  max_output_tokens=4, temperature=0, truncation="disabled")
    assert r.status in ("completed", "incomplete"), r


def main():
    s = Server()
    try:
        for t in (plain, streamed, structured, tools, refusals):
            t(s)
    finally:
        s.stop()
    failed = [r for r in RESULTS if r[1] is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
