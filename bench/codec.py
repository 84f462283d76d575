"""The wire codec's cost per message: the generated per-version functions (net/protocol/codegen.py) against the
field walk they are generated from (`schema.reference_codec`), measured in the same run.

Figures: microseconds to decode and to encode the body of a Produce request (v7 and the flexible v9), a
Produce response v9, a Fetch request v11 with 3 partitions and a Fetch response v11 with 3 partitions of
records; best of --rounds rounds of --count each, and the ratio field walk / generated.

    python bench/codec.py [--count 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from net.protocol import messages  # noqa: E402
from net.protocol.schema import compiled_codec, reference_codec  # noqa: E402
from net.protocol.types import Reader  # noqa: E402

RECORDS = b"\0" * 170  # the records field is a slice either way; its size does not matter here


def cases() -> list[tuple[str, object, int]]:
    produce, produced = messages.ProduceRequest, messages.ProduceResponse
    fetch, fetched = messages.FetchRequest, messages.FetchResponse
    request = produce(acks=1, timeout_ms=30_000, topic_data=[produce.TopicProduceData(
        name="small", partition_data=[produce.PartitionProduceData(index=0, records=RECORDS)])])
    response = produced(throttle_time_ms=0, responses=[produced.TopicProduceResponse(
        name="small", partition_responses=[produced.PartitionProduceResponse(
            index=0, base_offset=5, log_append_time_ms=-1, log_start_offset=0)])])
    fetch_request = fetch(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, session_id=0,
                          session_epoch=-1, topics=[fetch.FetchTopic(topic="t", partitions=[
                              fetch.FetchPartition(partition=p, fetch_offset=100, partition_max_bytes=1 << 20)
                              for p in range(3)])])
    fetch_response = fetched(throttle_time_ms=0, session_id=1, responses=[fetched.FetchableTopicResponse(
        topic="t", partitions=[fetched.PartitionData(partition_index=p, high_watermark=100, last_stable_offset=100,
                                                     log_start_offset=0, records=RECORDS) for p in range(3)])])
    return [("produce request v7", request, 7), ("produce request v9", request, 9),
            ("produce response v9", response, 9), ("fetch request v11", fetch_request, 11),
            ("fetch response v11", fetch_response, 11)]


def best_of(rounds: int, count: int, action) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            action()
        best = min(best, (time.perf_counter() - started) / count * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for name, message, version in cases():
        body = message.encode(version)
        figures = {}
        for label, codec in (("field walk", reference_codec(type(message), version)),
                             ("generated", compiled_codec(type(message), version))):
            assert codec.decode(Reader(body)) == message
            decode = best_of(args.rounds, args.count, lambda: codec.decode(Reader(body)))
            encode = best_of(args.rounds, args.count, lambda: codec.encode(message, []))
            figures[label] = (decode, encode)
        (walk_decode, walk_encode), (gen_decode, gen_encode) = figures["field walk"], figures["generated"]
        print(f"RESULT {name}: decode {gen_decode:.2f} us (field walk {walk_decode:.2f}, {walk_decode / gen_decode:.1f}x), "
              f"encode {gen_encode:.2f} us (field walk {walk_encode:.2f}, {walk_encode / gen_encode:.1f}x)")


if __name__ == "__main__":
    main()
