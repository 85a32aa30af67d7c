"""The chat page at `/` in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) against a real `ferrox serve` on SmolLM2
with an API key: the key prompt, a streamed answer with its stats, the prefix
cache on a second turn, the stop button on a long answer, the conversation found
again after a reload, and CORS from a second origin (issue: a person at the
keyboard, points 2 and 3).

Run: python3 tests/webui/test_page.py PATH/TO/ferrox [--screenshot FILE.png]
Prints "N passed, M failed".
"""

import http.server
import json
import os
import sys
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "openai_sdk"))
from test_server import Server, check, finish, wait_for  # noqa: E402

KEY = "sesame"
CONVERSATIONS = "return JSON.parse(localStorage.getItem('ferrox.conversations'))"


def browser():
    opts = Options()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,860", "--no-first-run"):
        opts.add_argument(a)
    service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    d = webdriver.Chrome(options=opts, service=service)
    d.set_script_timeout(120)
    return d


class Origin:
    """A second web origin: a static page on another loopback port."""

    def __init__(self):
        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                body = b"<!doctype html><title>other origin</title><p>another site</p>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def el(d, css):
    return d.find_element(By.CSS_SELECTOR, css)


def last_answer(d):
    return d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")[-1]


def settings(d, **fields):
    """Opens Settings, fills `fields` (input id -> value) and saves."""
    if not el(d, "#settings").is_displayed():
        el(d, "#settings-toggle").click()
    for name, value in fields.items():
        box = el(d, "#" + name)
        box.clear()
        box.send_keys(str(value))
    el(d, "#settings-save").click()


# Records the length of the streaming answer's text at every change of the
# page, in the page itself: a poll from the test would miss a fast stream's
# steps on a busy machine.
WATCH_STREAM = """
window.lengthsSeen = [];
new MutationObserver(() => {
  const m = document.querySelector('#messages .msg.assistant.streaming .body');
  const seen = window.lengthsSeen;
  if (m && (!seen.length || seen[seen.length - 1] !== m.textContent.length)) {
    seen.push(m.textContent.length);
  }
}).observe(document.querySelector('#messages'), {subtree: true, childList: true, characterData: true});
"""


