"""The outbox: requests a broker sends to other brokers (WriteTxnMarkers will be the first user), queued
sans-IO in BrokerCore and delivered by both runtimes: the simulator over its network, net/node.py over a
Kafka connection. Each runtime answers every request exactly once, with the response or a typed error."""

from __future__ import annotations

import trio

from broker.core import OUTBOX_REQUESTS_MAX
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError
from partitions.records import decode_batches
from simulations import cluster_sim
from simulations.run import RunConfig
from tests.broker.test_broker_sans_io import Cluster
from tests.net.cluster_helpers import create_led_topic, in_process_node


def api_versions_request():
    return messages.ApiVersionsRequest(client_software_name="flotilla", client_software_version="0")


def test_requests_queue_in_order_and_a_full_outbox_answers_at_once():
    cluster = Cluster()
    broker = cluster.brokers[1]
    answers = []
    for index in range(3):
        broker.send_to_broker(2, ApiKey.API_VERSIONS, 3, api_versions_request(), lambda a, now: answers.append(a), 0)
    taken = broker.take_broker_requests()
    assert [r.destination for r in taken] == [2, 2, 2] and len({r.request_id for r in taken}) == 3
    assert broker.take_broker_requests() == [] and answers == []
    assert broker.broker_endpoint(2) == ("127.0.0.1", 9002) and broker.broker_endpoint(9) is None
    for _ in range(OUTBOX_REQUESTS_MAX):
        broker.send_to_broker(3, ApiKey.API_VERSIONS, 3, api_versions_request(), lambda a, now: answers.append(a), 0)
    broker.send_to_broker(3, ApiKey.API_VERSIONS, 3, api_versions_request(), lambda a, now: answers.append(a), 0)
    assert len(answers) == 1 and answers[0].code == ErrorCode.REQUEST_TIMED_OUT


class _OutboxSimulation(cluster_sim.ClusterSimulation):
    """The cluster workload, where node 1 sends ApiVersions to node 2 and to an unknown broker 9 at 5 s."""

    answers: list

    def _start_clients(self) -> None:
        super()._start_clients()
        self.answers = []
        self.loop.call_later(5_000_000, self._send)

    def _send(self) -> None:
        process = self.processes[1]
        for destination in (2, 9):
            process.broker.send_to_broker(destination, ApiKey.API_VERSIONS, 3, api_versions_request(),
                                          lambda answer, now, d=destination: self.answers.append((d, answer)),
                                          self.loop.now_ms)
        process._schedule_process_soon()


def test_the_simulator_delivers_outbox_requests_over_its_network():
    config = RunConfig(seed=3, duration_s=8.0, faults="none", workload="cluster")
    simulation = _OutboxSimulation(config, cluster_sim.Trace(None), cluster_sim.ClusterShape(50, True, 0.0))
    simulation.run()
    answers = dict(simulation.answers)
    assert answers[2].error_code == ErrorCode.NONE and {k.api_key for k in answers[2].api_keys} >= {ApiKey.PRODUCE}
    assert isinstance(answers[9], KafkaError) and answers[9].code == ErrorCode.NETWORK_EXCEPTION


async def test_a_real_node_delivers_outbox_requests_over_a_kafka_connection(tmp_path):
    node = in_process_node(tmp_path, "outbox")
    answers: list = []
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(30):
            while node.broker.broker_endpoint(1) is None:  # registered in its own metadata
                await trio.sleep(0.05)
            for destination in (1, 7):
                node.broker.send_to_broker(destination, ApiKey.API_VERSIONS, 3, api_versions_request(),
                                           lambda answer, now, d=destination: answers.append((d, answer)),
                                           node.state.broker_clock_ms())
            node._process()
            while len(answers) < 2:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    answered = dict(answers)
    assert not isinstance(answered[1], KafkaError), answered[1]
    assert answered[1].error_code == ErrorCode.NONE and len(answered[1].api_keys) > 10
    assert isinstance(answered[7], KafkaError) and answered[7].code == ErrorCode.NETWORK_EXCEPTION


