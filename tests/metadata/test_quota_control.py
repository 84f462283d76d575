"""The controller's AlterClientQuotas: Kafka's validation rules, the records it writes, replay into the image,
removal, snapshots and the codec."""

import pytest

from metadata.image import EMPTY_IMAGE, MetadataDelta, image_to_records, records_to_image
from metadata.records import ClientQuotaRecord, QuotaEntityPart as Part, decode_record, encode_record
from metadata.requests import AlterClientQuotasRequest, QuotaAlteration, QuotaOp, decode_request, encode_request
from partitions.errors import CorruptRecordError, ErrorCode
from tests.security.test_security_control import commit, controller


def alter(*entries, validate_only=False):
    return AlterClientQuotasRequest(tuple(QuotaAlteration(tuple(Part(t, n) for t, n in entity), tuple(
        QuotaOp(k, v, v is None) if v is not None else QuotaOp(k, 0.0, True) for k, v in ops.items()))
        for entity, ops in entries), validate_only)


ALICE = (("user", "alice"),)
SLOW = (("client-id", "slow"),)
ALICE_ANY_CLIENT = (("user", "alice"), ("client-id", None))


def test_set_change_and_remove_quotas_of_several_entities():
    ctl = controller()
    result = commit(ctl, alter((ALICE, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}),
                               (ALICE_ANY_CLIENT, {"producer_byte_rate": 10.0})))
    assert [r.error_code for r in result.response.results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len(result.records) == 3
    quotas = ctl.image().quotas
    assert quotas.value((("user", "alice"),), "consumer_byte_rate") == 2048.0
    # The entity is canonical whatever order its parts come in.
    assert quotas.value((("client-id", None), ("user", "alice")), "producer_byte_rate") == 10.0
    # Setting the same value writes nothing; changing one writes one record.
    same = commit(ctl, alter((ALICE, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 4096.0})))
    assert [r.key for r in same.records] == ["consumer_byte_rate"]
    removed = commit(ctl, alter((ALICE_ANY_CLIENT, {"producer_byte_rate": None}), (SLOW, {"producer_byte_rate": None})))
    assert [r.error_code for r in removed.response.results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len(removed.records) == 1 and removed.records[0].remove  # removing what is not there writes nothing
    assert (("client-id", None), ("user", "alice")) not in ctl.image().quotas.entities
    assert dict(ctl.image().quotas.entities[(("user", "alice"),)]) == {"producer_byte_rate": 1024.0,
                                                                       "consumer_byte_rate": 4096.0}


@pytest.mark.parametrize("entity, ops, message", [
    ((), {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ((("user", "a"), ("user", "b")), {"producer_byte_rate": 1.0}, "duplicate entity entry user"),
    ((("group", "g"),), {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: group"),
    ((("ip", "127.0.0.1"), ("user", "a")), {"connection_creation_rate": 1.0}, "IP entity should not be combined"),
    ((("ip", "not-an-ip"),), {"connection_creation_rate": 1.0}, "not-an-ip is not a valid IP"),
    ((("ip", "0:0::1"),), {"connection_creation_rate": 1.0}, "not an IP in its canonical form (write ::1)"),
    ((("ip", "10.0.0.1"),), {"producer_byte_rate": 1.0}, "Invalid configuration key producer_byte_rate"),
    ((("ip", None),), {"connection_creation_rate": 2.5}, "must be an integer"),
    ((("ip", None),), {"connection_creation_rate": 2.0**31}, "too large for an INT"),
    ((("user", ""),), {"producer_byte_rate": 1.0}, "Empty user not supported"),
    (ALICE, {"producer_byte_rate": 0.0}, "must be greater than 0"),
    (ALICE, {"producer_byte_rate": -5.0}, "must be greater than 0"),
    (ALICE, {"producer_byte_rate": 1.5}, "must be an integer"),
    (ALICE, {"consumer_byte_rate": 2.0**64}, "too large for a LONG"),
    (ALICE, {"fetch_rate": 1.0}, "Invalid configuration key fetch_rate"),
    (ALICE, {"connection_creation_rate": 10.0}, "Invalid configuration key connection_creation_rate"),
    (ALICE, {"request_percentage": 0.0}, "must be greater than 0"),
])
def test_invalid_entries_fail_alone_with_invalid_request(entity, ops, message):
    ctl = controller()
    result = commit(ctl, alter((entity, ops), (SLOW, {"producer_byte_rate": 100.0})))
    bad, good = result.response.results
    assert bad.error_code == ErrorCode.INVALID_REQUEST and message in bad.message, bad
    assert good.error_code == ErrorCode.NONE
    assert [r.entity for r in result.records] == [(Part("client-id", "slow"),)]


@pytest.mark.parametrize("key", ["request_percentage", "controller_mutation_rate"])
def test_request_percentage_and_controller_mutation_rate_may_be_fractional(key):
    ctl = controller()
    result = commit(ctl, alter((SLOW, {key: 12.5})))
    assert result.response.results[0].error_code == ErrorCode.NONE
    assert ctl.image().quotas.value((("client-id", "slow"),), key) == 12.5


def test_duplicate_entity_and_duplicate_key_fail_and_validate_only_writes_nothing():
    ctl = controller()
    result = commit(ctl, alter((SLOW, {"producer_byte_rate": 1.0}), (SLOW, {"producer_byte_rate": 2.0})))
    assert [r.error_code for r in result.response.results] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    assert "duplicate entity" in result.response.results[1].message
    twice = AlterClientQuotasRequest((QuotaAlteration((Part("user", "bob"),), (
        QuotaOp("producer_byte_rate", 1.0, False), QuotaOp("producer_byte_rate", 2.0, False))),))
    result = commit(ctl, twice)
    assert result.response.results[0].error_code == ErrorCode.INVALID_REQUEST and result.records == []
    result = commit(ctl, alter((ALICE, {"producer_byte_rate": 5.0}), validate_only=True))
    assert result.response.results[0].error_code == ErrorCode.NONE and result.records == []
    assert (("user", "alice"),) not in ctl.image().quotas.entities


def test_records_requests_and_snapshots_round_trip():
    record = ClientQuotaRecord((Part("user", None), Part("client-id", "c")), "producer_byte_rate", 512.0)
    assert decode_record(encode_record(record)) == record
    request = alter((ALICE_ANY_CLIENT, {"consumer_byte_rate": 3.0, "producer_byte_rate": None}), validate_only=True)
    assert decode_request(encode_request(request)) == request
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(record)
    delta.replay(ClientQuotaRecord((Part("user", "z"),), "consumer_byte_rate", 7.0))
    image = delta.apply()
    assert records_to_image(image_to_records(image), image.provenance) == image


def test_a_record_with_a_value_that_is_not_a_finite_float_is_refused():
    for value in (float("nan"), float("inf")):
        data = encode_record(ClientQuotaRecord((Part("user", "a"),), "producer_byte_rate", value))
        with pytest.raises(CorruptRecordError):
            decode_record(data)


def test_ip_entities_take_a_connection_creation_rate():
    ctl = controller()
    result = commit(ctl, alter(((("ip", "10.0.0.7"),), {"connection_creation_rate": 5.0}),
                               ((("ip", None),), {"connection_creation_rate": 100.0})))
    assert [r.error_code for r in result.response.results] == [ErrorCode.NONE, ErrorCode.NONE]
    quotas = ctl.image().quotas
    assert quotas.value((("ip", "10.0.0.7"),), "connection_creation_rate") == 5.0
    assert quotas.value((("ip", None),), "connection_creation_rate") == 100.0
