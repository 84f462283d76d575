"""A sweep of seeded random fault schedules with every fix on: no acknowledged entry is ever lost and the
committed log is one log on every node (crashes, single-node power loss, partitions, compaction)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.raftlog.harness import FAST_CONFIG, Cluster
from tests.raftlog.storages import PowerLossStorage

SWEEP_CONFIG = dataclasses.replace(FAST_CONFIG, log_compaction_entries_min=15, snapshot_chunk_bytes_max=128,
                                   append_entries_batch_bytes_max=512)


def run_fault_schedule(seed: int, rounds: int = 25) -> Cluster:
    faults = random.Random(seed)
    storages = {i: PowerLossStorage() for i in (1, 2, 3)}
    cluster = Cluster(seed=seed, config=SWEEP_CONFIG, storages=storages)
    counter = 0
    for _ in range(rounds):
        action = faults.random()
        alive = [i for i in cluster.ids if cluster.members[i].driver is not None]
        dead = [i for i in cluster.ids if cluster.members[i].driver is None]
        if action < 0.45 and alive:
            for _ in range(faults.randint(1, 6)):
                target = faults.choice(alive)
                cluster.propose(target, b"w-%d-%d" % (seed, counter), timeout_ms=faults.randint(50, 3000))
                counter += 1
        elif action < 0.55 and len(alive) > 1:
            victim = faults.choice(alive)
            cluster.crash(victim)
            if faults.random() < 0.5:
                storages[victim].power_loss()
        elif action < 0.7 and dead:
            cluster.start(faults.choice(dead))
        elif action < 0.8:
            a, b = faults.sample(list(cluster.ids), 2)
            cluster.partition(a, b)
        elif action < 0.9:
            cluster.heal()
        cluster.run_for(faults.randint(20, 1500))
    for i in cluster.ids:
        if cluster.members[i].driver is None:
            cluster.start(i)
    cluster.heal()
    cluster.commit(b"final-%d" % seed, timeout_ms=30_000)
    cluster.run_for(2000)
    return cluster


@pytest.mark.parametrize("seed", range(12))
def test_fault_sweep_loses_no_acknowledged_entry(seed: int) -> None:
    cluster = run_fault_schedule(seed)
    cluster.check_prefix_consistency()
    leader = cluster.wait_leader()
    committed = cluster.members[leader].machine.data()
    lost = [data for data in cluster.acked if data not in committed]
    assert lost == [], f"seed {seed}: acknowledged but lost {lost}"
    for member in cluster.members.values():
        assert member.machine.data() == committed, f"node {member.node_id} diverged (seed {seed})"
