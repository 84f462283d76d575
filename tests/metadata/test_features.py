"""Cluster features in the metadata log (KIP-584, metadata/features.py): the bootstrap level written with the
first registration, UpdateFeatures' rules (Kafka's FeatureControlManager), registrations refused for a
finalized level a broker cannot run, and the levels surviving a snapshot."""

from metadata.controller import ControllerConfig
from metadata.features import (
    LEGACY_SUPPORTED,
    SAFE_DOWNGRADE,
    TRANSACTION_VERSION,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    supported_features,
)
from metadata.image import image_to_records, records_to_image
from metadata.records import FeatureLevelRecord, SupportedFeature, decode_record_batch
from metadata.requests import BrokerRegistrationRequest, FeatureUpdate, UpdateFeaturesRequest
from partitions.errors import ErrorCode
from tests.metadata.harness import Cluster

TV = TRANSACTION_VERSION


def register(c: Cluster, broker_id: int, features=None, incarnation: int = 0):
    incarnation_id = bytes([broker_id, incarnation]) * 8
    return c.run(BrokerRegistrationRequest(broker_id, incarnation_id, "127.0.0.1", 9000 + broker_id,
                                           features=supported_features() if features is None else features))


def update(c: Cluster, *updates: tuple, validate_only: bool = False):
    return c.run(UpdateFeaturesRequest(tuple(FeatureUpdate(*u) for u in updates), validate_only=validate_only))


def level_records(c: Cluster) -> list[FeatureLevelRecord]:
    return [r for entry in c.log for r in decode_record_batch(entry) if isinstance(r, FeatureLevelRecord)]


def test_the_first_registration_writes_the_bootstrap_level_once():
    c = Cluster(ControllerConfig(bootstrap_features=((TV, 1),)))
    assert TV not in c.image.features.levels
    assert register(c, 1).error_code == ErrorCode.NONE
    assert c.image.features.levels[TV] == 1
    register(c, 2)
    register(c, 1, incarnation=1)
    assert level_records(c) == [FeatureLevelRecord(TV, 1)]
    # the registration keeps what the broker's code supports
    assert c.image.cluster.broker(2).features == supported_features()


def test_upgrade_and_downgrade_follow_kafkas_rules():
    c = Cluster()
    register(c, 1)
    assert c.image.features.levels[TV] == 2
    refused = update(c, (TV, 1, UPGRADE))  # a lower level needs a downgrade type
    assert refused.error_code == ErrorCode.INVALID_UPDATE_VERSION and "downgrade" in refused.message
    assert update(c, (TV, 1, SAFE_DOWNGRADE)).error_code == ErrorCode.NONE
    assert c.image.features.levels[TV] == 1
    assert update(c, (TV, 2, SAFE_DOWNGRADE)).error_code == ErrorCode.INVALID_UPDATE_VERSION  # "downgrade" upward
    assert update(c, (TV, 2, UPGRADE)).error_code == ErrorCode.NONE
    assert update(c, (TV, 0, UNSAFE_DOWNGRADE)).error_code == ErrorCode.NONE
    assert c.image.features.levels[TV] == 0 and c.image.features.finalized() == {}
    for bad in ((TV, 3, UPGRADE), (TV, -1, SAFE_DOWNGRADE), ("no.such.feature", 1, UPGRADE), (TV, 1, 9)):
        answer = update(c, bad)
        assert answer.error_code == ErrorCode.INVALID_UPDATE_VERSION, bad
    assert c.image.features.levels[TV] == 0


def test_a_level_zero_stays_off_across_registrations_and_snapshots():
    c = Cluster()
    register(c, 1)
    update(c, (TV, 0, SAFE_DOWNGRADE))
    register(c, 2)
    register(c, 1, incarnation=1)
    assert c.image.features.levels[TV] == 0  # the bootstrap level is not written again
    reloaded = records_to_image(image_to_records(c.image), c.image.provenance)
    assert reloaded.features == c.image.features and reloaded.cluster == c.image.cluster


def test_an_update_is_all_or_nothing_and_validate_only_writes_nothing():
    c = Cluster()
    register(c, 1)
    before = len(c.log)
    assert update(c, (TV, 1, SAFE_DOWNGRADE), validate_only=True).error_code == ErrorCode.NONE
    assert update(c, (TV, 1, SAFE_DOWNGRADE), ("no.such.feature", 1, UPGRADE)).error_code == \
        ErrorCode.INVALID_UPDATE_VERSION
    assert update(c, (TV, 1, SAFE_DOWNGRADE), (TV, 1, SAFE_DOWNGRADE)).error_code == ErrorCode.INVALID_REQUEST
    assert len(c.log) == before and c.image.features.levels[TV] == 2
    assert update(c, (TV, 2, UPGRADE)).error_code == ErrorCode.NONE  # already there: nothing to write
    assert len(c.log) == before


def test_an_update_needs_every_registered_broker_to_support_the_level():
    c = Cluster(ControllerConfig(bootstrap_features=((TV, 1),)))
    register(c, 1)
    register(c, 2, features=(SupportedFeature(TV, 0, 1),))  # a broker whose code stops at level 1
    answer = update(c, (TV, 2, UPGRADE))
    assert answer.error_code == ErrorCode.INVALID_UPDATE_VERSION and "Broker 2" in answer.message
    assert c.image.features.levels[TV] == 1


def test_a_broker_that_cannot_run_the_finalized_level_may_not_register():
    c = Cluster()
    register(c, 1)
    refused = register(c, 2, features=(SupportedFeature(TV, 0, 1),))
    assert refused.error_code == ErrorCode.UNSUPPORTED_VERSION and TV in refused.message
    assert c.image.cluster.broker(2) is None
    update(c, (TV, 1, SAFE_DOWNGRADE))
    assert register(c, 2, features=(SupportedFeature(TV, 0, 1),)).error_code == ErrorCode.NONE


def test_a_registration_without_features_reads_as_what_older_nodes_supported():
    c = Cluster()
    assert register(c, 1, features=()).error_code == ErrorCode.NONE
    assert LEGACY_SUPPORTED[TV] == (0, 2)
    assert update(c, (TV, 1, SAFE_DOWNGRADE)).error_code == ErrorCode.NONE
