// kafkajs 2.2.4 as an OAUTHBEARER client, for tests/interop/test_oauth.py. Run with the pinned
// kafkajs on NODE_PATH (scripts/lib/oidc.sh ensure_kafkajs installs it into the cache):
//
//   NODE_PATH=$KAFKAJS_NODE_PATH node client.js '<json arguments>'
//
// Arguments: bootstrap, tokenUrl, clientId, clientSecret, and
//   mode "roundtrip": topic, records, group. Creates the topic (3 partitions), produces `records`
//     keyed records with values derived from their keys, consumes them with a consumer group until
//     each key arrived, checks every value, and prints a one-line JSON summary. Exit 0 only if
//     everything matched.
//   mode "expect-refusal": token (a fixed token to present). Exit 0 only if the client cannot list
//     topics. kafkajs 2.2.4 does not implement the OAUTHBEARER failure exchange (RFC 7628 §3.2.2):
//     it takes the server's JSON challenge (a SaslAuthenticate answer without error code) for a
//     success, and only its next request fails, when the server closes the connection. So it never
//     reports KafkaJSSASLAuthenticationError for a refused token; the summary lists the errors it did
//     report (the test compares them between Kafka and Portcullis).
//   mode "steady": topic, seconds, rate, group. Creates the topic (3 partitions), starts a consumer
//     group member on it, produces `rate` keyed records a second (in batches of rate/10 every
//     100 ms, acks all) for `seconds` once the member has joined its group, then waits until the
//     consumer has seen every key. For the
//     re-authentication test: tokens live 12 s, so every connection that lives through the run
//     re-authenticates (kafkajs does so before a request once its session has less than
//     `reauthenticationThreshold` left, 4 s here). The summary counts what kafkajs logged at WARN
//     or ERROR (a retried request, a lost connection, a crashed consumer): the test wants none.
//
// The token comes from `oauthBearerProvider`, which kafkajs calls at every (re-)authentication:
// here it fetches one from the provider's token endpoint by client credentials (HTTP basic), and
// reuses it until `refreshFraction` (default 0.5) of its lifetime has passed, as an application would.
// Both defaults here follow from the 12-s tokens: kafkajs re-authenticates before a request once the
// session has less than `reauthenticationThreshold` left (kafkajs' own default is 10 s), and a
// session lives only as long as its token. With kafkajs' 10 s and a token reused until 80 % of its
// life, any session begun with a token older than 2 s starts under the threshold: kafkajs
// re-authenticates at every request, and the second within a second is refused with
// ILLEGAL_SASL_STATE, as Kafka refuses it (seen when a loaded machine made a run last that long).
// With 4 s and half the lifetime, a session lasts at least 6 s and re-authenticates 2 s in at the
// earliest.

const crypto = require('node:crypto');
const { Kafka, Partitioners, logLevel } = require('kafkajs');

const args = JSON.parse(process.argv[2]);
const stats = { token_fetches: 0, provider_calls: 0 };

function valueFor(key) {
  return `${key}:${crypto.createHash('sha256').update(key).digest('hex')}`;
}

let cached = null; // { value, refreshAt }
async function fetchToken() {
  const auth = Buffer.from(`${args.clientId}:${args.clientSecret}`).toString('base64');
  const res = await fetch(args.tokenUrl, {
    method: 'POST',
    headers: { authorization: `Basic ${auth}`, 'content-type': 'application/x-www-form-urlencoded' },
    body: 'grant_type=client_credentials',
  });
  if (!res.ok) throw new Error(`token endpoint answered ${res.status}: ${await res.text()}`);
  const body = await res.json();
  stats.token_fetches += 1;
  const fraction = args.refreshFraction ?? 0.5;
  return { value: body.access_token, refreshAt: Date.now() + body.expires_in * 1000 * fraction };
}

async function oauthBearerProvider() {
  stats.provider_calls += 1;
  if (args.token) return { value: args.token };
  if (!cached || Date.now() >= cached.refreshAt) cached = await fetchToken();
  return { value: cached.value };
}

// What kafkajs logged at WARN or ERROR (the steady mode reports it; other modes log only errors).
const logged = [];
const logCreator = () => ({ level, log }) => {
  if (level <= logLevel.WARN) logged.push({ level, message: String(log.message), error: log.error });
};

const kafka = new Kafka({
  clientId: 'portcullis-kafkajs-oauth',
  brokers: [args.bootstrap],
  sasl: { mechanism: 'oauthbearer', oauthBearerProvider },
  connectionTimeout: 10000,
  requestTimeout: 30000,
  reauthenticationThreshold: args.reauthenticationThreshold ?? 4000,
  retry: { retries: args.mode === 'expect-refusal' ? 0 : 5 },
  logLevel: args.mode === 'steady' ? logLevel.WARN : logLevel.ERROR,
  ...(args.mode === 'steady' ? { logCreator } : {}),
});

// kafkajs' own `waitForLeaders` retries only LEADER_NOT_AVAILABLE, but a KRaft broker answers
// Metadata from a cache that follows the controller, so right after CreateTopics it may still say
// UNKNOWN_TOPIC_OR_PARTITION (seen on a loaded CI run, through Portcullis as directly). Wait until
// every partition has a leader, treating both answers as "not yet".
async function createTopicAndWait(admin, topic, numPartitions) {
  await admin.createTopics({ topics: [{ topic, numPartitions }], waitForLeaders: false });
  const deadline = Date.now() + 30000;
  for (;;) {
    try {
      const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
      const partitions = topics[0]?.partitions ?? [];
      if (partitions.length === numPartitions && partitions.every((p) => p.leader >= 0)) return;
    } catch (e) {
      const type = e.type ?? e.cause?.type;
      if (type !== 'UNKNOWN_TOPIC_OR_PARTITION' && type !== 'LEADER_NOT_AVAILABLE') throw e;
    }
    if (Date.now() > deadline) throw new Error(`topic ${topic} has no leader for every partition after 30 s`);
    await new Promise((resolve) => { setTimeout(resolve, 100); });
  }
}

