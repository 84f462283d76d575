"""Checkers of the groups simulation, on top of the whole-cluster checkers (simulations/cluster_checkers.py).

- generation_exclusive: in the classic protocol no two members of one generation are handed the same
  partition (observed from the SyncGroup answers the members receive).
- commit_kept: an acknowledged offset commit is never lost or moved backwards by a stale member. Client-side
  acknowledgements arrive in any order across members, so the rule is stated with happens-before: a commit
  acknowledged at offset O for a partition, by a request sent after an acknowledgement of offset F > O for
  the same partition had been received, is a violation (the coordinator accepted a stale member's commit,
  or lost the acknowledged F). At the end, the coordinator's committed offset of each partition is at least
  the largest acknowledged one.
- group_delivery: every record acknowledged to the acks=all producer is consumed by some member of the group
  at least once (checked once the run converged).
- liveness (extended): after the faults heal, within the bound, every running member is in one Stable
  generation, the partitions are all owned, and the members have read up to each partition's high watermark.
"""

from __future__ import annotations

from simulations.cluster_checkers import CHECKER_NAMES as CLUSTER_CHECKER_NAMES, ClusterCheckers, TopicPartition
from simulations.run import CheckerVerdict

GROUP_CHECKER_NAMES = ("generation_exclusive", "commit_kept", "group_delivery")


class GroupCheckers(ClusterCheckers):
    """The cluster's checkers plus the group ones (see the module docstring)."""

    group_checker_names = GROUP_CHECKER_NAMES

    def __init__(self) -> None:
        super().__init__()
        self.owners: dict[tuple[str, int], dict[int, str]] = {}  # (group, generation) -> partition -> member
        self.max_acked_commit: dict[tuple[str, int], int] = {}  # (group, partition) -> offset
        self.group_consumed: dict[TopicPartition, set[int]] = {}
        self.commits_acked = 0
        self.assignments_seen = 0

    def violate(self, checker: str, detail: str) -> None:
        if checker in self.group_checker_names:
            self.violations.setdefault(checker, detail)
            return
        super().violate(checker, detail)

    def observe_assignment(self, group: str, generation: int, member_id: str, partitions: list[int]) -> None:
        self.assignments_seen += 1
        owners = self.owners.setdefault((group, generation), {})
        for partition in partitions:
            owner = owners.setdefault(partition, member_id)
            if owner != member_id:
                self.violate("generation_exclusive", f"group {group} generation {generation}: partition {partition} "
                                                     f"assigned to {owner} and to {member_id}")

    def commit_floor(self, group: str, partition: int) -> int:
        """The largest commit of this partition acknowledged so far (-1 when none): a commit sent now must not
        be acknowledged below it."""
        return self.max_acked_commit.get((group, partition), -1)

    def observe_commit_acked(self, group: str, partition: int, offset: int, floor: int, generation: int,
                             member_id: str) -> None:
        self.commits_acked += 1
        if offset < floor:
            self.violate("commit_kept", f"group {group} partition {partition}: commit of {offset} by {member_id} "
                                        f"(generation {generation}) acknowledged after {floor} had been")
        key = (group, partition)
        self.max_acked_commit[key] = max(self.max_acked_commit.get(key, -1), offset)

    def observe_group_record(self, key: TopicPartition, offset: int, value: bytes, high_watermark: int) -> None:
        if offset >= high_watermark:
            self.violate("reads_committed", f"{key[0]}-{key[1]} group member read offset {offset} at or above "
                                            f"the high watermark {high_watermark}")
        self.group_consumed.setdefault(key, set()).add(offset)

    def check_final_commits(self, group: str, committed: dict[int, int]) -> None:
        for (checked_group, partition), offset in sorted(self.max_acked_commit.items()):
            if checked_group == group and committed.get(partition, -1) < offset:
                self.violate("commit_kept", f"group {group} partition {partition}: committed "
                                            f"{committed.get(partition, -1)} at the end, {offset} was acknowledged")

    def check_group_delivery(self) -> None:
        for key, acked in sorted(self.acked.items()):
            missing = sorted(set(acked) - self.group_consumed.get(key, set()))
            if missing:
                self.violate("group_delivery", f"{key[0]}-{key[1]}: {len(missing)} acknowledged records never "
                                               f"consumed by the group, first at offset {missing[0]}")

    def verdicts(self, node_errors: list[str]) -> list[CheckerVerdict]:
        verdicts = super().verdicts(node_errors)
        group_verdicts = [CheckerVerdict(name, name not in self.violations, self.violations.get(name, ""))
                          for name in self.group_checker_names]
        return verdicts[:len(CLUSTER_CHECKER_NAMES)] + group_verdicts + verdicts[len(CLUSTER_CHECKER_NAMES):]
