// Jobs: those started in a chosen window, newest first, followed while any runs
// (each job's message is its progress).

import { op } from '../api.js';
import { attempt, dataTable, field, fill, h, select, when } from '../ui.js';

const DAY = 24 * 3600 * 1000;

export async function render(main) {
  const status = h('div');
  const list = h('div', { 'aria-live': 'polite' });
  const since = select([['1', 'Last day'], ['7', 'Last 7 days'], ['30', 'Last 30 days']], '7', { name: 'since' });
  let timer = null;

  async function refresh() {
    clearTimeout(timer);
    const from = new Date(Date.now() - Number(since.value) * DAY).toISOString();
    const to = new Date(Date.now() + DAY).toISOString();
    const jobs = await attempt(status, () => op('search_jobs_by_start_date', { from_date: from, to_date: to }));
    if (!jobs) return;
    jobs.sort((a, b) => (b.start_datetime ?? 0) - (a.start_datetime ?? 0));
    fill(list, dataTable({
      columns: [
        'type',
        { name: 'status', render: (j) => h('span', { class: `tag ${j.status === 'COMPLETE' ? 'good' : j.status === 'ERROR' ? 'bad' : ''}` }, j.status) },
        { name: 'message', label: 'Progress or result', render: (j) => [j.status === 'IN_PROGRESS' ? h('progress', { 'aria-label': `Job ${j.id} running` }) : null, ' ', j.message ?? ''] },
        { name: 'user' },
        { name: 'start_datetime', label: 'Started', render: (j) => when(j.start_datetime) },
        { name: 'end_datetime', label: 'Ended', render: (j) => when(j.end_datetime) },
        { name: 'id', label: 'Id' },
      ],
      rows: jobs,
      empty: 'No jobs in this window.',
    }));
    if (jobs.some((j) => j.status === 'IN_PROGRESS' || j.status === 'PENDING')) timer = setTimeout(refresh, 1000);
  }

  fill(main, h('h1', {}, 'Jobs'),
    h('form', { class: 'row', onsubmit: (event) => { event.preventDefault(); refresh(); } }, field('Started', since), h('button', { type: 'submit' }, 'Show')),
    status, list);
  await refresh();
  return () => clearTimeout(timer);
}
