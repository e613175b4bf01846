'use strict';
// Candidate A of leadership.test.js's story, a process of its own (forked,
// with an IPC channel) so that the test can freeze it with a real SIGSTOP.
//
//   node leader-candidate.js <election> <ttlMs> <row id>
//
// Sends { step: 'leader', term } once it leads and wrote its row (owner 'a'
// under its term), then waits for a message (the test freezes it
// meanwhile, and thaws it); then tries to write again, through lead.fenced
// and through the bare fenced(client, { generation: term, resource:
// election }), waits for lead.signal, and sends { step: 'tried', report };
// at last { step: 'exit', error: the name of what leadership rejected with }.

const pg = require('pg');
const lf = require('lease-fence');
const { config } = require('./helpers');

async function attempt(run) {
  try {
    await run();
    return { committed: true };
  } catch (err) {
    return { name: err.name, resource: err.resource ?? null };
  }
}

async function main() {
  const [election, ttl, id] = process.argv.slice(2);
  const ttlMs = Number(ttl);
  const rowId = Number(id);
  const conn = new pg.Client(config);
  const work = new pg.Client(config);
  await conn.connect();
  await work.connect();
  const update = (owner) => (c) => c.query('UPDATE account SET owner = $1 WHERE id = $2', [owner, rowId]);
  try {
    await lf.leadership(conn, election, { ttlMs, value: 'a' }, async (lead) => {
      await lead.fenced(work, update('a'));
      process.send({ step: 'leader', term: String(lead.term) });
      await new Promise((resolve) => process.once('message', resolve));   // frozen here, then thawed
      const report = {};
      report.fenced = await attempt(() => lead.fenced(work, update('a-after')));
      report.bare = await attempt(() => lf.fenced(work, { generation: lead.term, resource: election },
        update('a-after')));
      if (!lead.signal.aborted) {
        await new Promise((resolve) => lead.signal.addEventListener('abort', resolve, { once: true }));
      }
      report.lost = { aborted: lead.signal.aborted, reason: lead.signal.reason.name,
        why: lead.lostReason };
      process.send({ step: 'tried', report });
    });
    process.send({ step: 'exit', error: null });
  } catch (err) {
    process.send({ step: 'exit', error: err.name, message: err.message });
  } finally {
    await conn.end().catch(() => {});
    await work.end().catch(() => {});
    process.disconnect();
  }
}

main();
