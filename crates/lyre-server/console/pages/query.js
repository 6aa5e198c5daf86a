// SQL and search: a statement (`sql`) or a search by value (`search_by_value`), the
// answer as a table with how long it took.

import { op } from '../api.js';
import { attempt, columnsOf, dataTable, field, fill, h } from '../ui.js';

export async function render(main) {
  const statement = h('textarea', { name: 'sql', rows: 5, 'aria-label': 'SQL statement' });
  statement.value = sessionStorage.getItem('lyre.sql') ?? 'SELECT * FROM system.hdb_user';
  const answer = h('div', { 'aria-live': 'polite' });
  const run = async () => {
    sessionStorage.setItem('lyre.sql', statement.value);
    await timed(answer, () => op('sql', { sql: statement.value }));
  };
  statement.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); run(); }
  });

  const database = h('input', { name: 'database', value: 'data', size: 10 });
  const table = h('input', { name: 'table', size: 12, required: true });
  const attribute = h('input', { name: 'attribute', value: 'id', size: 10 });
  const value = h('input', { name: 'value', value: '*', size: 14 });
  const found = h('div', { 'aria-live': 'polite' });

  fill(main,
    h('h1', {}, 'Query'),
    h('section', { class: 'card' },
      h('h2', {}, 'SQL'),
      statement,
      h('div', { class: 'row' }, h('button', { type: 'button', onclick: run }, 'Run SQL'), h('span', { class: 'hint' }, 'Ctrl+Enter runs it too.')),
      answer),
    h('section', { class: 'card' },
      h('h2', {}, 'Search by value'),
      h('form', {
        class: 'row',
        onsubmit: (event) => {
          event.preventDefault();
          timed(found, () => op('search_by_value', {
            database: database.value, table: table.value, search_attribute: attribute.value, search_value: value.value, get_attributes: ['*'],
          }));
        },
      }, field('Database', database), field('Table', table), field('Attribute', attribute), field('Value (* matches any)', value),
      h('button', { type: 'submit' }, 'Search')),
      found));
}

/** Runs `work`, then shows its rows (or message) and the time it took. */
async function timed(place, work) {
  fill(place, h('p', { class: 'hint' }, 'Running…'));
  const started = performance.now();
  const result = await attempt(place, work);
  if (result === undefined) return;
  const ms = (performance.now() - started).toFixed(1);
  if (!Array.isArray(result)) {
    fill(place, h('p', { class: 'hint' }, `Done in ${ms} ms`), h('pre', {}, JSON.stringify(result, null, 2)));
    return;
  }
  fill(place,
    h('p', { class: 'hint', 'data-timing': ms }, `${result.length} row${result.length === 1 ? '' : 's'} in ${ms} ms`),
    dataTable({ columns: columnsOf(result), rows: result, empty: 'No rows.' }));
}
