// The Bide dev console. Every second it reads the local stack (/_local/status,
// /_local/sessions, /_local/sessions/{id}) and the sessions API (GET /sessions/{id}, its
// /workflow), and draws what changed. Actions go through the sessions API, as a deployed UI's
// would. Text from sessions is only ever set as text, never parsed as HTML.
"use strict";

const POLL_MS = 1000;
const state = {
  selected: null, // the session shown
  skew: 0, // server clock minus this browser's, in seconds (the stack may run a test clock)
  polling: false,
  drawn: {}, // section name -> the JSON it was last drawn from
  notices: [],
};

// --- small helpers --------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "data") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const seg = encodeURIComponent;

async function call(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (_) {
    data = text;
  }
  return { ok: response.ok, status: response.status, data };
}

function why(response) {
  const d = response.data;
  if (d && typeof d === "object") {
    if (d.error || d.message) return `HTTP ${response.status}: ${d.error || d.message}`;
    if (Array.isArray(d.detail)) {
      return (
        `HTTP ${response.status}: ` + d.detail.map((e) => `${e.loc.join(".")}: ${e.msg}`).join("; ")
      );
    }
  }
  return `HTTP ${response.status}`;
}

function now() {
  return Date.now() / 1000 + state.skew;
}

function span(seconds) {
  if (seconds >= 3600) {
    const minutes = Math.round(seconds / 60);
    const hours = Math.floor(minutes / 60);
    const days = Math.floor(hours / 24);
    return days ? `${days}d ${hours % 24}h` : `${hours}h ${minutes % 60}m`;
  }
  const secs = Math.round(seconds);
  const minutes = Math.floor(secs / 60);
  return minutes ? `${minutes}m ${secs % 60}s` : `${secs}s`;
}

function relative(at) {
  const seconds = at - now();
  if (Math.abs(seconds) < 0.5) return "now";
  return seconds > 0 ? `in ${span(seconds)}` : `${span(-seconds)} ago`;
}

