"""Client quotas (Kafka's ClientQuotaManager with its DefaultQuotaCallback, and ClientRequestQuotaManager),
sans-IO.

Theory of operation. The quotas are metadata (ClientQuotaRecord, `image.quotas`), set with AlterClientQuotas;
each broker enforces them on its own traffic, as Kafka's brokers do (a client spread over three brokers may
use three times its quota in all). Four quota types: `producer_byte_rate` (the bytes of each Produce request a
client sends), `consumer_byte_rate` (the record bytes of each Fetch response a consumer gets; followers'
fetches are replication, never a client's), `request_percentage` (the time the node spends handling the
client's requests, as a percentage of one thread: 100 is all of one core; recorded by net/dispatcher.py for
every request but followers' fetches, inter-broker WriteTxnMarkers and acks=0 produces, as Kafka exempts them)
and `controller_mutation_rate` (KIP-599: partitions created, added or deleted per second by CreateTopics,
CreatePartitions and DeleteTopics; recorded by broker/handlers_admin.py for what the controller did). Kafka
enforces the last on its active controller, for the whole cluster; here the broker the client asked records
it, like the others, so a client spread over three brokers gets three times it.

Which quota applies to a client (user, client id) is Kafka's order of precedence, for each quota type on its
own, the first entity that has a value for it:
    user + client-id, user + default client-id, user, default user + client-id,
    default user + default client-id, default user, client-id, default client-id
and the match says which clients share one rate: a quota on a user is shared by all its client ids, a default
quota is each user's (or client id's) own. The user is the principal's name ("ANONYMOUS" without
authentication).

Rates are Kafka's sampled rate: `quota.window.num` (11) windows of `quota.window.size.seconds` (1) each; the
rate is the sum of the live windows over their elapsed time, counted as at least `num - 1` windows. A client
whose rate goes above its quota is throttled by
    throttle_ms = (rate - quota) / quota * elapsed_window_ms,
the time after which, with nothing more recorded, its rate is back at the quota (KIP-13). The broker answers
at once with `throttle_time_ms` set and then reads nothing more from that connection for that long (KIP-219:
net/dispatcher.py mutes the connection). A throttled fetch is answered empty, its bytes unrecorded, as Kafka
does, and a consumer's fetch asks for no more than `quota * (num - 1) * window` bytes. A request quota's
throttle is at most one window (Kafka bounds it so), a byte rate's is not.

A controller mutation quota is Kafka's token bucket instead: a client starts with a burst of `quota * num *
window` tokens, which refill at `quota` per second up to that burst; each mutation takes one, and once the
tokens are below zero the client is throttled for the time the refill takes to bring them back to zero,
    throttle_ms = -tokens / quota * 1000.
Kafka's permissive versions (CreateTopics v0-5, DeleteTopics v0-4, CreatePartitions v0-2) accept the mutations
meanwhile; its strict ones (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) refuse those of a client
already below zero with THROTTLING_QUOTA_EXCEEDED (broker/handlers_admin.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metadata.image import ClientQuotasImage, QuotaEntity
from metadata.quota_control import CONNECTION_CREATION_RATE, IP

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
CONTROLLER_MUTATION = "controller_mutation_rate"
QUOTA_TYPES = (PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION)
WINDOW_NUM_DEFAULT = 11  # quota.window.num
WINDOW_MS_DEFAULT = 1_000  # quota.window.size.seconds
ANONYMOUS = "ANONYMOUS"
SENSORS_MAX = 100_000  # (quota type, user, client id) rates kept; the least recently used go beyond it


def ip_connection_rate(quotas: ClientQuotasImage, host: str) -> float | None:
    """KIP-612: the connection_creation_rate quota of connections from `host` (its own ip entity, else the
    default one), or None; enforced by net/connections.py as each listener accepts."""
    for entity in (((IP, host),), ((IP, None),)):
        value = quotas.value(entity, CONNECTION_CREATION_RATE)
        if value is not None:
            return value
    return None


def quota_user(session) -> str:
    """The session principal's name, as Kafka's quota entities name users ("User:alice" -> "alice")."""
    principal = session.principal
    return principal.split(":", 1)[1] if ":" in principal else principal


def _precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """Kafka's order of precedence: (entity, the (user, client id) that shares the rate) for each level."""
    return [
        ((("client-id", client_id), ("user", user)), (user, client_id)),
        ((("client-id", None), ("user", user)), (user, client_id)),
        ((("user", user),), (user, "")),
        ((("client-id", client_id), ("user", None)), (user, client_id)),
        ((("client-id", None), ("user", None)), (user, client_id)),
        ((("user", None),), (user, "")),
        ((("client-id", client_id),), ("", client_id)),
        ((("client-id", None),), ("", client_id)),
    ]


