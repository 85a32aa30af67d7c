"""Structured output against a real `ferrox serve` on SmolLM2, through the
official `openai` SDK, LangChain (`langchain-openai`) and LiteLLM: 20 JSON
schemas whose every answer parses and validates (Python `jsonschema`), the SDK's
Pydantic `parse`, `json_object`, streaming, the llama-server and vLLM names for
the same fields, and the 400s for what cannot be compiled (issue: apps and
agents, point 2). A 135M model is weak: the constraint does the work.

Run: python3 tests/openai_sdk/test_structured.py PATH/TO/ferrox
"""

import json
import os
import re
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import jsonschema  # noqa: E402
import openai  # noqa: E402
import pydantic  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_server import check, run_suite  # noqa: E402

MODEL = "smollm2-135m"

S = {"type": "string", "maxLength": 24}
SCHEMAS = [
    ("person", {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]}),
    ("city", {"type": "object", "properties": {"city": S, "country": S, "population": {"type": "integer", "minimum": 0}}, "required": ["city", "country", "population"], "additionalProperties": False}),
    ("color", {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]}),
    ("flag", {"type": "object", "properties": {"answer": {"type": "boolean"}, "reason": S}, "required": ["answer", "reason"]}),
    ("numbers", {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 2, "maxItems": 5}),
    ("tags", {"type": "object", "properties": {"tags": {"type": "array", "items": S, "minItems": 1, "maxItems": 4}}, "required": ["tags"]}),
    ("point", {"type": "object", "properties": {"x": {"type": "number", "minimum": -10, "maximum": 10}, "y": {"type": "number", "minimum": -10, "maximum": 10}}, "required": ["x", "y"]}),
    ("nested", {"type": "object", "properties": {"owner": {"type": "object", "properties": {"name": S, "email": {"type": "string", "format": "email", "maxLength": 40}}, "required": ["name", "email"]}}, "required": ["owner"]}),
    ("book", {"type": "object", "properties": {"title": S, "author": S, "year": {"type": "integer", "minimum": 1400, "maximum": 2030}, "genres": {"type": "array", "items": {"enum": ["fiction", "history", "science"]}, "maxItems": 3}}, "required": ["title", "author", "year", "genres"]}),
    ("code", {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"]}),
    ("date", {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}, "required": ["when"]}),
    ("choice", {"anyOf": [{"type": "object", "properties": {"cat": S}, "required": ["cat"]}, {"type": "object", "properties": {"dog": S}, "required": ["dog"]}]}),
    ("refs", {"$defs": {"item": {"type": "object", "properties": {"sku": S, "qty": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["sku", "qty"]}}, "type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 3}}, "required": ["items"]}),
    ("nullable", {"type": "object", "properties": {"middle_name": {"type": ["string", "null"], "maxLength": 12}}, "required": ["middle_name"]}),
    ("const", {"type": "object", "properties": {"version": {"const": 2}, "ok": {"type": "boolean"}}, "required": ["version", "ok"]}),
    ("matrix", {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 2}, "minItems": 2, "maxItems": 2}),
    ("weather", {"type": "object", "properties": {"temp_c": {"type": "number", "minimum": -60, "maximum": 60}, "sky": {"enum": ["sunny", "cloudy", "rain"]}}, "required": ["temp_c", "sky"], "additionalProperties": False}),
    ("word", {"type": "string", "pattern": "^[a-z]{3,8}$"}),
    ("score", {"type": "integer", "minimum": 1, "maximum": 10}),
    ("recipe", {"type": "object", "properties": {"dish": S, "steps": {"type": "array", "items": {"type": "string", "maxLength": 30}, "minItems": 1, "maxItems": 3}, "minutes": {"type": "integer", "minimum": 1, "maximum": 240}}, "required": ["dish", "steps", "minutes"]}),
]
assert len(SCHEMAS) == 20


def ask(s, question, **kw):
    kw.setdefault("max_tokens", 300)
    return s.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}], **kw)


def response_format(name, schema, strict=False):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


@check("20 json_schema requests: every answer parses and validates")
def twenty_schemas(s):
    for i, (name, schema) in enumerate(SCHEMAS):
        r = ask(s, f"Give me an example {name} as JSON.", response_format=response_format(name, schema), temperature=0.7, seed=i)
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", (name, r.choices[0].finish_reason, text)
        jsonschema.validate(json.loads(text), schema)


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    age: int = pydantic.Field(ge=0, le=120)
    hobbies: list[str] = pydantic.Field(max_length=3)


@check("the SDK's parse with a Pydantic model (strict json_schema)")
def sdk_parse(s):
    r = s.client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "Describe a person."}], response_format=Person, max_tokens=200, temperature=0)
    p = r.choices[0].message.parsed
    assert isinstance(p, Person) and len(p.hobbies) <= 3, r


