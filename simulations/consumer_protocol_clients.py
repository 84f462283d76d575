"""A consumer-group member of the KIP-848 consumer protocol for the simulation, over the real codec.

Theory of operation. `SimConsumerProtocolMember` does what librdkafka's `group.protocol=consumer` does,
reduced to the protocol; it shares fetching, committing and the workload's faults with the classic member
(simulations/group_clients.py) and replaces the JoinGroup/SyncGroup dance with ConsumerGroupHeartbeat:

    find coordinator -> heartbeat (epoch 0, subscription, no partitions) -> every heartbeat answer carries
    the member epoch and, when it changed, the assignment:
      partitions no longer assigned: commit their positions (OffsetCommit v9 with the member epoch), stop
        fetching them, then heartbeat at once reporting the smaller set (the coordinator moves the member to
        its next epoch only when it no longer reports them);
      partitions newly assigned: OffsetFetch their committed offsets, then fetch them.

Every heartbeat reports the partitions the member owns (by topic id, as the protocol names them), and every
answer is reconciled against the last assignment received (the coordinator sends it only when it changes).
After any error the next heartbeat is a full one (subscription, rebalance timeout, owned partitions), as
librdkafka's is, so that its answer carries the assignment even if the coordinator moved on meanwhile.
FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID make the member give up every partition and join again with epoch 0
under the same member id (client-generated, KIP-1082); a restarted process takes a new member id; a clean
leave is a heartbeat with epoch -1. A commit refused with STALE_MEMBER_EPOCH waits for the next heartbeat.
"""

from __future__ import annotations

import uuid
from typing import Any

from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from simulations.group_clients import (
    COORDINATOR_ERRORS,
    HEARTBEAT_INTERVAL_MS,
    REBALANCE_TIMEOUT_MS,
    RETRY_BACKOFF_MS,
    SimGroupConsumer,
)

CONSUMER_GROUP_HEARTBEAT_VERSION = 1
OFFSET_COMMIT_VERSION_KIP848 = 9
LEAVE_GROUP_MEMBER_EPOCH = -1
FENCING_ERRORS = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})


class SimConsumerProtocolMember(SimGroupConsumer):
    """One KIP-848 member (see the module docstring). `generation` mirrors the member epoch, so the commit
    path and the checkers of the classic member apply unchanged."""

    offset_commit_version = OFFSET_COMMIT_VERSION_KIP848
    rebalance_request_timeout_ms = None

    def _reset(self) -> None:
        super()._reset()
        self.incarnation = getattr(self, "incarnation", -1) + 1
        self.member_id = f"{self.name}-{self.incarnation}"  # client-generated, new for each process
        self.generation = 0
        self.topic_id: uuid.UUID | None = None
        self.target: set[int] = set()  # the partitions of the last assignment received
        self.send_full_heartbeat = True  # after an error, as librdkafka does: every field, so the answer is full

    # --- lifecycle -----------------------------------------------------------------------------------------

    def leave(self) -> None:
        if not self.running or self.coordinator is None:
            return
        self.host.trace("group.leave", self.name)
        request = messages.ConsumerGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id,
                                                         member_epoch=LEAVE_GROUP_MEMBER_EPOCH)
        self.send(self.coordinator, ApiKey.CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_HEARTBEAT_VERSION, request,
                  lambda response: None)
        self.running = False
        self._reset()

    # --- the protocol --------------------------------------------------------------------------------------

    def _join(self) -> None:
        self.generation = 0
        self._send_heartbeat(joining=True)

    def _heartbeat(self) -> None:
        self._send_heartbeat(joining=False)

    def _send_heartbeat(self, joining: bool) -> None:
        request_class = messages.ConsumerGroupHeartbeatRequest
        owned = [] if joining or self.topic_id is None else [
            request_class.TopicPartitions(topic_id=self.topic_id, partitions=sorted(self.assignment))]
        full = joining or self.send_full_heartbeat
        request = request_class(
            group_id=self.group, member_id=self.member_id, member_epoch=0 if joining else self.generation,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS if full else -1,
            subscribed_topic_names=[self.topic] if full else None, topic_partitions=owned)
        self._request(self.coordinator, ApiKey.CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_HEARTBEAT_VERSION, request,
                      self._on_member_heartbeat)

    def _on_member_heartbeat(self, response: Any) -> None:
        self.inflight = False
        now = self.loop.now_ms
        self.heartbeat_due_ms = now + HEARTBEAT_INTERVAL_MS
        if response is None or response.error_code != ErrorCode.NONE:
            # The coordinator may have moved on without this answer reaching us (its write committed after
            # it answered an error): the next heartbeat is a full one, whose answer carries the assignment.
            self.send_full_heartbeat = True
        if response is None or response.error_code in COORDINATOR_ERRORS:
            self._lost_coordinator()
            return
        if response.error_code in FENCING_ERRORS:
            self._rejoin_after(response.error_code)
            return
        if response.error_code != ErrorCode.NONE:
            self._to(self.state if self.state == "stable" else "join", RETRY_BACKOFF_MS)
            return
        self.send_full_heartbeat = False
        self.generation = response.member_epoch
        if self.state != "stable":
            self.state = "stable"
            self.commit_due_ms = now + HEARTBEAT_INTERVAL_MS
        if response.assignment is not None:
            self.target = set()
            for topic in response.assignment.topic_partitions:
                self.topic_id = topic.topic_id
                self.target.update(topic.partitions)
        # Every answer reconciles against the last assignment received (sent only when it changes), so that a
        # step that failed (an OffsetFetch refused while the coordinator moved) is taken again.
        assigned = self.target
        revoked = sorted(set(self.assignment) - assigned)
        added = sorted(assigned - set(self.assignment))
        if revoked:
            self._revoke(revoked)
        elif added:
            self._take(added)

    def _revoke(self, revoked: list[int]) -> None:
        """Commit what was read of the revoked partitions, stop fetching them, and say so at once."""
        self.host.trace("group.revoke", self.name, self.generation, ",".join(map(str, revoked)))
        keep = [p for p in self.assignment if p not in revoked]

        def released() -> None:
            self.assignment = keep
            for partition in revoked:
                self.positions.pop(partition, None)
                self.committed.pop(partition, None)
            self.heartbeat_due_ms = self.loop.now_ms

        self._commit_then(revoked, released)

    def _commit_then(self, partitions: list[int], then) -> None:
        changed = {p: self.positions[p] for p in partitions
                   if p in self.positions and self.positions[p] != self.committed.get(p)}
        if not changed:
            then()
            return
        self._send_commit(changed, lambda codes: then())  # given up whether or not the commit was accepted

    def _take(self, added: list[int]) -> None:
        """Start reading newly assigned partitions at their committed offsets (a refused offset: taken on a
        later heartbeat answer)."""

        def taken(fetched: bool) -> None:
            if fetched:
                self.assignment = sorted(set(self.assignment) | set(added))
                self.host.trace("group.assigned", self.name, self.generation, ",".join(map(str, self.assignment)))
                self.checkers.assignments_seen += 1

        self._fetch_offsets(added, taken)

    def _on_heartbeat(self, response: Any) -> None:  # the classic Heartbeat is never sent
        raise AssertionError("a consumer-protocol member sends no classic Heartbeat")

    def _rejoin_after(self, code: int) -> None:
        """Fenced: give up every partition (without committing: the coordinator refuses this epoch) and join
        again with epoch 0 under the same member id."""
        self.host.trace("group.fenced", self.name, int(code))
        self.assignment = []
        self.target = set()
        self.positions.clear()
        self.committed.clear()
        self.generation = 0
        self._to("join", RETRY_BACKOFF_MS)

    def _on_found(self, response: Any) -> None:
        """A member that has an epoch keeps it across a coordinator change (its state is the group's, in the
        log); only a member without one joins."""
        self.inflight = False
        if response is None or response.error_code != ErrorCode.NONE:
            self._lost_coordinator()
            return
        self.coordinator = response.node_id
        if self.generation > 0:
            self._to("stable")
            self.heartbeat_due_ms = self.loop.now_ms
        else:
            self._to("join")


