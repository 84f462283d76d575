// kafkajs (a Kafka client written from scratch in JavaScript) against a Flotilla cluster, unchanged:
//   node kafkajs_check.js BOOTSTRAP PREFIX
// The test creates PREFIX-plain and PREFIX-txn (3 partitions each, RF 3); the admin part creates and deletes
// PREFIX-admin itself. Prints one JSON object: what an idempotent acks=all producer sent, what a consumer group
// read (and committed), what a transactional producer committed, aborted and sent as offsets, what a
// read_committed consumer read, and what the admin client saw.
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')

const [bootstrap, prefix] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'kafkajs-check', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING,
                          retry: { retries: 10 } })
const plain = `${prefix}-plain`, txnTopic = `${prefix}-txn`, RECORDS = 300

async function readAll (groupId, topic, expected, options = {}) {
  const consumer = kafka.consumer({ groupId, ...options })
  const seen = {}
  let count = 0
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${count} of ${expected} from ${topic}`)), 60000)
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        (seen[partition] = seen[partition] || []).push([Number(message.offset), message.value.toString()])
        if (++count === expected) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await done
  await consumer.disconnect() // commits what was read (autoCommit)
  return seen
}

async function adminChecks (topic) {
  // The admin API as kafkajs drives it: topics with configs, partitions added, gzip batches with headers,
  // offsets by timestamp, a group's offsets set and reset, records deleted, the topic deleted.
  const seen = {}
  const admin = kafka.admin()
  await admin.connect()
  seen.created = await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 2,
    replicationFactor: 3, configEntries: [{ name: 'retention.ms', value: '3600000' }] }] })
  await admin.alterConfigs({ resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '7200000' }] }] })
  // Asked again until the broker asked has applied the change the controller committed (or 10 s pass).
  for (let tries = 0; tries < 50; tries++) {
    const described = await admin.describeConfigs({ resources: [{ type: 2, name: topic, configNames: ['retention.ms'] }] })
    seen.retention_ms = described.resources[0].configEntries.find(e => e.configName === 'retention.ms').configValue
    if (seen.retention_ms === '7200000') break
    await new Promise(resolve => setTimeout(resolve, 200))
  }
  await admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] })
  // The controller answers once the change is committed; the broker asked next learns it from the metadata log
  // a moment later: asked again until it shows the new partition (or 10 s pass and the test sees 2).
  for (let tries = 0; tries < 50; tries++) {
    seen.partitions = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length
    if (seen.partitions === 3) break
    await new Promise(resolve => setTimeout(resolve, 200))
  }
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages: [0, 1, 2, 3, 4, 5].map(i =>
    ({ value: `g${i}`, partition: i % 3, headers: { index: `${i}` } })) })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `${topic}-group` })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  seen.headers = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('admin topic not read')), 60000)
    consumer.run({ eachMessage: async ({ message }) => {
      seen.headers.push([message.value.toString(), message.headers.index.toString()])
      if (seen.headers.length === 6) { clearTimeout(timer); resolve() }
    } }).catch(reject)
  })
  const group = (await admin.describeGroups([`${topic}-group`])).groups[0]
  seen.group = [group.state, group.members.length]
  await consumer.disconnect()
  seen.listed = (await admin.listGroups()).groups.some(g => g.groupId === `${topic}-group`)
  const offsets = async () => (await admin.fetchOffsets({ groupId: `${topic}-group`, topics: [topic] }))[0].partitions
    .map(p => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0])
  seen.offsets_read = await offsets()
  await admin.setOffsets({ groupId: `${topic}-group`, topic, partitions: [{ partition: 0, offset: '1' }] })
  seen.offsets_set = await offsets()
  await admin.resetOffsets({ groupId: `${topic}-group`, topic, earliest: true })
  seen.offsets_reset = await offsets()
  seen.by_timestamp = (await admin.fetchTopicOffsetsByTimestamp(topic, Date.now() + 3600000))
    .map(p => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0])
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '1' }] })
  seen.low_high = (await admin.fetchTopicOffsets(topic)).map(p => [p.partition, Number(p.low), Number(p.high)])
    .sort((a, b) => a[0] - b[0])
  await admin.deleteGroups([`${topic}-group`])
  await admin.deleteTopics({ topics: [topic] })
  // The broker asked may list the topic until it has applied the deletion the controller committed: ask again
  // (for up to 10 s).
  for (let tries = 0; tries < 50; tries++) {
    seen.still_listed = (await admin.listTopics()).includes(topic)
    if (!seen.still_listed) break
    await new Promise(resolve => setTimeout(resolve, 200))
  }
  await admin.disconnect()
  return seen
}

async function main () {
  const result = {}
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const messages = []
  for (let i = 0; i < RECORDS; i++) messages.push({ key: `key-${i % 7}`, value: `plain-${i}`, partition: i % 3 })
  for (let i = 0; i < RECORDS; i += 100) {
    await producer.send({ topic: plain, acks: -1, messages: messages.slice(i, i + 100) })
  }
  await producer.disconnect()
  result.group_read = await readAll(`${prefix}-group`, plain, RECORDS)
  const admin = kafka.admin()
  await admin.connect()
  result.group_offsets = (await admin.fetchOffsets({ groupId: `${prefix}-group`, topics: [plain] }))[0].partitions
    .map(p => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0])

  const transactional = kafka.producer({ transactionalId: `${prefix}-txn-id`, idempotent: true, maxInFlightRequests: 1 })
  await transactional.connect()
  result.committed = []
  for (let t = 0; t < 6; t++) {
    const txn = await transactional.transaction()
    const batch = []
    for (let i = 0; i < 6; i++) batch.push({ value: `t${t}-${i}`, partition: i % 3 })
    await txn.send({ topic: txnTopic, messages: batch })
    if (t === 5) {
      await txn.sendOffsets({ consumerGroupId: `${prefix}-eos`, topics: [{ topic: plain, partitions: [
        { partition: 0, offset: '42' }, { partition: 1, offset: '43' }, { partition: 2, offset: '44' }] }] })
    }
    if (t % 3 === 1) {
      await txn.abort()
    } else {
      await txn.commit()
      result.committed.push(...batch.map(m => [m.partition, m.value]))
    }
  }
  await transactional.disconnect()
  // Offsets committed in a transaction become the group's once the coordinator's COMMIT marker lands on
  // __consumer_offsets, a moment after EndTxn is answered (as in Kafka): until then they read as -1.
  for (let attempt = 0; ; attempt++) {
    result.eos_offsets = (await admin.fetchOffsets({ groupId: `${prefix}-eos`, topics: [plain] }))[0].partitions
      .map(p => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0])
    if (result.eos_offsets.every(([, offset]) => offset >= 0) || attempt === 100) break
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  await admin.disconnect()
  result.read_committed = await readAll(`${prefix}-reader`, txnTopic, result.committed.length)
  result.admin = await adminChecks(`${prefix}-admin`)
  console.log(JSON.stringify(result))
}

main().then(() => process.exit(0), error => { console.error(error.stack || String(error)); process.exit(1) })
