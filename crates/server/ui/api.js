// The API as the dashboard reads it: every request carries the tab's token (when there is
// one), kept in sessionStorage — never in the URL, gone when the tab closes.

const TOKEN_KEY = "fencelock.token";

/** The collection of each kind, as the API names it. */
export const COLLECTIONS = { lock: "locks", semaphore: "semaphores", rwlock: "rwlocks" };

/** A 401: the server wants a (valid) token. */
export class Unauthenticated extends Error {}

/** Any other answer than the one asked for, with its problem's detail. */
export class Failed extends Error {
  constructor(status, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
  }
}

export function savedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function saveToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** The headers of every request: the bearer token, if the tab has one. */
export function authHeaders(extra = {}) {
  const token = savedToken();
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

/** `fetch` with the token; a 401 becomes {@link Unauthenticated}. */
export async function call(path, init = {}) {
  const response = await fetch(path, {
    ...init,
    headers: authHeaders(init.headers),
    cache: "no-store",
  });
  if (response.status === 401) throw new Unauthenticated("the server wants a token");
  return response;
}

async function failure(response) {
  let detail = "";
  try {
    detail = (await response.json()).detail;
  } catch {
    // Not a problem document: the status says enough.
  }
  return new Failed(response.status, detail);
}

/** GET a JSON document; `null` for a 404 (nothing held). */
export async function getJson(path) {
  const response = await call(path);
  if (response.status === 404) return null;
  if (!response.ok) throw await failure(response);
  return response.json();
}

/** The caller and its grants (`GET /whoami`). */
export function whoami() {
  return getJson("/whoami");
}

/** Whether `grants` give `right` over `name` (by prefix, as the server judges). */
export function may(grants, right, name) {
  return grants.some((grant) => grant.rights.includes(right) && name.startsWith(grant.prefix));
}

/** The path of one name of `kind`. */
export function namePath(kind, name) {
  return `/${COLLECTIONS[kind]}/${encodeURIComponent(name)}`;
}

/**
 * Every page of a list (`GET /locks`, `/semaphores`, `/rwlocks`), handing each page's items
 * to `onPage` as it comes, so the first rows show before the last page is read.
 */
export async function listAll(kind, onPage) {
  const collection = COLLECTIONS[kind];
  let cursor = null;
  do {
    const query = new URLSearchParams({ limit: "1000" });
    if (cursor) query.set("cursor", cursor);
    const page = await getJson(`/${collection}?${query}`);
    if (!page) return;
    onPage(page[collection]);
    cursor = page.next_cursor;
  } while (cursor);
}

/** Force-release `name` of `kind`: true if it freed something, false if nothing was held. */
export async function forceRelease(kind, name) {
  const response = await call(namePath(kind, name), {
    method: "DELETE",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ force: true }),
  });
  if (response.status === 204) return true;
  if (response.status === 404) return false;
  throw await failure(response);
}
