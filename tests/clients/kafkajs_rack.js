// kafkajs reading a topic with a rack (KIP-392 fetch from the closest replica), unchanged:
//   node kafkajs_rack.js BOOTSTRAP TOPIC RACK EXPECTED
// A consumer group member with `rackId` reads EXPECTED records of TOPIC from the beginning and prints them as a
// JSON list of [partition, offset, value].
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, rackId, expected] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'kafkajs-rack', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING,
                          retry: { retries: 10 } })

async function main () {
  const consumer = kafka.consumer({ groupId: `kafkajs-rack-${rackId}`, rackId })
  const read = []
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${read.length} of ${expected}`)), 60000)
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        read.push([partition, Number(message.offset), message.value.toString()])
        if (read.length === Number(expected)) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify(read))
}

main().catch(error => { process.stderr.write(`${error.stack || error}\n`); process.exit(1) })
