// A live view of a table's changes: the table's event stream (`/console/changes/...`)
// shown newest first, the last 200 kept.

import { changes } from '../api.js';
import { fill, h, show, when } from '../ui.js';

const KEPT = 200;

export async function render(main, { args: [db, table] }) {
  if (!db || !table) {
    fill(main, h('h1', {}, 'Live changes'), h('p', {}, 'Choose a table on the Databases page.'));
    return undefined;
  }
  const state = h('p', { class: 'hint', role: 'status' }, 'Connecting…');
  const list = h('ul', { class: 'events', 'aria-label': 'Changes, newest first' });
  fill(main, h('h1', {}, `Live changes: ${db}.${table}`),
    h('p', {}, h('a', { href: `#/table/${encodeURIComponent(db)}/${encodeURIComponent(table)}` }, 'Back to the records')),
    state, list);
  const stream = changes(db, table, 'omitCurrent=true');
  stream.onopen = () => { state.textContent = 'Watching: changes appear here as they commit.'; };
  stream.onerror = () => { state.textContent = 'The stream was interrupted; reconnecting…'; };
  stream.addEventListener('end', (event) => { state.textContent = `The stream ended: ${event.data}`; stream.close(); });
  stream.onmessage = (event) => {
    let change;
    try { change = JSON.parse(event.data); } catch { change = { type: 'message', value: event.data }; }
    list.prepend(h('li', { class: 'event' },
      h('span', { class: 'tag' }, change.type ?? 'change'), ' ',
      h('strong', {}, show(change.id)), ' ',
      h('span', { class: 'hint' }, when(change.localTime ?? Date.now())), ' ',
      h('code', {}, show(change.value))));
    while (list.children.length > KEPT) list.lastChild.remove();
  };
  return () => stream.close();
}
