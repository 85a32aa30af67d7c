// ferrox's chat page: conversations kept in localStorage, answers streamed from
// /v1/chat/completions (server-sent events), markdown rendered with the vendored
// `marked` and sanitized with the vendored DOMPurify. No network beyond this
// server: every asset is compiled into the binary.
"use strict";

const STORE = "ferrox.conversations";
const SETTINGS = "ferrox.settings";
const DEFAULTS = { system: "", temperature: 0.7, top_p: 0.95, max_tokens: "", api_key: "" };

const $ = (id) => document.getElementById(id);
const state = {
  conversations: load(STORE, []),
  settings: Object.assign({}, DEFAULTS, load(SETTINGS, {})),
  current: null,
  controller: null,
  model: null,
};

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v === null ? fallback : v;
  } catch (_) {
    return fallback;
  }
}

function save() {
  localStorage.setItem(STORE, JSON.stringify(state.conversations));
}

function headers() {
  const h = { "Content-Type": "application/json" };
  if (state.settings.api_key) h.Authorization = "Bearer " + state.settings.api_key;
  return h;
}

function notice(text) {
  const n = $("notice");
  n.textContent = text || "";
  n.hidden = !text;
}

// ---- markdown ----------------------------------------------------------------

function renderMarkdown(el, text) {
  el.innerHTML = DOMPurify.sanitize(marked.parse(text, { gfm: true, breaks: true }));
}

// ---- conversations -----------------------------------------------------------

function newConversation() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [] };
  state.conversations.unshift(c);
  state.current = c;
  save();
  renderAll();
}

function select(id) {
  if (state.controller) return; // finish or stop the answer first
  state.current = state.conversations.find((c) => c.id === id) || null;
  renderAll();
}

function remove(id) {
  if (state.controller) return;
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.current && state.current.id === id) state.current = state.conversations[0] || null;
  save();
  renderAll();
}

function renderList() {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of state.conversations) {
    const li = document.createElement("li");
    li.dataset.id = c.id;
    li.className = state.current && c.id === state.current.id ? "active" : "";
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = c.title;
    title.addEventListener("click", () => select(c.id));
    const del = document.createElement("button");
    del.type = "button";
    del.className = "delete";
    del.title = "delete this conversation";
    del.textContent = "\u00d7";
    del.addEventListener("click", () => remove(c.id));
    li.append(title, del);
    ul.append(li);
  }
}

// How each finish reason reads under an answer.
const FINISH = { stop: "complete", length: "max tokens reached", stopped: "stopped" };

function statsText(s) {
  if (!s) return "";
  const parts = [`${s.completion_tokens} tokens`];
  if (s.tokens_per_second !== null) parts.push(`${s.tokens_per_second.toFixed(1)} t/s`);
  parts.push(`${s.cached_tokens} of ${s.prompt_tokens} prompt tokens cached`);
  if (s.ttft_ms !== null) parts.push(`first token ${s.ttft_ms} ms`);
  if (s.finish) parts.push(FINISH[s.finish] || s.finish);
  return parts.join(" \u00b7 ");
}

function messageElement(m) {
  const div = document.createElement("div");
  div.className = "msg " + m.role + (m.stopped ? " stopped" : "") + (m.error ? " error" : "");
  const body = document.createElement("div");
  body.className = "body";
  if (m.role === "assistant") renderMarkdown(body, m.content);
  else body.textContent = m.content;
  div.append(body);
  if (m.role === "assistant") {
    const stats = document.createElement("div");
    stats.className = "stats";
    stats.textContent = m.error ? m.error : statsText(m.stats);
    div.append(stats);
  }
  return div;
}

function renderMessages() {
  const box = $("messages");
  box.replaceChildren();
  if (!state.current) return;
  for (const m of state.current.messages) box.append(messageElement(m));
  box.scrollTop = box.scrollHeight;
}

function renderAll() {
  renderList();
  renderMessages();
}

// ---- settings ----------------------------------------------------------------

function showSettings() {
  const s = state.settings;
  $("system-prompt").value = s.system;
  $("temperature").value = s.temperature;
  $("top-p").value = s.top_p;
  $("max-tokens").value = s.max_tokens;
  $("api-key").value = s.api_key;
}

function toggleSettings(open) {
  const form = $("settings");
  form.hidden = open === undefined ? !form.hidden : !open;
  $("settings-toggle").setAttribute("aria-expanded", String(!form.hidden));
  if (!form.hidden) showSettings();
}

function saveSettings(ev) {
  ev.preventDefault();
  state.settings = {
    system: $("system-prompt").value,
    temperature: $("temperature").value === "" ? DEFAULTS.temperature : Number($("temperature").value),
    top_p: $("top-p").value === "" ? DEFAULTS.top_p : Number($("top-p").value),
    max_tokens: $("max-tokens").value === "" ? "" : Number($("max-tokens").value),
    api_key: $("api-key").value.trim(),
  };
  localStorage.setItem(SETTINGS, JSON.stringify(state.settings));
  toggleSettings(false);
  loadModel();
}

