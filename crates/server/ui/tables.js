// What is held, as the lists and the event stream tell it, and the tables that show it.
//
// The model keeps one entry per name and kind, with its holders by fencing token; the
// tables show the entries under the filter, sorted by name, a page at a time (a server may
// hold tens of thousands: only the rows shown are in the document). Rows are kept by key
// and updated in place, so the focus stays where the keyboard left it.

export const PAGE = 100;

/** A lease, permit or hold as the API writes it, as the tables use it. */
export function holderOf(body) {
  return {
    owner: body.owner,
    principal: body.principal ?? null,
    token: body.fencing_token,
    acquiredAt: Date.parse(body.acquired_at),
    expiresAt: Date.parse(body.expires_at),
    meta: body.meta ?? null,
    mode: body.mode ?? null,
    limit: body.limit ?? null,
  };
}

const key = (kind, name) => `${kind}\u0000${name}`;

/** Everything held, by kind and name. */
export class Model {
  constructor() {
    this.entries = new Map();
    this.sorted = { lock: null, semaphore: null, rwlock: null };
  }

  clear() {
    this.entries.clear();
    for (const kind of Object.keys(this.sorted)) this.sorted[kind] = null;
  }

  get(kind, name) {
    return this.entries.get(key(kind, name));
  }

  /** The names of `kind`, sorted as the API sorts them (by UTF-16 here: close enough to show). */
  names(kind) {
    if (!this.sorted[kind]) {
      const names = [];
      for (const entry of this.entries.values()) if (entry.kind === kind) names.push(entry.name);
      this.sorted[kind] = names.sort();
    }
    return this.sorted[kind];
  }

  count(kind) {
    return this.names(kind).length;
  }

  /** `holder` now holds `name` of `kind`; a lock has one holder, the others many. */
  put(kind, name, holder, limit = null) {
    let entry = this.get(kind, name);
    if (!entry) {
      entry = { kind, name, holders: new Map(), limit: null };
      this.entries.set(key(kind, name), entry);
      this.sorted[kind] = null;
    }
    if (kind === "lock") entry.holders.clear();
    entry.holders.set(holder.token, holder);
    entry.limit = holder.limit ?? limit ?? entry.limit;
  }

  /** The holder of `token` ended (every holder when the token is unknown). */
  end(kind, name, token) {
    const entry = this.get(kind, name);
    if (!entry) return;
    if (token === null || token === undefined) entry.holders.clear();
    else entry.holders.delete(token);
    if (entry.holders.size === 0) {
      this.entries.delete(key(kind, name));
      this.sorted[kind] = null;
    }
  }

  /** A page of `GET /locks`, `/semaphores` or `/rwlocks`. */
  load(kind, items) {
    for (const item of items) {
      if (kind === "lock") this.put(kind, item.resource, holderOf(item));
      else {
        for (const body of item.permits ?? item.holders ?? []) {
          this.put(kind, item.name, holderOf(body), item.limit);
        }
      }
    }
  }

  /** An event of the stream; says whether it changed what is held. */
  apply(event, data) {
    const kind = data.kind;
    if (!(kind in this.sorted)) return false;
    switch (event) {
      case "grant":
      case "extend":
      case "renew":
      case "snapshot": {
        const body = data.hold ?? data.lease;
        if (!body) return false;
        this.put(kind, data.name, holderOf(body));
        return true;
      }
      case "release":
      case "expire":
      case "force-release":
        this.end(kind, data.name, data.fencing_token);
        return true;
      default:
        return false;
    }
  }
}

