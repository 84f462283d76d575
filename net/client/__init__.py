"""Flotilla's own Kafka client: a sans-IO connection (`connection`), a trio client (`aio.KafkaClient`) and a
blocking facade over it (`sync.SyncKafkaClient`)."""