// ---- the server --------------------------------------------------------------

async function errorText(resp) {
  try {
    const body = await resp.json();
    const e = body.error || {};
    return `${resp.status}: ${e.message || JSON.stringify(body)}`;
  } catch (_) {
    return `${resp.status} ${resp.statusText}`;
  }
}

async function loadModel() {
  const resp = await fetch("v1/models", { headers: headers() }).catch(() => null);
  if (!resp) return notice("cannot reach the server");
  if (resp.status === 401) {
    notice("This server needs an API key: enter it in Settings.");
    toggleSettings(true);
    $("api-key").focus();
    return;
  }
  if (!resp.ok) return notice(await errorText(resp));
  const list = await resp.json();
  state.model = list.data[0].id;
  $("model").textContent = state.model;
  notice("");
}

function requestBody(conv) {
  const s = state.settings;
  const messages = [];
  if (s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of conv.messages) {
    if (!m.error && m.content) messages.push({ role: m.role, content: m.content });
  }
  const body = {
    model: state.model || undefined,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: s.temperature,
    top_p: s.top_p,
  };
  if (s.max_tokens !== "") body.max_tokens = s.max_tokens;
  return body;
}

// Reads server-sent events from `resp`, calling `onData` with each parsed
// `data:` payload until `[DONE]`.
async function readEvents(resp, onData) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("input").disabled = busy;
}

async function send(ev) {
  ev.preventDefault();
  const text = $("input").value;
  if (!text.trim() || state.controller) return;
  if (!state.current) newConversation();
  const conv = state.current;
  if (conv.messages.length === 0) conv.title = text.trim().slice(0, 40);
  conv.messages.push({ role: "user", content: text });
  const request = requestBody(conv);
  const answer = { role: "assistant", content: "", stats: null };
  conv.messages.push(answer);
  $("input").value = "";
  save();
  renderAll();
  await stream(request, answer);
}

// Streams the answer to `request` into `answer` (the last message shown).
async function stream(request, answer) {
  const view = $("messages").lastElementChild;
  const body = view.querySelector(".body");
  const stats = view.querySelector(".stats");
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  view.classList.add("streaming");
  const started = performance.now();
  let first = null;
  let usage = null;
  let finish = null;
  let pending = false;
  const paint = () => {
    pending = false;
    renderMarkdown(body, answer.content);
    save();
    $("messages").scrollTop = $("messages").scrollHeight;
  };
  try {
    const resp = await fetch("v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(request),
      signal: controller.signal,
    });
    if (!resp.ok) throw new Error(await errorText(resp));
    await readEvents(resp, (chunk) => {
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      if (choice.finish_reason) finish = choice.finish_reason;
      const delta = choice.delta && choice.delta.content;
      if (delta) {
        if (first === null) first = performance.now();
        answer.content += delta;
        if (!pending) {
          pending = true;
          requestAnimationFrame(paint);
        }
      }
    });
  } catch (e) {
    if (e.name === "AbortError") answer.stopped = true;
    else answer.error = String(e.message || e);
  } finally {
    state.controller = null;
    setBusy(false);
    view.classList.remove("streaming");
  }
  answer.stats = finishStats(usage, answer, first, started, finish);
  paint();
  view.className = messageElement(answer).className;
  stats.textContent = answer.error ? answer.error : statsText(answer.stats);
  save();
  renderList();
  $("input").focus();
}

// What the stats line shows: the server's usage when the stream ended normally,
// else what the page counted itself.
function finishStats(usage, answer, first, started, finish) {
  const now = performance.now();
  const generated = usage ? usage.completion_tokens : null;
  const seconds = first === null ? null : (now - first) / 1000;
  return {
    completion_tokens: generated === null ? "?" : generated,
    prompt_tokens: usage ? usage.prompt_tokens : "?",
    cached_tokens: usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0,
    tokens_per_second: generated && seconds > 0 && generated > 1 ? (generated - 1) / seconds : null,
    ttft_ms: first === null ? null : Math.round(first - started),
    finish: answer.stopped ? "stopped" : finish,
  };
}

function stop() {
  if (state.controller) state.controller.abort();
}

// ---- start -------------------------------------------------------------------

function start() {
  marked.use({ gfm: true });
  $("new-chat").addEventListener("click", () => {
    if (!state.controller) newConversation();
  });
  $("settings-toggle").addEventListener("click", () => toggleSettings());
  $("settings").addEventListener("submit", saveSettings);
  $("composer").addEventListener("submit", send);
  $("stop").addEventListener("click", stop);
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  // An answer cut by a reload or a closed tab keeps what arrived.
  for (const c of state.conversations) {
    for (const m of c.messages) {
      if (m.role === "assistant" && !m.stats && !m.error) m.stopped = true;
    }
  }
  state.current = state.conversations[0] || null;
  renderAll();
  loadModel();
  $("input").focus();
}

document.addEventListener("DOMContentLoaded", start);
