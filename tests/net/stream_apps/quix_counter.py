"""A Quix Streams application, run by tests/net/test_stream_frameworks.py in an environment of its own:
an exactly-once, stateful count per key (RocksDB state with its changelog topic) from one topic into another.
argv: bootstrap servers, input topic, output topic, consumer group, state directory."""

import sys

from quixstreams import Application

bootstrap, source, sink, group, state_dir = sys.argv[1:6]
app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                  processing_guarantee="exactly-once", state_dir=state_dir, loglevel="WARNING", commit_interval=0.5)
words = app.topic(source, key_deserializer="str", value_deserializer="json")
counts = app.topic(sink, key_serializer="str", value_serializer="json")


def count(value, state):
    seen = state.get("count", 0) + 1
    state.set("count", seen)
    return {"word": value["word"], "count": seen, "i": value["i"]}


app.dataframe(words).apply(count, stateful=True).to_topic(counts)
app.run()
