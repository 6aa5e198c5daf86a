// A table's records: paged, sorted and filtered with REST's query grammar (read through
// `/console/data/...`), edited, inserted and deleted with operations, imported from CSV
// or JSON with progress, exported as JSON or CSV.

import { op, read } from '../api.js';
import { attempt, columnsOf, dataTable, download, field, fill, h, notify, parseJson, select, sure } from '../ui.js';

/** Records inserted per operation when importing JSON. */
const IMPORT_BATCH = 500;

export async function render(main, { args: [db, table] }) {
  if (!db || !table) {
    fill(main, h('h1', {}, 'Records'), h('p', {}, 'Choose a table on the Databases page.'));
    return;
  }
  const status = h('div');
  fill(main, h('h1', {}, `${db}.${table}`), status);
  const described = await attempt(status, () => op('describe_table', { database: db, table }));
  if (!described) return;
  const key = described.hash_attribute ?? 'id';
  const state = { filter: '', sort: null, offset: 0, size: 25 };

  const filter = h('input', { name: 'filter', size: 40, placeholder: 'name=Rex&age=gt=2' });
  const size = select(['10', '25', '50', '100'], '25', { name: 'size' });
  const results = h('div');
  const editor = h('div');
  const transfer = h('div');
  const pager = h('div', { class: 'row' });

  const query = (paged) => {
    const parts = [state.filter.trim()].filter(Boolean);
    if (state.sort) parts.push(`sort(${state.sort.descending ? '-' : '+'}${state.sort.name})`);
    if (paged) parts.push(`limit(${state.offset},${state.offset + state.size + 1})`);
    return parts.join('&');
  };

  async function load() {
    const rows = await attempt(status, () => read(db, table, '', query(true)));
    if (!rows) return;
    const more = rows.length > state.size;
    const shown = rows.slice(0, state.size);
    const names = columnsOf(shown, key);
    for (const attribute of described.attributes ?? []) if (!names.includes(attribute.attribute)) names.push(attribute.attribute);
    const columns = [
      ...names.map((name) => ({ name })),
      { name: '', label: 'Actions', sort: false, render: (row) => rowActions(row) },
    ];
    fill(results, dataTable({
      columns,
      rows: shown,
      caption: `Records ${shown.length ? state.offset + 1 : 0}–${state.offset + shown.length}${more ? ' (more follow)' : ''}`,
      sorted: state.sort,
      onSort: (name) => {
        state.sort = state.sort?.name === name ? { name, descending: !state.sort.descending } : { name, descending: false };
        state.offset = 0;
        load();
      },
      empty: 'No records match.',
    }));
    fill(pager,
      h('button', { type: 'button', class: 'quiet', disabled: state.offset === 0, onclick: () => { state.offset = Math.max(0, state.offset - state.size); load(); } }, 'Previous page'),
      h('button', { type: 'button', class: 'quiet', disabled: !more, onclick: () => { state.offset += state.size; load(); } }, 'Next page'));
  }

  function rowActions(row) {
    return h('span', { class: 'row' },
      h('button', { type: 'button', class: 'quiet', 'aria-label': `Edit record ${row[key]}`, onclick: () => edit(row) }, 'Edit'),
      h('button', {
        type: 'button',
        class: 'danger',
        'aria-label': `Delete record ${row[key]}`,
        onclick: async () => {
          if (!sure(`Delete record ${row[key]}?`)) return;
          const done = await attempt(status, () => op('delete', { database: db, table, hash_values: [row[key]] }));
          if (done) { notify(`Record ${row[key]} deleted`); await load(); }
        },
      }, 'Delete'));
  }

  /** The editor, for `record` (changed with `update`) or a new record (`insert`). */
  function edit(record) {
    const text = h('textarea', { rows: 10, name: 'record', 'aria-label': record ? `Record ${record[key]} as JSON` : 'New record as JSON' });
    text.value = JSON.stringify(record ?? { [key]: undefined }, null, 2);
    const problem = h('div');
    fill(editor, h('section', { class: 'card' },
      h('h2', {}, record ? `Edit record ${record[key]}` : 'Insert a record'),
      h('p', { class: 'hint' }, record ? 'Attributes left out keep their values; the primary key names the record.' : `Leave out ${key} to have one generated.`),
      text, problem,
      h('div', { class: 'row' },
        h('button', {
          type: 'button',
          onclick: async () => {
            const done = await attempt(problem, async () => {
              const value = parseJson(text.value, 'The record');
              if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error('The record must be one JSON object.');
              const answer = await op(record ? 'update' : 'insert', { database: db, table, records: [value] });
              const skipped = answer.skipped_hashes ?? [];
              if (skipped.length) throw new Error(`${answer.message}: skipped ${JSON.stringify(skipped)}`);
              return answer;
            });
            if (done) { notify(done.message ?? 'Saved'); fill(editor); await load(); }
          },
        }, record ? 'Save record' : 'Insert record'),
        h('button', { type: 'button', class: 'quiet', onclick: () => fill(editor) }, 'Cancel'))));
    text.focus();
  }

  fill(main,
    h('h1', {}, `${db}.${table}`),
    h('p', { class: 'hint' }, `Primary key ${key}. `, h('a', { href: `#/live/${encodeURIComponent(db)}/${encodeURIComponent(table)}` }, 'Watch live changes')),
    h('form', {
      class: 'row',
      role: 'search',
      onsubmit: (event) => {
        event.preventDefault();
        state.filter = filter.value;
        state.size = Number(size.value);
        state.offset = 0;
        load();
      },
    }, field('Filter (REST query: name=Rex&age=gt=2, select(name), …)', filter), field('Page size', size),
    h('button', { type: 'submit' }, 'Apply')),
    h('div', { class: 'row' },
      h('button', { type: 'button', onclick: () => edit(null) }, 'Insert a record'),
      h('button', { type: 'button', class: 'quiet', onclick: () => exportAs('json') }, 'Export JSON'),
      h('button', { type: 'button', class: 'quiet', onclick: () => exportAs('csv') }, 'Export CSV')),
    status, editor, results, pager, importCard(db, table, transfer, load), transfer);

  async function exportAs(kind) {
    const accept = kind === 'csv' ? 'text/csv' : 'application/json';
    const text = await attempt(status, () => read(db, table, '', query(false), accept).then((body) => (typeof body === 'string' ? body : JSON.stringify(body, null, 2))));
    if (text !== undefined) download(`${db}.${table}.${kind}`, accept, text);
  }

  await load();
}

