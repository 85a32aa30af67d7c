"""`ferrox chat` as a person uses it, in a pseudo-terminal driven by pexpect: type
messages (one over two lines), see answers stream, use the /commands, stop a
long answer with Ctrl-C and keep chatting, exit with Ctrl-D and read the stats
(issue: a person at the keyboard, point 1). Also `ferrox run` without a prompt
and llama-cli's `-cnv` spelling start the same chat.

Run: python3 tests/chat/test_chat.py PATH/TO/ferrox
"""

import json
import os
import sys
import tempfile

import pexpect

FERROX = sys.argv[1] if len(sys.argv) > 1 else "target/debug/ferrox"
PROMPT = "> "
RESULTS = []


def spawn(*args):
    child = pexpect.spawn(FERROX, list(args), encoding="utf-8", timeout=120, dimensions=(40, 200))
    child.expect_exact("/help lists the commands")
    child.expect_exact(PROMPT)
    return child


def check(name, fn):
    try:
        fn()
        RESULTS.append((name, None))
        print(f"PASS {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - report every failure
        RESULTS.append((name, e))
        print(f"FAIL {name}: {e!r}", flush=True)


def conversation():
    with tempfile.TemporaryDirectory() as d:
        saved = os.path.join(d, "chat.json")
        c = spawn("chat", "--temp", "0", "-n", "24")
        c.sendline("/system You are terse.")
        c.expect_exact("(system prompt set)")
        c.expect_exact(PROMPT)
        # A message over two lines, then an answer and the next prompt.
        c.sendline("What is the capital \\")
        c.expect_exact("… ")
        c.sendline("of France?")
        c.expect_exact(PROMPT)
        first = c.before
        assert "Paris" in first, first
        c.sendline("/save " + saved)
        c.expect_exact("(saved 2 messages")
        c.expect_exact(PROMPT)
        data = json.load(open(saved))
        assert data["system"] == "You are terse.", data
        assert [m["role"] for m in data["messages"]] == ["user", "assistant"], data
        assert data["messages"][0]["content"] == "What is the capital \nof France?", data
        # The history is kept: the second turn sees the first.
        c.sendline("And of Germany?")
        c.expect_exact(PROMPT)
        c.sendline("/clear")
        c.expect_exact("(conversation cleared)")
        c.expect_exact(PROMPT)
        c.sendline("/load " + saved)
        c.expect_exact("(loaded 2 messages")
        c.expect_exact(PROMPT)
        c.sendline("/nonsense")
        c.expect_exact("unknown command /nonsense")
        c.expect_exact(PROMPT)
        c.sendeof()
        c.expect_exact("chat:")
        c.expect(r"(\d+) answers, (\d+) prompt tokens \((\d+) from the prefix cache\)")
        answers, prompt, cached = (int(g) for g in c.match.groups())
        assert answers == 2 and prompt > 0, c.match.group(0)
        # The second answer's prompt began with the first turn: served from cache.
        assert cached > 0, c.match.group(0)
        c.expect_exact("generation:")
        c.expect(pexpect.EOF)
        c.close()
        assert c.exitstatus == 0, c.exitstatus


def interrupt():
    # Greedy, so the answer is the same every run (a sampled one was once a few
    # comma-separated words that ended before Ctrl-C).
    c = spawn("chat", "--temp", "0", "-n", "4000", "-c", "8192")
    # A first answer, so that the one stopped is not the first (the line editor
    # runs between them).
    c.sendline("Hi")
    c.expect_exact(PROMPT)
    c.sendline("Write a very long story about a dragon.")
    c.expect_exact("dragon.")  # the echo of the line typed
    c.expect(r"\w+\W+\w+\W+\w+\W+\w+")  # then the answer, streaming
    c.sendintr()
    c.expect_exact("[interrupted]")
    c.expect_exact(PROMPT)
    # The session goes on.
    c.sendline("/help")
    c.expect_exact("/clear")
    c.expect_exact(PROMPT)
    c.sendline("Say hi.")
    c.expect_exact(PROMPT)
    c.sendeof()
    c.expect(r"(\d+) answers")
    assert c.match.group(1) == "3", c.match.group(0)
    c.expect(pexpect.EOF)
    c.close()
    assert c.exitstatus == 0, c.exitstatus


def run_without_prompt():
    for args in (("run", "--temp", "0", "-n", "4"), ("run", "-cnv", "--temp", "0", "-n", "4")):
        c = spawn(*args)
        c.sendline("Hi")
        c.expect_exact(PROMPT)
        c.sendeof()
        c.expect_exact("1 answers")
        c.expect(pexpect.EOF)
        c.close()
        assert c.exitstatus == 0, (args, c.exitstatus)


def main():
    check("a conversation: two-line input, history, /system /save /clear /load, Ctrl-D stats", conversation)
    check("Ctrl-C stops a long answer and the chat goes on", interrupt)
    check("`run` without a prompt and `run -cnv` start the chat", run_without_prompt)
    failed = [r for r in RESULTS if r[1] is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
