// The console's shell: signing in and out, the page list, and the router. Each page
// is a module under `pages/` whose `render(main, args)` fills `<main>` and may answer
// a function that stops what it started (timers, event streams) when the user leaves.

import { op, whenSignedOut } from './api.js';
import { isSuperUser, setUser } from './session.js';
import { fill, h } from './ui.js';

const PAGES = {
  databases: () => import('./pages/databases.js'),
  table: () => import('./pages/records.js'),
  live: () => import('./pages/live.js'),
  query: () => import('./pages/query.js'),
  users: () => import('./pages/users.js'),
  roles: () => import('./pages/users.js'),
  components: () => import('./pages/components.js'),
  jobs: () => import('./pages/jobs.js'),
  logs: () => import('./pages/logs.js'),
  metrics: () => import('./pages/metrics.js'),
  config: () => import('./pages/config.js'),
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
let leave = null;

async function route() {
  if (leave) {
    try { leave(); } catch { /* a page that failed to stop must not stop the next */ }
    leave = null;
  }
  const [name, ...args] = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const page = PAGES[name] ? name : 'databases';
  for (const link of nav.querySelectorAll('a')) {
    const current = link.getAttribute('href') === `#/${page}` || (page === 'table' && link.getAttribute('href') === '#/databases');
    if (current) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  fill(main, h('p', { class: 'hint' }, 'Loading…'));
  try {
    const module = await PAGES[page]();
    leave = (await module.render(main, { page, args })) ?? null;
  } catch (error) {
    fill(main, h('h1', {}, 'This page failed'), h('div', { class: 'error', role: 'alert' }, error.message));
  }
  main.focus({ preventScroll: true });
}

/** Shows the sign-in dialog over whatever is on the page; settles once signed in. */
function signIn(reason = '') {
  if (signIn.pending) return signIn.pending;
  const dialog = document.getElementById('sign-in');
  const form = document.getElementById('sign-in-form');
  const problem = document.getElementById('sign-in-error');
  document.getElementById('sign-in-reason').textContent = reason;
  problem.hidden = true;
  signIn.pending = new Promise((resolve) => {
    form.onsubmit = async (event) => {
      event.preventDefault();
      const data = new FormData(form);
      try {
        await op('login', { username: data.get('username'), password: data.get('password') }, { retry: false });
        await whoAmI();
        form.elements.password.value = '';
        dialog.close();
        signIn.pending = null;
        resolve();
      } catch (error) {
        problem.textContent = error.status === 401 ? 'Wrong username or password.' : error.message;
        problem.hidden = false;
      }
    };
    // Escape must not leave a signed-out page behind the dialog.
    dialog.oncancel = (event) => event.preventDefault();
  });
  dialog.showModal();
  form.elements.username.focus();
  return signIn.pending;
}

async function whoAmI() {
  const user = await op('user_info', {}, { retry: false });
  setUser(user);
  document.getElementById('who').textContent = `${user.username} (${user.role?.role ?? 'no role'})`;
  document.getElementById('sign-out').hidden = false;
  for (const item of nav.querySelectorAll('[data-super]')) item.hidden = !isSuperUser();
  nav.hidden = false;
}

async function signOut() {
  try { await op('logout', {}, { retry: false }); } catch { /* the session may be gone already */ }
  setUser(null);
  nav.hidden = true;
  document.getElementById('who').textContent = '';
  document.getElementById('sign-out').hidden = true;
  if (leave) { leave(); leave = null; }
  fill(main);
  await signIn();
  route();
}

async function start() {
  whenSignedOut(signIn);
  document.getElementById('sign-out').addEventListener('click', signOut);
  try {
    await whoAmI();
  } catch {
    await signIn();
  }
  window.addEventListener('hashchange', route);
  route();
}

start();
