"""The simulated network: per-stream FIFO, resets on loss, partitions that stall then reset, pauses."""

from simulations.loop import US_PER_MS, US_PER_S, EventLoop, Trace
from simulations.network import Network, NetworkConfig


class Recorder:
    """An endpoint that writes down what it is told, and can echo."""

    def __init__(self, node_id, log):
        self.node_id = node_id
        self.log = log

    def on_connected(self, peer_id):
        self.log.append((self.node_id, "connected", peer_id))

    def on_disconnected(self, peer_id):
        self.log.append((self.node_id, "disconnected", peer_id))

    def on_message(self, peer_id, data):
        self.log.append((self.node_id, "message", peer_id, data))


def _cluster(node_count=2, seed=1, **config):
    loop = EventLoop(seed, Trace())
    network = Network(loop, NetworkConfig(**config))
    log = []
    for node_id in range(1, node_count + 1):
        network.add_node(node_id)
    for node_id in range(1, node_count + 1):
        network.node_up(node_id, Recorder(node_id, log))
    loop.run_until(US_PER_S)
    return loop, network, log


def _messages(log, node_id):
    return [entry[3] for entry in log if entry[0] == node_id and entry[1] == "message"]


def test_streams_open_between_live_nodes_and_both_ends_are_told():
    loop, network, log = _cluster(3)
    assert all(network.is_connected(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b)
    assert (1, "connected", 2) in log and (2, "connected", 1) in log


def test_messages_arrive_in_order_exactly_once_despite_jitter():
    loop, network, log = _cluster(latency_us_min=0, latency_us_jitter=50_000)
    for index in range(500):
        assert network.send(1, 2, index.to_bytes(2, "big"))
    loop.run_until(loop.now_us + US_PER_S)
    assert _messages(log, 2) == [index.to_bytes(2, "big") for index in range(500)]


def test_a_dropped_message_resets_the_stream_and_nothing_after_it_is_delivered_on_that_stream():
    loop, network, log = _cluster(drop_probability=0.05, latency_us_min=1000, latency_us_jitter=0)
    for index in range(200):
        network.send(1, 2, index.to_bytes(2, "big"))
    loop.run_until(loop.now_us + 10 * US_PER_MS)
    received = [int.from_bytes(m, "big") for m in _messages(log, 2)]
    # A reset cuts the stream: the receiver sees a gap-free prefix of what was sent, then a disconnect.
    assert received == list(range(len(received))) and len(received) < 200
    assert (2, "disconnected", 1) in log and (1, "disconnected", 2) in log


def test_stream_reconnects_after_a_reset_with_a_fresh_stream():
    loop, network, log = _cluster()
    network.reset(1, 2)
    assert not network.is_connected(1, 2)
    assert not network.send(1, 2, b"lost")
    loop.run_until(loop.now_us + US_PER_S)
    assert network.is_connected(1, 2)
    assert log.count((2, "connected", 1)) == 2 and log.count((2, "disconnected", 1)) == 1
    assert network.send(1, 2, b"after")
    loop.run_until(loop.now_us + US_PER_S)
    assert _messages(log, 2) == [b"after"]


def test_one_way_partition_stalls_one_direction_while_the_other_flows():
    loop, network, log = _cluster(stall_reset_us=5 * US_PER_S)
    network.block(1, 2)
    network.send(1, 2, b"held")
    network.send(2, 1, b"flows")
    loop.run_until(loop.now_us + US_PER_S)
    assert _messages(log, 1) == [b"flows"] and _messages(log, 2) == []
    network.heal()
    loop.run_until(loop.now_us + US_PER_S)
    assert _messages(log, 2) == [b"held"]  # TCP retransmitted it once the path came back
    assert network.is_connected(1, 2)


def test_partition_longer_than_the_stall_timeout_resets_and_blocks_reconnect_until_heal():
    loop, network, log = _cluster(3, stall_reset_us=2 * US_PER_S)
    network.isolate(3)
    network.send(1, 3, b"stuck")
    network.send(1, 2, b"fine")
    loop.run_until(loop.now_us + 5 * US_PER_S)
    assert not network.is_connected(1, 3) and network.is_connected(1, 2)
    assert _messages(log, 3) == [] and _messages(log, 2) == [b"fine"]
    network.heal()
    loop.run_until(loop.now_us + US_PER_S)
    assert network.is_connected(1, 3)
    assert _messages(log, 3) == []  # the stalled message died with its stream


def test_crashed_node_is_absent_and_peers_see_disconnect():
    loop, network, log = _cluster(3)
    network.node_down(3)
    loop.run_until(loop.now_us + US_PER_MS)
    assert (1, "disconnected", 3) in log and (2, "disconnected", 3) in log
    assert not network.send(1, 3, b"x")
    network.node_up(3, Recorder(3, log))
    loop.run_until(loop.now_us + US_PER_S)
    assert network.is_connected(1, 3)


def test_paused_node_receives_nothing_until_resumed_and_keeps_its_streams():
    loop, network, log = _cluster()
    network.pause(2)
    network.send(1, 2, b"wait")
    loop.run_until(loop.now_us + 10 * US_PER_S)
    assert _messages(log, 2) == [] and network.is_connected(1, 2)
    network.resume(2)
    loop.run_until(loop.now_us + US_PER_S)
    assert _messages(log, 2) == [b"wait"]


def test_same_seed_same_trace_and_different_seed_different_trace():
    def trace_hash(seed):
        loop, network, _ = _cluster(3, seed=seed, drop_probability=0.01)
        for index in range(300):
            network.send(1 + index % 3, 1 + (index + 1) % 3, bytes([index % 256]))
            loop.run_until(loop.now_us + 100)
        loop.run_until(loop.now_us + US_PER_S)
        return loop.trace.sha256()

    assert trace_hash(5) == trace_hash(5)
    assert trace_hash(5) != trace_hash(6)


def test_last_disturbed_notes_a_node_s_own_faults_and_network_changes_for_everyone_but_not_traffic():
    loop, network, _ = _cluster(3)
    up_us = dict(network.last_disturbed_us)
    assert sorted(up_us) == [1, 2, 3]  # each went up
    network.send(1, 2, b"x")
    loop.run_until(loop.now_us + 10 * US_PER_MS)
    assert network.last_disturbed_us == up_us  # traffic and connections are no fault
    network.pause(3)
    paused_us = loop.now_us
    assert network.last_disturbed_us == {**up_us, 3: paused_us}  # a pause touches the paused node alone
    loop.run_until(loop.now_us + 100 * US_PER_MS)
    network.block(1, 2)
    assert set(network.last_disturbed_us.values()) == {loop.now_us}  # a link fault touches every node
    loop.run_until(loop.now_us + 100 * US_PER_MS)
    network.heal()  # so does its end
    assert set(network.last_disturbed_us.values()) == {loop.now_us}


def test_links_are_impaired_while_a_partition_slow_link_or_drop_rate_lasts():
    loop, network, _ = _cluster(3)
    assert not network.links_impaired
    network.partition([1])
    loop.run_until(loop.now_us + 10 * US_PER_S)
    assert network.links_impaired  # long after the block was traced: a partition disturbs until it heals
    network.heal()
    assert not network.links_impaired
    network.slow(1, 2, 1000)
    assert network.links_impaired
    network.heal()
    network.set_drop_probability(0.01)
    assert network.links_impaired
    network.set_drop_probability(0.0)
    assert not network.links_impaired
