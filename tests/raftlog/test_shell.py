"""RaftShell over real loopback TCP: election, commit, authentication, failover, control RPC."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import trio

from partitions.storage import MemoryStorage
from raftlog.port import NotLeaderError, RaftConfig
from raftlog.shell import ControlRpcError, HandshakeError, RaftShell, call_rpc
from tests.raftlog.harness import StateMachine

SHELL_CONFIG = RaftConfig(election_timeout_min_ms=300, election_timeout_max_ms=600, heartbeat_interval_ms=50,
                          leader_fallback_timeout_ms=1000)
CLUSTER = "shell-test"


def _free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _make_shells(secrets: dict[int, bytes], rpc_handler: Any = None) -> dict[int, RaftShell]:
    ports = dict(zip((1, 2, 3), _free_ports(3)))
    shells = {}
    for i in (1, 2, 3):
        machine = StateMachine()
        peers = {p: ("127.0.0.1", ports[p]) for p in ports if p != i}
        shells[i] = RaftShell.create(i, peers, "127.0.0.1", ports[i], MemoryStorage(), f"raft-{i}", machine.snapshot,
                                     machine.restore, CLUSTER, secrets[i], SHELL_CONFIG, rpc_handler=rpc_handler)
    return shells


async def _run_in_scope(shell: RaftShell, scope: trio.CancelScope,
                        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    with scope:
        await shell.run(task_status=task_status)


async def _wait_leader(shells: dict[int, RaftShell], among: set[int], timeout_s: float = 10) -> int:
    with trio.fail_after(timeout_s):
        while True:
            leaders = [i for i in among if shells[i].status().is_leader]
            if len(leaders) == 1:
                return leaders[0]
            await trio.sleep(0.02)


async def _wait_committed(shell: RaftShell, data: bytes, timeout_s: float = 10) -> None:
    with trio.fail_after(timeout_s):
        async for _, entry in shell.committed_feed():
            if entry == data:
                return


async def test_three_shells_elect_commit_and_fail_over_when_the_leader_is_cancelled() -> None:
    shells = _make_shells({1: b"s3cret", 2: b"s3cret", 3: b"s3cret"})
    scopes = {i: trio.CancelScope() for i in shells}
    async with trio.open_nursery() as nursery:
        for i, shell in shells.items():
            await nursery.start(_run_in_scope, shell, scopes[i])
        leader = await _wait_leader(shells, set(shells))
        index = await shells[leader].propose(b"first", 5000)
        assert index >= 2
        for shell in shells.values():
            await _wait_committed(shell, b"first")
        follower = next(i for i in shells if i != leader)
        with pytest.raises(NotLeaderError) as raised:
            await shells[follower].propose(b"via-follower", 1000)
        assert raised.value.leader_hint == leader

        scopes[leader].cancel()  # kill the leader's shell: its streams close
        survivors = set(shells) - {leader}
        new_leader = await _wait_leader(shells, survivors)
        assert new_leader != leader
        assert shells[new_leader].status().term > shells[leader].status().term
        await shells[new_leader].propose(b"second", 5000)
        for i in survivors:
            await _wait_committed(shells[i], b"second")
        nursery.cancel_scope.cancel()


async def test_peer_with_wrong_secret_cannot_join() -> None:
    shells = _make_shells({1: b"right", 2: b"right", 3: b"wrong"})
    async with trio.open_nursery() as nursery:
        for shell in shells.values():
            await nursery.start(shell.run)
        leader = await _wait_leader(shells, {1, 2})
        await shells[leader].propose(b"members-only", 5000)
        await _wait_committed(shells[1 if leader == 2 else 2], b"members-only")
        await trio.sleep(0.5)
        outsider = shells[3].status()
        assert outsider.leader_id is None and outsider.last_applied == 1, outsider
        assert not outsider.is_leader
        assert shells[1].rejected_handshakes + shells[2].rejected_handshakes > 0
        nursery.cancel_scope.cancel()


async def test_control_rpc_is_answered_only_with_the_cluster_secret() -> None:
    seen: list[dict[str, Any]] = []

    async def handler(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request)
        return {"ok": True, "echo": request["x"]}

    shells = _make_shells({1: b"k", 2: b"k", 3: b"k"}, rpc_handler=handler)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(shells[1].run)
        response = await call_rpc("127.0.0.1", port, CLUSTER, b"k", {"x": 7}, 2000)
        assert response == {"ok": True, "echo": 7}
        with pytest.raises((HandshakeError, ControlRpcError)):
            await call_rpc("127.0.0.1", port, CLUSTER, b"not-k", {"x": 8}, 2000)
        with pytest.raises((HandshakeError, ControlRpcError)):
            await call_rpc("127.0.0.1", port, "other-cluster", b"k", {"x": 9}, 2000)
        assert [r["x"] for r in seen] == [7]
        nursery.cancel_scope.cancel()


async def test_unauthenticated_garbage_and_oversized_frames_are_closed_without_harm() -> None:
    shells = _make_shells({1: b"k", 2: b"k", 3: b"k"})
    async with trio.open_nursery() as nursery:
        port = await nursery.start(shells[1].run)
        for payload in (b"\xff\xff\xff\xff" + b"x" * 100, b"\x00\x00\x00\x05hello", b"GET / HTTP/1.1\r\n\r\n"):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(payload)
                with trio.fail_after(6):
                    while await stream.receive_some(1024):
                        pass  # the server closes the connection
        assert shells[1].rejected_handshakes == 3
        response_port = shells[1].listen_port
        assert response_port == port
        nursery.cancel_scope.cancel()


async def test_the_frames_of_a_driver_step_leave_before_the_owners_step_runs() -> None:
    """A node's step can take seconds (a metadata delta that creates a thousand replicas). The leader's new
    commit index and a follower's acknowledgement, queued by the driver step before it, must be on their way
    by then, so that the other members apply the same entry meanwhile instead of after this one."""
    import random

    from raftlog.driver import RaftDriver
    from raftlog.shell import monotonic_ms

    ports = dict(zip((1, 2, 3), _free_ports(3)))
    shells: dict[int, RaftShell] = {}
    unsent_at_step: dict[int, int] = {}  # frames queued but not yet written when a member's step saw the entry

    def on_step(i: int) -> None:
        driver = shells[i].driver
        driver.take_completions()
        driver.take_late_completions()
        for _, data in driver.take_committed():
            if data == b"probe":
                unsent_at_step[i] = shells[i].frames_queued - shells[i].frames_sent

    for i in (1, 2, 3):
        machine = StateMachine()
        peers = {p: ("127.0.0.1", ports[p]) for p in ports if p != i}
        driver = RaftDriver(i, sorted(peers), MemoryStorage(), f"raft-{i}", monotonic_ms, random.Random(i),
                            machine.snapshot, machine.restore, SHELL_CONFIG)
        shells[i] = RaftShell(driver, i, "127.0.0.1", ports[i], peers, CLUSTER, b"s3cret",
                              on_step=lambda i=i: on_step(i))
    async with trio.open_nursery() as nursery:
        for shell in shells.values():
            await nursery.start(shell.run)
        leader = await _wait_leader(shells, set(shells))
        shells[leader].driver.propose(b"probe", monotonic_ms() + 5_000)
        shells[leader].wake()
        with trio.fail_after(10):
            while len(unsent_at_step) < 3:
                await trio.sleep(0.01)
        assert unsent_at_step == {1: 0, 2: 0, 3: 0}
        nursery.cancel_scope.cancel()


def test_frames_dropped_with_a_stream_are_not_waited_for() -> None:
    """Frames drained with a broken stream never leave: they stop counting as queued, or every later deferred
    step would wait out its rounds for them."""
    shell = _make_shells({1: b"s", 2: b"s", 3: b"s"})[1]
    shell._peer_up[2] = True
    shell.driver._outbox.extend([(2, b"frame-a"), (2, b"frame-b")])
    shell._pump()
    assert shell.frames_queued == 2 and shell.frames_sent == 0
    shell._drain_queue(2)  # the stream to peer 2 broke
    assert shell.frames_queued == 0
