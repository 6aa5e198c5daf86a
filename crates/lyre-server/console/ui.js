// Building blocks of the console's pages: elements made without HTML strings (a
// value from the database is always text, never markup), tables, forms, errors.

/** An element: `props` sets attributes (`class`, `for`, …), properties (`value`,
 * `checked`, `hidden`) and listeners (`onclick`); children are nodes or text. */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
    else if (key in PROPERTIES) node[PROPERTIES[key]] = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

const PROPERTIES = { value: 'value', checked: 'checked', hidden: 'hidden', disabled: 'disabled', text: 'textContent' };

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
}

/** Empties `node` and fills it with `children`. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** A labelled control: the label's text, then the control. */
export function field(text, control) {
  return h('label', {}, text, control);
}

/** A labelled checkbox, the box before its text. */
export function checkbox(text, props = {}) {
  const box = h('input', { type: 'checkbox', ...props });
  return { box, label: h('label', { class: 'inline' }, box, text) };
}

/** A `<select>` of `options` (strings or `[value, text]`), with `selected` chosen. */
export function select(options, selected, props = {}) {
  return h('select', props, options.map((option) => {
    const [value, text] = Array.isArray(option) ? option : [option, option];
    return h('option', { value, selected: value === selected }, text);
  }));
}

/** An alert box naming what went wrong (the server's own message, and what a
 * refused permission lacked when the server said). */
export function errorBox(error) {
  const lines = [error?.message ?? String(error)];
  const missing = error?.body?.unauthorized_access;
  if (Array.isArray(missing) && missing.length) {
    lines.push('Missing permissions:');
    for (const entry of missing) lines.push(`  ${describeMissing(entry)}`);
  }
  if (error?.status === 403 && lines.length === 1) lines.push('Your role does not allow this. Ask a super user for the permission.');
  return h('div', { class: 'error', role: 'alert' }, lines.join('\n'));
}

/** One entry of Harper's `unauthorized_access`: the table and the permissions it needs. */
function describeMissing(entry) {
  if (typeof entry === 'string') return entry;
  const table = [entry?.schema ?? entry?.database, entry?.table].filter(Boolean).join('.');
  const needs = [...(entry?.required_table_permissions ?? [])];
  for (const attribute of entry?.required_attribute_permissions ?? []) {
    needs.push(typeof attribute === 'string' ? attribute : `${attribute.attribute_name ?? attribute.attribute}: ${(attribute.required_permissions ?? []).join(', ')}`);
  }
  return table && needs.length ? `${table} needs ${needs.join(', ')}` : JSON.stringify(entry);
}

/** Runs `work`; an error it throws is shown in `place` (replacing what was there),
 * and what it answered is returned (undefined on error). */
export async function attempt(place, work) {
  place.replaceChildren();
  try {
    return await work();
  } catch (error) {
    place.replaceChildren(errorBox(error));
    return undefined;
  }
}

/** A short message in the corner, read out by screen readers. */
export function notify(text) {
  const toast = document.getElementById('toast');
  toast.textContent = text;
  toast.classList.add('shown');
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => toast.classList.remove('shown'), 2500);
}

/** Text shown for any value in a cell: strings as they are, the rest as JSON. */
export function show(value) {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  return JSON.stringify(value);
}

/** A table of `rows` (objects) under `columns` (names, or `{name, label, sort, render, num}`).
 * `sorted` is `{name, descending}`; `onSort(name)` makes headers buttons. */
export function dataTable({ columns, rows, caption, sorted, onSort, empty = 'Nothing to show.' }) {
  const cols = columns.map((c) => (typeof c === 'string' ? { name: c } : c));
  const head = h('tr', {}, cols.map((col) => {
    const label = col.label ?? col.name;
    if (!onSort || col.sort === false) return h('th', { scope: 'col' }, label);
    const mark = sorted?.name === col.name ? (sorted.descending ? ' ▼' : ' ▲') : '';
    const order = sorted?.name === col.name ? (sorted.descending ? 'descending' : 'ascending') : 'none';
    return h('th', { scope: 'col', 'aria-sort': order }, h('button', { type: 'button', onclick: () => onSort(col.name) }, label + mark));
  }));
  const body = rows.length
    ? rows.map((row) => h('tr', {}, cols.map((col) => {
      const content = col.render ? col.render(row) : show(row[col.name]);
      return h('td', { class: col.num ? 'num' : null }, content);
    })))
    : [h('tr', {}, h('td', { colspan: cols.length }, empty))];
  return h('div', { class: 'scroll' }, h('table', { class: 'data' }, caption ? h('caption', {}, caption) : null, h('thead', {}, head), h('tbody', {}, body)));
}

/** Every attribute name in `rows`, `first` (the primary key) first. */
export function columnsOf(rows, first) {
  const names = new Set(first ? [first] : []);
  for (const row of rows) for (const name of Object.keys(row ?? {})) names.add(name);
  return [...names];
}

/** A byte count as people read it. */
export function bytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

/** A time (ms since 1970, or a date string) in the reader's locale. */
export function when(time) {
  if (time === undefined || time === null || time === '') return '';
  const date = new Date(time);
  return Number.isNaN(date.getTime()) ? String(time) : date.toLocaleString();
}

/** Saves `text` as a file named `name` through the browser's download. */
export function download(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = h('a', { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** Asks before something that cannot be undone. */
export function sure(question) {
  return window.confirm(question);
}

/** Parses `text` as JSON, throwing an error that says where it is wrong. */
export function parseJson(text, what) {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`${what} is not valid JSON: ${error.message}`);
  }
}
