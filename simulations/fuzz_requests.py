"""Well-formed Kafka requests with hostile values, drawn from the message schemas by a seeded `random.Random`.

A `RequestFuzzer` draws a request of any API the codec implements (except `EXCLUDED_APIS`), in any version of
its range, whose every field present in that version holds a value of its type: the codec encodes it, a
broker decodes it, and what the broker's handlers make of it is what is tested. Values lean towards the ones
that reach deep into a handler rather than stop at its first check: the names of a small vocabulary of topics,
groups and transactional ids (created on the way by the fuzzer's own CreateTopics, FindCoordinator and
InitProducerId), partitions around the real ones, and the producer ids, epochs, member ids and generations
that earlier answers named (`learn`). Record fields carry a real record batch (plain, idempotent or
transactional, sometimes compressed) as often as garbage. Every number type also gets its edges (-1, 0, its
minimum and maximum).

The vocabulary never names a topic outside `topics` (a workload keeps its own topic out of reach), config
resources are only those topics and brokers that do not exist, and an unclean ElectLeaders names its
partitions: the fuzzer may delete, reassign, truncate, elect and reconfigure what it names, never the
cluster's own data.

Used by the fuzz simulation (simulations/fuzz_sim.py) and by a real-node test (tests/net/test_request_fuzz.py).
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from net.protocol import messages
from net.protocol.codec import SUPPORTED, ApiKey
from net.protocol.types import INT_BOUNDS, NULL_UUID
from partitions.records import build_batch

# Not drawn: UnregisterBroker decommissions the cluster's own brokers, AlterClientQuotas throttles every client
# (the quotas workload drives it), and the SASL exchange belongs to the SASL listener (the sasl workload).
EXCLUDED_APIS = frozenset({ApiKey.UNREGISTER_BROKER, ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.SASL_HANDSHAKE,
                           ApiKey.SASL_AUTHENTICATE})
# How often an API is drawn, against 1 for the others: topics are created more often than deleted, so that
# produces, fetches and transactions find them.
API_WEIGHTS = {ApiKey.PRODUCE: 3.0, ApiKey.FETCH: 2.0, ApiKey.CREATE_TOPICS: 2.0, ApiKey.DELETE_TOPICS: 0.3,
               ApiKey.JOIN_GROUP: 2.0, ApiKey.SYNC_GROUP: 2.0, ApiKey.INIT_PRODUCER_ID: 2.0,
               ApiKey.FIND_COORDINATOR: 2.0, ApiKey.CONSUMER_GROUP_HEARTBEAT: 2.0}
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
GROUPS = ("fuzz-g1", "fuzz-g2", "")
TRANSACTIONAL_IDS = ("fuzz-t1", "fuzz-t2", "")
CONFIG_NAMES = ("cleanup.policy", "retention.ms", "retention.bytes", "min.insync.replicas", "segment.bytes",
                "max.message.bytes", "message.timestamp.type", "compression.type", "no.such.config")
CONFIG_VALUES = ("1", "0", "-1", "compact", "delete", "compact,delete", "LogAppendTime", "zstd", "x", "")
ABSENT_BROKERS = ("99", "-1", "x")
ARRAY_ITEMS_MAX = 3

_PARTITION_FIELDS = frozenset({"partition_index", "partition", "partitions", "index", "partition_indexes"})
_TOPIC_FIELDS = frozenset({"topic", "topic_names", "subscribed_topic_names"})
_GROUP_FIELDS = frozenset({"group_id", "group_ids", "groups", "groups_names"})
_TXN_FIELDS = frozenset({"transactional_id", "transactional_ids", "v3_and_below_transactional_id"})
_BROKER_FIELDS = frozenset({"broker_id", "broker_ids", "replicas", "replica_id"})
# Values that get past a handler's first checks, drawn most of the time for fields of these names: small
# enumerations whose random values would stop every request at once, and timeouts a coordinator accepts
# (a group's session timeout between 6 and 1,800 s, a transaction's up to 900 s).
_CHOICES = {"resource_type": (2, 4, 8, 0), "mechanism": (1, 2, 0), "key_type": (0, 1, 0, 2), "acks": (-1, 1, 0, 2),
            "config_operation": (0, 1, 2, 3, 4), "coordinator_type": (0, 1), "election_type": (0, 1, 2),
            "endpoint_type": (1, 2, 3), "isolation_level": (0, 1, 2), "num_partitions": (1, 2, 3, -1, 0),
            "replication_factor": (1, 2, 3, -1, 4), "count": (1, 2, 3, 0),
            "timeout_ms": (0, 1, 100, 1_000, 5_000), "max_wait_ms": (0, 0, 10, 100, 500),
            "session_timeout_ms": (6_000, 10_000, 30_000, 45_000, 0, 100),
            "rebalance_timeout_ms": (1_000, 5_000, 30_000, 0), "transaction_timeout_ms": (1_000, 10_000, 60_000, 0,
                                                                                          900_001),
            "session_id": (0, 0, 0, 1), "session_epoch": (-1, 0, 0, 1, 2)}
_MOSTLY_EMPTY = frozenset({"assignments", "configs", "forgotten_topics_data"})  # else most requests stop at them
_LEARNED_INTS = frozenset({"producer_id", "producer_epoch", "generation_id", "member_epoch", "session_id"})


def present_fields(cls: type, version: int) -> list:
    """The schema fields of a message or struct class that exist in `version` (tagged ones included)."""
    return [spec for spec in cls._fields if version in spec.versions or version in spec.tagged]


class RequestFuzzer:
    """Draws hostile well-formed requests (see the module docstring)."""

    def __init__(self, rng: random.Random, topics: tuple[str, ...] = ("fuzz-a", "fuzz-b"),
                 apis: dict[int, tuple[int, int]] | None = None) -> None:
        self.rng = rng
        # The internal topics are named (and deleted) less often: each deletion moves every coordinator.
        self.topics = (*topics * 6, *INTERNAL_TOPICS, "")
        self._own_topics = frozenset(topics) | frozenset(INTERNAL_TOPICS)
        self.apis: list[tuple[int, int, int]] = []
        self.serve(apis or SUPPORTED)
        self.learned: dict[str, list[Any]] = {"producer_id": [], "producer_epoch": [], "generation_id": [],
                                              "member_epoch": [], "member_id": [], "topic_id": [], "session_id": []}
        self.leaders: dict[tuple[str, int], int] = {}  # (topic, partition) -> leader, from Metadata answers
        # (key type: 0 group, 1 transaction; id) -> node, from FindCoordinator answers
        self.coordinators: dict[tuple[int, str], int] = {}

    def serve(self, apis: dict[int, tuple[int, int]]) -> None:
        """Draw from these APIs and version ranges (a broker's ApiVersions answer): api key -> (lowest, highest)."""
        self.apis = sorted((key, low, high) for key, (low, high) in apis.items()
                           if key not in EXCLUDED_APIS and key in messages.REQUESTS and key in SUPPORTED)

    def request(self) -> tuple[int, int, Any]:
        """(api key, version, request message)."""
        weights = [API_WEIGHTS.get(api_key, 1.0) for api_key, _, _ in self.apis]
        api_key, low, high = self.rng.choices(self.apis, weights)[0]
        version = self.rng.randint(low, high)
        cls = messages.REQUESTS[api_key]
        request = self._struct(cls, version, cls.__name__)
        if api_key == ApiKey.ELECT_LEADERS and request.election_type != 0 and request.topic_partitions is None:
            # An unclean election of every partition: on a partition with no live ISR member Kafka elects an
            # out-of-sync replica and acknowledged records are lost by design. Only the fuzzer's own topics.
            request.topic_partitions = []
        return api_key, version, request

    def learn(self, response: Any, request: Any = None) -> None:
        """Keep the ids an answer names (producer ids and epochs, member ids, generations, the topic ids of the
        fuzzer's own topics), so later requests can name them, and the leaders and coordinators it names, so
        that `route` can send a request where it is served rather than refused."""
        self._learn_struct(response)
        for topic in getattr(response, "topics", None) or ():
            for partition in getattr(topic, "partitions", None) or ():
                leader = getattr(partition, "leader_id", None)
                if isinstance(getattr(topic, "name", None), str) and isinstance(leader, int):
                    self.leaders[(topic.name, partition.partition_index)] = leader
        key_type = getattr(request, "key_type", None)
        if key_type not in (0, 1):
            return
        for coordinator in getattr(response, "coordinators", None) or ():
            if not coordinator.error_code and coordinator.node_id >= 0:
                self.coordinators[(key_type, coordinator.key)] = coordinator.node_id
        if isinstance(getattr(request, "key", None), str) and not getattr(response, "coordinators", None) \
                and not getattr(response, "error_code", 1) and getattr(response, "node_id", -1) >= 0:
            self.coordinators[(key_type, request.key)] = response.node_id  # FindCoordinator before v4: one key

    def route(self, request: Any) -> int | None:
        """The broker that leads or coordinates what `request` names first, when an answer named it (None:
        unknown, any broker will do)."""
        for name in ("transactional_id", "group_id", "groups", "groups_names", "group_ids"):
            key = getattr(request, name, None)
            if isinstance(key, list):
                key = key[0] if key and isinstance(key[0], str) else None
            coordinator = self.coordinators.get((1 if name == "transactional_id" else 0, key))
            if coordinator is not None:
                return coordinator
        partition = _first_partition(request)
        return self.leaders.get(partition) if partition is not None else None

    # --- drawing ----------------------------------------------------------------------------------------

    def _struct(self, cls: type, version: int, owner: str) -> Any:
        values = {}
        for spec in present_fields(cls, version):
            values[spec.name] = self._field(spec, cls, version, owner)
        return cls(**values)

    def _field(self, spec: Any, cls: type, version: int, owner: str) -> Any:
        rng = self.rng
        if version in spec.nullable and rng.random() < 0.1:
            return None
        if spec.is_array:
            count = rng.choice((0, 0, 0, 0, 1, 2) if spec.name in _MOSTLY_EMPTY else (0, 1, 1, 2, ARRAY_ITEMS_MAX))
            items = [self._item(spec, cls, version, owner) for _ in range(count)]
            if items and rng.random() < 0.15:
                items.append(items[0])  # a duplicate entry
            return items
        return self._item(spec, cls, version, owner)

    def _item(self, spec: Any, cls: type, version: int, owner: str) -> Any:
        if spec.is_struct:
            struct_class = cls._struct_classes[spec.name]
            return self._struct(struct_class, version, f"{owner}.{struct_class.__name__}")
        kind, name, rng = spec.item_type, spec.name, self.rng
        if kind in INT_BOUNDS:
            return self._int(kind, name)
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "float64":
            return rng.choice((0.0, 1.0, -1.0, 1e9, rng.uniform(-10, 1000)))
        if kind == "uuid":
            known = self.learned["topic_id"]
            if known and rng.random() < 0.6:
                return rng.choice(known)
            return rng.choice((NULL_UUID, uuid.UUID(int=rng.getrandbits(128))))
        if kind == "records":
            return self._records()
        if kind == "bytes":
            return rng.choice((b"", b"\x00", rng.randbytes(rng.randint(1, 40))))
        return self._string(name, owner)

    def _int(self, kind: str, name: str) -> int:
        rng = self.rng
        low, high = INT_BOUNDS[kind]
        roll = rng.random()
        if name in _PARTITION_FIELDS and roll < 0.8:
            return rng.choice((0, 0, 1, 2, 3, -1, 99))
        if name in _BROKER_FIELDS and roll < 0.8:
            return rng.choice((1, 2, 3, -1, 99))
        if name in _LEARNED_INTS and self.learned[name] and roll < 0.5:
            return max(low, min(high, rng.choice(self.learned[name]) + rng.choice((0, 0, 0, 1, -1))))
        if name in _CHOICES and roll < 0.85:
            return rng.choice(_CHOICES[name])
        if roll < 0.85:
            return max(low, min(high, rng.choice((-1, 0, 0, 1, 2, 3, rng.randint(0, 20), low, high))))
        return rng.randint(low, high)

    def _string(self, name: str, owner: str) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            return rng.choice(("", "x", "\u00e9\u00e8", "a" * 300, "fuzz-" + str(rng.randint(0, 9))))
        if name in _GROUP_FIELDS:
            return rng.choice(GROUPS)
        if name in _TXN_FIELDS:
            return rng.choice(TRANSACTIONAL_IDS)
        if name == "key" or name == "coordinator_keys":
            return rng.choice((*GROUPS, *TRANSACTIONAL_IDS))
        if name == "member_id" and self.learned["member_id"] and roll < 0.7:
            return rng.choice(self.learned["member_id"])
        if name == "resource_name" or name == "resource_name_filter":
            return rng.choice((*self.topics[:-1], *ABSENT_BROKERS))  # never "" (a broker resource: the cluster)
        if name == "name" and "Config" in owner or name in ("configuration_keys", "key") and "Config" in owner:
            return rng.choice(CONFIG_NAMES)
        if name == "name" and "Protocol" in owner:
            return rng.choice(("range", "roundrobin", "cooperative-sticky", "x"))
        if name == "value":
            return rng.choice(CONFIG_VALUES)
        if name == "subscribed_topic_regex":
            return rng.choice(("fuzz-.*", "(", ".*", "fuzz-a"))
        if name == "name" or name in _TOPIC_FIELDS:
            return rng.choice(self.topics)
        if name == "protocol_type":
            return rng.choice(("consumer", "consumer", "consumer", "", "x"))
        if name in ("principal", "principal_filter"):
            return rng.choice(("User:fuzz", "User:*", "x", ""))
        return rng.choice(("", "x", "fuzz", "range", "uniform", "consumer", "*"))

    def _records(self) -> bytes | None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            return rng.choice((None, b""))
        if roll < 0.4:
            return rng.randbytes(rng.randint(1, 120))
        count = rng.randint(1, 4)
        records = [(rng.choice((None, b"k")), rng.randbytes(rng.randint(0, 30))) for _ in range(count)]
        pids = self.learned["producer_id"]
        flavour = rng.random()
        kwargs: dict[str, Any] = {"compression": rng.choice((0, 0, 1, 4))}
        if flavour < 0.5 and pids:
            epochs = self.learned["producer_epoch"] or [0]
            kwargs.update(producer_id=rng.choice(pids), producer_epoch=rng.choice(epochs),
                          base_sequence=rng.choice((0, 0, 1, rng.randint(0, 50))), is_transactional=flavour < 0.25)
        batch = build_batch(records, base_timestamp=rng.choice((0, 1_700_000_000_000, -1)), **kwargs)
        if rng.random() < 0.1:  # one flipped byte past the CRC's start: a batch whose checksum is wrong
            position = rng.randint(21, len(batch) - 1)
            batch = batch[:position] + bytes([batch[position] ^ 0xFF]) + batch[position + 1:]
        return batch

    # --- learning ---------------------------------------------------------------------------------------

    def _learn_struct(self, struct: Any) -> None:
        names = getattr(struct, "_names", ())
        for name in names:
            value = getattr(struct, name)
            if isinstance(value, list):
                for item in value:
                    if hasattr(item, "_names"):
                        self._learn_struct(item)
            elif hasattr(value, "_names"):
                self._learn_struct(value)
            elif name in _LEARNED_INTS and isinstance(value, int) and value >= 0:
                self._remember(name, value)
            elif name == "member_id" and isinstance(value, str) and value:
                self._remember(name, value)
        topic_id = getattr(struct, "topic_id", None)
        if isinstance(topic_id, uuid.UUID) and topic_id.int and getattr(struct, "name", None) in self._own_topics:
            self._remember("topic_id", topic_id)

    def _remember(self, name: str, value: Any) -> None:
        known = self.learned[name]
        if value not in known:
            known.append(value)
            if len(known) > 8:
                del known[0]


def _first_partition(struct: Any) -> tuple[str, int] | None:
    """The first (topic name, partition) a request names: a struct with a topic name whose list of partition
    structs (or ints) starts with a partition index."""
    names = getattr(struct, "_names", ())
    topic = next((getattr(struct, n) for n in ("name", "topic") if n in names
                  and isinstance(getattr(struct, n), str)), None)
    for name in names:
        value = getattr(struct, name)
        if not isinstance(value, list) or not value:
            continue
        first = value[0]
        if topic is not None and isinstance(first, int) and name in _PARTITION_FIELDS:
            return topic, first
        if hasattr(first, "_names"):
            if topic is not None:
                index = next((getattr(first, n) for n in ("partition_index", "partition", "index")
                              if n in first._names), None)
                if isinstance(index, int):
                    return topic, index
            found = _first_partition(first)
            if found is not None:
                return found
    return None
