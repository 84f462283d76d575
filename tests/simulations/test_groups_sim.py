"""The groups workload: the whole-cluster simulation with a consumer group (simulations/groups_sim.py).

Its checkers are shown to fail on hand-fed violations; each planted coordinator bug fails a group checker at
a named seed (the first failing seed of `flotilla simulate --workload groups --seeds 300 --duration 30
--bugs <BUG>` under the default fault mix), replays to the same trace, and passes with the bug off."""

from __future__ import annotations

import pytest

from net.protocol.codec import ApiKey
from simulations.consumer_groups_sim import ConsumerGroupCheckers
from simulations.faults import DEFAULT_FAULTS
from partitions.errors import ErrorCode
from simulations.group_checkers import ANSWER_MS_MAX, LATE_SYNC_MS, PARKED_SYNC_MS_MAX, SETTLE_MS, FaultWindows, \
    GroupCheckers
from simulations.group_clients import REBALANCE_TIMEOUT_MS
from simulations.group_clients import decode_assignment, encode_assignment, range_assignment
from tests.simulations.workloads import assert_sweep_passes, assert_teeth, failed_checkers, workload_config
from simulations.run import RunConfig, run_one

TEETH_DURATION_S = 30.0
# commit_before_hw answers group writes before they are committed: a failover loses an acknowledged write
# of the coordinator (here its assignment: two members hold one partition in one generation).
# (56 before the slow leaders; 34 until index files and a new leader's epoch checkpoint were written lazily)
COMMIT_BEFORE_HW_SEED = 1
# stale_generation_commit accepts a commit of an older generation: a member paused past its session resumes
# and commits for the generation it had, after another member was assigned a newer one (commit_kept).
# Of `--duration 60` (176 before the slow leaders and more frequent pauses; 11 until the offsets topic had three
# replicas; 73 before fetch sessions; 71 until a starting node held its first Metadata requests, after which none
# of seeds 1-540 moved the offset back, the only harm commit_kept then saw; since it also refuses a stale
# generation's commit that keeps the offset, seeds 18, 22, 34, 35 and 52 of 1-60 caught it; 22 is the first since
# the nodes answered each connection in request order).
STALE_GENERATION_SEED = 22
STALE_GENERATION_DURATION_S = 60.0
# poll_ignores_changes tells the coordinator runtimes that nothing changed: an answer held for the high
# watermark leaves at the shard's next timer or its write timeout. After the heal, with nothing wrong, a
# SyncGroup waits 3 s for a session timer (coordinator_answers_prompt; liveness and the safety checkers pass).
# (4 until the nodes answered each connection in request order, 3 until a starting node held its first Metadata
# requests, 8 before the slow leaders)
POLL_IGNORES_CHANGES_SEED = 5
# expire_parked_members expires members waiting in a parked SyncGroup for their session: a leader whose
# assignor outlives the followers' session has them removed while they wait (parked_sync_answered).
EXPIRE_PARKED_MEMBERS_SEED = 1
# no_pending_sync_expiry never removes a member that sends no SyncGroup: the followers of a leader whose assignor
# outlives the rebalance timeout wait for it, past rebalance timeout plus write timeout (parked_sync_answered).
NO_PENDING_SYNC_EXPIRY_SEED = 1
GROUP_CHECKERS = {"generation_exclusive", "commit_kept", "group_delivery"}


def _config(seed: int, duration_s: float = 20.0, faults: str = "none", bugs: frozenset[str] = frozenset()) -> RunConfig:
    return workload_config("groups", seed, duration_s, faults, bugs)


def test_a_fault_free_run_shares_the_partitions_in_one_generation_and_passes_every_checker():
    result = run_one(_config(seed=1))
    assert result.ok, failed_checkers(result)
    assert result.stats["assignments"] == 3  # three members, one generation
    assert result.stats["group_records"] >= result.stats["acked_all"]
    assert result.stats["commits_acked"] > 0


def test_generation_exclusive_fails_when_two_members_of_a_generation_share_a_partition():
    checkers = GroupCheckers()
    checkers.observe_assignment("g", 3, "a", [0, 1])
    checkers.observe_assignment("g", 4, "b", [0])  # another generation: fine
    assert "generation_exclusive" not in checkers.violations
    checkers.observe_assignment("g", 3, "b", [1, 2])
    assert "partition 1" in checkers.violations["generation_exclusive"]


