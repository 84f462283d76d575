// @platformatic/kafka (a Kafka client written from scratch in TypeScript that speaks only recent request
// versions: Fetch v12-17, JoinGroup v6-9, SyncGroup v4-5, CreateTopics v7, ...) against a Flotilla cluster,
// unchanged:
//   node platformatic_check.mjs BOOTSTRAP PREFIX
// The test creates PREFIX-plain and PREFIX-txn (3 partitions each, RF 3); the admin part creates and deletes
// PREFIX-admin itself. Prints one JSON object: what an idempotent acks=all producer sent, what a classic group
// and a KIP-848 group read and committed, what a transactional producer committed and aborted, what a
// read_committed consumer read, and what the admin client saw.
import { Admin, Connection, Consumer, Producer, alterReplicaLogDirsV2, describeQuorumV2, describeTopicPartitionsV0,
         stringDeserializers, stringSerializers }
  from '@platformatic/kafka'

const [bootstrap, prefix] = process.argv.slice(2)
const bootstrapBrokers = bootstrap.split(',')
const plain = `${prefix}-plain`
const txnTopic = `${prefix}-txn`
const RECORDS = 300
const out = {}
const json = value => JSON.parse(JSON.stringify(value, (_, v) => typeof v === 'bigint' ? v.toString() : v))

