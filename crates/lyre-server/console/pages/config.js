// Configuration: every setting `get_configuration` answers, by Harper's flattened
// name (`logging_level`), editable; changed ones are written with `set_configuration`
// (which refuses an unknown key or a wrong value, naming it), and a restart applies them.

import { ApiError, op } from '../api.js';
import { attempt, fill, h, notify, sure } from '../ui.js';

export async function render(main) {
  const status = h('div');
  const form = h('div');
  fill(main, h('h1', {}, 'Configuration'), status, form);
  const config = await attempt(status, () => op('get_configuration'));
  if (!config) return;
  const inputs = flatten(config).map(([key, value]) => {
    const input = h('input', { name: key, value: show(value), 'data-original': show(value), size: 28, 'aria-label': key });
    return { key, value, input };
  });
  const problem = h('div');
  fill(form,
    h('p', { class: 'hint' }, 'Changes are written to the configuration file and apply when Lyre restarts. Values are JSON where they are not plain text (numbers, true/false, lists).'),
    h('form', {
      onsubmit: async (event) => {
        event.preventDefault();
        const changed = {};
        for (const { key, value, input } of inputs) {
          if (input.value === input.dataset.original) continue;
          changed[key] = typed(input.value, value);
        }
        if (!Object.keys(changed).length) { notify('Nothing changed'); return; }
        const done = await attempt(problem, () => op('set_configuration', changed));
        if (done) {
          for (const { input } of inputs) input.dataset.original = input.value;
          fill(problem, h('p', { class: 'ok', role: 'status' }, `${done.message} Changed: ${(done.restart_required ?? Object.keys(changed)).join(', ')}`));
        }
      },
    },
    h('div', { class: 'scroll' }, h('table', { class: 'data' },
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Setting'), h('th', { scope: 'col' }, 'Value'))),
      h('tbody', {}, inputs.map(({ key, input }) => h('tr', {}, h('th', { scope: 'row' }, h('code', {}, key)), h('td', {}, input)))))),
    problem,
    h('div', { class: 'row' },
      h('button', { type: 'submit' }, 'Save changes'),
      h('button', { type: 'button', class: 'danger', onclick: () => restart(problem) }, 'Restart Lyre'))));
}

/** `{a: {b: 1}}` as `[['a_b', 1]]`, Harper's flattened names; lists stay whole. */
function flatten(value, prefix = '') {
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    return Object.entries(value).flatMap(([key, inner]) => flatten(inner, prefix ? `${prefix}_${key}` : key));
  }
  return [[prefix, value]];
}

function show(value) {
  if (value === null || value === undefined) return '';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** The text typed for a setting, as the type the setting had (text stays text). */
function typed(text, original) {
  if (typeof original === 'string') return text;
  if (text === '') return null;
  try {
    return JSON.parse(text);
  } catch {
    return text; // the server names the setting and what it expected
  }
}

// When the server answering now started (`system_information`'s time), or null
// while none answers. A server that answers but no longer knows this session (it
// expired, or the applied configuration ended it) is up: the user signs in again,
// as on any other page, and the question is asked once more.
async function started() {
  const ask = async (retry, signal) => (await op('system_information', { attributes: ['time'] }, { retry, signal })).time.process_started;
  try {
    // A request the stopping server took but will not answer is given up after 2 s.
    return await ask(false, AbortSignal.timeout(2000));
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) return null; // down, or between processes
    try {
      return await ask(true);
    } catch {
      return null;
    }
  }
}

async function restart(place) {
  if (!sure('Restart Lyre? Requests in flight finish first; the console reconnects when it is back.')) return;
  const before = await attempt(place, () => op('system_information', { attributes: ['time'] }));
  if (!before) return;
  const done = await attempt(place, () => op('restart'));
  if (!done) return;
  fill(place, h('p', { class: 'hint', role: 'status' }, 'Restarting…'));
  // Back is a server that started after the one that took the restart.
  const giveUpAt = Date.now() + 60_000;
  while (Date.now() < giveUpAt) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const now = await started();
    if (now != null && now !== before.time.process_started) {
      fill(place, h('p', { class: 'ok', role: 'status' }, 'Lyre is back.'));
      return;
    }
  }
  fill(place, h('div', { class: 'error', role: 'alert' }, 'Lyre has not come back within a minute of the restart.'));
}
