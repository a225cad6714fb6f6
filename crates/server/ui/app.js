// The dashboard: who holds what, since when, who waits; each name's history; the server's
// metrics; force-release for an administrator.
//
// Startup: ask who we are (`GET /whoami`; a 401 shows the sign-in form), open the event
// stream, and once it says where it starts, read the lists page by page; the events that
// came meanwhile are applied after the lists, so nothing between the two is lost (an event
// already in a list changes nothing when applied again). From then on only the stream
// changes the tables: no polling.

import * as api from "./api.js";
import { Charts } from "./charts.js";
import { Live } from "./live.js";
import { Model, Table, duration, metaText } from "./tables.js";

const KINDS = ["lock", "semaphore", "rwlock"];
/** Events kept per name for its history, and names with a history. */
const HISTORY = 50;
const HISTORIES = 2000;

const $ = (id) => document.getElementById(id);

const state = {
  grants: [],
  model: new Model(),
  tables: {},
  elections: new Map(),
  histories: new Map(),
  live: null,
  charts: null,
  pending: null, // Events that came while the lists were read.
  open: null, // The name whose detail is shown: {kind, name}.
  forcing: null,
  waitersTimer: null,
  renderQueued: false,
  firstRows: false,
};

function status(text, kind = "") {
  const element = $("status");
  element.textContent = text;
  element.className = `status ${kind}`;
}

// ---- Rendering, coalesced to one pass per frame however many events come.

function render() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  // A hidden tab gets no animation frames: it renders on a timer instead, so that it is
  // current (and its document true) the moment it is shown or read.
  const later = document.hidden ? (run) => setTimeout(run, 0) : requestAnimationFrame;
  later(() => {
    state.renderQueued = false;
    const prefix = $("prefix").value;
    for (const kind of KINDS) state.tables[kind].render(state.model, prefix);
    renderElections(prefix);
    if (state.open) renderDetail();
    if (!state.firstRows && document.querySelector("table.held tbody tr")) {
      state.firstRows = true;
      performance.mark("fencelock:first-rows");
    }
  });
}

function renderElections(prefix) {
  const rows = [...state.elections.values()]
    .filter((e) => e.name.startsWith(prefix))
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.name = e.name;
      for (const text of [e.name, e.leader ?? "(vacant)", e.term ?? "", e.value ?? "", new Date(e.at).toLocaleTimeString()]) {
        const td = document.createElement("td");
        td.textContent = String(text);
        tr.append(td);
      }
      return tr;
    });
  $("elections").tBodies[0].replaceChildren(...rows);
  $("elections-summary").textContent = rows.length ? `${rows.length} live or ended while open` : "none live";
}

setInterval(() => {
  const now = Date.now();
  for (const kind of KINDS) state.tables[kind]?.tick(now);
  if (state.open) tickDetail(now);
}, 250);

// ---- The stream.

function remember(event, data) {
  if (!data.name || !data.kind) return;
  const key = `${data.kind}\u0000${data.name}`;
  let history = state.histories.get(key);
  if (!history) {
    if (state.histories.size >= HISTORIES) state.histories.delete(state.histories.keys().next().value);
    history = [];
    state.histories.set(key, history);
  }
  history.push({ event, ...data });
  if (history.length > HISTORY) history.shift();
}

function onEvent(event, data) {
  if (state.pending) {
    state.pending.push([event, data]);
    return;
  }
  take(event, data);
}

/**
 * An event of the elections' own stream, which starts with a `reset` and a snapshot of
 * every live leadership (elections have no list to read first).
 */
function takeElection(event, data) {
  if (event === "reset") {
    state.elections.clear();
  } else if (data.kind === "election") {
    const vacant = event === "vacant";
    state.elections.set(data.name, {
      name: data.name,
      leader: vacant ? null : data.owner,
      term: vacant ? null : data.fencing_token,
      value: vacant ? null : (data.leadership?.value ?? null),
      at: Date.parse(vacant ? data.at : (data.leadership?.since ?? data.at)),
    });
    if (event !== "snapshot") remember(event, data);
  }
  render();
}

function take(event, data) {
  if (event === "reset") {
    // The events since our last id are gone: what is live comes next as snapshots.
    state.model.clear();
    render();
    return;
  }
  if (event === "overflow") return; // The stream closes; it resumes from the last id.
  if (event !== "snapshot") remember(event, data);
  if (state.model.apply(event, data) || (state.open && state.open.name === data.name)) render();
}