async function readAll (groupId, topic, expected, options = {}) {
  // Reads `expected` records from the start in group `groupId`, lets the autocommit (every 100 ms) commit them,
  // then leaves. (Breaking out of a for-await loop would destroy the stream before its autocommit ran.)
  const consumer = new Consumer({ groupId, clientId: groupId, bootstrapBrokers, deserializers: stringDeserializers,
                                  ...options })
  const stream = await consumer.consume({ topics: [topic], mode: 'earliest', autocommit: 100,
                                          isolationLevel: options.isolationLevel ?? 0 })
  const seen = {}
  let count = 0
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${count} of ${expected} from ${topic}`)), 60000)
    stream.on('error', reject)
    stream.on('autocommit', error => { if (error) reject(error) })
    stream.on('data', message => {
      (seen[message.partition] ||= []).push([Number(message.offset), message.value])
      if (++count === expected) { clearTimeout(timer); resolve() }
    })
  })
  await new Promise(resolve => setTimeout(resolve, 1000)) // several autocommit rounds
  await stream.close()
  await consumer.close()
  return seen
}

async function committed (admin, groupId, topic) {
  // Offsets committed in a transaction become the group's once the coordinator's COMMIT marker lands on
  // __consumer_offsets, a moment after EndTxn is answered (as in Kafka): until then they are not listed.
  for (let attempt = 0; ; attempt++) {
    const [group] = await admin.listConsumerGroupOffsets({ groups: [groupId] })
    const found = group.topics.find(t => t.name === topic)
    if (found) return found.partitions.map(p => [p.partitionIndex, Number(p.committedOffset)]).sort((a, b) => a[0] - b[0])
    if (attempt === 100) throw new Error(`group ${groupId} has no offsets for ${topic} after 10 s`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

async function untilEveryBroker (what, sees) {
  // The controller answers CreateTopics, DeleteTopics and CreatePartitions once its records are committed; each
  // broker describes the change once it has applied them, a moment later (as in Kafka, whose own tests wait the
  // same way). The client asks its first bootstrap broker and then trusts its cache, so wait for every broker.
  for (const broker of bootstrapBrokers) {
    const probe = new Admin({ clientId: 'platformatic-probe', bootstrapBrokers: [broker] })
    try {
      for (let attempt = 0; !(await sees(probe)); attempt++) {
        if (attempt === 100) throw new Error(`${broker} does not describe ${what} after 10 s`)
        await new Promise(resolve => setTimeout(resolve, 100))
      }
    } finally {
      await probe.close()
    }
  }
}
const partitionsOf = async (probe, topic) =>
  (await probe.metadata({ topics: [topic], forceUpdate: true })).topics.get(topic).partitionsCount

const admin = new Admin({ clientId: 'platformatic-admin', bootstrapBrokers })

// An idempotent acks=all producer: keys, headers, explicit partitions.
const producer = new Producer({ clientId: 'platformatic-producer', bootstrapBrokers, serializers: stringSerializers,
                                idempotent: true, acks: -1 })
const messages = []
for (let i = 0; i < RECORDS; i++) {
  messages.push({ topic: plain, key: `k${i}`, value: `plain-${i}`, partition: i % 3, headers: { index: `${i}` } })
}
const sent = await producer.send({ messages })
out.sent_offsets = sent.offsets.map(o => [o.partition, Number(o.offset)]).sort((a, b) => a[0] - b[0])
await producer.close()

// A classic group (JoinGroup/SyncGroup/Heartbeat/OffsetCommit), then a KIP-848 group (ConsumerGroupHeartbeat).
out.classic_read = await readAll(`${prefix}-classic`, plain, RECORDS)
out.classic_offsets = await committed(admin, `${prefix}-classic`, plain)
out.consumer_protocol_read = await readAll(`${prefix}-848`, plain, RECORDS, { groupProtocol: 'consumer' })
out.consumer_protocol_offsets = await committed(admin, `${prefix}-848`, plain)

// Transactions: commit, abort, commit; a read_committed reader sees the committed ones only.
const txnProducer = new Producer({ clientId: 'platformatic-txn', bootstrapBrokers, serializers: stringSerializers,
                                   transactionalId: `${prefix}-tid`, idempotent: true, acks: -1 })
out.committed = []
for (const [index, commit] of [[0, true], [1, false], [2, true]]) {
  const transaction = await txnProducer.beginTransaction()
  const values = [0, 1, 2].map(p => `t${index}-${p}`)
  await transaction.send({ messages: values.map((value, p) => ({ topic: txnTopic, value, partition: p })) })
  if (commit) {
    await transaction.commit()
    out.committed.push(...values)
  } else {
    await transaction.abort()
  }
}
await txnProducer.close()
const readCommitted = await readAll(`${prefix}-rc`, txnTopic, out.committed.length, { isolationLevel: 1 })
out.read_committed = Object.values(readCommitted).flat().map(([, value]) => value).sort()

// Consume-transform-produce: 30 records a group consumer read go out transformed in one transaction with their
// offsets (AddOffsetsToTxn, TxnOffsetCommit); the group's committed offsets are the transaction's.
const eosConsumer = new Consumer({ groupId: `${prefix}-eos`, clientId: 'platformatic-eos', bootstrapBrokers,
                                   deserializers: stringDeserializers })
const eosStream = await eosConsumer.consume({ topics: [plain], mode: 'earliest', autocommit: false })
const batch = await new Promise((resolve, reject) => {
  const got = []
  eosStream.on('error', reject)
  eosStream.on('data', message => { if (got.length < 30 && got.push(message) === 30) resolve(got) })
})
const eosProducer = new Producer({ clientId: 'platformatic-eos', bootstrapBrokers, serializers: stringSerializers,
                                   transactionalId: `${prefix}-eos-tid`, idempotent: true, acks: -1 })
const eos = await eosProducer.beginTransaction()
await eos.addConsumer(eosConsumer)
await eos.send({ messages: batch.map(m => ({ topic: txnTopic, value: `eos-${m.value}`, partition: m.partition })) })
for (const message of batch) await eos.addOffset(message)
await eos.commit()
await eosProducer.close()
await eosStream.close()
await eosConsumer.close()
out.eos_read = batch.map(m => [m.partition, Number(m.offset)])
out.eos_offsets = await committed(admin, `${prefix}-eos`, plain)
const afterEos = await readAll(`${prefix}-rc2`, txnTopic, out.committed.length + batch.length, { isolationLevel: 1 })
out.eos_output = Object.values(afterEos).flat().map(([, value]) => value).filter(v => v.startsWith('eos-')).sort()

// The admin client: a topic created and deleted, groups listed, described and deleted.
const created = await admin.createTopics({ topics: [`${prefix}-admin`], partitions: 2, replicas: 3 })
out.admin_created = created.map(t => [t.name, t.partitions, t.replicas])
await untilEveryBroker(`${prefix}-admin`, async probe => (await probe.listTopics()).includes(`${prefix}-admin`))
out.admin_topics = (await admin.listTopics()).filter(name => name.startsWith(prefix)).sort()
await admin.deleteTopics({ topics: [`${prefix}-admin`] })
await untilEveryBroker(`${prefix}-admin deleted`,
                       async probe => !(await probe.listTopics()).includes(`${prefix}-admin`))
out.admin_topics_after_delete = (await admin.listTopics()).filter(name => name.startsWith(prefix)).sort()
const groups = await admin.listGroups({ types: ['classic', 'consumer'] }) // (the client's default: classic)
out.groups = [...groups.values()].filter(g => g.id.startsWith(prefix)).map(g => [g.id, g.protocolType]).sort()
out.consumer_groups = [...(await admin.listGroups({ types: ['consumer'] })).values()]
  .filter(g => g.id.startsWith(prefix)).map(g => g.id)
const described = await admin.describeGroups({ groups: [`${prefix}-classic`] })
out.described = [...described.values()].map(g => [g.id, g.state, g.protocolType])
await admin.deleteGroups({ groups: [`${prefix}-classic`] })
out.groups_after_delete = [...(await admin.listGroups({ types: ['classic', 'consumer'] })).values()]
  .filter(g => g.id.startsWith(prefix))
  .map(g => g.id).sort()

// Configs, partitions, records, offsets, log dirs and quotas through the admin client's newest versions.
const topic = `${prefix}-plain`
const TOPIC = 2 // ConfigResourceTypes.TOPIC
await admin.alterConfigs({ resources: [{ resourceType: TOPIC, resourceName: topic,
                                         configs: [{ name: 'retention.ms', value: '7200000' }] }] })
await admin.incrementalAlterConfigs({ resources: [{ resourceType: TOPIC, resourceName: topic,
  configs: [{ name: 'cleanup.policy', configOperation: 0, value: 'compact,delete' }] }] })
// Asked again until the broker asked has applied both changes the controller committed (or 10 s pass).
for (let tries = 0; tries < 50; tries++) {
  const [described2] = await admin.describeConfigs({ resources: [{ resourceType: TOPIC, resourceName: topic,
    configurationKeys: ['retention.ms', 'cleanup.policy', 'segment.bytes'] }] })
  out.configs = described2.configs.map(c => [c.name, c.value, c.configSource, c.configType]).sort()
  const value = name => described2.configs.find(c => c.name === name)?.value
  if (value('retention.ms') === '7200000' && value('cleanup.policy') === 'compact,delete') break
  await new Promise(resolve => setTimeout(resolve, 200))
}
await admin.createPartitions({ topics: [{ name: topic, count: 4 }] })
await untilEveryBroker(`4 partitions of ${topic}`, async probe => await partitionsOf(probe, topic) === 4)
out.partitions_after_create = (await admin.metadata({ topics: [topic], forceUpdate: true })).topics.get(topic)
  .partitionsCount
const deleted = await admin.deleteRecords({ topics: [{ name: topic, partitions: [{ partition: 0, offset: 10n }] }] })
out.low_watermark = deleted.map(t => t.partitions.map(p => [p.partition, Number(p.lowWatermark)]))
const listed = await admin.listOffsets({ topics: [{ name: topic, partitions: [0, 1, 3].map(partitionIndex =>
  ({ partitionIndex, timestamp: -1n })) }] })
out.end_offsets = listed[0].partitions.map(p => [p.partitionIndex, Number(p.offset)]).sort((a, b) => a[0] - b[0])
await admin.alterConsumerGroupOffsets({ groupId: `${prefix}-848`, topics: [{ name: topic,
  partitionOffsets: [{ partition: 1, offset: 42n }] }] })
await admin.deleteConsumerGroupOffsets({ groupId: `${prefix}-848`, topics: [{ name: topic, partitionIndexes: [2] }] })
out.altered_offsets = await committed(admin, `${prefix}-848`, topic)
const logDirs = await admin.describeLogDirs({ topics: [{ name: topic, partitions: [0, 1, 2, 3] }] })
out.log_dir_replicas = logDirs.map(b => b.results.flatMap(r => r.topics.flatMap(t => t.partitions)).length)
  .reduce((a, b) => a + b, 0)
const firstLogDir = logDirs.find(b => b.broker === 1).results[0].logDir
await admin.alterClientQuotas({ entries: [{ entities: [{ entityType: 'client-id', entityName: `${prefix}-app` }],
                                            ops: [{ key: 'producer_byte_rate', value: 1048576, remove: false }] }] })
const quotas = await admin.describeClientQuotas({ components: [{ entityType: 'client-id', matchType: 0,
                                                                 match: `${prefix}-app` }] })
out.quotas = quotas.map(q => [q.entity.map(e => [e.entityType, e.entityName]), q.values.map(v => [v.key, v.value])])
await admin.close()

// DescribeTopicPartitions (KIP-966), which the client has as a raw API: two pages of three partitions.
const [host, port] = bootstrapBrokers[0].split(':')
const connection = new Connection('platformatic-describe')
await connection.connect(host, Number(port))
const describePage = cursor => new Promise((resolve, reject) => describeTopicPartitionsV0.api(
  connection, [{ name: topic }], 3, cursor, (error, response) => error ? reject(error) : resolve(response)))
const page1 = await describePage(undefined)
const page2 = await describePage(page1.nextCursor)
out.describe_pages = [page1, page2].map(page => [page.topics.map(t => [t.name, t.partitions.map(p => p.partitionIndex)]),
                                                 page.nextCursor ? [page.nextCursor.topicName, page.nextCursor.partitionIndex] : null])
// DescribeQuorum v2 (KIP-595/836/853), also a raw API: the metadata log's quorum, asked of this node.
const quorum = await new Promise((resolve, reject) => describeQuorumV2.api(
  connection, [{ topicName: '__cluster_metadata', partitions: [{ partitionIndex: 0 }] }],
  (error, response) => error ? reject(error) : resolve(response)))
const [metadataLog] = quorum.topics[0].partitions
out.quorum = { errorCode: quorum.errorCode, topic: quorum.topics[0].topicName, partitionError: metadataLog.errorCode,
               leader: metadataLog.leaderId, epoch: metadataLog.leaderEpoch, highWatermark: metadataLog.highWatermark,
               voters: metadataLog.currentVoters.map(v => [v.replicaId, v.logEndOffset, v.lastFetchTimestamp,
                                                           v.lastCaughtUpTimestamp]),
               observers: metadataLog.observers.map(o => o.replicaId),
               nodes: quorum.nodes.map(n => [n.nodeId, n.listeners.map(l => [l.name, l.host, l.port])]) }
// AlterReplicaLogDirs v2, a raw API that throws on any partition's error (with the response): a replica asked
// into the directory it is in, and another into a path that is no log directory of the node.
const altered = await new Promise(resolve => alterReplicaLogDirsV2.api(connection, [
  { path: firstLogDir, topics: [{ name: topic, partitions: [0] }] },
  { path: '/nowhere', topics: [{ name: topic, partitions: [1] }] }], (error, response) => resolve(error ? error.response : response)))
out.alter_log_dirs = altered.results.flatMap(r => r.partitions.map(p => [r.topicName === topic, p.partitionIndex, p.errorCode]))
await connection.close()
console.log(JSON.stringify(json(out)))