@dataclass
class SampledRate:
    """Kafka's Rate over SampledStat: `num` windows of `window_ms`; values recorded into the current one."""

    num: int
    window_ms: int
    starts: list[int] = field(default_factory=list)  # window start times, oldest first
    sums: list[float] = field(default_factory=list)

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self.starts or now_ms >= self.starts[-1] + self.window_ms:
            self.starts.append(now_ms)
            self.sums.append(0.0)
            if len(self.starts) > self.num:
                del self.starts[0], self.sums[0]
        self.sums[-1] += value

    def _purge(self, now_ms: int) -> None:
        expiry = self.num * self.window_ms
        while self.starts and now_ms - self.starts[0] >= expiry:
            del self.starts[0], self.sums[0]

    def window_size_ms(self, now_ms: int) -> int:
        """The elapsed time the rate divides by: since the oldest live window, at least num - 1 windows."""
        elapsed = now_ms - self.starts[0] if self.starts else 0
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def rate(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        return sum(self.sums) * 1000.0 / self.window_size_ms(now_ms)

    def throttle_ms(self, quota: float, now_ms: int) -> int:
        """0 within `quota`; above it, the time after which, with nothing more recorded, the rate is back at the
        quota: (rate - quota) / quota * the elapsed window (KIP-13), at least 1 ms."""
        observed = self.rate(now_ms)
        if observed <= quota:
            return 0
        return max(1, round((observed - quota) / quota * self.window_size_ms(now_ms)))


@dataclass
class TokenBucket:
    """Kafka's TokenBucket stat: tokens refill at the quota's rate up to a burst; recording takes them."""

    tokens: float
    updated_ms: int

    def record(self, value: float, quota: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.tokens + quota * max(0, now_ms - self.updated_ms) / 1000) - value
        self.updated_ms = now_ms


class ClientQuotas:
    """The client quotas of one broker: which applies to a client, its rate, and its throttle time."""

    def __init__(self, window_num: int = WINDOW_NUM_DEFAULT, window_ms: int = WINDOW_MS_DEFAULT) -> None:
        self.window_num = window_num
        self.window_ms = window_ms
        self._image = ClientQuotasImage()
        self._enabled = False  # the image has a user or client-id quota (ip entities are the listeners' affair)
        self._found: dict[tuple[str, str, str], tuple[float, tuple[str, str]] | None] = {}  # quota() of this image
        self._rates: dict[tuple[str, str, str], SampledRate] = {}  # (quota type, user, client id), LRU order
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}  # controller mutations, the same keys

    @property
    def enabled(self) -> bool:
        """Some user or client-id entity has a quota: requests are counted. Only ip entities (KIP-612's
        connection rates, net/connections.py) leave requests uncounted."""
        return self._enabled

    def update(self, image: ClientQuotasImage) -> None:
        """A new metadata image's quotas. A client's rate carries over when its quota changes."""
        if image is not self._image:
            self._image = image
            self._found.clear()
            self._enabled = any(part[0] != IP for entity in image.entities for part in entity)

    def quota(self, quota_type: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """(the quota's value, the (user, client id) that shares the rate) of the quota that applies, or None."""
        if not self._enabled:
            return None
        key = (quota_type, user, client_id)
        if key in self._found:
            return self._found[key]
        if len(self._found) >= SENSORS_MAX:
            self._found.clear()
        found = None
        user = user or ANONYMOUS
        for entity, sharing in _precedence(user, client_id):
            if not client_id and any(part[0] == "client-id" and part[1] is not None for part in entity):
                continue
            value = self._image.value(entity, quota_type)
            if value is not None:
                found = (value, sharing)
                break
        self._found[key] = found
        return found

    def record(self, quota_type: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` (bytes, or percent-seconds of a request quota) for the client; the throttle time (ms)
        its rate now calls for, 0 within quota."""
        found = self.quota(quota_type, user, client_id)
        if found is None:
            return 0
        limit, sharing = found
        if quota_type == CONTROLLER_MUTATION:
            return self._record_mutations(limit, sharing, value, now_ms)
        rate = self._rate(quota_type, sharing)
        rate.record(value, now_ms)
        throttle_ms = rate.throttle_ms(limit, now_ms)
        # A request quota's throttle is at most one window (Kafka's ClientRequestQuotaManager); a byte rate's is
        # not bounded.
        return min(throttle_ms, self.window_ms) if quota_type == REQUEST else throttle_ms

    def _record_mutations(self, quota: float, sharing: tuple[str, str], value: float, now_ms: int) -> int:
        burst = quota * self.window_num * self.window_ms / 1000
        key = (CONTROLLER_MUTATION, *sharing)
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            bucket = TokenBucket(burst, now_ms)
            if len(self._buckets) >= SENSORS_MAX:
                del self._buckets[next(iter(self._buckets))]
        self._buckets[key] = bucket  # most recently used last
        bucket.record(value, quota, burst, now_ms)
        return 0 if bucket.tokens >= 0 else max(1, round(-bucket.tokens / quota * 1000))

    def unrecord(self, quota_type: str, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back bytes recorded for a response that was not sent (a throttled fetch)."""
        found = self.quota(quota_type, user, client_id)
        if found is not None:
            self._rate(quota_type, found[1]).record(-value, now_ms)

    def max_bytes(self, quota_type: str, user: str, client_id: str) -> int | None:
        """The most one response may carry without being throttled for sure (Kafka's getMaxValueInQuotaWindow),
        None without a quota."""
        found = self.quota(quota_type, user, client_id)
        if found is None:
            return None
        return max(1, int(found[0] * (self.window_num - 1) * self.window_ms / 1000))

    def _rate(self, quota_type: str, sharing: tuple[str, str]) -> SampledRate:
        key = (quota_type, *sharing)
        rate = self._rates.pop(key, None)
        if rate is None:
            rate = SampledRate(self.window_num, self.window_ms)
            if len(self._rates) >= SENSORS_MAX:
                del self._rates[next(iter(self._rates))]
        self._rates[key] = rate  # most recently used last
        return rate
