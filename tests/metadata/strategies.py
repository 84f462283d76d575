"""Hypothesis strategies for metadata records."""

from hypothesis import strategies as st

from metadata import records as r

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
ids = st.binary(min_size=16, max_size=16)
text = st.text(max_size=40)
int_tuples = st.lists(int32, max_size=6).map(tuple)
optional_int_tuples = st.none() | int_tuples
optional_bool = st.none() | st.booleans()

RECORD_STRATEGIES = {
    r.RegisterBrokerRecord: st.builds(
        r.RegisterBrokerRecord,
        broker_id=int32,
        incarnation_id=ids,
        broker_epoch=int64,
        host=text,
        port=int32,
        rack=st.none() | text,
        roles=st.lists(text, max_size=3).map(tuple),
        fenced=st.booleans(),
        in_controlled_shutdown=st.booleans(),
    ),
    r.BrokerRegistrationChangeRecord: st.builds(
        r.BrokerRegistrationChangeRecord, int32, int64, optional_bool, optional_bool
    ),
    r.UnregisterBrokerRecord: st.builds(r.UnregisterBrokerRecord, int32, int64),
    r.TopicRecord: st.builds(r.TopicRecord, text, ids),
    r.PartitionRecord: st.builds(
        r.PartitionRecord, ids, int32, int_tuples, int_tuples, int32, int32, int32, int_tuples, int_tuples
    ),
    r.PartitionChangeRecord: st.builds(
        r.PartitionChangeRecord,
        ids,
        int32,
        st.none() | int32,
        optional_int_tuples,
        optional_int_tuples,
        optional_int_tuples,
        optional_int_tuples,
    ),
    r.ConfigRecord: st.builds(r.ConfigRecord, st.sampled_from([2, 4]), text, text, st.none() | text),
    r.RemoveTopicRecord: st.builds(r.RemoveTopicRecord, ids),
    r.ProducerIdsRecord: st.builds(r.ProducerIdsRecord, int32, int64, int64),
    r.FeatureLevelRecord: st.builds(r.FeatureLevelRecord, text, st.integers(0, 32767)),
    r.NoOpRecord: st.builds(r.NoOpRecord),
    r.AccessControlEntryRecord: st.builds(
        r.AccessControlEntryRecord, ids, st.integers(0, 7), text, st.integers(0, 4), text, text,
        st.integers(0, 15), st.integers(0, 3),
    ),
    r.RemoveAccessControlEntryRecord: st.builds(r.RemoveAccessControlEntryRecord, ids),
    r.UserScramCredentialRecord: st.builds(
        r.UserScramCredentialRecord, text, st.integers(1, 2), st.binary(max_size=64), st.binary(max_size=64),
        st.binary(max_size=64), st.integers(4096, 16384),
    ),
    r.RemoveUserScramCredentialRecord: st.builds(r.RemoveUserScramCredentialRecord, text, st.integers(1, 2)),
    r.ClientQuotaRecord: st.builds(
        r.ClientQuotaRecord,
        st.lists(st.builds(r.QuotaEntityPart, st.sampled_from(["user", "client-id"]), st.none() | text),
                 min_size=1, max_size=2, unique_by=lambda part: part.entity_type).map(tuple),
        st.sampled_from(["producer_byte_rate", "consumer_byte_rate"]),
        st.floats(1, 2**40, allow_nan=False, allow_infinity=False), st.booleans(),
    ),
}

any_record = st.one_of(*RECORD_STRATEGIES.values())
