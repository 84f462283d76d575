"""A Faust (faust-streaming) application, run by tests/net/test_stream_frameworks.py in an environment of its
own: an exactly-once count per key in a Faust table (its changelog topic) from one topic into another.
Environment: BOOTSTRAP (host:port,...), SOURCE, SINK, GROUP (the application id)."""

import os

import faust

app = faust.App(os.environ["GROUP"], broker=[f"kafka://{b}" for b in os.environ["BOOTSTRAP"].split(",")],
                store="memory://", topic_partitions=3, topic_replication_factor=3,
                processing_guarantee="exactly_once", web_enabled=False)
words = app.topic(os.environ["SOURCE"], key_type=str, value_type=str)
counts_out = app.topic(os.environ["SINK"], key_type=str, value_type=str)
counts = app.Table("counts", default=int)


@app.agent(words)
async def count(stream):
    async for word, line in stream.items():
        counts[word] += 1
        await counts_out.send(key=word, value=f"{line}:{counts[word]}")


if __name__ == "__main__":
    app.main()