function importCard(db, table, transfer, reload) {
  const file = h('input', { type: 'file', name: 'import', accept: '.csv,.json,text/csv,application/json' });
  const action = select([['insert', 'Insert (refuse existing keys)'], ['upsert', 'Upsert (replace existing)']], 'insert', { name: 'action' });
  return h('section', { class: 'card' },
    h('h2', {}, 'Import'),
    h('form', {
      class: 'row',
      onsubmit: async (event) => {
        event.preventDefault();
        const chosen = file.files?.[0];
        if (!chosen) return;
        const text = await chosen.text();
        const json = chosen.name.endsWith('.json') || chosen.type === 'application/json';
        await (json ? importJson : importCsv)(db, table, text, action.value, transfer);
        await reload();
      },
    }, field('CSV or JSON file', file), field('Records with existing keys', action), h('button', { type: 'submit' }, 'Import')));
}

/** A JSON array inserted in batches, the bar showing how many went in. */
async function importJson(db, table, text, action, place) {
  const bar = h('progress', { max: 1, value: 0, 'aria-label': 'Import progress' });
  const line = h('span', { class: 'hint' });
  fill(place, h('div', { class: 'row' }, bar, line));
  const problem = h('div');
  place.append(problem);
  await attempt(problem, async () => {
    const records = parseJson(text, 'The file');
    if (!Array.isArray(records)) throw new Error('The file must hold a JSON array of records.');
    bar.max = records.length || 1;
    let done = 0;
    for (let start = 0; start < records.length; start += IMPORT_BATCH) {
      const batch = records.slice(start, start + IMPORT_BATCH);
      const answer = await op(action, { database: db, table, records: batch });
      done += batch.length;
      bar.value = done;
      line.textContent = `${done} of ${records.length} sent; ${answer.message}`;
    }
    notify(`Imported ${records.length} records`);
  });
}

/** A CSV file loaded as a job (`csv_data_load`), its progress followed until it ends. */
async function importCsv(db, table, text, action, place) {
  const bar = h('progress', { 'aria-label': 'Import progress' });
  const line = h('span', { class: 'hint' }, 'Starting the load…');
  const problem = h('div');
  fill(place, h('div', { class: 'row' }, bar, line), problem);
  await attempt(problem, async () => {
    const started = await op('csv_data_load', { database: db, table, data: text, action });
    for (;;) {
      const [job] = await op('get_job', { id: started.job_id });
      line.textContent = `Job ${started.job_id}: ${job?.status ?? 'unknown'}${job?.message ? ` — ${job.message}` : ''}`;
      if (job?.status === 'ERROR') throw new Error(`The load failed: ${job.message}`);
      if (job?.status === 'COMPLETE') break;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    bar.max = 1;
    bar.value = 1;
    notify('CSV loaded');
  });
}
