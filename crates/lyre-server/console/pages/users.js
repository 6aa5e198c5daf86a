// Users and roles: listing, creating, changing and dropping them, and an editor of
// a role's permissions (per table: read, insert, update, delete).

import { op } from '../api.js';
import { attempt, checkbox, dataTable, field, fill, h, notify, select, sure, when } from '../ui.js';

const ACTIONS = ['read', 'insert', 'update', 'delete'];

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

  /** The permission editor: a grid of every table against the four actions. */
  function edit(role, all) {
    const permission = role?.permission ?? {};
    const name = h('input', { name: 'role', required: true, value: role?.role ?? '', disabled: Boolean(role) });
    const superUser = checkbox('Super user (everything)', { checked: Boolean(permission.super_user) });
    const structure = checkbox('May change structure (create and drop tables)', { checked: permission.structure_user === true });
    const boxes = [];
    const rows = [];
    for (const db of Object.keys(all).sort()) {
      for (const table of Object.keys(all[db]).sort()) {
        const granted = permission[db]?.tables?.[table] ?? {};
        rows.push(h('tr', {}, h('th', { scope: 'row' }, `${db}.${table}`), ACTIONS.map((action) => {
          const box = h('input', { type: 'checkbox', checked: Boolean(granted[action]), 'aria-label': `${action} ${db}.${table}` });
          boxes.push({ db, table, action, box });
          return h('td', {}, box);
        })));
      }
    }
    const problem = h('div');
    fill(editor, h('section', { class: 'card' },
      h('h2', {}, role ? `Edit role ${role.role}` : 'Add a role'),
      h('form', {
        onsubmit: async (event) => {
          event.preventDefault();
          const built = { super_user: superUser.box.checked };
          if (structure.box.checked) built.structure_user = true;
          for (const { db, table, action, box } of boxes) {
            const tables = (built[db] ??= { tables: {} }).tables;
            const entry = (tables[table] ??= { read: false, insert: false, update: false, delete: false, attribute_permissions: [] });
            entry[action] = box.checked;
          }
          const params = role ? { id: role.id, role: role.role, permission: built } : { role: name.value, permission: built };
          const done = await attempt(problem, () => op(role ? 'alter_role' : 'add_role', params));
          if (done) { notify(`Role ${params.role} saved`); fill(editor); await refresh(); }
        },
      },
      h('div', { class: 'row' }, field('Role name', name), superUser.label, structure.label),
      h('div', { class: 'scroll' }, h('table', { class: 'data perm-grid' },
        h('caption', {}, 'Table permissions'),
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Table'), ACTIONS.map((a) => h('th', { scope: 'col' }, a)))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 5 }, 'No tables yet.'))))),
      problem,
      h('div', { class: 'row' }, h('button', { type: 'submit' }, 'Save role'), h('button', { type: 'button', class: 'quiet', onclick: () => fill(editor) }, 'Cancel')))));
    name.focus();
  }
  await refresh();
}

/** One line per permission: `super user`, or each table with what it may do. */
function summary(permission = {}) {
  if (permission.super_user) return h('span', { class: 'tag good' }, 'super user');
  const tags = [];
  if (permission.structure_user) tags.push(h('span', { class: 'tag' }, 'structure'));
  for (const [db, granted] of Object.entries(permission)) {
    for (const [table, actions] of Object.entries(granted?.tables ?? {})) {
      const allowed = ACTIONS.filter((a) => actions?.[a]);
      if (allowed.length) tags.push(h('span', { class: 'tag' }, `${db}.${table}: ${allowed.join(', ')}`));
    }
  }
  return tags.length ? tags : h('span', { class: 'hint' }, 'nothing');
}
