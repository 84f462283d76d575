// @platformatic/kafka over SASL_SSL (TLS with the cluster's CA, SASL SCRAM-SHA-512 through SaslHandshake v1 and
// the flexible SaslAuthenticate v2):
//   node platformatic_secure.mjs BOOTSTRAP CA_FILE USER PASSWORD TOPIC
// Produces 50 records to TOPIC, reads them back in a group, lists the topics it may see, then tries a wrong
// password. Prints one JSON object.
import { readFileSync } from 'node:fs'
import { Admin, Consumer, Producer, stringDeserializers, stringSerializers } from '@platformatic/kafka'

const [bootstrap, caFile, username, password, topic] = process.argv.slice(2)
const connection = { bootstrapBrokers: bootstrap.split(','), tls: { ca: readFileSync(caFile) },
                     tlsServerName: 'localhost', sasl: { mechanism: 'SCRAM-SHA-512', username, password } }
const out = {}

const producer = new Producer({ clientId: 'secure-producer', ...connection, serializers: stringSerializers,
                                idempotent: true, acks: -1 })
await producer.send({ messages: Array.from({ length: 50 }, (_, i) => ({ topic, value: `s-${i}`, partition: 0 })) })
await producer.close()

const consumer = new Consumer({ groupId: `${topic}-group`, clientId: 'secure-consumer', ...connection,
                                deserializers: stringDeserializers })
const stream = await consumer.consume({ topics: [topic], mode: 'earliest', autocommit: false })
out.read = await new Promise((resolve, reject) => {
  const values = []
  const timer = setTimeout(() => reject(new Error(`read ${values.length} of 50`)), 60000)
  stream.on('error', reject)
  stream.on('data', message => { if (values.push(message.value) === 50) { clearTimeout(timer); resolve(values) } })
})
await stream.close()
await consumer.close()

const admin = new Admin({ clientId: 'secure-admin', ...connection })
out.topics = (await admin.listTopics()).filter(name => !name.startsWith('__')).sort()
await admin.close()

const wrong = new Admin({ clientId: 'secure-wrong', ...connection, retries: 0,
                          sasl: { mechanism: 'SCRAM-SHA-512', username, password: 'not-the-password' } })
try {
  await wrong.listTopics()
  out.wrong_password = 'accepted'
} catch (error) {
  const messages = []
  const walk = (e, depth) => {
    if (!e || depth > 6) return
    messages.push(e.message)
    for (const inner of e.errors ?? []) walk(inner, depth + 1)
    walk(e.cause, depth + 1)
  }
  walk(error, 0)
  out.wrong_password = messages.join(' / ')
}
await wrong.close().catch(() => {})
console.log(JSON.stringify(out))
