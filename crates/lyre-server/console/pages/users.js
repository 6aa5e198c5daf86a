// Users and roles: listing, creating, changing and dropping them, and an editor of
// a role's permissions (per table: read, insert, update, delete, and which
// attributes it may read, insert and update).

import { op } from '../api.js';
import { attempt, checkbox, dataTable, field, fill, h, notify, select, sure, when } from '../ui.js';

const ACTIONS = ['read', 'insert', 'update', 'delete'];
/** What a role may do to one attribute (deletes are whole records). */
const ATTRIBUTE_ACTIONS = ['read', 'insert', 'update'];

export async function render(main, { page }) {
  return page === 'roles' ? renderRoles(main) : renderUsers(main);
}

async function renderUsers(main) {
  const status = h('div');
  const list = h('div');
  fill(main, h('h1', {}, 'Users'), status, list);
  async function refresh() {
    const [users, roles] = (await attempt(status, () => Promise.all([op('list_users'), op('list_roles')]))) ?? [];
    if (!users) return;
    const roleNames = roles.map((r) => r.role);
    fill(list,
      dataTable({
        columns: [
          'username',
          { name: 'role', render: (u) => u.role?.role ?? '' },
          { name: 'active', render: (u) => h('span', { class: `tag ${u.active ? 'good' : 'bad'}` }, u.active ? 'active' : 'inactive') },
          { name: '__createdtime__', label: 'Created', render: (u) => when(u.__createdtime__) },
          { name: 'change', label: 'Change', render: (u) => alterForm(u, roleNames, refresh, status) },
        ],
        rows: users,
      }),
      addUserForm(roleNames, refresh, status));
  }
  await refresh();
}

function alterForm(user, roleNames, refresh, status) {
  const role = select(roleNames, user.role?.role, { 'aria-label': `Role of ${user.username}` });
  const password = h('input', { type: 'password', placeholder: 'new password', autocomplete: 'new-password', 'aria-label': `New password of ${user.username}`, size: 12 });
  const active = checkbox('active', { checked: Boolean(user.active) });
  return h('form', {
    class: 'row',
    onsubmit: async (event) => {
      event.preventDefault();
      const params = { username: user.username, role: role.value, active: active.box.checked };
      if (password.value) params.password = password.value;
      const done = await attempt(status, () => op('alter_user', params));
      if (done) { notify(`User ${user.username} changed`); await refresh(); }
    },
  }, role, password, active.label, h('button', { type: 'submit', class: 'quiet' }, 'Save'),
  h('button', {
    type: 'button',
    class: 'danger',
    onclick: async () => {
      if (!sure(`Drop user ${user.username}?`)) return;
      const done = await attempt(status, () => op('drop_user', { username: user.username }));
      if (done) { notify(`User ${user.username} dropped`); await refresh(); }
    },
  }, 'Drop'));
}

function addUserForm(roleNames, refresh, status) {
  const username = h('input', { name: 'username', required: true, autocomplete: 'off' });
  const password = h('input', { name: 'password', type: 'password', required: true, autocomplete: 'new-password' });
  const role = select(roleNames, roleNames[0], { name: 'role' });
  const active = checkbox('Active', { checked: true });
  return h('section', { class: 'card' }, h('h2', {}, 'Add a user'), h('form', {
    class: 'row',
    onsubmit: async (event) => {
      event.preventDefault();
      const done = await attempt(status, () => op('add_user', { username: username.value, password: password.value, role: role.value, active: active.box.checked }));
      if (done) { notify(`User ${username.value} added`); await refresh(); }
    },
  }, field('Username', username), field('Password', password), field('Role', role), active.label, h('button', { type: 'submit' }, 'Add user')));
}

