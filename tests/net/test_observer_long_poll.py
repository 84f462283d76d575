"""A broker-only node (a KRaft observer) long-polls the quorum leader for the metadata log, as Kafka's observers
fetch from the leader: the leader holds a fetch that finds nothing new (up to 500 ms) and answers it as soon as an
entry is committed. Before, the observer asked again every 100 ms while nothing changed, ten empty answers a
second per observer, and learnt of a new entry up to 100 ms late. Two real nodes in this process, on 127.0.0.1:
node 1 a controller and broker, node 2 broker-only; node 2's registration and heartbeats reach node 1 through
the controller calls' RPCs (broker/controller_calls.py)."""

from __future__ import annotations

import trio

from broker.config import parse_config
from cli.local_cluster import free_ports
from metadata.requests import CreatableTopic, CreateTopicsRequest
from net.node import Node
from partitions.errors import ErrorCode


def two_nodes(tmp_path) -> tuple[Node, Node]:
    kafka_1, controller_1, kafka_2 = free_ports(3)
    config = parse_config({
        "cluster_id": "longpoll",
        "nodes": [{"id": 1, "host": "127.0.0.1", "kafka_port": kafka_1, "controller_port": controller_1,
                   "roles": ["broker", "controller"], "data_dir": "node-1"},
                  {"id": 2, "host": "127.0.0.1", "kafka_port": kafka_2, "roles": ["broker"], "data_dir": "node-2"}],
        "topic_defaults": {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
    }, "<test>", str(tmp_path))
    return Node(config, 1), Node(config, 2)


async def test_an_idle_observer_waits_at_the_leader_and_hears_of_a_new_topic_from_the_held_fetch(tmp_path):
    controller, observer = two_nodes(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(controller.run)
        await nursery.start(observer.run)
        with trio.fail_after(60):
            while not observer.broker.image.cluster.is_active(2):  # registered through an RPC to node 1
                await trio.sleep(0.05)
            answers = controller.state.metadata_fetch_answers
            while answers["held"] < 2:  # the observer caught up and waits at the leader
                await trio.sleep(0.05)
            before = dict(answers)
            await trio.sleep(1.5)
            assert answers["empty"] == before["empty"], (before, answers)  # no poll answered empty at once
            assert answers["held"] > before["held"] or answers["entries"] > before["entries"], (before, answers)

            # A new entry: the held fetch is answered with it (the observer's image has the topic).
            created = await controller.submit_to_controller(CreateTopicsRequest(topics=(CreatableTopic(
                name="news", num_partitions=1, replication_factor=1),)))
            assert created.topics[0].error_code == ErrorCode.NONE
            while "news" not in observer.broker.image.topics.by_name:
                await trio.sleep(0.01)
            assert answers["entries"] > before["entries"]
            assert observer.state.leader_hint == 1
        nursery.cancel_scope.cancel()