async def test_a_real_nodes_outbox_pipelines_requests_to_one_destination(tmp_path):
    """Outbox requests to one destination are all in flight at once, as the simulator's runtime sends them:
    ten long-poll fetches wait at the destination together, and one produce answers all of them. A node that
    sent them one at a time (each after the previous answer) never has more than one waiting there."""
    from broker.handlers_data import DataPlaneApis
    from tests.broker.test_broker_sans_io import fetch_request, produce_request

    node = in_process_node(tmp_path, "outbox")
    fetched: list = []
    produced: list = []
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(30):
            await create_led_topic(node, "held")
            data_plane = next(g for g in node.state.apis._groups if isinstance(g, DataPlaneApis))
            for _ in range(10):
                node.broker.send_to_broker(1, ApiKey.FETCH, 11, fetch_request("held", 0, 0, max_wait_ms=20_000),
                                           lambda answer, now: fetched.append(answer), node.state.broker_clock_ms())
            node._process()
            while len(data_plane._fetches) < 10:  # all ten parked at the destination together
                await trio.sleep(0.05)
            node.broker.send_to_broker(1, ApiKey.PRODUCE, 9, produce_request("held", 0, [b"news"], acks=1),
                                       lambda answer, now: produced.append(answer), node.state.broker_clock_ms())
            node._process()
            while len(fetched) < 10 or not produced:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert not isinstance(produced[0], KafkaError), produced[0]
    for answer in fetched:
        assert not isinstance(answer, KafkaError), answer
        partition = answer.responses[0].partitions[0]
        assert partition.error_code == ErrorCode.NONE and partition.high_watermark == 1 and partition.records


async def test_a_real_nodes_outbox_sends_requests_to_one_destination_in_the_order_queued(tmp_path):
    """trio starts the tasks of one batch in either order (it reverses half of its batches on purpose): the
    outbox's requests to one destination still leave in the order the broker queued them, so ten produce
    requests queued together land in the log in that order, round after round. (A partition leader's KIP-890
    verifications answered out of order appended a producer's batches out of order.)"""
    from tests.broker.test_broker_sans_io import produce_request

    node = in_process_node(tmp_path, "outbox")
    produced: list = []
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(60):
            await create_led_topic(node, "ordered")
            for round_ in range(8):
                for index in range(10):
                    node.broker.send_to_broker(1, ApiKey.PRODUCE, 9,
                                               produce_request("ordered", 0, [f"{round_}-{index}".encode()], acks=1),
                                               lambda answer, now: produced.append(answer),
                                               node.state.broker_clock_ms())
                node._process()
                while len(produced) < 10 * (round_ + 1):
                    await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert all(not isinstance(answer, KafkaError) for answer in produced), produced
    data = node.broker.hosted("ordered", 0).log.read(0, 1 << 20).records
    values = [record.value.decode() for batch in decode_batches(bytes(data)) for record in batch.records]
    assert values == [f"{round_}-{index}" for round_ in range(8) for index in range(10)]


async def test_send_turns_follow_the_tickets_and_skip_those_given_up():
    from net.node import SendTurns

    turns, sent = SendTurns(), []
    tickets = [turns.ticket() for _ in range(4)]

    async def send(ticket):
        await turns.wait(ticket)
        sent.append(ticket)
        turns.release(ticket)

    async with trio.open_nursery() as nursery:
        for ticket in reversed(tickets[2:]):  # started last first
            nursery.start_soon(send, ticket)
        await trio.sleep(0.01)
        assert sent == []  # 0 and 1 have not gone
        turns.release(tickets[1])  # given up before its turn (a deadline, no connection): skipped
        assert sent == []
        with trio.move_on_after(0.01):  # 0 waits for its turn... and it is its turn: it goes at once
            await send(tickets[0])
    assert sent == [0, 2, 3]
    turns.release(0)  # releasing again, or an old ticket, changes nothing
    with trio.fail_after(1):
        await turns.wait(turns.ticket())  # the next ticket's turn has come: no wait