/** "4.2 s", "3 m 05 s", "2 h 10 m", "3 d 4 h" */
export function duration(ms) {
  if (ms < 0) ms = 0;
  const s = ms / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.floor(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${String(m % 60).padStart(2, "0")} m`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** Metadata as `key=value` pairs on one line. */
export function metaText(meta) {
  if (!meta) return "";
  return Object.entries(meta)
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(" ");
}

function cell(row, text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  td.textContent = text;
  row.append(td);
  return td;
}

function set(td, text) {
  if (td.textContent !== text) td.textContent = text;
}

/** The columns of each kind: what a row shows of an entry. */
const COLUMNS = {
  lock: (entry) => {
    const [h] = entry.holders.values();
    return [h.owner, h.principal ?? "", String(h.token), metaText(h.meta)];
  },
  semaphore: (entry) => {
    const permits = [...entry.holders.values()];
    return [
      `${permits.length} / ${entry.limit ?? "?"}`,
      permits.map((p) => p.owner).join(", "),
      [...new Set(permits.map((p) => p.principal).filter(Boolean))].join(", "),
      permits.map((p) => p.token).join(", "),
      permits.map((p) => metaText(p.meta)).filter(Boolean).join("; "),
    ];
  },
  rwlock: (entry) => {
    const holds = [...entry.holders.values()];
    const readers = holds.filter((h) => h.mode === "read");
    const writer = holds.find((h) => h.mode === "write");
    return [
      readers.length ? `${readers.length}: ${readers.map((r) => r.owner).join(", ")}` : "",
      writer ? writer.owner : "",
      [...new Set(holds.map((h) => h.principal).filter(Boolean))].join(", "),
      holds.map((h) => h.token).join(", "),
      holds.map((h) => metaText(h.meta)).filter(Boolean).join("; "),
    ];
  },
};

/** The oldest grant and the soonest end among an entry's holders. */
function span(entry) {
  let since = Infinity;
  let until = Infinity;
  for (const h of entry.holders.values()) {
    since = Math.min(since, h.acquiredAt);
    until = Math.min(until, h.expiresAt);
  }
  return { since, until };
}

/**
 * The table of one kind: the rows of the names under the filter, a page at a time.
 *
 * `onOpen(kind, name)`: a row was chosen (click, or Enter on it); `onForce(kind, name)`: its
 * force-release button; `mayForce(name)`: whether the caller may force-release it;
 * `onMore()`: the next page was asked for.
 */
export class Table {
  constructor(kind, { tbody, summary, more, onOpen, onForce, mayForce, onMore }) {
    this.kind = kind;
    this.tbody = tbody;
    this.summary = summary;
    this.more = more;
    this.onOpen = onOpen;
    this.onForce = onForce;
    this.mayForce = mayForce;
    this.rows = new Map();
    this.shown = PAGE;
    more.addEventListener("click", () => {
      this.shown += PAGE;
      onMore();
    });
  }

  /** Builds the row of `name`, once; updated in place afterwards. */
  row(name) {
    let row = this.rows.get(name);
    if (row) return row;
    const tr = document.createElement("tr");
    tr.tabIndex = 0;
    tr.dataset.name = name;
    // A hint, not a label: a label would hide the row's cells from a screen reader.
    tr.title = "Enter or click: its history and waiters";
    tr.addEventListener("click", (event) => {
      if (!event.target.closest("button")) this.onOpen(this.kind, name);
    });
    tr.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && event.target === tr) {
        event.preventDefault();
        this.onOpen(this.kind, name);
      }
    });
    const th = document.createElement("th");
    th.scope = "row";
    th.className = "name";
    th.textContent = name;
    tr.append(th);
    const columns = COLUMNS[this.kind];
    const width = this.kind === "lock" ? 4 : 5;
    const cells = [];
    for (let i = 0; i < width; i++) cells.push(cell(tr, "", i === width - 1 ? "meta" : null));
    const age = cell(tr, "", "age num");
    const left = cell(tr, "", "left num");
    const action = document.createElement("td");
    action.className = "action";
    tr.append(action);
    row = { tr, cells, columns, age, left, action, button: null, span: null };
    this.rows.set(name, row);
    return row;
  }

  /** Fills the row of `entry` from the model. */
  fill(row, entry) {
    const values = row.columns(entry);
    values.forEach((text, i) => set(row.cells[i], text));
    row.span = span(entry);
    const may = this.mayForce(entry.name);
    if (may && !row.button) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "danger";
      button.textContent = "Force release";
      button.setAttribute("aria-label", `Force release ${entry.name}`);
      button.addEventListener("click", () => this.onForce(this.kind, entry.name));
      row.action.append(button);
      row.button = button;
    } else if (!may && row.button) {
      row.button.remove();
      row.button = null;
    }
  }

  /** Shows the names of `model` that start with `prefix`, the first `shown` of them. */
  render(model, prefix) {
    const names = model.names(this.kind);
    const matching = prefix ? names.filter((n) => n.startsWith(prefix)) : names;
    const visible = matching.slice(0, this.shown);
    const keep = new Set(visible);
    for (const name of this.rows.keys()) if (!keep.has(name)) this.rows.delete(name);
    const trs = visible.map((name) => {
      const row = this.row(name);
      this.fill(row, model.get(this.kind, name));
      return row.tr;
    });
    const current = this.tbody.children;
    const same = current.length === trs.length && trs.every((tr, i) => current[i] === tr);
    if (!same) {
      // Moving the focused row would blur it: give the focus back where it was.
      const focused = this.tbody.contains(document.activeElement) ? document.activeElement : null;
      this.tbody.replaceChildren(...trs);
      if (focused && focused.isConnected) focused.focus({ preventScroll: true });
    }
    this.tick(Date.now());
    const total = matching.length;
    this.summary.textContent =
      total === 0
        ? "nothing held"
        : total > visible.length
          ? `${visible.length} of ${total} shown`
          : `${total} held`;
    this.more.hidden = total <= visible.length;
  }

  /** The ages and countdowns of the rows shown, at `now`. */
  tick(now) {
    for (const row of this.rows.values()) {
      if (!row.span) continue;
      set(row.age, duration(now - row.span.since));
      const left = row.span.until - now;
      set(row.left, left > 0 ? duration(left) : "expired");
      row.left.classList.toggle("soon", left < 5000);
    }
  }
}
