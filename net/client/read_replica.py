"""Where a client with a rack sends its fetches (KIP-392, fetching from the closest replica).

Theory of operation: a client that sets its rack (`client.rack`) sends it in every Fetch (v11+). A leader whose
cluster has a replica selector may answer such a fetch with no records and `preferred_read_replica`, the
in-sync replica in the client's rack; the client's fetches for that partition then go there. When that replica
answers an error or cannot be reached, the client goes back to the leader and, for READ_REPLICA_BACKOFF_S,
asks it without the rack, so that the leader answers the records itself instead of naming the failed replica
again; then it sends the rack again. `ReadReplicas` keeps that per partition, for Flotilla's client
(net/client/aio.py) and the Spark source (spark/source.py); it does no I/O.
"""

from __future__ import annotations

import time
from typing import Callable, Hashable

READ_REPLICA_BACKOFF_S = 10.0  # after the replica a leader named failed, read from the leader this long


class ReadReplicas:
    """The replica each partition's fetches go to, for a client in `rack` ("" : always the leader)."""

    def __init__(self, rack: str, clock: Callable[[], float] | None = None) -> None:
        self.rack = rack
        self._clock = clock or time.monotonic
        self._replicas: dict[Hashable, int] = {}
        self._leader_only_until: dict[Hashable, float] = {}

    def replica(self, key: Hashable) -> int | None:
        """The replica to fetch `key` from instead of its leader, None for the leader."""
        return self._replicas.get(key)

    def rack_for_leader(self, key: Hashable) -> str:
        """The rack to send the leader: none while backing off after a failed replica."""
        until = self._leader_only_until.get(key)
        if until is not None:
            if self._clock() < until:
                return ""
            del self._leader_only_until[key]
        return self.rack

    def named(self, key: Hashable, preferred_read_replica: int, leader: int) -> bool:
        """The leader's answer named `preferred_read_replica` (-1: none). True when the fetches go there now."""
        if preferred_read_replica < 0 or preferred_read_replica == leader or not self.rack:
            return False
        self._replicas[key] = preferred_read_replica
        return True

    def failed(self, key: Hashable) -> None:
        """The replica answered an error or could not be reached: back to the leader, without the rack a while."""
        self._replicas.pop(key, None)
        self._leader_only_until[key] = self._clock() + READ_REPLICA_BACKOFF_S