def test_commit_kept_fails_on_a_commit_acknowledged_below_an_earlier_acknowledgement():
    checkers = GroupCheckers()
    checkers.observe_commit_acked("g", 0, 100, checkers.commit_floor("g", 0), 1, "a")
    floor = checkers.commit_floor("g", 0)
    checkers.observe_commit_acked("g", 0, 120, floor, 2, "b")
    assert "commit_kept" not in checkers.violations
    checkers.observe_commit_acked("g", 0, 110, 120, 1, "a")
    assert "acknowledged after 120" in checkers.violations["commit_kept"]
    lost = GroupCheckers()
    lost.observe_commit_acked("g", 1, 50, -1, 1, "a")
    lost.check_final_commits("g", {1: 40})
    assert "50 was acknowledged" in lost.violations["commit_kept"]


def test_commit_kept_fails_on_a_commit_of_a_generation_older_than_one_already_assigned():
    checkers = GroupCheckers()
    checkers.observe_assignment("g", 1, "a", [0])
    checkers.observe_commit_acked("g", 0, 100, -1, 1, "a", checkers.generation_floor("g"))
    sent_before_the_rebalance = checkers.generation_floor("g")
    checkers.observe_assignment("g", 2, "b", [0])
    checkers.observe_commit_acked("g", 0, 120, 100, 1, "a", sent_before_the_rebalance)  # left before it: fine
    checkers.observe_commit_acked("g", 0, 130, 120, 2, "b", checkers.generation_floor("g"))
    assert "commit_kept" not in checkers.violations
    checkers.observe_commit_acked("g", 0, 140, 130, 1, "a", checkers.generation_floor("g"))  # the offset kept
    assert "after generation 2 had been assigned" in checkers.violations["commit_kept"]
    consumer_groups = ConsumerGroupCheckers()  # a member's epoch may trail the group's: not checked there
    consumer_groups.observe_assignment("g", 2, "b", [0])
    assert consumer_groups.generation_floor("g") == -1


def test_group_delivery_fails_when_an_acknowledged_record_was_never_consumed():
    checkers = GroupCheckers()
    checkers.observe_ack(("sim", 0), 0, b"v0")
    checkers.observe_ack(("sim", 0), 1, b"v1")
    checkers.observe_group_record(("sim", 0), 0, b"v0", 5)
    checkers.check_group_delivery()
    assert "first at offset 1" in checkers.violations["group_delivery"]


def test_fault_windows_follow_the_faults_in_the_trace():
    windows = FaultWindows()
    line = windows.observe_trace_line
    line(500_000, "net.deliver", (1, 2, 7, 100, 0))  # traffic, connects, assignments: no change
    line(600_000, "group.assigned", ("member-0", 1, "0,1"))
    assert windows.quiet_since(1)
    line(1_000_000, "net.block", (1, 3))
    line(1_000_000, "net.block", (3, 1))
    assert not windows.quiet_since(0)  # a partition in effect
    line(4_000_000, "net.heal", ())
    assert windows.quiet_since(4_001) and not windows.quiet_since(4_000)
    line(5_000_000, "net.pause", (2,))
    line(5_500_000, "net.down", (2,))  # a paused node that crashes is down, no longer paused
    assert not windows.quiet_since(0)
    line(6_000_000, "net.up", (2,))
    assert windows.quiet_since(6_001)
    line(7_000_000, "fault.controlled_shutdown", (3,))
    line(7_300_000, "net.down", (3,))
    line(7_800_000, "net.up", (3,))
    line(8_000_000, "group.pause", ("member-1",))
    line(8_000_000, "net.drop_probability", ("0.020000",))
    line(9_000_000, "group.resume", ("member-1",))
    assert not windows.quiet_since(0)  # messages are still lost
    line(9_500_000, "net.drop_probability", ("0.000000",))
    assert windows.quiet_since(9_501)
    line(10_000_000, "net.reset", (1, 2, 9, "fault"))  # over at once, but a change
    line(10_000_000, "fault.crash_in_step", (1, 4))
    assert windows.quiet_since(10_001) and not windows.quiet_since(10_000)