async function renderRoles(main) {
  const status = h('div');
  const list = h('div');
  const editor = h('div');
  fill(main, h('h1', {}, 'Roles'), status, editor, list);
  async function refresh() {
    const [roles, all] = (await attempt(status, () => Promise.all([op('list_roles'), op('describe_all')]))) ?? [];
    if (!roles) return;
    fill(list,
      h('div', { class: 'row' }, h('button', { type: 'button', onclick: () => edit(null, all) }, 'Add a role')),
      dataTable({
        columns: [
          'role',
          { name: 'permission', label: 'Permissions', render: (r) => summary(r.permission) },
          { name: 'change', label: 'Change', render: (r) => h('span', { class: 'row' },
            h('button', { type: 'button', class: 'quiet', 'aria-label': `Edit role ${r.role}`, onclick: () => edit(r, all) }, 'Edit'),
            h('button', {
              type: 'button',
              class: 'danger',
              'aria-label': `Drop role ${r.role}`,
              onclick: async () => {
                if (!sure(`Drop role ${r.role}?`)) return;
                const done = await attempt(status, () => op('drop_role', { id: r.id }));
                if (done) { notify(`Role ${r.role} dropped`); await refresh(); }
              },
            }, 'Drop')) },
        ],
        rows: roles,
      }));
  }

  /**
   * The permission editor: a grid of every table against the four actions, each
   * table with its attribute permissions. What the grid does not show (structure
   * rights on named databases) is saved as the role had it, except what no longer
   * exists, which the server would refuse: that is left out, and the notice says so.
   */
  function edit(role, all) {
    const permission = role?.permission ?? {};
    const name = h('input', { name: 'role', required: true, value: role?.role ?? '', disabled: Boolean(role) });
    const superUser = checkbox('Super user (everything)', { checked: Boolean(permission.super_user) });
    const named = Array.isArray(permission.structure_user) ? permission.structure_user : null;
    const structure = checkbox(
      named ? `May change structure everywhere (now only in ${named.join(', ')})` : 'May change structure (create and drop tables)',
      { checked: permission.structure_user === true });
    const grid = [];
    const rows = [];
    for (const db of Object.keys(all).sort()) {
      for (const table of Object.keys(all[db]).sort()) {
        const granted = permission[db]?.tables?.[table] ?? {};
        const actions = Object.fromEntries(ACTIONS.map((action) => [action,
          h('input', { type: 'checkbox', checked: Boolean(granted[action]), 'aria-label': `${action} ${db}.${table}` })]));
        const attributes = attributeEditor(`${db}.${table}`, all[db][table], granted, actions);
        grid.push({ db, table, actions, attributes });
        // A structure user of the database may do everything in it, whatever is ticked here.
        const everything = permission.structure_user === true || Boolean(named?.includes(db));
        rows.push(h('tr', {}, h('th', { scope: 'row' }, `${db}.${table}`), ACTIONS.map((action) => h('td', {}, actions[action])),
          h('td', {}, everything ? h('span', { class: 'hint' }, `everything, as a structure user of ${db}`) : null, attributes.cell)));
      }
    }
    const problem = h('div');
    fill(editor, h('section', { class: 'card' },
      h('h2', {}, role ? `Edit role ${role.role}` : 'Add a role'),
      h('form', {
        onsubmit: async (event) => {
          event.preventDefault();
          const { built, leftOut } = superUser.box.checked
            // A super user's document may hold nothing else.
            ? { built: { super_user: true }, leftOut: [] }
            : buildPermission(permission, all, structure.box.checked, grid);
          const params = role ? { id: role.id, role: role.role, permission: built } : { role: name.value, permission: built };
          const done = await attempt(problem, () => op(role ? 'alter_role' : 'add_role', params));
          if (done) {
            notify(leftOut.length ? `Role ${params.role} saved, without what no longer exists: ${leftOut.join(', ')}` : `Role ${params.role} saved`);
            fill(editor);
            await refresh();
          }
        },
      },
      h('div', { class: 'row' }, field('Role name', name), superUser.label, structure.label),
      h('div', { class: 'scroll' }, h('table', { class: 'data perm-grid' },
        h('caption', {}, 'Table permissions'),
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Table'), ACTIONS.map((a) => h('th', { scope: 'col' }, a)),
          h('th', { scope: 'col' }, 'attributes'))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 6 }, 'No tables yet.'))))),
      problem,
      h('div', { class: 'row' }, h('button', { type: 'submit' }, 'Save role'), h('button', { type: 'button', class: 'quiet', onclick: () => fill(editor) }, 'Cancel')))));
    name.focus();
  }
  await refresh();
}

/** The keys of a permission document that are not databases. */
const RESERVED = ['super_user', 'cluster_user', 'structure_user'];

/**
 * The permission document the editor saves for a role that is not a super user: the
 * role's own, with the grid's actions and attribute lists over it, and without the
 * databases, tables and attributes it names that `all` (the server's description)
 * no longer has. Returns it and the names left out.
 */
function buildPermission(permission, all, structureEverywhere, grid) {
  const built = structuredClone(permission);
  const leftOut = [];
  const exists = (db) => Object.hasOwn(all, db);
  built.super_user = false;
  if (structureEverywhere) {
    built.structure_user = true;
  } else if (Array.isArray(built.structure_user)) {
    leftOut.push(...built.structure_user.filter((db) => !exists(db)));
    built.structure_user = built.structure_user.filter(exists);
  } else {
    delete built.structure_user;
  }
  for (const key of Object.keys(built)) {
    if (RESERVED.includes(key)) continue;
    if (!exists(key)) { leftOut.push(key); delete built[key]; continue; }
    for (const table of Object.keys(built[key]?.tables ?? {})) {
      if (!Object.hasOwn(all[key], table)) { leftOut.push(`${key}.${table}`); delete built[key].tables[table]; }
    }
  }
  for (const { db, table, actions, attributes } of grid) {
    const tables = ((built[db] ??= {}).tables ??= {});
    const entry = (tables[table] ??= {});
    for (const action of ACTIONS) entry[action] = actions[action].checked;
    entry.attribute_permissions = attributes.permissions();
    leftOut.push(...attributes.gone());
  }
  return { built, leftOut };
}

