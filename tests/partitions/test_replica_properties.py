"""Random runs of three replicas (produce with every acks, follower fetches of every size, time passing, ISR
shrinks and expansions committed late, clean leader failovers) checked after every step:

- a consumer fetch from the leader never returns an offset at or above the high watermark;
- whatever was ever below a leader's high watermark (visible to consumers, or acknowledged under acks=all)
  stays in every later leader's log at the same offset with the same value;
- every ISR member holds the leader's log below the high watermark;
- once fetching resumes without faults, every replica's log converges to the leader's.

The same checker, run on fixed sequences with the planted bugs switched on, reports a violation: that is
what makes it worth running.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.batch import iter_batches
from partitions.errors import ErrorCode, NotEnoughReplicasError
from tests.partitions.test_replica_helpers import Cluster, batch, offsets_and_values

LAG_MS = 10_000
PRODUCE_TIMEOUT_MS = 30_000
BROKERS = (1, 2, 3)


class ReplicationViolation(AssertionError):
    """A checked replication guarantee did not hold."""


class Run:
    """One cluster driven by operations, with the checker's memory of what was committed."""

    def __init__(self, bug_hw_from_leader_leo: bool = False) -> None:
        self.cluster = Cluster(BROKERS, min_insync_replicas=2, replica_lag_time_max_ms=LAG_MS)
        for partition in self.cluster.partitions.values():
            partition.bug_hw_from_leader_leo = bug_hw_from_leader_leo
        self.now_ms = 0
        self.cluster.elect(1, now_ms=0)
        self.committed: dict[int, bytes] = {}
        self.acknowledged: dict[int, bytes] = {}
        self.sent = 0
        self.waiting: dict[str, tuple[int, bytes]] = {}  # request id -> (offset, value)

    @property
    def leader(self):
        return self.cluster[self.cluster.leader_id]

    def apply(self, operation: tuple) -> None:
        kind = operation[0]
        if kind == "produce":
            self.produce(operation[1])
        elif kind == "fetch" and operation[1] != self.cluster.leader_id:
            self.cluster.fetch(operation[1], self.now_ms, operation[2])
        elif kind == "tick":
            self.now_ms += operation[1]
            self.leader.maybe_shrink_isr(self.now_ms)
        elif kind == "commit_isr" and self.leader.pending_isr_change is not None:
            self.cluster.commit_isr(self.leader.pending_isr_change.proposed_isr, self.now_ms)
        elif kind == "failover":
            self.failover(operation[1])
        self.collect_completions()
        self.check()

    def produce(self, required_acks: int) -> None:
        self.sent += 1
        value = b"v%d" % self.sent
        try:
            result = self.leader.append_records(batch(value), required_acks, self.now_ms)
        except NotEnoughReplicasError:
            return
        if result.required_offset is not None:
            request_id = value.decode()
            self.waiting[request_id] = (result.first_offset, value)
            self.leader.pending_produce(request_id, result.required_offset, self.now_ms + PRODUCE_TIMEOUT_MS)

    def failover(self, candidate: int) -> None:
        """The leader's broker fails; the controller elects `candidate` if it is in the committed ISR, and the
        old leader comes straight back as a follower (its log intact)."""
        old_leader = self.cluster.leader_id
        isr = self.leader.isr
        if candidate == old_leader or candidate not in isr:
            return
        new_isr = tuple(broker for broker in isr if broker != old_leader)
        self.cluster.elect(candidate, isr=new_isr, now_ms=self.now_ms)
        for completion in self.cluster[old_leader].take_completed(self.now_ms):
            assert completion.error == ErrorCode.NOT_LEADER_OR_FOLLOWER, completion
            self.waiting.pop(completion.request_id)

    def collect_completions(self) -> None:
        self.note_committed()
        for completion in self.leader.take_completed(self.now_ms):
            offset, value = self.waiting.pop(completion.request_id)
            if completion.error == ErrorCode.NONE:
                self.acknowledged[offset] = value
                if self.committed.get(offset) != value:
                    raise ReplicationViolation(f"acknowledged {value!r} at {offset} but it is not committed")

    def note_committed(self) -> None:
        leader = self.leader
        for offset, value in self.cluster.log_values(self.cluster.leader_id):
            if offset >= leader.high_watermark:
                break
            if self.committed.setdefault(offset, value) != value:
                raise ReplicationViolation(
                    f"offset {offset} was committed as {self.committed[offset]!r}, leader now has {value!r}"
                )

    def check(self) -> None:
        leader = self.leader
        leader_log = dict(self.cluster.log_values(self.cluster.leader_id))
        for offset, value in self.committed.items():
            if leader_log.get(offset) != value:
                raise ReplicationViolation(f"committed {value!r} at {offset} lost: leader has {leader_log.get(offset)!r}")
        fetched = leader.read_for_consumer(leader.log_start_offset, 1 << 20).records
        for _, header in iter_batches(fetched):
            if header.last_offset >= leader.high_watermark:
                raise ReplicationViolation(f"consumer saw offset {header.last_offset} >= HW {leader.high_watermark}")
        below_hw = [(o, v) for o, v in sorted(leader_log.items()) if o < leader.high_watermark]
        for member in leader.isr:
            member_log = self.cluster.log_values(member)
            if member_log[: len(below_hw)] != below_hw:
                raise ReplicationViolation(f"ISR member {member} differs from the leader below HW")

    def heal(self) -> None:
        """No more faults: commit pending ISR changes and let every follower fetch until nothing changes."""
        for _ in range(20):
            self.now_ms += 1
            for follower in BROKERS:
                if follower != self.cluster.leader_id:
                    self.cluster.fetch(follower, self.now_ms)
            if self.leader.pending_isr_change is not None:
                self.cluster.commit_isr(self.leader.pending_isr_change.proposed_isr, self.now_ms)
            self.collect_completions()
            self.check()
        reference = self.cluster.log_values(self.cluster.leader_id)
        for broker in BROKERS:
            if self.cluster.log_values(broker) != reference:
                raise ReplicationViolation(f"broker {broker} did not converge to the leader's log")
        if self.leader.high_watermark != self.leader.log_end_offset:
            raise ReplicationViolation(f"HW {self.leader.high_watermark} stuck below LEO {self.leader.log_end_offset}")


operations = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.sampled_from([-1, 0, 1])),
        st.tuples(st.just("fetch"), st.sampled_from(BROKERS), st.sampled_from([1, 150, 1 << 20])),
        st.tuples(st.just("tick"), st.integers(1, 2 * LAG_MS)),
        st.tuples(st.just("commit_isr")),
        st.tuples(st.just("failover"), st.sampled_from(BROKERS)),
    ),
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(operations)
def test_random_runs_keep_replication_guarantees(ops):
    run = Run()
    for operation in ops:
        run.apply(operation)
    run.heal()


def test_planted_bug_hw_from_leader_leo_is_caught_by_the_checker():
    # acks=1 record visible at once (HW = leader LEO); the leader fails before any follower fetched it.
    operations_losing_visible_record = [("produce", 1), ("failover", 2)]
    run = Run(bug_hw_from_leader_leo=True)
    with pytest.raises(ReplicationViolation):
        for operation in operations_losing_visible_record:
            run.apply(operation)


def test_checker_accepts_the_same_sequence_without_the_bug():
    run = Run()
    for operation in [("produce", 1), ("failover", 2), ("produce", -1), ("fetch", 1, 1 << 20)]:
        run.apply(operation)
    run.heal()
    assert offsets_and_values(run.leader.read_for_consumer(0, 1 << 20).records) == [(0, b"v2")]