function utc(at) {
  return new Date(at * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

// A time that keeps its relative part current (see tick()).
function time(at, format) {
  if (at === null || at === undefined) return el("span", { text: "never" });
  const node = el("span", { class: "time", data: { at: String(at), format: format || "when" } });
  node.title = utc(at);
  renderTime(node);
  return node;
}

function renderTime(node) {
  const at = Number(node.dataset.at);
  node.textContent =
    node.dataset.format === "relative" ? relative(at) : `${utc(at)} (${relative(at)})`;
}

function tick() {
  for (const node of document.querySelectorAll("[data-at]")) renderTime(node);
}

function badge(text, kind) {
  return el("span", { class: "badge " + (kind || text).replace(/ /g, "-"), text });
}

function callText(tool) {
  const args = tool.arguments;
  let shown;
  if (args && typeof args === "object" && !Array.isArray(args)) {
    shown = Object.entries(args)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(", ");
  } else {
    shown = args === undefined || args === null ? "" : JSON.stringify(args);
  }
  return `${tool.name || "?"}(${shown})`;
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {
    const area = el("textarea", { class: "offscreen" });
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

// Redraw a section only when its data changed: a form being typed into is left alone.
function section(name, data, draw) {
  const key = JSON.stringify(data);
  if (state.drawn[name] === key) return;
  state.drawn[name] = key;
  draw(data);
}

function notice(text, bad) {
  state.notices = [{ text, bad, at: now() }, ...state.notices].slice(0, 4);
  const list = document.getElementById("notices");
  if (!list) return;
  list.replaceChildren(
    ...state.notices.map((n) => el("li", { class: n.bad ? "bad" : null, text: n.text })),
  );
}

// --- the stack and the session list ---------------------------------------------------------

function drawStatus(status) {
  const parts = [
    `workers running: ${status.workers_running.length}`,
    `queued wakes: ${status.wakes_queued.length}`,
    `alarms: ${status.alarms.length}`,
  ];
  if (status.dead_letters) parts.push(`dead letters: ${status.dead_letters}`);
  document.getElementById("stack-status").textContent = parts.join(" · ");
}

function drawSessions(sessions) {
  document.getElementById("no-sessions").hidden = sessions.length > 0;
  const list = document.getElementById("session-list");
  list.replaceChildren(
    ...sessions.map((s) => {
      const meta = [`${s.live_tasks} live task${s.live_tasks === 1 ? "" : "s"}`];
      if (s.asks) meta.push(`${s.asks} question${s.asks === 1 ? "" : "s"}`);
      if (s.approvals) meta.push(`${s.approvals} approval${s.approvals === 1 ? "" : "s"}`);
      const item = el(
        "button",
        {
          type: "button",
          class: "session-item" + (s.session_id === state.selected ? " selected" : ""),
          data: { session: s.session_id },
          onclick: () => select(s.session_id),
        },
        el("span", { class: "sid", text: s.session_id }),
        badge(s.state),
        " ",
        el("span", { class: "meta", text: meta.join(" · ") }),
        s.alarm_at
          ? el("span", { class: "meta" }, " · alarm ", time(s.alarm_at, "relative"))
          : null,
      );
      return el("li", {}, item);
    }),
  );
}

function select(sessionId) {
  if (location.hash !== "#" + seg(sessionId)) location.hash = seg(sessionId);
  else show(sessionId);
}

function show(sessionId) {
  state.selected = sessionId;
  state.drawn = {};
  for (const item of document.querySelectorAll(".session-item")) {
    item.classList.toggle("selected", item.dataset.session === sessionId);
  }
  const pane = document.getElementById("session");
  if (!sessionId) {
    pane.replaceChildren(el("p", { class: "empty", text: "Select a session on the left." }));
    return;
  }
  // The pane's layout is the page's <template>; only the data is drawn here.
  pane.replaceChildren(document.getElementById("session-pane").content.cloneNode(true));
  pane.querySelector(".session-head h2").textContent = sessionId;
  const input = document.getElementById("message");
  document.getElementById("send").addEventListener("submit", async (event) => {
    event.preventDefault();
    const content = input.value.trim();
    if (!content) return;
    const requestId = "console-" + Math.random().toString(36).slice(2, 12);
    const r = await call("POST", `/sessions/${seg(sessionId)}/inputs`, {
      content,
      request_id: requestId,
    });
    if (r.ok) {
      input.value = "";
      notice(`message sent: submission ${r.data.id} ${r.data.status}`);
    } else notice(`message refused: ${why(r)}`, true);
    poll();
  });
  state.notices = [];
  poll();
}

// --- one session ----------------------------------------------------------------------------

function drawBadges(view, local) {
  const badges = [
    badge(
      view.running ? "conversation running" : "conversation idle",
      view.running ? "running" : "idle",
    ),
  ];
  if (local && local.worker_running) badges.push(badge("worker running", "running"));
  document.getElementById("session-badges").replaceChildren(...badges);
}

// Questions, approvals and sign-ins, as cards kept across polls (so an answer being typed
// survives): cards whose request is gone are removed, new ones added.
function drawNeeds(sessionId, workflow) {
  const box = document.getElementById("asks");
  const items = [
    ...(workflow.asks || []).map((a) => ({
      key: "ask:" + a.id,
      build: () => askCard(sessionId, a),
    })),
    ...(workflow.approvals || []).map((a) => ({
      key: "approval:" + a.id,
      build: () => approvalCard(sessionId, a),
    })),
    ...(workflow.authorizations || []).map((a) => ({
      key: "auth:" + a.id,
      build: () => signInCard(sessionId, a),
    })),
  ];
  const wanted = new Set(items.map((i) => i.key));
  for (const card of [...box.children]) if (!wanted.has(card.dataset.key)) card.remove();
  const present = new Set([...box.children].map((c) => c.dataset.key));
  for (const item of items) if (!present.has(item.key)) box.append(item.build());
  document
    .getElementById("needs-you-empty")
    .replaceChildren(
      items.length ? "" : el("p", { class: "empty", text: "Nothing waits for you." }),
    );
}

function settle(card, ok, text) {
  const result = card.querySelector(".result");
  result.textContent = text;
  result.className = "result " + (ok ? "good" : "bad");
  for (const control of card.querySelectorAll("button, input")) control.disabled = ok;
  card.classList.toggle("settled", ok);
}

function askCard(sessionId, ask) {
  const card = el("div", { class: "card ask", data: { key: "ask:" + ask.id, ask: ask.id } });
  const freeform = ask.allow_freeform || !ask.options.length;
  const text = freeform
    ? el("input", {
        type: "text",
        class: "answer-text",
        placeholder: "Your answer",
        "aria-label": "answer",
      })
    : null;
  async function answer(optionId) {
    const body = {};
    if (optionId) body.option_id = optionId;
    if (text && text.value.trim()) body.text = text.value.trim();
    if (!body.option_id && !body.text) return settle(card, false, "Type an answer first.");
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    const r = await call("POST", `/sessions/${seg(sessionId)}/asks/${seg(ask.id)}/answer`, body);
    const result = r.ok ? r.data.result : null;
    if (result === "delivered") {
      settle(card, true, "Answered: the run resumes.");
      notice(`question ${ask.id} answered: delivered`);
    } else {
      settle(card, false, result ? `Not taken: ${result}` : why(r));
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
    poll();
  }
  const buttons = ask.options.map((o) =>
    el("button", {
      type: "button",
      class: o.style === "default" ? null : o.style,
      title: o.description || null,
      onclick: () => answer(o.id),
      text: o.label || o.id,
    }),
  );
  card.append(
    el(
      "div",
      { class: "card-head" },
      badge("question", "needs-you"),
      `${ask.tool} · task `,
      el("code", { text: ask.task_id }),
      " · asked ",
      time(ask.created_at, "relative"),
    ),
    el("p", { class: "prompt", text: ask.prompt }),
    el(
      "div",
      { class: "actions" },
      ...buttons,
      text,
      freeform
        ? el("button", {
            type: "button",
            class: "primary",
            onclick: () => answer(null),
            text: "Send answer",
          })
        : null,
    ),
    el("p", { class: "result" }),
  );
  return card;
}

function approvalCard(sessionId, approval) {
  const card = el("div", {
    class: "card approval",
    data: { key: "approval:" + approval.id, approval: approval.id },
  });
  const note = el("input", { type: "text", placeholder: "Note (optional)", "aria-label": "note" });
  async function decide(approved) {
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    const body = { approved, by: "console" };
    if (note.value.trim()) body.note = note.value.trim();
    const r = await call(
      "POST",
      `/sessions/${seg(sessionId)}/approvals/${seg(approval.id)}/decide`,
      body,
    );
    const result = r.ok ? r.data.result : null;
    if (result === "decided") {
      settle(card, true, approved ? "Approved: the call runs." : "Denied: the call is blocked.");
      notice(`approval ${approval.id} ${approved ? "approved" : "denied"}`);
    } else {
      settle(card, false, result ? `Not taken: ${result}` : why(r));
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
    poll();
  }
  card.append(
    el(
      "div",
      { class: "card-head" },
      badge("approval", "active"),
      `${approval.tool} · ${approval.subject} · call `,
      el("code", { text: approval.call_task }),
      approval.deadline ? el("span", {}, " · deadline ", time(approval.deadline)) : null,
    ),
    el("pre", { class: "args", text: JSON.stringify(approval.arguments, null, 2) }),
    el(
      "div",
      { class: "actions" },
      el("button", {
        type: "button",
        class: "primary",
        onclick: () => decide(true),
        text: "Approve",
      }),
      el("button", { type: "button", class: "danger", onclick: () => decide(false), text: "Deny" }),
      note,
    ),
    el("p", { class: "result" }),
  );
  return card;
}

function signInCard(sessionId, auth) {
  return el(
    "div",
    { class: "card", data: { key: "auth:" + auth.id } },
    el(
      "div",
      { class: "card-head" },
      badge("sign-in", "needs-you"),
      `${auth.tool} · step ${auth.step} · task `,
      el("code", { text: auth.task_id }),
    ),
    el("p", { class: "prompt", text: `The run needs a sign-in with ${auth.provider}.` }),
    el(
      "p",
      { class: "empty" },
      "The provider's callback completes it: ",
      el("code", {
        text: `POST /sessions/${sessionId}/authorizations/${auth.id}/complete {"token": ...}`,
      }),
    ),
    el("p", { class: "result" }),
  );
}

function drawTasks(data) {
  const { tasks, hooks, progress, people } = data;
  const box = document.getElementById("tasks");
  if (!tasks.length)
    return box.replaceChildren(
      el("p", { class: "empty", text: "No live tasks: nothing runs and nothing waits." }),
    );
  const ids = new Set(tasks.map((t) => t.id));
  const children = new Map();
  for (const task of tasks) {
    const owner = ids.has(task.owner) ? task.owner : null;
    if (!children.has(owner)) children.set(owner, []);
    children.get(owner).push(task);
  }
  const byTask = (list) =>
    list.reduce((m, x) => m.set(x.task_id, [...(m.get(x.task_id) || []), x]), new Map());
  const hooksOf = byTask(hooks);
  const progressOf = byTask(progress);
  const peopleOf = byTask(people);
  function branch(owner) {
    const kids = children.get(owner) || [];
    return el(
      "ul",
      {},
      ...kids.map((t) =>
        el(
          "li",
          { data: { task: t.id } },
          taskNode(
            t,
            hooksOf.get(t.id) || [],
            progressOf.get(t.id) || [],
            peopleOf.get(t.id) || [],
          ),
          children.has(t.id) ? branch(t.id) : null,
        ),
      ),
    );
  }
  const tree = branch(null);
  tree.className = "tree";
  box.replaceChildren(tree);
}

function taskNode(task, hooks, progress, people) {
  const line = el(
    "div",
    { class: "task-line" },
    badge(task.status),
    task.abort_marked ? badge("abort-marked", "abort") : null,
    el("span", { class: "kind", text: task.tool ? `tool ${callText(task.tool)}` : task.kind }),
    el("code", { class: "muted", text: task.id }),
    task.phase ? el("span", { class: "meta", text: `phase ${task.phase}` }) : null,
  );
  const details = [];
  if (task.status === "sleeping" || (task.until !== null && task.until !== undefined)) {
    details.push(el("span", {}, "until ", time(task.until)));
  }
  if (task.keys && task.keys.length) {
    details.push(
      el(
        "span",
        {},
        "on ",
        el("code", { text: task.keys.map((k) => `${k.signal}/${k.key}`).join(", ") }),
      ),
    );
  }
  if (task.beat_by !== null && task.beat_by !== undefined) {
    // When a missed heartbeat will be noticed (a beat moves it).
    details.push(el("span", {}, "beat by ", time(task.beat_by), ` (every ${task.heartbeat}s)`));
  }
  for (const slot of task.slots || []) {
    const where = el("code", { text: `${slot.signal}/${slot.key}` });
    // A failure is shown as a failure, never as a value.
    details.push(
      slot.holds === "failure" && slot.failure
        ? el(
            "span",
            { class: "held-failure" },
            badge("failure", "abort"),
            " on ",
            where,
            `: ${slot.failure.type}: ${slot.failure.message}`,
          )
        : el("span", {}, `holds ${slot.holds} on `, where),
    );
  }
  if (task.policy) {
    details.push(
      el("span", {
        text: `policy ${task.policy} on ${task.on.length} task${task.on.length === 1 ? "" : "s"}`,
      }),
    );
  }
  for (const p of people)
    details.push(el("span", { class: "waits-for-you", text: `waits for ${p.text}` }));
  const node = el(
    "div",
    { class: "task" },
    line,
    details.length ? el("div", { class: "task-detail" }, ...details) : null,
  );
  for (const hook of hooks) {
    const button = el("button", {
      type: "button",
      class: "small copy",
      text: "Copy",
      "aria-label": "copy webhook URL",
    });
    button.addEventListener("click", () => copy(hook.url, button));
    const meta = [`webhook → ${hook.signal}/${hook.key}`, `${hook.received} received`];
    if (hook.signed) meta.push("needs an HMAC signature");
    node.append(
      el(
        "div",
        { class: "hook" },
        el("code", { class: "hook-url", text: hook.url }),
        button,
        el("span", { class: "meta", text: meta.join(" · ") }),
      ),
    );
  }
  for (const p of progress) {
    const value = typeof p.value === "string" ? p.value : JSON.stringify(p.value);
    node.append(
      el(
        "div",
        { class: "progress" },
        "progress ",
        el("span", { class: "value", text: value }),
        el("span", { class: "meta" }, " ", time(p.at, "relative")),
      ),
    );
  }
  return node;
}

function drawSchedule(data) {
  const { wake, local, live } = data;
  let summary = "parked on signals only (no alarm)";
  if (wake.active) summary = "active: something can run now";
  else if (wake.at) summary = "parked until a deadline";
  else if (!live) summary = "idle: nothing to run, no alarm";
  const facts = [
    ["wake()", summary],
    ["next deadline", time(wake.at)],
    ["alarm", local ? time(local.alarm_at) : "?"],
    ["worker", local && local.worker_running ? "running" : "not running"],
  ];
  const queued = local ? local.wakes_queued : [];
  facts.push([
    "queued wakes",
    queued.length
      ? queued
          .map((q) => `${q.reason}${q.visible_in_seconds ? ` (in ${q.visible_in_seconds}s)` : ""}`)
          .join(", ")
      : "none",
  ]);
  document
    .getElementById("schedule")
    .replaceChildren(
      el(
        "dl",
        { class: "facts" },
        ...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]),
      ),
    );
}

function drawBackground(tasks) {
  document.getElementById("background-panel").hidden = !tasks.length;
  document
    .getElementById("background")
    .replaceChildren(
      el(
        "ul",
        { class: "transcript" },
        ...tasks.map((t) =>
          el(
            "li",
            {},
            el("span", { class: "who" }, badge(t.status)),
            el(
              "span",
              { class: "text" },
              el("span", {
                class: "call",
                text: callText({ name: t.tool, arguments: t.arguments }),
              }),
              ` · task ${t.id}`,
              t.result !== null && t.result !== undefined
                ? ` · result ${JSON.stringify(t.result)}`
                : "",
              t.error ? ` · error ${t.error}` : "",
            ),
          ),
        ),
      ),
    );
}

function drawTranscript(data) {
  const { entries, submissions } = data;
  const rows = entries.map((e) => {
    let who = e.type || "?";
    const parts = [];
    if (e.text) parts.push(e.text);
    if (e.type === "assistant") {
      for (const c of e.tool_calls || [])
        parts.push(el("div", { class: "call", text: "→ " + callText(c) }));
    } else if (e.type === "tool_result") {
      who = "tool";
      parts.unshift(el("span", { class: "call", text: `${e.name || ""}: ` }));
    }
    return el(
      "li",
      { class: e.is_error ? "error" : null },
      el("span", { class: "who", text: who }),
      el("span", { class: "text" }, ...parts),
    );
  });
  const box = document.getElementById("transcript");
  const pending = submissions.filter((s) => s.status === "queued" || s.status === "placed");
  box.replaceChildren(
    rows.length
      ? el("ol", { class: "transcript" }, ...rows)
      : el("p", { class: "empty", text: "Nothing said yet." }),
    el("p", {
      class: "empty",
      hidden: !pending.length,
      text: "submissions: " + pending.map((s) => `${s.id} ${s.status}`).join(", "),
    }),
  );
}

// The workflow view holds the first page of each list: read the rest of the lists the page
// draws (questions, approvals, sign-ins) from GET .../workflow/<list>, page by page.
async function workflowView(base) {
  const found = await call("GET", base + "/workflow");
  if (!found.ok || !found.data) return found;
  for (const name of ["asks", "approvals", "authorizations"]) {
    let cursor = found.data[name + "_next"];
    let more = found.data[name + "_more"];
    for (let pages = 0; more && cursor && pages < 20; pages++) {
      const query = "?limit=500&cursor=" + encodeURIComponent(cursor);
      const page = await call("GET", `${base}/workflow/${name}${query}`);
      if (!page.ok) break;
      found.data[name] = [...(found.data[name] || []), ...page.data.items];
      cursor = page.data.next || cursor;
      more = page.data.more;
    }
  }
  return found;
}

async function loadSession(sessionId) {
  const base = `/sessions/${seg(sessionId)}`;
  const [view, workflow, local] = await Promise.all([
    call("GET", base),
    workflowView(base),
    call("GET", `/_local/sessions/${seg(sessionId)}`),
  ]);
  if (sessionId !== state.selected) return;
  if (!view.ok) {
    document
      .getElementById("tasks")
      .replaceChildren(el("p", { class: "empty", text: `Cannot read this session: ${why(view)}` }));
    return;
  }
  const v = view.data;
  const w = workflow.ok
    ? workflow.data
    : { asks: [], approvals: [], authorizations: [], tasks: [] };
  const l = local.ok ? local.data : null;
  drawBadges(v, l);
  section("needs", w, (data) => drawNeeds(sessionId, data));
  const asks = (w.asks || []).map((a) => ({
    task_id: a.task_id,
    text: `your answer to “${a.prompt}”`,
  }));
  const approvals = (w.approvals || []).map((a) => ({
    task_id: a.call_task,
    text: `your approval of ${a.subject}`,
  }));
  section(
    "tasks",
    {
      tasks: v.tasks,
      hooks: v.webhooks || [],
      progress: l ? l.progress : [],
      people: [...asks, ...approvals],
    },
    drawTasks,
  );
  section(
    "schedule",
    {
      wake: v.wake,
      live: v.tasks.length,
      local: l && { ...l, now: undefined, seq: undefined, progress: undefined },
    },
    drawSchedule,
  );
  section("background", w.tasks || [], drawBackground);
  section("transcript", { entries: v.entries, submissions: v.submissions }, drawTranscript);
}

// --- the loop -------------------------------------------------------------------------------

async function poll() {
  if (state.polling) return;
  state.polling = true;
  try {
    const [status, sessions] = await Promise.all([
      call("GET", "/_local/status"),
      call("GET", "/_local/sessions"),
    ]);
    document.getElementById("offline").hidden = true;
    state.skew = status.data.now - Date.now() / 1000;
    drawStatus(status.data);
    // Redrawn only when it changed, so a click on it is never lost to a redraw.
    section("sessions", sessions.data.sessions, drawSessions);
    if (state.selected) await loadSession(state.selected);
  } catch (_) {
    document.getElementById("offline").hidden = false;
  } finally {
    state.polling = false;
  }
}

function fromHash() {
  const id = decodeURIComponent(location.hash.slice(1));
  show(id || null);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("new-session").addEventListener("click", async () => {
    const r = await call("POST", "/sessions", {});
    if (r.ok) select(r.data.session_id);
  });
  window.addEventListener("hashchange", fromHash);
  fromHash();
  setInterval(poll, POLL_MS);
  setInterval(tick, 1000);
  poll();
});