async function onStart() {
  state.pending = [];
  try {
    for (const kind of KINDS) {
      await api.listAll(kind, (items) => {
        state.model.load(kind, items);
        render();
      });
    }
  } catch (error) {
    if (error instanceof api.Unauthenticated) return signedOut();
    status(`could not read the lists: ${error.message}`, "bad");
  }
  const pending = state.pending;
  state.pending = null;
  for (const [event, data] of pending) take(event, data);
  render();
}

function onStatus(what) {
  if (what === "live") status("live", "good");
  else if (what === "reconnecting") status("reconnecting…", "bad");
  else if (what === "signed-out") signedOut();
}

// ---- The detail of one name: its holders, this server's waiters, its history.

/** How often an open detail asks again for its waiters: joining a line makes no event. */
const WAITERS_EVERY_MS = 2000;

async function openDetail(kind, name) {
  clearInterval(state.waitersTimer);
  state.open = { kind, name, waiters: null };
  $("detail").hidden = false;
  renderDetail();
  $("detail-title").focus();
  state.waitersTimer = setInterval(refreshWaiters, WAITERS_EVERY_MS);
  await refreshWaiters();
}

async function refreshWaiters() {
  const open = state.open;
  if (!open) return;
  try {
    const body = await api.getJson(api.namePath(open.kind, open.name));
    if (state.open === open) {
      open.waiters = body?.waiters ?? [];
      renderDetail();
    }
  } catch (error) {
    if (error instanceof api.Unauthenticated) signedOut();
  }
}

function closeDetail() {
  clearInterval(state.waitersTimer);
  const open = state.open;
  state.open = null;
  $("detail").hidden = true;
  if (open) document.querySelector(`#${api.COLLECTIONS[open.kind]} tr[data-name="${CSS.escape(open.name)}"]`)?.focus();
}

function item(text, className) {
  const li = document.createElement("li");
  li.textContent = text;
  if (className) li.className = className;
  return li;
}

function renderDetail() {
  const { kind, name, waiters } = state.open;
  $("detail-title").textContent = `${kind} ${name}`;
  const entry = state.model.get(kind, name);
  const holders = entry ? [...entry.holders.values()] : [];
  $("detail-holders").replaceChildren(
    ...(holders.length
      ? holders.map((h) => {
          const li = item(
            `${h.owner}${h.principal ? ` (${h.principal})` : ""} — token ${h.token}${h.mode ? `, ${h.mode}` : ""}${h.meta ? ` — ${metaText(h.meta)}` : ""}`,
          );
          const left = document.createElement("span");
          left.className = "left";
          left.dataset.until = String(h.expiresAt);
          li.append(" — ", left);
          return li;
        })
      : [item("nothing held", "none")]),
  );
  const force = $("detail-force");
  if (holders.length && api.may(state.grants, "admin", name)) {
    if (!force.firstChild) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "danger";
      button.textContent = "Force release";
      button.addEventListener("click", () => askForce(state.open.kind, state.open.name));
      force.append(button);
    }
  } else force.replaceChildren();
  $("detail-waiters").replaceChildren(
    ...(waiters === null
      ? [item("asking…", "none")]
      : waiters.length
        ? waiters.map((w) => {
            const li = item(`${w.owner}${w.mode ? ` (${w.mode})` : ""}`);
            const since = document.createElement("span");
            since.dataset.since = String(Date.parse(w.since));
            const until = document.createElement("span");
            until.dataset.givesUp = String(Date.parse(w.until));
            li.append(" — waiting ", since, ", gives up in ", until);
            return li;
          })
        : [item("nobody waits here", "none")]),
  );
  const history = state.histories.get(`${kind}\u0000${name}`) ?? [];
  $("detail-history").replaceChildren(
    ...(history.length
      ? [...history].reverse().map((e) => {
          const parts = [new Date(Date.parse(e.at)).toLocaleTimeString(), e.event, e.owner];
          if (e.fencing_token !== null && e.fencing_token !== undefined) parts.push(`token ${e.fencing_token}`);
          if (e.held_ms !== undefined) parts.push(`held ${duration(e.held_ms)}`);
          return item(parts.join(" · "), `event ${e.event}`);
        })
      : [item("no event since this page opened", "none")]),
  );
  tickDetail(Date.now());
}