def test_coordinator_answers_prompt_fails_on_an_answer_held_seconds_in_a_quiet_stretch():
    checkers = GroupCheckers()
    line = checkers.fault_windows.observe_trace_line
    line(1_000_000, "fault.crash", (2,))
    line(1_000_000, "net.down", (2,))
    line(2_000_000, "net.up", (2,))
    answer = checkers.observe_coordinator_answer
    answer(ApiKey.OFFSET_COMMIT, "member-0", 2_500, 5_500, True)  # the restart explains it
    answer(ApiKey.HEARTBEAT, "member-0", 2_000 + SETTLE_MS + 1, 2_000 + SETTLE_MS + 4, True)
    answer(ApiKey.JOIN_GROUP, "member-1", 8_000, 11_000, True)  # waits for the rebalance by design
    assert "coordinator_answers_prompt" not in checkers.violations
    assert checkers.quiet_answer_ms_max == 3
    answer(ApiKey.SYNC_GROUP, "member-2", 8_000, 8_000 + ANSWER_MS_MAX, True)
    assert "coordinator_answers_prompt" not in checkers.violations
    answer(ApiKey.OFFSET_COMMIT, "member-2", 8_000, 13_000, False)
    assert "member-2's OFFSET_COMMIT sent at 8000 ms given up after 5000 ms" in \
           checkers.violations["coordinator_answers_prompt"]


def test_a_slow_leader_is_a_fault_for_prompt_answers_but_not_for_parked_syncs():
    windows = FaultWindows()
    line = windows.observe_trace_line
    line(1_000_000, "group.slow_assign", ("member-0", 4_000))  # armed: nothing happens yet
    assert windows.quiet_since(1)
    line(2_000_000, "group.assigning", ("member-0", 3, 4_000))
    assert not windows.quiet_since(1) and windows.quiet_but_slow_leaders_since(1)
    line(6_000_000, "group.assign_done", ("member-0",))
    assert windows.quiet_since(6_001) and not windows.quiet_since(6_000)
    assert windows.quiet_but_slow_leaders_since(1)
    line(7_000_000, "group.pause", ("member-1",))
    assert not windows.quiet_but_slow_leaders_since(1)


def test_parked_sync_answered_fails_on_a_waiting_member_removed_or_held_past_its_bound():
    checkers = GroupCheckers()
    line = checkers.fault_windows.observe_trace_line
    seen = checkers.coordinators_seen()

    def sync(member: str, joined_ms: int, sent_ms: int, answered_ms: int, code: int | None) -> None:
        checkers.observe_sync_answer(member, joined_ms, sent_ms, answered_ms, seen, code)

    line(1_000_000, "fault.crash", (2,))
    sync("member-1", 500, 500, 4_000, ErrorCode.UNKNOWN_MEMBER_ID)  # a crash meanwhile
    line(2_000_000, "group.assigning", ("member-0", 3, 12_000))
    sync("member-1", 900, 2_001, 5_002, ErrorCode.UNKNOWN_MEMBER_ID)  # joined before the crash: a reloaded group
    sync("member-1", 2_001, 2_001, 2_001 + ANSWER_MS_MAX, ErrorCode.UNKNOWN_MEMBER_ID)  # answered at once
    sync("member-1", 2_001, 2_001 + REBALANCE_TIMEOUT_MS + 1, 20_000, ErrorCode.UNKNOWN_MEMBER_ID)  # itself late
    sync("member-1", 2_001, 2_001, 7_001, ErrorCode.REBALANCE_IN_PROGRESS)  # the leader removed
    sync("member-2", 2_001, 2_001, 2_001 + PARKED_SYNC_MS_MAX, ErrorCode.NONE)
    assert "parked_sync_answered" not in checkers.violations and checkers.parked_syncs == 2
    sync("member-2", 2_001, 2_001, 5_002, ErrorCode.UNKNOWN_MEMBER_ID)
    assert "member-2's SyncGroup sent at 2001 ms answered UNKNOWN_MEMBER_ID after waiting 3001 ms" in \
           checkers.violations["parked_sync_answered"]
    held = GroupCheckers()
    held.fault_windows.observe_trace_line(2_000_000, "group.assigning", ("member-0", 3, 14_000))
    held.observe_sync_answer("member-1", 2_001, 2_001, 2_002 + PARKED_SYNC_MS_MAX, seen, None)
    assert f"given up after {PARKED_SYNC_MS_MAX + 1} ms" in held.violations["parked_sync_answered"]