async function roundtrip() {
  const admin = kafka.admin();
  await admin.connect();
  await createTopicAndWait(admin, args.topic, 3);
  await admin.disconnect();

  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const batch = 500;
  for (let i = 0; i < args.records; i += batch) {
    const messages = [];
    for (let j = i; j < Math.min(i + batch, args.records); j += 1) {
      const key = `kj-${j}`;
      messages.push({ key, value: valueFor(key) });
    }
    await producer.send({ topic: args.topic, acks: -1, messages });
  }
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: args.group });
  const seen = new Set();
  let duplicates = 0;
  let badValues = 0;
  await consumer.connect();
  await consumer.subscribe({ topic: args.topic, fromBeginning: true });
  const done = new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        const key = message.key.toString();
        if (seen.has(key)) duplicates += 1;
        seen.add(key);
        if (message.value.toString() !== valueFor(key)) badValues += 1;
        if (seen.size >= args.records) resolve();
      },
    });
  });
  const timeout = new Promise((resolve) => { setTimeout(resolve, 90000); });
  await Promise.race([done, timeout]);
  await consumer.disconnect();
  const summary = {
    ok: seen.size === args.records && duplicates === 0 && badValues === 0,
    records: args.records, consumed_distinct: seen.size, duplicates, bad_values: badValues, ...stats,
  };
  console.log(JSON.stringify(summary));
  return summary.ok ? 0 : 1;
}

async function steady() {
  const admin = kafka.admin();
  await admin.connect();
  await createTopicAndWait(admin, args.topic, 3);
  await admin.disconnect();

  const seen = new Set();
  let duplicates = 0;
  let badValues = 0;
  let crashed = null;
  let target = Infinity;
  let allSeen;
  const done = new Promise((resolve) => { allSeen = resolve; });
  const consumer = kafka.consumer({ groupId: args.group });
  consumer.on(consumer.events.CRASH, (e) => { crashed = String(e.payload?.error ?? e); });
  let joined;
  const groupJoined = new Promise((resolve) => { joined = resolve; });
  consumer.on(consumer.events.GROUP_JOIN, () => joined());
  await consumer.connect();
  await consumer.subscribe({ topic: args.topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      const key = message.key.toString();
      if (seen.has(key)) duplicates += 1;
      seen.add(key);
      if (message.value.toString() !== valueFor(key)) badValues += 1;
      if (seen.size >= target) allSeen();
    },
  });

  // The partitioner named, or kafkajs warns that its default changed in 2.0.
  // Until the member has joined, a fresh cluster may answer the coordinator lookup with
  // COORDINATOR_NOT_AVAILABLE while it creates __consumer_offsets (Kafka's own behaviour, which
  // kafkajs logs as an error and retries): what was logged before the run starts is reported apart.
  await Promise.race([groupJoined, new Promise((resolve) => { setTimeout(resolve, 60000); })]);
  const beforeRun = logged.splice(0);
  const producer = kafka.producer({ allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const perTick = Math.max(1, Math.round(args.rate / 10));
  const end = Date.now() + args.seconds * 1000;
  let sent = 0;
  let failed = 0;
  let next = Date.now();
  while (Date.now() < end) {
    const messages = [];
    for (let j = 0; j < perTick; j += 1) {
      const key = `kjs-${sent + j}`;
      messages.push({ key, value: valueFor(key) });
    }
    try {
      await producer.send({ topic: args.topic, acks: -1, messages });
      sent += messages.length;
    } catch (e) {
      failed += messages.length;
      logged.push({ level: logLevel.ERROR, message: `send failed: ${e}` });
    }
    next += 100;
    const wait = next - Date.now();
    if (wait > 0) await new Promise((resolve) => { setTimeout(resolve, wait); });
  }
  await producer.disconnect();
  target = sent;
  if (seen.size >= target) allSeen();
  await Promise.race([done, new Promise((resolve) => { setTimeout(resolve, 60000); })]);
  await consumer.disconnect();
  const summary = {
    ok: failed === 0 && seen.size === sent && duplicates === 0 && badValues === 0 && crashed === null
      && logged.length === 0,
    sent, failed, consumed_distinct: seen.size, duplicates, bad_values: badValues, crashed,
    logged: logged.length, first_logged: logged.slice(0, 5),
    logged_before_run: beforeRun.map((e) => `${e.message}: ${e.error ?? ''}`).slice(0, 5), ...stats,
  };
  console.log(JSON.stringify(summary));
  return summary.ok ? 0 : 1;
}

async function expectRefusal() {
  const admin = kafka.admin();
  try {
    await admin.connect();
    await admin.listTopics();
    console.log(JSON.stringify({ ok: false, errors: [], ...stats }));
    return 1;
  } catch (e) {
    // kafkajs wraps the failure of its last try (KafkaJSNumberOfRetriesExceeded, ...): the chain.
    const chain = [];
    for (let err = e; err && chain.length < 8; err = err.originalError ?? err.cause) {
      chain.push({ name: err.name, message: String(err.message) });
    }
    console.log(JSON.stringify({ ok: true, errors: chain, ...stats }));
    return 0;
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

const modes = { roundtrip, steady, 'expect-refusal': expectRefusal };
(modes[args.mode] ?? roundtrip)()
  .then((rc) => process.exit(rc))
  .catch((e) => {
    console.log(JSON.stringify({ ok: false, error: String(e?.stack ?? e), ...stats }));
    process.exit(1);
  });
