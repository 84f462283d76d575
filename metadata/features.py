"""Cluster features (KIP-584): the finalized levels in the metadata log and the controller's rules for them
(Kafka's FeatureControlManager).

Theory of operation:
- Each node's code supports a range of levels per feature (`SUPPORTED_FEATURES`); a broker registers them
  (BrokerRegistrationRequest.features, kept in its RegisterBrokerRecord). A registration that lacks them
  comes from a node that predates them: every such version supported `LEGACY_SUPPORTED`.
- The finalized level of a feature is the last FeatureLevelRecord's (`image.features`). Level 0 turns a
  feature off: the image keeps the 0, so it stays off, and ApiVersions advertises only levels above 0.
- Bootstrap (Kafka writes these when the storage is formatted): the first broker registration a controller
  commits while a feature was never written also writes the controller's bootstrap level for it
  (`bootstrap_records`), so every broker reads one level from the log rather than each its own setting.
  Until then a broker uses its own configured level (`finalized_level`).
- UpdateFeatures (`update_features`) is all or nothing, as in Kafka: every update must name a known feature
  at a level every registered broker and this controller support; a lower level needs a downgrade type and a
  higher one the upgrade type; `validate_only` writes nothing. The first refused update fails the request with
  INVALID_UPDATE_VERSION (INVALID_REQUEST for a feature named twice).
- A broker registering while a feature is finalized at a level its code does not support is refused with
  UNSUPPORTED_VERSION (`registration_error`), as Kafka's ClusterControlManager refuses it.

Pure functions of the image: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from metadata.records import FeatureLevelRecord, SupportedFeature
from metadata.requests import UpdateFeaturesRequest, UpdateFeaturesResponse
from partitions.errors import ErrorCode

TRANSACTION_VERSION = "transaction.version"  # KIP-890: 2 bumps the producer epoch per transaction (part 2)
TRANSACTION_VERSION_MAX = 2
# What this code supports, per feature: (lowest, highest) level.
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, TRANSACTION_VERSION_MAX)}
# What a registration without features (a node before they were registered) supports.
LEGACY_SUPPORTED: Mapping[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, TRANSACTION_VERSION_MAX)}

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # Kafka's FeatureUpdate.UpgradeType codes


def supported_features(supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES) -> tuple[SupportedFeature, ...]:
    """The registration form of `supported`."""
    return tuple(SupportedFeature(name, low, high) for name, (low, high) in sorted(supported.items()))


def registered_ranges(features: Iterable[SupportedFeature]) -> dict[str, tuple[int, int]]:
    """A registration's supported ranges (LEGACY_SUPPORTED for one that names none)."""
    ranges = {f.name: (f.min_level, f.max_level) for f in features}
    return ranges if ranges else dict(LEGACY_SUPPORTED)


def finalized_level(image, name: str, fallback: int) -> int:
    """The feature's level in the metadata log, or `fallback` (the node's configured level) if it was never
    written there."""
    return image.features.levels.get(name, fallback)


def bootstrap_records(image, bootstrap: Mapping[str, int]) -> list[FeatureLevelRecord]:
    """FeatureLevelRecords for the bootstrap levels of features the log never had."""
    return [FeatureLevelRecord(name, level) for name, level in sorted(bootstrap.items())
            if name not in image.features.levels]


def registration_error(image, features: Iterable[SupportedFeature], bootstrap: Mapping[str, int]) -> str | None:
    """Why a broker supporting `features` may not register while the image's levels (or, for features never
    written, the bootstrap ones this registration would write) are finalized; None if it may."""
    ranges = registered_ranges(features)
    levels = dict(bootstrap)
    levels.update(image.features.levels)
    for name, level in sorted(levels.items()):
        if level == 0:
            continue
        low, high = ranges.get(name, (0, 0))
        if not low <= level <= high:
            return (f"Unable to register because the broker does not support finalized version {level} of {name}. "
                    f"The broker supports versions {low}-{high}")
    return None


def update_features(image, request: UpdateFeaturesRequest,
                    supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES,
                    ) -> tuple[list[FeatureLevelRecord], UpdateFeaturesResponse]:
    """The records an UpdateFeatures writes and its answer (see the module docstring)."""
    records: list[FeatureLevelRecord] = []
    seen: set[str] = set()
    for update in request.updates:
        if update.name in seen:
            return [], UpdateFeaturesResponse(ErrorCode.INVALID_REQUEST, f"Feature {update.name} is named twice")
        seen.add(update.name)
        reason = _update_error(image, update.name, update.level, update.upgrade_type, supported)
        if reason is not None:
            return [], UpdateFeaturesResponse(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"The update failed for all features since the following feature had an error: Invalid update "
                f"version {update.level} for feature {update.name}. {reason}")
        if image.features.levels.get(update.name) != update.level:
            records.append(FeatureLevelRecord(update.name, update.level))
    return ([] if request.validate_only else records), UpdateFeaturesResponse(ErrorCode.NONE)


def _update_error(image, name: str, level: int, upgrade_type: int,
                  supported: Mapping[str, tuple[int, int]]) -> str | None:
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "The controller does not support the given upgrade type."
    if level < 0:
        return "A feature version cannot be less than 0."
    if name not in supported:
        return f"The controller does not support {name}."
    reason = _unsupported(level, "The controller", supported[name])
    if reason is not None:
        return reason
    for broker_id, registration in sorted(image.cluster.brokers.items()):
        reason = _unsupported(level, f"Broker {broker_id}",
                              registered_ranges(registration.features).get(name, (0, 0)))
        if reason is not None:
            return reason
    current = image.features.levels.get(name, 0)
    if level < current and upgrade_type == UPGRADE:
        return ("Can't downgrade the version of this feature without setting the upgrade type to either safe or "
                "unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        return "Can't downgrade to a newer version."
    return None


def _unsupported(level: int, who: str, levels: tuple[int, int]) -> str | None:
    low, high = levels
    if low <= level <= high:
        return None
    return f"{who} does not support this feature at version {level}; it supports versions {low}-{high}."
