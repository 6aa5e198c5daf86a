// Logs: `read_log` filtered by level, text and time, newest first, optionally
// followed (the newest entries fetched every two seconds).

import { op } from '../api.js';
import { attempt, checkbox, dataTable, field, fill, h, select, when } from '../ui.js';

const LEVELS = ['', 'trace', 'debug', 'info', 'warn', 'error', 'fatal', 'notify'];

export async function render(main) {
  const status = h('div');
  const list = h('div');
  const level = select(LEVELS.map((l) => [l, l || 'any level']), '', { name: 'level' });
  const text = h('input', { name: 'filter', placeholder: 'text in the entry', size: 20 });
  const from = h('input', { name: 'from', type: 'datetime-local' });
  const limit = select(['50', '200', '1000'], '200', { name: 'limit' });
  const follow = checkbox('Follow (refresh every 2 s)');
  let timer = null;

  async function refresh() {
    clearTimeout(timer);
    const params = { limit: Number(limit.value), order: 'desc' };
    if (level.value) params.level = level.value;
    if (text.value) params.filter = text.value;
    if (from.value) params.from = new Date(from.value).toISOString();
    const entries = await attempt(status, () => op('read_log', params));
    if (entries) {
      fill(list, dataTable({
        columns: [
          { name: 'timestamp', label: 'Time', render: (e) => when(e.timestamp) },
          { name: 'level', render: (e) => h('span', { class: `tag ${['error', 'fatal'].includes(e.level) ? 'bad' : ''}` }, e.level) },
          { name: 'tags', label: 'Where', render: (e) => (e.tags ?? []).join(', ') },
          'message',
        ],
        rows: entries,
        caption: `${entries.length} entries, newest first`,
        empty: 'No entries match.',
      }));
    }
    if (follow.box.checked) timer = setTimeout(refresh, 2000);
  }
  follow.box.addEventListener('change', refresh);

  fill(main, h('h1', {}, 'Logs'),
    h('form', { class: 'row', onsubmit: (event) => { event.preventDefault(); refresh(); } },
      field('Level', level), field('Containing', text), field('From', from), field('Entries', limit), follow.label,
      h('button', { type: 'submit' }, 'Show')),
    status, list);
  await refresh();
  return () => clearTimeout(timer);
}
