// The chat page of `inkling serve`: one conversation view over /v1/chat/completions (streamed),
// conversations and settings in localStorage, the API key (when the server wants one) in
// sessionStorage. Model output is only ever put into the page as text or through
// markdown.js, which builds DOM nodes; nothing here assigns HTML.
import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "inkling.api_key";           // sessionStorage
const TEST_SCRIPT = "inkling.test_script";     // sessionStorage; honoured only by a --test-scripts server
const CONVERSATIONS = "inkling.conversations"; // localStorage
const SETTINGS = "inkling.settings";           // localStorage
const EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function readJson(storage, key, fallback) {
  try {
    const value = JSON.parse(storage.getItem(key));
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

function writeJson(storage, key, value) {
  try {
    storage.setItem(key, JSON.stringify(value));
    return true;
  } catch (e) {
    showNotice("could not save to the browser's storage: " + e.message);
    return false;
  }
}

// ---- state ------------------------------------------------------------------------------------

let conversations = readJson(localStorage, CONVERSATIONS, []);
if (!Array.isArray(conversations)) conversations = [];
let current = null;  // the conversation shown, or null for a new one not yet sent
let streaming = null;  // {controller, reply, view} while a reply streams
let modelName = "";

function saveConversations() {
  writeJson(localStorage, CONVERSATIONS, conversations);
  renderConversationList();
}

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

// ---- settings -----------------------------------------------------------------------------------

const settingFields = {
  system: $("system-prompt"),
  effort: $("effort"),
  temperature: $("temperature"),
  top_p: $("top-p"),
  max_tokens: $("max-tokens"),
};

function loadSettings() {
  const saved = readJson(localStorage, SETTINGS, {});
  for (const name of EFFORTS) settingFields.effort.appendChild(el("option", null, name)).value = name;
  for (const [name, field] of Object.entries(settingFields)) {
    if (typeof saved[name] === "string") field.value = saved[name];
    field.addEventListener("change", saveSettings);
  }
}

function saveSettings() {
  const values = {};
  for (const [name, field] of Object.entries(settingFields)) values[name] = field.value;
  writeJson(localStorage, SETTINGS, values);
}

// The request fields the settings add; a field left empty is left to the server.
function settingsBody() {
  const body = {};
  const number = (field) => (field.value.trim() === "" ? null : Number(field.value));
  if (settingFields.effort.value) body.reasoning_effort = settingFields.effort.value;
  const temperature = number(settingFields.temperature);
  if (temperature !== null && !Number.isNaN(temperature)) body.temperature = temperature;
  const topP = number(settingFields.top_p);
  if (topP !== null && !Number.isNaN(topP)) body.top_p = topP;
  const maxTokens = number(settingFields.max_tokens);
  if (maxTokens !== null && Number.isInteger(maxTokens)) body.max_tokens = maxTokens;
  return body;
}

// ---- the API key --------------------------------------------------------------------------------

function authHeaders() {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { Authorization: "Bearer " + key } : {};
}

let keyWaiters = [];

function askForKey(message) {
  const dialog = $("key-dialog");
  $("key-message").textContent = message;
  $("key-input").value = "";
  if (!dialog.open) dialog.showModal();
  $("key-input").focus();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$("key-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = $("key-input").value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY_STORE, key);
  if (await probe()) {
    $("key-dialog").close();
    const waiters = keyWaiters;
    keyWaiters = [];
    waiters.forEach((resolve) => resolve());
    if (!streaming) renderConversation();
  }
});
$("key-dialog").addEventListener("cancel", (event) => event.preventDefault());  // the page needs it

// Asks the server who it is; asks for the key when it says 401. Returns whether it answered.
async function probe() {
  let response;
  try {
    response = await fetch("/v1/models", { headers: authHeaders() });
  } catch (e) {
    setStatus("cannot reach the server: " + e.message, true);
    return false;
  }
  if (response.status === 401) {
    const had = sessionStorage.getItem(KEY_STORE);
    sessionStorage.removeItem(KEY_STORE);
    askForKey(had ? "The server refused that key. Enter the API key:" : "This server needs its API key (--api-key):");
    return false;
  }
  if (!response.ok) {
    setStatus("the server answered " + response.status, true);
    return false;
  }
  try {
    const models = await response.json();
    const model = models.data[0];
    modelName = model.id;
    $("model-name").textContent = model.id;
    $("model-name").title = model.context_length ? "context " + model.context_length + " tokens" : "";
    setStatus("");
  } catch {
    setStatus("unexpected /v1/models answer", true);
  }
  return true;
}

function setStatus(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", error);
}

function showNotice(text) {
  setStatus(text, true);
}

// ---- copying ------------------------------------------------------------------------------------

async function copyText(text, button) {
  let ok = false;
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      ok = true;
    }
  } catch {
    ok = false;
  }
  if (!ok) {  // plain http on another host: the old way
    const area = el("textarea");
    area.value = text;
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    area.remove();
  }
  const label = button.textContent;
  button.textContent = ok ? "Copied" : "Copy failed";
  setTimeout(() => (button.textContent = label), 1200);
}

