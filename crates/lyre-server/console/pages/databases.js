// Databases and tables: what `describe_all` shows, with creating and dropping
// databases, tables and attributes.

import { op } from '../api.js';
import { isSuperUser } from '../session.js';
import { attempt, bytes, checkbox, dataTable, field, fill, h, notify, select, sure } from '../ui.js';

const TYPES = ['String', 'Int', 'Long', 'Float', 'Boolean', 'Date', 'ID', 'Any', 'Bytes', 'Blob'];

export async function render(main) {
  const status = h('div');
  const list = h('div');
  fill(main, h('h1', {}, 'Databases'), status, list);

  async function refresh() {
    const all = await attempt(status, () => op('describe_all'));
    if (!all) return;
    const databases = Object.keys(all).sort();
    fill(list,
      isSuperUser() ? createDatabaseForm(refresh, status) : null,
      databases.length ? null : h('p', {}, 'No databases yet.'),
      databases.map((db) => databaseCard(db, all[db], refresh, status)));
  }
  await refresh();
}

function createDatabaseForm(refresh, status) {
  const name = h('input', { name: 'database', required: true, pattern: '[A-Za-z0-9_\\-]+' });
  return h('form', {
    class: 'row',
    onsubmit: async (event) => {
      event.preventDefault();
      const done = await attempt(status, () => op('create_database', { database: name.value }));
      if (done) { notify(`Database ${name.value} created`); await refresh(); }
    },
  }, field('New database', name), h('button', { type: 'submit' }, 'Create database'));
}

function databaseCard(db, tables, refresh, status) {
  const names = Object.keys(tables).sort();
  const rows = names.map((name) => ({ name, ...tables[name] }));
  const columns = [
    { name: 'name', label: 'Table', render: (t) => h('a', { href: `#/table/${encodeURIComponent(db)}/${encodeURIComponent(t.name)}` }, t.name) },
    { name: 'hash_attribute', label: 'Primary key' },
    { name: 'record_count', label: 'Records', num: true },
    { name: 'table_size', label: 'Size', num: true, render: (t) => bytes(t.table_size) },
    { name: 'attributes', label: 'Attributes', render: (t) => (t.attributes ?? []).map(attributeTag) },
    { name: 'actions', label: 'Actions', render: (t) => tableActions(db, t, refresh, status) },
  ];
  const size = rows.find((t) => typeof t.db_size === 'number')?.db_size;
  return h('section', { class: 'card', 'aria-label': `Database ${db}` },
    h('h2', {}, `${db} `, size !== undefined ? h('span', { class: 'hint' }, bytes(size)) : null),
    dataTable({ columns, rows, empty: 'No tables.' }),
    isSuperUser() ? h('div', { class: 'row' }, createTableForm(db, refresh, status),
      h('button', {
        type: 'button',
        class: 'danger',
        onclick: async () => {
          if (!sure(`Drop database ${db} and every table in it?`)) return;
          const done = await attempt(status, () => op('drop_database', { database: db }));
          if (done) { notify(`Database ${db} dropped`); await refresh(); }
        },
      }, `Drop database ${db}`)) : null);
}

function attributeTag(attribute) {
  const marks = [attribute.is_primary_key ? 'key' : null, attribute.indexed ? 'indexed' : null, attribute.type ?? null].filter(Boolean);
  return h('span', { class: 'tag', title: marks.join(', ') }, attribute.attribute, marks.length ? ` (${marks.join(', ')})` : '');
}

function tableActions(db, table, refresh, status) {
  const links = [
    h('a', { href: `#/table/${encodeURIComponent(db)}/${encodeURIComponent(table.name)}` }, 'Records'), ' · ',
    h('a', { href: `#/live/${encodeURIComponent(db)}/${encodeURIComponent(table.name)}` }, 'Live changes'),
  ];
  if (!isSuperUser()) return links;
  const attribute = h('input', { 'aria-label': `New attribute of ${table.name}`, placeholder: 'attribute', size: 10 });
  return [
    ...links,
    h('form', {
      class: 'row',
      onsubmit: async (event) => {
        event.preventDefault();
        const done = await attempt(status, () => op('create_attribute', { database: db, table: table.name, attribute: attribute.value }));
        if (done) { notify(`Attribute ${attribute.value} added`); await refresh(); }
      },
    }, attribute, h('button', { type: 'submit', class: 'quiet' }, 'Add attribute')),
    h('div', { class: 'row' },
      dropAttribute(db, table, refresh, status),
      h('button', {
        type: 'button',
        class: 'danger',
        onclick: async () => {
          if (!sure(`Drop table ${db}.${table.name} and its records?`)) return;
          const done = await attempt(status, () => op('drop_table', { database: db, table: table.name }));
          if (done) { notify(`Table ${table.name} dropped`); await refresh(); }
        },
      }, 'Drop table')),
  ];
}

function dropAttribute(db, table, refresh, status) {
  const names = (table.attributes ?? []).filter((a) => !a.is_primary_key).map((a) => a.attribute);
  if (!names.length) return null;
  const choice = select(names, names[0], { 'aria-label': `Attribute of ${table.name} to drop` });
  return h('span', { class: 'row' }, choice, h('button', {
    type: 'button',
    class: 'danger',
    onclick: async () => {
      if (!sure(`Drop attribute ${choice.value} of ${table.name}? Its values are removed from every record.`)) return;
      const done = await attempt(status, () => op('drop_attribute', { database: db, table: table.name, attribute: choice.value }));
      if (done) { notify(`Attribute ${choice.value} dropped`); await refresh(); }
    },
  }, 'Drop attribute'));
}

function createTableForm(db, refresh, status) {
  const name = h('input', { name: 'table', required: true });
  const key = h('input', { name: 'primary_key', value: 'id', required: true });
  const attributes = h('input', { name: 'attributes', placeholder: 'name:String, age:Int', size: 24 });
  const indexed = checkbox('Index the attributes', { checked: true });
  return h('form', {
    class: 'row',
    'aria-label': `Create a table in ${db}`,
    onsubmit: async (event) => {
      event.preventDefault();
      const listed = attributes.value.split(',').map((a) => a.trim()).filter(Boolean).map((text) => {
        const [attribute, type] = text.split(':').map((part) => part.trim());
        return { name: attribute, type: type || 'Any', indexed: indexed.box.checked };
      });
      const params = { database: db, table: name.value, primary_key: key.value };
      if (listed.length) params.attributes = listed;
      const done = await attempt(status, () => op('create_table', params));
      if (done) { notify(`Table ${name.value} created`); await refresh(); }
    },
  }, field('New table', name), field('Primary key', key), field(`Attributes (types: ${TYPES.join(', ')})`, attributes), indexed.label,
  h('button', { type: 'submit' }, 'Create table'));
}
