// End-to-end (tests/test_node_clients.py): BullMQ's Node client against a Redis URL (argv[2]) under a key prefix
// (argv[3]); prints what happened as one line of JSON.
const { Queue, Worker, QueueEvents, FlowProducer } = require('bullmq');
const url = new URL(process.argv[2]);
const connection = {
  host: url.hostname, port: Number(url.port || 6379), db: Number(url.pathname.slice(1) || 0),
  username: decodeURIComponent(url.username) || undefined, password: decodeURIComponent(url.password) || undefined,
  maxRetriesPerRequest: null,
};
const prefix = process.argv[3];
const name = 'e2e';
// A worker takes job 's' and dies without renewing its lock; a second worker's stalled check finds the job
// (its first pass marks it, the next moves it back to wait) and runs it to completed.
async function stalledJobRecovery() {
  const qname = 'e2e-stalled';
  const queue = new Queue(qname, { connection, prefix });
  const events = new QueueEvents(qname, { connection, prefix });
  await events.waitUntilReady();
  const seen = [];
  events.on('stalled', ({ jobId }) => seen.push(['stalled', jobId]));
  events.on('completed', ({ jobId }) => seen.push(['completed', jobId]));
  await queue.add('abandoned', { n: 8 }, { jobId: 's' });
  const dead = new Worker(qname, null, { connection, prefix, lockDuration: 300 });
  const taken = await dead.getNextJob('dead-token');
  await dead.close();
  await new Promise((r) => setTimeout(r, 500));  // its lock lapses
  const rescuer = new Worker(qname, async (job) => ({ doubled: job.data.n * 2 }),
                             { connection, prefix, stalledInterval: 300, maxStalledCount: 1 });
  const deadline = Date.now() + 15000;
  while (Date.now() < deadline && (await queue.getJobCounts('completed')).completed < 1) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const job = await queue.getJob('s');
  const out = { taken: taken ? taken.id : null, state: await job.getState(), returnvalue: job.returnvalue,
                events: seen.sort() };
  await rescuer.close();
  await events.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return out;
}

(async () => {
  const queue = new Queue(name, { connection, prefix });
  const events = new QueueEvents(name, { connection, prefix });
  await events.waitUntilReady();
  const seen = [];
  events.on('completed', ({ jobId }) => seen.push(['completed', jobId]));
  events.on('failed', ({ jobId }) => seen.push(['failed', jobId]));
  await queue.add('standard', { n: 1 }, { jobId: 'a' });
  await queue.add('delayed', { n: 2 }, { jobId: 'b', delay: 200 });
  await queue.add('prioritized', { n: 3 }, { jobId: 'c', priority: 2 });
  await queue.add('flaky', { n: 4 }, { jobId: 'd', attempts: 2, backoff: { type: 'fixed', delay: 100 } });
  await queue.add('doomed', { n: 5 }, { jobId: 'e', attempts: 1 });
  // a parent with two children: the parent runs once both are done, and reads their return values
  const flow = new FlowProducer({ connection, prefix });
  await flow.add({
    name: 'parent', queueName: name, data: {}, opts: { jobId: 'p' },
    children: [{ name: 'child', queueName: name, data: { n: 6 }, opts: { jobId: 'f1' } },
               { name: 'child', queueName: name, data: { n: 7 }, opts: { jobId: 'f2' } }],
  });
  const tries = {};
  const worker = new Worker(name, async (job) => {
    tries[job.id] = (tries[job.id] || 0) + 1;
    if (job.id === 'd' && tries[job.id] === 1) throw new Error('first try fails');
    if (job.id === 'e') throw new Error('always fails');
    if (job.name === 'parent') {
      const values = Object.values(await job.getChildrenValues());
      return { sum: values.reduce((total, v) => total + v.doubled, 0), children: values.length };
    }
    return { doubled: job.data.n * 2 };
  }, { connection, prefix, stalledInterval: 1000 });
  const deadline = Date.now() + 15000;
  while (Date.now() < deadline) {
    const c = await queue.getJobCounts('completed', 'failed');
    if (c.completed === 7 && c.failed === 1) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const counts = await queue.getJobCounts('wait', 'active', 'delayed', 'prioritized', 'completed', 'failed');
  const jobs = {};
  for (const id of ['a', 'b', 'c', 'd', 'e', 'f1', 'f2', 'p']) {
    const job = await queue.getJob(id);
    jobs[id] = { state: await job.getState(), attemptsMade: job.attemptsMade, returnvalue: job.returnvalue,
                 failedReason: job.failedReason || null };
  }
  await worker.close();
  await events.close();
  await flow.close();
  await queue.obliterate({ force: true });
  await queue.close();
  const stalled = await stalledJobRecovery();
  console.log(JSON.stringify({ counts, jobs, tries, events: seen.sort(), stalled }));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
