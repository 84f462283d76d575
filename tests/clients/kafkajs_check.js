// kafkajs (a Kafka client written from scratch in JavaScript) against a Flotilla cluster, unchanged:
//   node kafkajs_check.js BOOTSTRAP PREFIX
// Creates nothing (the test creates PREFIX-plain and PREFIX-txn with 3 partitions each, RF 3). Prints one JSON
// object: what an idempotent acks=all producer sent, what a consumer group read (and committed), what a
// transactional producer committed, aborted and sent as offsets, and what a read_committed consumer read.
const { Kafka, logLevel } = require('kafkajs')

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
  result.eos_offsets = (await admin.fetchOffsets({ groupId: `${prefix}-eos`, topics: [plain] }))[0].partitions
    .map(p => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0])
  await admin.disconnect()
  result.read_committed = await readAll(`${prefix}-reader`, txnTopic, result.committed.length)
  console.log(JSON.stringify(result))
}

main().then(() => process.exit(0), error => { console.error(error.stack || String(error)); process.exit(1) })