function copyButton(getText, title) {
  const button = el("button", "copy", "Copy");
  button.type = "button";
  button.title = title;
  button.addEventListener("click", () => copyText(getText(), button));
  return button;
}

// ---- rendering a conversation -------------------------------------------------------------------

function renderMarkdownInto(target, text) {
  target.replaceChildren(renderMarkdown(text));
  for (const pre of target.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    const bar = el("div", "code-bar");
    bar.appendChild(el("span", "code-lang", code.dataset.lang || "code"));
    bar.appendChild(copyButton(() => code.textContent, "copy this code"));
    pre.before(bar);
  }
}

function prettyArguments(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function figuresText(f) {
  const parts = [];
  if (f.prompt !== undefined) parts.push(`prompt ${f.prompt}` + (f.cached ? ` (${f.cached} cached)` : ""));
  if (f.generated !== undefined) parts.push(`${f.generated} generated`);
  if (f.tps) parts.push(`${f.tps.toFixed(1)} tokens/s`);
  if (f.seconds !== undefined) parts.push(`${f.seconds.toFixed(1)} s`);
  return parts.join(" · ");
}

function userView(message) {
  const root = el("article", "msg user");
  root.appendChild(el("div", "bubble", message.content));
  const foot = el("div", "msg-foot");
  foot.appendChild(copyButton(() => message.content, "copy this message"));
  root.appendChild(foot);
  return root;
}

// An assistant reply's view; update() re-renders it from the reply record.
function assistantView(reply) {
  const root = el("article", "msg assistant");
  const reasoning = el("details", "reasoning");
  const summary = el("summary", null, "Reasoning");
  const reasoningText = el("div", "reasoning-text");
  reasoning.append(summary, reasoningText);
  const tools = el("div", "tool-calls");
  const content = el("div", "content markdown");
  const error = el("div", "error");
  const foot = el("div", "msg-foot");
  const figures = el("span", "figures");
  foot.append(figures, copyButton(() => reply.content, "copy this answer"));
  root.append(reasoning, tools, content, error, foot);
  let renderedContent = null, renderedTools = null, pending = false, userToggled = false;
  summary.addEventListener("click", () => (userToggled = true));

  function update() {
    pending = false;
    const live = streaming && streaming.reply === reply;
    reasoning.hidden = !reply.reasoning;
    if (reasoningText.textContent !== reply.reasoning) reasoningText.textContent = reply.reasoning || "";
    const thinking = live && !reply.content && !(reply.tool_calls || []).length;
    summary.textContent = thinking ? "Thinking…" : "Reasoning";
    reasoning.classList.toggle("live", thinking);
    // Open while the model thinks, folded once the answer begins, unless the reader chose.
    if (!userToggled && live) reasoning.open = thinking;
    const toolsKey = JSON.stringify(reply.tool_calls || []);
    if (toolsKey !== renderedTools) {
      renderedTools = toolsKey;
      tools.replaceChildren();
      for (const call of reply.tool_calls || []) {
        const card = el("div", "tool-card");
        const head = el("div", "tool-head");
        head.append(el("span", "tool-label", "tool call"), el("span", "tool-name", call.name || ""));
        const args = el("pre", "tool-args", prettyArguments(call.arguments || ""));
        card.append(head, args);
        if (call.id) card.dataset.id = call.id;
        tools.appendChild(card);
      }
    }
    if (reply.content !== renderedContent) {
      renderedContent = reply.content;
      renderMarkdownInto(content, reply.content || "");
    }
    error.hidden = !reply.error;
    error.textContent = reply.error || "";
    const f = reply.figures || {};
    const notes = [figuresText(f)];
    if (reply.finish_reason === "length") notes.push("cut off at the token limit");
    if (reply.stopped) notes.push("stopped");
    figures.textContent = live ? "…" : notes.filter(Boolean).join(" · ");
    for (const key of ["prompt", "cached", "generated"]) {
      if (f[key] !== undefined) figures.dataset[key] = String(f[key]);
      else delete figures.dataset[key];
    }
    root.classList.toggle("live", live);
  }
  // Streams call this per chunk; the DOM follows once per frame.
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      const box = $("messages");
      const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
      update();
      if (atBottom) box.scrollTop = box.scrollHeight;  // follow the stream unless the reader scrolled up
    });
  }
  update();
  return { root, update, schedule };
}

