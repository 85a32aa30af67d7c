#!/usr/bin/env python3
"""Every chat template in llama.cpp's models/templates/ renders byte-identically
in ferrox (minijinja) and in Python's jinja2 as `transformers` sets it up
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, strftime_now, its tojson), for a fixed set of conversations:
one turn, a system prompt, several turns, a closed conversation without the
generation prompt, tools offered, a tool call with its result, and text with
quotes, tags and non-ASCII characters.

ferrox renders each case through `examples/render_templates.rs`, which also
prints the exact variables the template saw; jinja2 renders the same variables
(so both sides get identical input). A case passes when both render the same
bytes, or both refuse it (a template that raises, e.g. for a role it does not
take) and ferrox's error names the template line.

    python3 tests/templates/test_jinja2.py [TEMPLATES_DIR]

Needs `transformers` (for its template environment; no torch) and the refs of
scripts/fetch-llama-refs.
"""
import html
import json
import os
import subprocess
import sys
from pathlib import Path

from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = Path(__file__).resolve().parents[2]
# Where jinja2 itself behaves unlike any other renderer, and ferrox (with
# llama.cpp's minja) does not follow: markupsafe's `Markup + str` escapes the
# str, so `"..."|safe + t | tojson` writes `&#34;` into this prompt. The case
# still passes only if ferrox's text is jinja2's with those entities unescaped.
ESCAPED_BY_MARKUP = {"meetkai-functionary-medium-v3.1.jinja"}
# 2026-12-01 09:30:00 UTC: strftime_now sees this on both sides.
TIME = 1796117400

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {"name": "get_time", "description": "The time now.", "parameters": {"type": "object", "properties": {}}},
}


def msg(role, content, **extra):
    return {"role": role, "content": content, **extra}


CALL = {"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}

CONVERSATIONS = {
    "one_turn": dict(messages=[msg("user", "What is the capital of France?")]),
    "system": dict(messages=[msg("system", "You are terse."), msg("user", "Hi!")]),
    "multi_turn": dict(
        messages=[
            msg("system", "Answer in one word."),
            msg("user", "Colour of the sky?"),
            msg("assistant", "Blue."),
            msg("user", "And grass?"),
        ]
    ),
    "closed": dict(
        messages=[msg("user", "Say hi."), msg("assistant", "Hi.")],
        add_generation_prompt=False,
    ),
    "tools_offered": dict(
        messages=[msg("system", "Use tools when useful."), msg("user", "Weather in Paris?")],
        tools=[WEATHER, CLOCK],
    ),
    "tool_result": dict(
        messages=[
            msg("user", "Weather in Paris?"),
            msg("assistant", "", tool_calls=[CALL]),
            msg("tool", '{"temperature": 18, "sky": "clear"}', tool_call_id="call_1"),
        ],
        tools=[WEATHER],
    ),
    "awkward_text": dict(
        messages=[msg("user", "Quote \"this\" & <b>that</b>: café, 東京, 🙂\n  indented\tline ")],
    ),
}


def cases(templates):
    for t in templates:
        for name, conv in CONVERSATIONS.items():
            yield (t, name), {
                "template": str(t),
                "messages": conv["messages"],
                "tools": conv.get("tools", []),
                "vars": {},
                "add_generation_prompt": conv.get("add_generation_prompt", True),
                "bos": "<s>",
                "eos": "</s>",
                "time": TIME,
            }


def ferrox_render(lines):
    # scripts/test-all builds the example with the workspace and names it here;
    # alone, this builds it.
    built = os.environ.get("FERROX_RENDER_TEMPLATES")
    cmd = [built] if built else ["cargo", "run", "-q", "--locked", "-p", "ferrox-text", "--example", "render_templates"]
    out = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"render_templates failed:\n{out.stderr}")
    return [json.loads(l) for l in out.stdout.splitlines()]


def jinja2_render(source, context):
    from datetime import datetime, timezone

    template = _compile_jinja_template(source)
    fixed = datetime.fromtimestamp(TIME, tz=timezone.utc)
    template.globals["strftime_now"] = lambda fmt: fixed.strftime(fmt)
    return template.render(**context)


def main():
    refs = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if refs is None:
        env = os.environ
        if env.get("FERROX_LLAMA_REFS"):
            refs = Path(env["FERROX_LLAMA_REFS"]) / "templates"
        else:
            base = Path(env.get("FERROX_MODELS_DIR") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ferrox" / "models")
            refs = base / "llama-cpp-refs" / "templates"
    templates = sorted(refs.glob("*.jinja"))
    if len(templates) < 60:
        sys.exit(f"expected llama.cpp's ~70 templates in {refs}, found {len(templates)}: run scripts/fetch-llama-refs")
    keys, inputs = zip(*cases(templates))
    answers = ferrox_render([json.dumps(c) for c in inputs])
    passed, failed, both_refused = 0, [], 0
    for (template, name), answer in zip(keys, answers):
        label = f"{template.name} / {name}"
        try:
            want, want_err = jinja2_render(template.read_text(), answer["context"]), None
        except Exception as e:  # the template raised, or jinja2 could not run it
            want, want_err = None, f"{type(e).__name__}: {e}"
        got, got_err = answer.get("rendered"), answer.get("error")
        raised = want_err is not None and want_err.startswith("TemplateError: ")
        if want_err is None and got == want:
            passed += 1
        elif want_err is None and template.name in ESCAPED_BY_MARKUP and got == html.unescape(want):
            passed += 1
        elif raised and got_err is not None and want_err.removeprefix("TemplateError: ") not in got_err:
            failed.append(f"{label}: the template raised {want_err!r}, ferrox says {got_err!r}")
        elif want_err is not None and got_err is not None and "line " in got_err:
            passed += 1
            both_refused += 1
        elif want_err is not None and got_err is not None:
            failed.append(f"{label}: ferrox's error names no template line: {got_err}")
        elif want_err is not None:
            failed.append(f"{label}: jinja2 refuses ({want_err}) but ferrox rendered")
        elif got_err is not None:
            failed.append(f"{label}: ferrox refuses ({got_err}) but jinja2 rendered")
        else:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            failed.append(
                f"{label}: differs at byte {at}:\n    ferrox: {got[max(0, at - 40):at + 60]!r}\n    jinja2: {want[max(0, at - 40):at + 60]!r}"
            )
    for f in failed:
        print("FAIL", f)
    print(f"{len(templates)} templates x {len(CONVERSATIONS)} conversations ({both_refused} refused by both)")
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
