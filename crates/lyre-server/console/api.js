// The console's only way to the server: Operations API calls (`POST /`) and the two
// console reads (`/console/data/...`, `/console/changes/...`), all signed in with the
// session cookie `login` sets. A request refused for want of a session asks the user
// to sign in again (a dialog over the page, so nothing typed is lost) and is sent once
// more.

/** An error the server answered, with its status and the body it sent. */
export class ApiError extends Error {
  constructor(message, status, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

let signInAgain = null;

/** Sets what runs when the session has ended: a promise settled once signed in. */
export function whenSignedOut(handler) {
  signInAgain = handler;
}

async function send(url, init, retry = true) {
  const response = await fetch(url, { credentials: 'same-origin', ...init });
  if (response.status === 401 && retry && signInAgain) {
    await signInAgain('Your session has ended. Sign in again to go on where you were.');
    return send(url, init, false);
  }
  return response;
}

/**
 * The message of an error body, as Harper shapes them (`error`, `message`, text),
 * with the problems a refused role permission lists beside it (`main_permissions`,
 * and `schema_permissions` by `<database>_<table>`).
 */
function messageOf(body, response) {
  if (body && typeof body === 'object') {
    const text = body.error ?? body.message ?? JSON.stringify(body);
    const message = typeof text === 'string' ? text : JSON.stringify(text);
    const problems = [
      ...(Array.isArray(body.main_permissions) ? body.main_permissions : []),
      ...Object.entries(body.schema_permissions ?? {}).flatMap(([table, listed]) => (Array.isArray(listed) ? listed : []).map((p) => `${table}: ${p}`)),
    ];
    return problems.length ? `${message}: ${problems.join('; ')}` : message;
  }
  if (typeof body === 'string' && body.trim()) return body.trim();
  return `${response.status} ${response.statusText}`;
}

/** JSON text decoded, or the text itself when it is not JSON. */
function parseOr(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

async function decoded(response) {
  return parseOr(await response.text());
}

/**
 * Runs one operation; resolves with its answer or throws an ApiError naming the
 * problem. `retry: false` answers a 401 as an error instead of asking to sign in;
 * `signal` aborts the request (an `AbortSignal.timeout` bounds a wait).
 */
export async function op(operation, params = {}, { retry = true, signal } = {}) {
  const response = await send('/', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ operation, ...params }),
    signal,
  }, retry);
  const body = await decoded(response);
  if (!response.ok) throw new ApiError(messageOf(body, response), response.status, body);
  return body;
}

/** The path of a table's console read: `/console/data/<db>/<table>/<rest>`. */
export function dataPath(database, table, rest = '') {
  return `/console/data/${encodeURIComponent(database)}/${encodeURIComponent(table)}/${rest}`;
}

/** Reads a table through REST's grammar (`query` without its `?`); JSON, or text for other types. */
export async function read(database, table, rest, query, accept = 'application/json') {
  const url = dataPath(database, table, rest) + (query ? `?${query}` : '');
  const response = await send(url, { headers: { accept } });
  const body = accept === 'application/json' ? await decoded(response) : await response.text();
  if (!response.ok) throw new ApiError(messageOf(body, response), response.status, body);
  return body;
}

/** The Prometheus text of `GET /metrics`. */
export async function metricsText() {
  const response = await send('/metrics', { headers: { accept: 'text/plain' } });
  const text = await response.text();
  if (!response.ok) throw new ApiError(messageOf(parseOr(text), response), response.status, parseOr(text));
  return text;
}

/** An EventSource of a table's changes (`query` says where to start: `previousCount=20`). */
export function changes(database, table, query = '') {
  const url = `/console/changes/${encodeURIComponent(database)}/${encodeURIComponent(table)}/` + (query ? `?${query}` : '');
  return new EventSource(url, { withCredentials: true });
}