def test_late_sync_fenced_fails_on_an_assignment_for_a_sync_sent_after_the_rebalance_timeout():
    checkers = GroupCheckers()
    line = checkers.fault_windows.observe_trace_line
    joined = checkers.coordinators_seen()
    late = 1_000 + LATE_SYNC_MS + 1

    def sync(member: str, joined_ms: int, sent_ms: int, code: int | None, seen: tuple[int, int] = joined) -> None:
        checkers.observe_sync_answer(member, joined_ms, sent_ms, sent_ms + 2, seen, code)

    sync("member-0", 1_000, 1_000 + LATE_SYNC_MS, ErrorCode.NONE)  # in time
    sync("member-0", 1_000, late, ErrorCode.UNKNOWN_MEMBER_ID)  # removed
    sync("member-0", 1_000, late, None)  # no answer
    line(2_000_000, "group.crash", ("member-1",))  # another member's fault: only a rebalance
    sync("member-0", 1_000, late, ErrorCode.REBALANCE_IN_PROGRESS)
    assert "late_sync_fenced" not in checkers.violations and checkers.late_syncs == 2
    checkers.shards_made += 1  # a coordinator moved: its deadline was in the old one's memory
    sync("member-0", 1_000, late, ErrorCode.NONE)
    line(9_000_000, "net.block", (1, 2))
    sync("member-0", 8_000, 8_000 + late, ErrorCode.NONE, checkers.coordinators_seen())
    assert "late_sync_fenced" not in checkers.violations and checkers.late_syncs == 2
    line(20_000_000, "net.heal", ())
    sync("member-2", 20_001, 20_001 + late, ErrorCode.NONE, checkers.coordinators_seen())
    assert f"member-2's SyncGroup sent {late} ms after its JoinGroup answer (at 20001 ms) was answered with an " \
           f"assignment" in checkers.violations["late_sync_fenced"]


def test_the_members_range_assignment_and_its_bytes():  # Kafka's RangeAssignor, ConsumerProtocolAssignment
    assert range_assignment(["b", "a", "c"], 4) == {"a": [0, 1], "b": [2], "c": [3]}
    assert decode_assignment(encode_assignment("sim", [2, 0])) == [0, 2]


def _assert_teeth(bug: str, seed: int, duration_s: float = TEETH_DURATION_S) -> None:
    assert_teeth("groups", bug, seed, duration_s, GROUP_CHECKERS)


@pytest.mark.slow
def test_commit_before_hw_fails_a_group_checker_at_its_known_seed():
    _assert_teeth("commit_before_hw", COMMIT_BEFORE_HW_SEED)


@pytest.mark.slow
def test_stale_generation_commit_fails_a_group_checker_at_its_known_seed():
    _assert_teeth("stale_generation_commit", STALE_GENERATION_SEED, STALE_GENERATION_DURATION_S)


@pytest.mark.slow
def test_poll_ignores_changes_fails_coordinator_answers_prompt_at_its_known_seed():
    assert_teeth("groups", "poll_ignores_changes", POLL_IGNORES_CHANGES_SEED, TEETH_DURATION_S,
                 {"coordinator_answers_prompt"})


@pytest.mark.slow
def test_expire_parked_members_fails_parked_sync_answered_at_its_known_seed():
    assert_teeth("groups", "expire_parked_members", EXPIRE_PARKED_MEMBERS_SEED, TEETH_DURATION_S,
                 {"parked_sync_answered"})


@pytest.mark.slow
def test_no_pending_sync_expiry_fails_parked_sync_answered_at_its_known_seed():
    assert_teeth("groups", "no_pending_sync_expiry", NO_PENDING_SYNC_EXPIRY_SEED, TEETH_DURATION_S,
                 {"parked_sync_answered"})


@pytest.mark.slow
def test_groups_sweep_with_every_fix_in_place_finds_no_failure():
    assert_sweep_passes("groups", 30, 20.0)


@pytest.mark.slow
def test_a_replica_closed_before_its_first_record_survives_a_power_loss_of_every_node():
    # Seed 146 (found with three replicas per offsets partition): a broker stops 0.6 s after its replica of the
    # group's offsets partition is created, comes back, rejoins the ISR, and after a power loss of every node
    # its replica directory was gone (its entry in the parent never synced); elected leader with an empty log,
    # it made the others truncate, and the group handed out generation 1 a second time (generation_exclusive).
    result = run_one(_config(146, 30.0, DEFAULT_FAULTS))
    assert not failed_checkers(result), failed_checkers(result)
    assert result.stats["faults"] > 0