class SimMigratingMember(SimConsumerProtocolMember):
    """A member whose process speaks the classic protocol or the consumer protocol, switching at each restart
    (a rolling upgrade, and back): members 0 and 2 start classic, member 1 with the consumer protocol. While
    classic it is exactly `SimGroupConsumer` (eager, range, JoinGroup/SyncGroup/Heartbeat, OffsetCommit v7);
    while not, `SimConsumerProtocolMember`. With both kinds in the group, the coordinator turns the group into a
    consumer group and back (KIP-848's online migration)."""

    def __init__(self, host: Any, client_id: int, name: str, *args: Any) -> None:
        self.classic = not name.endswith("1")
        self.switches = 0
        super().__init__(host, client_id, name, *args)

    @property
    def offset_commit_version(self) -> int:  # type: ignore[override]
        return SimGroupConsumer.offset_commit_version if self.classic else OFFSET_COMMIT_VERSION_KIP848

    def _reset(self) -> None:
        super()._reset()
        if self.classic:
            self.member_id = ""  # the coordinator gives a classic member its id (KIP-394)
            self.generation = -1

    def restart(self) -> None:
        if self.running:
            return
        self.classic = not self.classic
        self.switches += 1
        self.host.trace("group.protocol", self.name, "classic" if self.classic else "consumer")
        super().restart()

    def leave(self) -> None:
        (SimGroupConsumer.leave if self.classic else SimConsumerProtocolMember.leave)(self)

    def _join(self) -> None:
        (SimGroupConsumer._join if self.classic else SimConsumerProtocolMember._join)(self)

    def _heartbeat(self) -> None:
        (SimGroupConsumer._heartbeat if self.classic else SimConsumerProtocolMember._heartbeat)(self)

    def _on_heartbeat(self, response: Any) -> None:
        (SimGroupConsumer._on_heartbeat if self.classic else SimConsumerProtocolMember._on_heartbeat)(self, response)

    def _rejoin_after(self, code: int) -> None:
        (SimGroupConsumer._rejoin_after if self.classic else SimConsumerProtocolMember._rejoin_after)(self, code)

    def _on_found(self, response: Any) -> None:
        (SimGroupConsumer._on_found if self.classic else SimConsumerProtocolMember._on_found)(self, response)