function renderConversation() {
  const box = $("messages");
  box.replaceChildren();
  if (!current || !current.messages.length) {
    const empty = el("div", "empty");
    empty.appendChild(el("p", null, modelName ? `Chat with ${modelName}.` : "Start a conversation."));
    empty.appendChild(el("p", "hint", "Enter sends · Shift+Enter breaks the line · Escape stops"));
    box.appendChild(empty);
    return;
  }
  for (const message of current.messages) {
    box.appendChild(message.role === "user" ? userView(message) : assistantView(message).root);
  }
  box.scrollTop = box.scrollHeight;
}

function renderConversationList() {
  const list = $("conversations");
  list.replaceChildren();
  const sorted = [...conversations].sort((a, b) => (b.updated || 0) - (a.updated || 0));
  for (const conversation of sorted) {
    const item = el("li");
    if (current && conversation.id === current.id) item.className = "current";
    const open = el("button", "open", conversation.title || "(untitled)");
    open.type = "button";
    open.title = conversation.title || "";
    open.addEventListener("click", () => openConversation(conversation.id));
    const remove = el("button", "delete", "×");
    remove.type = "button";
    remove.title = "delete this conversation";
    remove.setAttribute("aria-label", "delete " + (conversation.title || "conversation"));
    remove.addEventListener("click", () => deleteConversation(conversation.id));
    item.append(open, remove);
    list.appendChild(item);
  }
}

function openConversation(id) {
  if (streaming) stop();
  current = conversations.find((c) => c.id === id) || null;
  renderConversation();
  renderConversationList();
  closeDrawer();
}

function deleteConversation(id) {
  if (streaming && current && current.id === id) stop();
  conversations = conversations.filter((c) => c.id !== id);
  if (current && current.id === id) current = null;
  saveConversations();
  renderConversation();
}

function newChat() {
  if (streaming) stop();
  current = null;
  renderConversation();
  renderConversationList();
  closeDrawer();
  $("input").focus();
}

// ---- sending ------------------------------------------------------------------------------------

// The conversation as Chat Completions messages: the reasoning and tool calls go back too, so the
// prompt repeats the tokens the model wrote (and the prompt cache continues it).
function requestMessages(messages) {
  const out = [];
  const system = settingFields.system.value.trim();
  if (system) out.push({ role: "system", content: system });
  for (const m of messages) {
    if (m.role === "user") {
      out.push({ role: "user", content: m.content });
      continue;
    }
    if (m.error && !m.content && !(m.tool_calls || []).length) continue;  // a failed reply: nothing to repeat
    const message = { role: "assistant", content: m.content || "" };
    if (m.reasoning) message.reasoning_content = m.reasoning;
    if ((m.tool_calls || []).length)
      message.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
    out.push(message);
  }
  return out;
}

function errorMessage(status, text) {
  try {
    const body = JSON.parse(text);
    if (body.error && body.error.message) return `${status}: ${body.error.message}`;
  } catch {
    // not JSON: the text itself
  }
  return `${status}: ${text || "the server gave no reason"}`;
}

function applyChunk(reply, data, clock) {
  if (data.error) {
    reply.error = data.error.message || JSON.stringify(data.error);
    return;
  }
  if (data.usage) {
    const u = data.usage;
    reply.figures.prompt = u.prompt_tokens;
    reply.figures.generated = u.completion_tokens;
    reply.figures.cached = (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) || 0;
    if (data.timings && data.timings.predicted_per_second > 0) reply.figures.tps = data.timings.predicted_per_second;
  }
  for (const choice of data.choices || []) {
    const delta = choice.delta || {};
    let wrote = false;
    if (typeof delta.reasoning_content === "string" && delta.reasoning_content) {
      reply.reasoning += delta.reasoning_content;
      wrote = true;
    }
    if (typeof delta.content === "string" && delta.content) {
      reply.content += delta.content;
      wrote = true;
    }
    for (const call of delta.tool_calls || []) {
      const index = call.index ?? reply.tool_calls.length;
      const slot = (reply.tool_calls[index] ||= { id: "", name: "", arguments: "" });
      if (call.id) slot.id = call.id;
      if (call.function && call.function.name) slot.name = call.function.name;
      if (call.function && typeof call.function.arguments === "string") slot.arguments += call.function.arguments;
      wrote = true;
    }
    if (wrote && clock.first === null) clock.first = performance.now();
    if (choice.finish_reason) reply.finish_reason = choice.finish_reason;
  }
}

