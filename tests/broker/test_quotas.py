"""broker/quotas.py: which quota applies to a client (Kafka's precedence, per quota type), who shares a rate,
the sampled rate and the throttle time it calls for."""

from metadata.image import ClientQuotasImage, FrozenMap
from broker.quotas import CONTROLLER_MUTATION, FETCH, PRODUCE, REQUEST, ClientQuotas, SampledRate


def image(**entities):
    """entities: name -> (entity, {key: value})."""
    return ClientQuotasImage(FrozenMap({entity: FrozenMap(values) for entity, values in entities.values()}))


def quotas(*pairs):
    manager = ClientQuotas()
    manager.update(image(**{str(i): pair for i, pair in enumerate(pairs)}))
    return manager


def test_precedence_most_specific_first_per_quota_type():
    manager = quotas(
        ((("client-id", None),), {PRODUCE: 1.0}),
        ((("client-id", "c"),), {PRODUCE: 2.0}),
        ((("user", None),), {PRODUCE: 3.0}),
        ((("client-id", None), ("user", None)), {PRODUCE: 4.0}),
        ((("client-id", "c"), ("user", None)), {PRODUCE: 5.0}),
        ((("user", "alice"),), {PRODUCE: 6.0, FETCH: 60.0}),
        ((("client-id", None), ("user", "alice")), {PRODUCE: 7.0}),
        ((("client-id", "c"), ("user", "alice")), {PRODUCE: 8.0}),
    )
    assert manager.quota(PRODUCE, "alice", "c") == (8.0, ("alice", "c"))
    assert manager.quota(PRODUCE, "alice", "d") == (7.0, ("alice", "d"))  # user + default client: each client its own
    assert manager.quota(FETCH, "alice", "c") == (60.0, ("alice", ""))  # per type: the user's, shared by its clients
    assert manager.quota(PRODUCE, "bob", "c") == (5.0, ("bob", "c"))
    assert manager.quota(PRODUCE, "bob", "d") == (4.0, ("bob", "d"))
    assert manager.quota(FETCH, "bob", "d") is None


def test_default_user_then_client_levels():
    manager = quotas(((("user", None),), {PRODUCE: 3.0}), ((("client-id", "c"),), {PRODUCE: 2.0}))
    assert manager.quota(PRODUCE, "bob", "c") == (3.0, ("bob", ""))
    manager = quotas(((("client-id", "c"),), {PRODUCE: 2.0}), ((("client-id", None),), {PRODUCE: 1.0}))
    assert manager.quota(PRODUCE, "bob", "c") == (2.0, ("", "c"))  # shared by every user of client id c
    assert manager.quota(PRODUCE, "bob", "other") == (1.0, ("", "other"))
    assert manager.quota(PRODUCE, "", "x") == (1.0, ("", "x"))  # anonymous
    assert not ClientQuotas().enabled and ClientQuotas().quota(PRODUCE, "a", "b") is None


def test_rate_counts_at_least_num_minus_one_windows_and_forgets_old_ones():
    rate = SampledRate(num=11, window_ms=1000)
    rate.record(10_000, 0)
    assert rate.rate(0) == 1000.0  # 10 kB over the 10 s minimum
    rate.record(10_000, 500)
    assert rate.rate(500) == 20_000 / 10.5  # half a window elapsed, plus the ten counted at least
    assert rate.rate(11_000) == 0.0  # both windows expired (11 windows of 1 s)
    rate.record(1_000, 20_000)
    for t in range(20_000, 35_000, 1000):
        rate.record(1_000, t)
    assert 900 < rate.rate(35_000) <= 1100  # a steady 1 kB/s


def test_throttle_time_brings_the_rate_back_to_the_quota():
    manager = quotas(((("client-id", "c"),), {PRODUCE: 1000.0}))
    assert manager.record(PRODUCE, "u", "c", 10_000, 0) == 0  # 10 kB / 10 s: at the quota
    throttle = manager.record(PRODUCE, "u", "c", 10_000, 0)  # 2 kB/s against 1 kB/s over 10 s
    assert throttle == 10_000
    assert manager.record(PRODUCE, "u", "other", 10_000, 0) == 0  # another client id has its own rate
    assert manager.record(FETCH, "u", "c", 10**9, 0) == 0  # no consumer quota
    # Unrecorded bytes (a throttled fetch) do not count.
    manager = quotas(((("client-id", "c"),), {FETCH: 1000.0}))
    assert manager.record(FETCH, "u", "c", 20_000, 0) > 0
    manager.unrecord(FETCH, "u", "c", 20_000, 0)
    assert manager.record(FETCH, "u", "c", 5_000, 1) == 0
    assert manager.max_bytes(FETCH, "u", "c") == 10_000  # quota x (num - 1) windows
    assert manager.max_bytes(PRODUCE, "u", "c") is None


def test_a_request_quota_throttles_at_most_one_window_a_byte_rate_without_bound():
    manager = quotas(((("client-id", "c"),), {REQUEST: 1.0, PRODUCE: 1.0}))
    # 50 percent-seconds (half a second of handling) against 1% of a thread: far above, bounded to one window.
    assert manager.record(REQUEST, "u", "c", 50.0, 0) == 1000
    assert manager.record(PRODUCE, "u", "c", 1_000, 0) > 1000


def test_controller_mutations_take_tokens_from_a_bucket_with_a_burst_of_num_windows():
    manager = quotas(((("client-id", "c"),), {CONTROLLER_MUTATION: 2.0}))  # burst: 2 x 11 windows of 1 s
    assert manager.record(CONTROLLER_MUTATION, "u", "c", 22, 0) == 0  # the whole burst at once: 0 tokens left
    assert manager.record(CONTROLLER_MUTATION, "u", "c", 10, 0) == 5_000  # -10 tokens refill at 2 a second
    assert manager.record(CONTROLLER_MUTATION, "u", "c", 1, 5_000) == 500  # refilled to 0 by then, now -1
    assert manager.record(CONTROLLER_MUTATION, "u", "c", 1, 100_000) == 0  # refilled up to the burst, not beyond
    assert manager.record(CONTROLLER_MUTATION, "u", "c", 21, 100_000) == 0
    assert manager.record(CONTROLLER_MUTATION, "u", "c", 1, 100_000) == 500
    assert manager.record(CONTROLLER_MUTATION, "u", "other", 22, 0) == 0  # each client id its own bucket
    assert manager.record(PRODUCE, "u", "c", 10**9, 0) == 0  # no byte-rate quota


def test_ip_quotas_alone_leave_requests_uncounted():
    # An ip entity's connection_creation_rate is the listeners' (net/connections.py): with no user or client-id
    # quota, no request is counted, rated or throttled.
    manager = quotas(((("ip", "10.0.0.1"),), {"connection_creation_rate": 5.0}),
                     ((("ip", None),), {"connection_creation_rate": 50.0}))
    assert not manager.enabled
    assert manager.record(PRODUCE, "alice", "c", 10**9, 0) == 0 and manager._rates == {}
    manager.update(image(ip=((("ip", None),), {"connection_creation_rate": 50.0}),
                         client=((("client-id", "c"),), {PRODUCE: 1000.0})))
    assert manager.enabled
    assert manager.record(PRODUCE, "alice", "c", 10**6, 0) > 0