/**
 * A table's attribute permissions, as the role's `granted` entry for the table has
 * them. Unticked, every attribute follows the table's actions (an empty list);
 * ticked, the role may do to each attribute only what is ticked for it (the primary
 * key is always readable), never more than the table allows. An attribute the list
 * names that the table no longer has is left out when saving (`gone` names it).
 */
function attributeEditor(table, described, granted, tableActions) {
  const listed = granted.attribute_permissions ?? [];
  const exists = new Set((described?.attributes ?? []).map((a) => a.attribute));
  // The role's own list first, in its order, so a table left alone saves as it was.
  const names = [...new Set([...listed.map((p) => p.attribute_name), ...exists])];
  const restrict = checkbox('Only as ticked below', { checked: listed.length > 0, 'aria-label': `restrict ${table} by attribute` });
  const boxes = names.map((attribute) => {
    const entry = listed.find((p) => p.attribute_name === attribute);
    // Without a list every attribute has what the table grants: restricting starts from that.
    const allowed = (action) => (entry ? Boolean(entry[action]) : listed.length === 0 && Boolean(granted[action]));
    return { attribute, entry, actions: Object.fromEntries(ATTRIBUTE_ACTIONS.map((action) => [action,
      h('input', { type: 'checkbox', checked: allowed(action), 'aria-label': `${action} ${table}.${attribute}` })])) };
  });
  const summary = h('summary', {});
  // Unticked, the list does not apply: its boxes are shown but cannot be changed; nor
  // can an attribute be given an action its table does not allow.
  const sync = () => {
    summary.textContent = restrict.box.checked ? 'restricted' : 'all';
    for (const { actions } of boxes) {
      for (const action of ATTRIBUTE_ACTIONS) actions[action].disabled = !restrict.box.checked || !tableActions[action].checked;
    }
  };
  restrict.box.addEventListener('change', sync);
  for (const action of ATTRIBUTE_ACTIONS) tableActions[action].addEventListener('change', sync);
  sync();
  const cell = h('details', {},
    summary,
    restrict.label,
    h('table', { class: 'data perm-grid' },
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'attribute'), ATTRIBUTE_ACTIONS.map((a) => h('th', { scope: 'col' }, a)))),
      h('tbody', {}, boxes.map(({ attribute, actions }) =>
        h('tr', {}, h('th', { scope: 'row' }, attribute), ATTRIBUTE_ACTIONS.map((action) => h('td', {}, actions[action])))))));
  const permissions = () => {
    if (!restrict.box.checked) return [];
    const list = boxes.flatMap(({ attribute, entry, actions }) => {
      if (!exists.has(attribute)) return []; // gone from the table: see `gone`
      const given = Object.fromEntries(ATTRIBUTE_ACTIONS.map((a) => [a, actions[a].checked && tableActions[a].checked]));
      // Unlisted already means nothing allowed: an attribute the list did not name
      // joins it only when something is ticked for it.
      if (!entry && !Object.values(given).some(Boolean)) return [];
      return [{ ...entry, attribute_name: attribute, ...given }];
    });
    // An empty list would allow every attribute: nothing ticked lists each as allowing nothing.
    if (list.length) return list;
    return [...exists].map((attribute) => ({ attribute_name: attribute, ...Object.fromEntries(ATTRIBUTE_ACTIONS.map((a) => [a, false])) }));
  };
  /** The attributes the role's list names that the table no longer has (left out). */
  const gone = () => (restrict.box.checked ? listed.filter((p) => !exists.has(p.attribute_name)).map((p) => `${table}.${p.attribute_name}`) : []);
  return { cell, permissions, gone };
}

/** One line per permission: `super user`, or each table with what it may do. */
function summary(permission = {}) {
  if (permission.super_user) return h('span', { class: 'tag good' }, 'super user');
  const tags = [];
  const structure = permission.structure_user;
  if (structure) tags.push(h('span', { class: 'tag' }, Array.isArray(structure) ? `structure: ${structure.join(', ')}` : 'structure'));
  for (const [db, granted] of Object.entries(permission)) {
    for (const [table, actions] of Object.entries(granted?.tables ?? {})) {
      const allowed = ACTIONS.filter((a) => actions?.[a]);
      const byAttribute = actions?.attribute_permissions?.length ? ' (by attribute)' : '';
      if (allowed.length) tags.push(h('span', { class: 'tag' }, `${db}.${table}: ${allowed.join(', ')}${byAttribute}`));
    }
  }
  return tags.length ? tags : h('span', { class: 'hint' }, 'nothing');
}
