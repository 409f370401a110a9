// One kafkajs group consumer in its own process, reporting JSON lines in the schema of
// ../kafkago/main.go: started, joined (member id, generation), assignment, message (with `ts`,
// the record's timestamp), committed, closed, error; each with `t` (CLOCK_MONOTONIC seconds,
// as Python's time.monotonic()) and `at` (wall clock, epoch seconds).
//
//   node worker.js --bootstrap HOST:PORT --topic T --group G [--session-ms 30000]
//       [--heartbeat-ms 3000] [--client-id ID]
//
// kafkajs comes from `npm install kafkajs` (NODE_PATH names where). A zero or absent interval
// keeps kafkajs' default (session 30 s, heartbeat 3 s, maxWaitTimeInMs 5 s). Offsets are
// committed by kafkajs' auto-commit (autoCommitInterval 1 s here); `committed` is reported from
// its COMMIT_OFFSETS instrumentation event. `close` on stdin (or end of input) disconnects
// gracefully (LeaveGroup).
'use strict';
const { Kafka, logLevel } = require('kafkajs');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
}
const startNs = process.hrtime.bigint();
const startMono = Number(require('fs').readFileSync('/proc/uptime', 'utf8').split(' ')[0]);

function emit(ev, fields) {
  // hrtime is CLOCK_MONOTONIC; its origin is not exposed, so anchor it once to /proc/uptime
  // (CLOCK_BOOTTIME, equal to CLOCK_MONOTONIC on a machine that has not suspended).
  const t = startMono + Number(process.hrtime.bigint() - startNs) / 1e9;
  process.stdout.write(JSON.stringify({ ev, t, at: Date.now() / 1000, ...(fields || {}) }) + '\n');
}

const kafka = new Kafka({
  clientId: args['client-id'] || 'kafkajs',
  brokers: [args.bootstrap],
  logLevel: logLevel.ERROR,
  logCreator: () => ({ level, log }) => emit('error', { error: `${log.message} ${log.error || ''}`.trim() }),
});
const options = { groupId: args.group, autoCommitInterval: 1000 };
if (Number(args['session-ms'])) options.sessionTimeout = Number(args['session-ms']);
if (Number(args['heartbeat-ms'])) options.heartbeatInterval = Number(args['heartbeat-ms']);
const consumer = kafka.consumer(options);
const committed = {};

consumer.on(consumer.events.GROUP_JOIN, (e) => {
  const { memberId, groupProtocol, memberAssignment } = e.payload;
  emit('joined', { member_id: memberId, generation: null, protocol: groupProtocol });
  emit('assignment', { partitions: (memberAssignment[args.topic] || []).slice().sort((a, b) => a - b) });
});
consumer.on(consumer.events.REBALANCING, () => emit('assignment', { partitions: [] }));
consumer.on(consumer.events.COMMIT_OFFSETS, (e) => {
  for (const topic of e.payload.topics) {
    for (const p of topic.partitions) committed[p.partition] = Number(p.offset);
  }
  emit('committed', { offsets: { ...committed } });
});
consumer.on(consumer.events.CRASH, (e) => emit('error', { error: `crash: ${e.payload.error}` }));

async function main() {
  await consumer.connect();
  await consumer.subscribe({ topic: args.topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      emit('message', {
        partition, offset: Number(message.offset), value: message.value ? message.value.toString() : '',
        topic, ts: Number(message.timestamp),
      });
    },
  });
  emit('started');
}

let closing = false;
async function close() {
  if (closing) return;
  closing = true;
  await consumer.disconnect();
  emit('closed');
  process.exit(0);
}
let pending = '';
process.stdin.on('data', (chunk) => {
  pending += chunk.toString();
  const lines = pending.split('\n');
  pending = lines.pop();
  if (lines.some((l) => l.trim() === 'close')) close();
});
process.stdin.on('end', close);
main().catch((err) => { emit('error', { error: String(err) }); process.exit(1); });