@check("json_object gives a JSON object; a streamed schema answer reassembles to valid JSON")
def json_object_and_stream(s):
    r = ask(s, "Describe your day.", response_format={"type": "json_object"}, temperature=0, max_tokens=120)
    text = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict), text
    else:
        assert text.startswith("{"), text
    name, schema = SCHEMAS[0]
    plain = ask(s, "Describe a person.", response_format=response_format(name, schema), temperature=0).choices[0].message.content
    parts = []
    for chunk in s.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Describe a person."}], response_format=response_format(name, schema), temperature=0, max_tokens=300, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    assert len(parts) > 3 and "".join(parts) == plain, (parts, plain)
    jsonschema.validate(json.loads(plain), schema)


@check("llama-server and vLLM names: json_schema, grammar (Lark and GBNF), guided_json, guided_regex, guided_grammar, guided_choice")
def aliases(s):
    name, schema = SCHEMAS[2]
    for field in ("json_schema", "guided_json"):
        text = ask(s, "Pick a color.", extra_body={field: schema}, temperature=0).choices[0].message.content
        jsonschema.validate(json.loads(text), schema)
    for field, g in (("grammar", 'start: "yes" | "no" | "maybe"'), ("guided_grammar", 'start: "yes" | "no" | "maybe"'), ("grammar", 'root ::= answer\nanswer ::= "yes" | "no" | "maybe" # GBNF')):
        text = ask(s, "Is water wet?", extra_body={field: g}).choices[0].message.content
        assert text in ("yes", "no", "maybe"), (field, g, text)
    text = ask(s, "Call me.", extra_body={"guided_regex": r"\+1 [0-9]{3}-[0-9]{4}"}).choices[0].message.content
    assert re.fullmatch(r"\+1 [0-9]{3}-[0-9]{4}", text), text
    text = ask(s, "Best pet?", extra_body={"guided_choice": ["cat", "dog"]}).choices[0].message.content
    assert text in ("cat", "dog"), text
    c = s.client.completions.create(model=MODEL, prompt="The year was", max_tokens=10, extra_body={"guided_regex": "[12][0-9]{3}"})
    assert re.fullmatch("[12][0-9]{3}", c.choices[0].text), c.choices[0].text


@check("a schema or grammar that cannot be compiled is a 400 that says why; two constraints are refused")
def refusals(s):
    for kw, says in (
        ({"response_format": response_format("bad", {"type": "strin"})}, "JSON schema"),
        ({"response_format": response_format("bad", {"type": "integer", "minimum": 3, "maximum": 1}, strict=True)}, "JSON schema"),
        ({"extra_body": {"grammar": "start: ("}}, "grammar"),
        ({"extra_body": {"guided_regex": "[0-9"}}, "regular expression"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_object"}, "extra_body": {"guided_choice": ["a"]}}, "one output constraint"),
    ):
        try:
            ask(s, "x", **kw)
            raise AssertionError(f"no 400 for {kw}")
        except openai.BadRequestError as e:
            assert says in e.body["message"], e.body


@check("reasoning fields: chat_template_kwargs reach the template; reasoning_effort is refused where the template has no knob")
def reasoning_fields(s):
    plain = ask(s, "Hi", temperature=0, max_tokens=8).choices[0].message
    with_kwargs = ask(s, "Hi", temperature=0, max_tokens=8, extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices[0].message
    assert with_kwargs.content == plain.content, (plain, with_kwargs)
    assert getattr(plain, "reasoning_content", None) is None, plain
    for kw, param in (({"reasoning_effort": "high"}, "reasoning_effort"), ({"extra_body": {"chat_template_kwargs": [1]}}, "chat_template_kwargs"), ({"extra_body": {"reasoning_effort": "max"}}, "reasoning_effort")):
        try:
            ask(s, "Hi", max_tokens=4, **kw)
            raise AssertionError(f"no 400 for {kw}")
        except openai.BadRequestError as e:
            assert e.body["param"] == param, e.body


@check("LangChain with_structured_output (json_schema) returns a validated Pydantic object")
def langchain(s):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=s.base + "/v1", api_key="unused", temperature=0, max_tokens=200, max_retries=0)
    p = llm.with_structured_output(Person, method="json_schema").invoke("Describe a person.")
    assert isinstance(p, Person), p
    raw = llm.with_structured_output(SCHEMAS[1][1] | {"title": "city"}, method="json_schema").invoke("Name a city.")
    jsonschema.validate(raw, SCHEMAS[1][1])


@check("LiteLLM completion with a json_schema response_format")
def litellm_check(s):
    import litellm

    name, schema = SCHEMAS[6]
    r = litellm.completion(model="openai/" + MODEL, api_base=s.base + "/v1", api_key="unused", messages=[{"role": "user", "content": "A point."}], response_format=response_format(name, schema), max_tokens=100, temperature=0)
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def main():
    run_suite((twenty_schemas, sdk_parse, json_object_and_stream, aliases, refusals, reasoning_fields, langchain, litellm_check))


if __name__ == "__main__":
    main()
