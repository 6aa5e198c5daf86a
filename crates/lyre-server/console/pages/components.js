// Components: each with its files and status (load errors included), a file's text
// viewed and saved, components added, deployed from a package and dropped.

import { op } from '../api.js';
import { attempt, field, fill, h, notify, sure } from '../ui.js';

export async function render(main) {
  const status = h('div');
  const list = h('div');
  const viewer = h('div');
  fill(main, h('h1', {}, 'Components'), status, addForm(), viewer, list);

  function addForm() {
    const name = h('input', { name: 'project', required: true });
    const pack = h('input', { type: 'file', name: 'package', accept: '.tar,.tgz,.tar.gz,application/gzip,application/x-tar' });
    return h('section', { class: 'card' },
      h('h2', {}, 'Add or deploy'),
      h('form', {
        class: 'row',
        onsubmit: async (event) => {
          event.preventDefault();
          const chosen = pack.files?.[0];
          const done = await attempt(status, async () => {
            if (!chosen) return op('add_component', { project: name.value });
            return op('deploy_component', { project: name.value, payload: await base64(chosen) });
          });
          if (done) { notify(done.message ?? 'Done'); await refresh(); }
        },
      }, field('Component name', name), field('Package to deploy (.tar or .tar.gz; leave empty for a new component from the template)', pack),
      h('button', { type: 'submit' }, 'Add or deploy')));
  }

  async function refresh() {
    const tree = await attempt(status, () => op('get_components'));
    if (!tree) return;
    const components = tree.entries ?? [];
    fill(list, components.length ? components.map(card) : h('p', {}, 'No components yet.'));
  }

  function card(component) {
    const state = component.status ?? {};
    const healthy = state.status === 'healthy';
    return h('section', { class: 'card', 'aria-label': `Component ${component.name}` },
      h('h2', {}, component.name, ' ', h('span', { class: `tag ${healthy ? 'good' : 'bad'}` }, state.status ?? 'unknown')),
      state.message ? h('p', { class: healthy ? 'hint' : 'error', role: healthy ? null : 'alert' }, state.message) : null,
      h('ul', {}, files(component.name, component.entries ?? [], '')),
      h('button', {
        type: 'button',
        class: 'danger',
        onclick: async () => {
          if (!sure(`Drop component ${component.name} and its files?`)) return;
          const done = await attempt(status, () => op('drop_component', { project: component.name }));
          if (done) { notify(`Component ${component.name} dropped`); fill(viewer); await refresh(); }
        },
      }, `Drop ${component.name}`));
  }

  function files(project, entries, prefix) {
    return entries.map((entry) => {
      const path = prefix + entry.name;
      if (Array.isArray(entry.entries)) return h('li', {}, `${entry.name}/`, h('ul', {}, files(project, entry.entries, `${path}/`)));
      return h('li', {}, h('button', { type: 'button', class: 'quiet', onclick: () => open(project, path) }, path), entry.size !== undefined ? h('span', { class: 'hint' }, ` ${entry.size} bytes`) : null);
    });
  }

  async function open(project, file) {
    const got = await attempt(status, () => op('get_component_file', { project, file }));
    if (!got) return;
    const text = h('textarea', { rows: 18, 'aria-label': `${project}/${file}` });
    text.value = got.message ?? '';
    const problem = h('div');
    fill(viewer, h('section', { class: 'card' },
      h('h2', {}, `${project}/${file}`),
      text, problem,
      h('div', { class: 'row' },
        h('button', {
          type: 'button',
          onclick: async () => {
            const done = await attempt(problem, () => op('set_component_file', { project, file, payload: text.value }));
            if (done) { notify(`${file} saved; the component reloads`); await refresh(); }
          },
        }, 'Save file'),
        h('button', { type: 'button', class: 'quiet', onclick: () => fill(viewer) }, 'Close'))));
    text.focus();
  }

  await refresh();
}

/** A file's bytes as base64 (`deploy_component`'s payload). */
async function base64(file) {
  const data = new Uint8Array(await file.arrayBuffer());
  let binary = '';
  for (let i = 0; i < data.length; i += 0x8000) binary += String.fromCharCode(...data.subarray(i, i + 0x8000));
  return btoa(binary);
}
