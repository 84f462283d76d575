// kafkajs over SASL_SSL with OAUTHBEARER (its oauthBearerProvider) against a Flotilla node, unchanged:
//   node kafkajs_oauthbearer.js BOOTSTRAP CA_FILE TOPIC TOKEN
// Prints one JSON object: what a producer authenticated with TOKEN sent. (A refused token is not tried here:
// kafkajs takes the server's RFC 7628 error for a success and fails at its next request, against Kafka too.)
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, caFile, topic, token] = process.argv.slice(2)

function client (token) {
  return new Kafka({
    clientId: 'kafkajs-oauthbearer', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING,
    ssl: { ca: [fs.readFileSync(caFile, 'utf-8')], servername: 'localhost' },
    sasl: { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: token }) },
    retry: { retries: 2 }
  })
}

async function main () {
  const result = {}
  const producer = client(token).producer()
  await producer.connect()
  result.produced = await producer.send({ topic, acks: -1, messages: [{ value: 'from-kafkajs' }] })
  await producer.disconnect()
  process.stdout.write(JSON.stringify(result))
}

main().catch(error => { process.stderr.write(String(error.stack)); process.exit(1) })