function tickDetail(now) {
  for (const span of $("detail").querySelectorAll("[data-until]")) {
    const left = Number(span.dataset.until) - now;
    span.textContent = left > 0 ? `expires in ${duration(left)}` : "expired";
  }
  for (const span of $("detail").querySelectorAll("[data-since]")) span.textContent = duration(now - Number(span.dataset.since));
  for (const span of $("detail").querySelectorAll("[data-gives-up]")) span.textContent = duration(Number(span.dataset.givesUp) - now);
}

// ---- Force-release, behind a confirmation.

function askForce(kind, name) {
  state.forcing = { kind, name, from: document.activeElement };
  $("confirm-text").textContent = `Free ${kind} “${name}” now, whoever holds it? Its holders are not told: the next grant gets a greater fencing token.`;
  $("confirm-error").textContent = "";
  $("confirm").showModal();
}

async function confirmForce(event) {
  event.preventDefault();
  const { kind, name } = state.forcing;
  try {
    const freed = await api.forceRelease(kind, name);
    $("confirm").close();
    status(freed ? `force-released ${kind} ${name}` : `${kind} ${name} was no longer held`, "good");
  } catch (error) {
    if (error instanceof api.Unauthenticated) {
      $("confirm").close();
      return signedOut();
    }
    $("confirm-error").textContent = `Not released: ${error.message}`;
  }
}

// ---- Signing in and out.

function signedOut() {
  stop();
  $("board").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  status("signed out");
  $("token").focus();
}

async function signIn(event) {
  event.preventDefault();
  api.saveToken($("token").value.trim());
  $("token").value = "";
  if (!(await start())) $("sign-in-error").textContent = "The server does not know this token.";
}

function signOut() {
  api.forgetToken();
  $("sign-in-error").textContent = "";
  signedOut();
}

function stop() {
  state.live?.stop();
  state.live = null;
  state.electionsLive?.stop();
  state.electionsLive = null;
  state.charts?.stop();
  state.model.clear();
  state.elections.clear();
  state.histories.clear();
  clearInterval(state.waitersTimer);
  state.open = null;
  $("detail").hidden = true;
  render();
}

/** Starts the board; false if the server wants a token it was not given. */
async function start() {
  let me;
  try {
    me = await api.whoami();
  } catch (error) {
    if (error instanceof api.Unauthenticated) {
      signedOut();
      return false;
    }
    status(`the server does not answer: ${error.message}`, "bad");
    return true;
  }
  state.grants = me.grants;
  $("sign-in").hidden = true;
  $("board").hidden = false;
  $("who").hidden = me.principal === null;
  $("principal").textContent = me.principal === null ? "" : `signed in as ${me.principal}`;
  state.live = new Live({ onStart, onEvent, onStatus, path: "/events?kinds=lock,semaphore,rwlock" });
  state.live.start();
  state.electionsLive = new Live({
    onStart() {},
    onEvent: takeElection,
    onStatus() {},
    path: "/events?kinds=election",
    from: "0-0",
  });
  state.electionsLive.start();
  state.charts.start();
  return true;
}

function setUp() {
  const common = {
    onOpen: openDetail,
    onForce: askForce,
    mayForce: (name) => api.may(state.grants, "admin", name),
    onMore: render,
  };
  for (const kind of KINDS) {
    const id = api.COLLECTIONS[kind];
    state.tables[kind] = new Table(kind, {
      ...common,
      tbody: $(id).tBodies[0],
      summary: $(`${id}-summary`),
      more: $(`${id}-more`),
    });
  }
  state.charts = new Charts($("charts"));
  $("prefix").addEventListener("input", render);
  $("detail-close").addEventListener("click", closeDetail);
  $("detail").addEventListener("keydown", (event) => {
    if (event.key === "Escape") closeDetail();
  });
  $("confirm-form").addEventListener("submit", confirmForce);
  $("confirm-cancel").addEventListener("click", () => $("confirm").close());
  $("confirm").addEventListener("close", () => {
    // Fired a task after the dialog closed: if it was opened again meanwhile (a quick
    // Escape, then Enter on the button again), the forcing now is the new one's.
    if ($("confirm").open) return;
    state.forcing?.from?.isConnected && state.forcing.from.focus();
    state.forcing = null;
  });
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
}

setUp();
start();