async function send() {
  const input = $("input");
  const text = input.value;
  if (!text.trim() || streaming) return;
  if (!current) {
    current = { id: newId(), title: text.trim().replace(/\s+/g, " ").slice(0, 60), created: Date.now(), messages: [] };
    conversations.push(current);
  }
  const conversation = current;
  conversation.messages.push({ role: "user", content: text });
  const reply = { role: "assistant", content: "", reasoning: "", tool_calls: [], figures: {} };
  const body = {
    model: modelName || undefined,
    messages: requestMessages(conversation.messages),
    stream: true,
    stream_options: { include_usage: true },
    ...settingsBody(),
  };
  const script = sessionStorage.getItem(TEST_SCRIPT);
  if (script !== null) body.inkling_test_script = script;
  conversation.messages.push(reply);
  conversation.updated = Date.now();
  input.value = "";
  autosize();
  saveConversations();
  renderConversation();
  const view = assistantView(reply);
  $("messages").lastChild.replaceWith(view.root);
  const controller = new AbortController();
  streaming = { controller, reply, view };
  setStreaming(true);
  view.update();  // marked live before the first await, so no one sees a finished empty reply
  const clock = { start: performance.now(), first: null };
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (response.status === 401) {
      conversation.messages.splice(-2, 2);  // not sent: put the text back and ask for the key
      input.value = text;
      autosize();
      finishStream();
      renderConversation();
      if (!conversation.messages.length) {
        conversations = conversations.filter((c) => c !== conversation);
        current = null;
      }
      saveConversations();
      sessionStorage.removeItem(KEY_STORE);
      askForKey("The server refused the key. Enter the API key:");
      return;
    }
    if (!response.ok) {
      reply.error = errorMessage(response.status, await response.text());
    } else {
      await readStream(response, reply, view, clock);
    }
  } catch (e) {
    if (e.name === "AbortError") reply.stopped = true;
    else reply.error = "the request failed: " + e.message;
  }
  const end = performance.now();
  reply.figures.seconds = (end - clock.start) / 1000;
  if (!reply.figures.tps && reply.figures.generated > 1 && clock.first !== null && end > clock.first)
    reply.figures.tps = (reply.figures.generated - 1) / ((end - clock.first) / 1000);
  conversation.updated = Date.now();
  finishStream();
  view.update();
  saveConversations();
}

async function readStream(response, reply, view, clock) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        try {
          applyChunk(reply, JSON.parse(data), clock);
        } catch (e) {
          reply.error = "unreadable stream event: " + e.message;
        }
      }
      view.schedule();
    }
  }
}

function finishStream() {
  streaming = null;
  setStreaming(false);
}

function stop() {
  if (streaming) streaming.controller.abort();
}

function setStreaming(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
  document.body.classList.toggle("streaming", on);
}

// ---- layout and keys ----------------------------------------------------------------------------

function autosize() {
  const input = $("input");
  input.style.height = "auto";
  input.style.height = Math.min(input.scrollHeight, 240) + "px";
}

function closeDrawer() {
  document.body.classList.remove("drawer-open");
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
$("input").addEventListener("input", autosize);
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && streaming) {
    event.preventDefault();
    stop();
  }
});
$("stop").addEventListener("click", stop);
$("new-chat").addEventListener("click", newChat);
$("menu").addEventListener("click", () => document.body.classList.toggle("drawer-open"));
$("scrim").addEventListener("click", closeDrawer);
$("settings-toggle").addEventListener("click", () => {
  const panel = $("settings");
  panel.hidden = !panel.hidden;
  $("settings-toggle").setAttribute("aria-expanded", String(!panel.hidden));
});
window.addEventListener("storage", (event) => {  // another tab changed the list
  if (event.key !== CONVERSATIONS) return;
  conversations = readJson(localStorage, CONVERSATIONS, []);
  if (current) current = conversations.find((c) => c.id === current.id) || null;
  renderConversationList();
});

loadSettings();
renderConversationList();
renderConversation();
probe().then(() => streaming || renderConversation());
document.body.dataset.ready = "1";
