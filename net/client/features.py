"""Cluster features over a KafkaClient (what kafka-features.sh describe / upgrade / downgrade send): the
supported and finalized levels from ApiVersions v3+, and UpdateFeatures. Raises KafkaError with the broker's
code and message on failure."""

from __future__ import annotations

from dataclasses import dataclass

from net.client.aio import KafkaClient
from net.client.errors import raise_for_code
from net.protocol import messages
from net.protocol.codec import ApiKey

API_VERSIONS_WITH_FEATURES = 3  # KIP-584: supported and finalized features, as tagged fields
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # UpdateFeatures v1+ UpgradeType


@dataclass(frozen=True)
class FeatureLevels:
    """One feature as a broker describes it: the levels its code supports and the cluster's finalized level
    (0: not finalized)."""

    name: str
    supported_min: int
    supported_max: int
    finalized: int


async def describe_features(client: KafkaClient) -> tuple[list[FeatureLevels], int]:
    """([FeatureLevels by name], finalized epoch) as the broker the client reaches first reports them."""
    request = messages.ApiVersionsRequest(client_software_name="flotilla-cli", client_software_version="1")
    response = await client._request_any(ApiKey.API_VERSIONS, request)
    raise_for_code(response.error_code, None, "cannot describe features")
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features or []}
    finalized = {f.name: f.max_version_level for f in response.finalized_features or []}
    rows = [FeatureLevels(name, *supported.get(name, (0, 0)), finalized.get(name, 0))
            for name in sorted(set(supported) | set(finalized))]
    return rows, response.finalized_features_epoch


async def update_features(client: KafkaClient, levels: dict[str, int], upgrade_type: int = UPGRADE,
                          validate_only: bool = False) -> None:
    """Set each feature to its level (0 turns it off) in one UpdateFeatures, all or nothing."""
    request_class = messages.UpdateFeaturesRequest
    request = request_class(feature_updates=[request_class.FeatureUpdateKey(
        feature=name, max_version_level=level, allow_downgrade=upgrade_type != UPGRADE, upgrade_type=upgrade_type)
        for name, level in levels.items()], validate_only=validate_only)
    response = await client._request_any(ApiKey.UPDATE_FEATURES, request)
    raise_for_code(response.error_code, response.error_message, "cannot update features")