def ask(d, text):
    """Sends `text`, returns the answer's lengths seen while it streamed, and
    waits for it to finish."""
    d.execute_script(WATCH_STREAM)
    answers = len(d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant"))
    box = el(d, "#input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    wait_for(
        lambda: len(d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")) > answers
        and not d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant.streaming"),
        "the answer",
    )
    return d.execute_script("return window.lengthsSeen")


@check("the page asks for the API key, then names the served model")
def key_prompt(d, s):
    d.get(s.base + "/")
    wait_for(lambda: "API key" in el(d, "#notice").text, "the key prompt")
    assert el(d, "#settings").is_displayed()
    settings(d, **{"api-key": KEY, "temperature": 0, "max-tokens": 48})
    wait_for(lambda: el(d, "#model").text == "smollm2-135m", "the model name")
    assert not el(d, "#notice").is_displayed()


@check("a message streams its answer, the same as the API's, with tokens/s and cached tokens")
def streamed_answer(d, s):
    question = "What is the capital of France?"
    seen = ask(d, question)
    conv = d.execute_script(CONVERSATIONS)[0]
    answer = conv["messages"][-1]
    # Streamed: the page showed part of the answer before the whole. (A short
    # answer's steps may reach a busy browser together, so one part is the
    # bound: [0, 4, 31] and [0, 15, 25] are both streams of 31 characters.)
    whole = len(answer["content"])
    assert any(0 < n < whole for n in seen), f"not streamed: lengths seen {seen} of {whole}"
    api = s.client.with_options(api_key=KEY).chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": question}], temperature=0, top_p=0.95, max_tokens=48
    )
    assert answer["content"] == api.choices[0].message.content, (answer["content"], api.choices[0].message.content)
    stats = last_answer(d).find_element(By.CSS_SELECTOR, ".stats").text
    assert "t/s" in stats and "prompt tokens cached" in stats, stats
    assert answer["stats"]["completion_tokens"] == api.usage.completion_tokens, answer["stats"]
    assert conv["title"] == question
    # The second turn starts with the first: the prefix cache serves it.
    ask(d, "And of Germany?")
    stats = d.execute_script(CONVERSATIONS)[0]["messages"][-1]["stats"]
    assert stats["cached_tokens"] > 0 and stats["cached_tokens"] < stats["prompt_tokens"], stats
    assert str(stats["cached_tokens"]) in last_answer(d).find_element(By.CSS_SELECTOR, ".stats").text


@check("the stop button ends a long answer and keeps what arrived")
def stop_button(d, s):
    aborted = s.metric("ferrox_aborted_requests_total")
    settings(d, **{"max-tokens": 1500, "temperature": 0.8})
    el(d, "#new-chat").click()
    box = el(d, "#input")
    box.send_keys("Write a very long story about a dragon who learns to cook.")
    box.send_keys(Keys.ENTER)
    wait_for(lambda: len(d.execute_script(CONVERSATIONS)[0]["messages"][-1]["content"]) > 40, "a long answer to stream")
    el(d, "#stop").click()
    wait_for(lambda: el(d, "#send").is_displayed(), "the send button to come back")
    assert not el(d, "#stop").is_displayed()
    msg = last_answer(d)
    assert "stopped" in msg.get_attribute("class"), msg.get_attribute("class")
    assert "stopped" in msg.find_element(By.CSS_SELECTOR, ".stats").text
    text = d.execute_script(CONVERSATIONS)[0]["messages"][-1]["content"]
    time.sleep(1.5)
    assert d.execute_script(CONVERSATIONS)[0]["messages"][-1]["content"] == text
    # The server saw the disconnect and cancelled the request.
    wait_for(lambda: s.metric("ferrox_aborted_requests_total") > aborted, "the server to abort the request", timeout=30)
    assert len(text) < 1500 * 2


@check("a reload finds the conversations and their messages")
def reload_keeps(d, s):
    before = d.execute_script(CONVERSATIONS)
    shown = [m.text for m in d.find_elements(By.CSS_SELECTOR, "#messages .msg .body")]
    d.refresh()
    wait_for(lambda: el(d, "#model").text == "smollm2-135m", "the page to load")
    titles = [li.text for li in d.find_elements(By.CSS_SELECTOR, "#conversations li .title")]
    assert titles == [c["title"] for c in before] and len(titles) == 2, titles
    assert [m.text for m in d.find_elements(By.CSS_SELECTOR, "#messages .msg .body")] == shown
    # The older conversation opens with both turns.
    d.find_elements(By.CSS_SELECTOR, "#conversations li .title")[1].click()
    bodies = d.find_elements(By.CSS_SELECTOR, "#messages .msg .body")
    assert len(bodies) == 4 and bodies[0].text == "What is the capital of France?", [b.text for b in bodies]


@check("markdown from the model is sanitized: HTML in an answer runs no script")
def sanitized(d, s):
    html = d.execute_script(
        "const e = document.createElement('div');"
        "renderMarkdown(e, 'hi <img src=x onerror=\"window.pwned = 1\"> `<b>code</b>`\\n\\n```\\n<script>window.pwned = 2</script>\\n```');"
        "document.body.append(e); return e.innerHTML;"
    )
    time.sleep(0.3)
    assert d.execute_script("return window.pwned") is None, html
    assert "onerror" not in html and "<script" not in html and "&lt;b&gt;code" in html, html


FETCH = """
const [url, key, done] = arguments;
fetch(url, {method: "POST", headers: {"Content-Type": "application/json", "Authorization": "Bearer " + key},
            body: JSON.stringify({messages: [{role: "user", content: "Hi"}], max_tokens: 4})})
  .then(r => r.json().then(j => done({status: r.status, body: j})))
  .catch(e => done({error: String(e)}));
"""


@check("CORS: a listed second origin calls the API from the browser (preflight and all); another origin cannot")
def cors(d, s, listed, unlisted):
    d.get(listed.url + "/")
    r = d.execute_async_script(FETCH, s.base + "/v1/chat/completions", KEY)
    assert r.get("status") == 200 and r["body"]["choices"][0]["message"]["content"], r
    d.get(unlisted.url + "/")
    r = d.execute_async_script(FETCH, s.base + "/v1/chat/completions", KEY)
    assert "error" in r and "Failed to fetch" in r["error"], r


def screenshot(d, s, path):
    """A conversation with a code block, for the README."""
    d.get(s.base + "/")
    wait_for(lambda: el(d, "#model").text == "smollm2-135m", "the page to load")
    settings(d, **{"max-tokens": 200, "temperature": 0, "system-prompt": "You are a helpful assistant."})
    el(d, "#new-chat").click()
    ask(d, "Write a Python function that returns the square of a number.")
    d.save_screenshot(path)
    print(f"screenshot: {path}")


def main():
    ferrox_args = sys.argv[2:]
    shot = None
    if "--screenshot" in ferrox_args:
        shot = ferrox_args[ferrox_args.index("--screenshot") + 1]
    listed, unlisted = Origin(), Origin()
    s = Server("--api-key", KEY, "--cors-origins", listed.url)
    d = browser()
    try:
        key_prompt(d, s)
        streamed_answer(d, s)
        stop_button(d, s)
        reload_keeps(d, s)
        sanitized(d, s)
        cors(d, s, listed, unlisted)
        if shot:
            screenshot(d, s, shot)
    finally:
        d.quit()
        s.stop()
    finish()


if __name__ == "__main__":
    main()
