"""UpdateFeatures (KIP-584), forwarded to the active controller, which checks it against every registered
broker's supported levels and writes FeatureLevelRecords (metadata/features.py). The finalized levels reach
clients through ApiVersions v3+ (broker/handlers_cluster.py), as in Kafka; there is no describe request.

Authorization (Kafka's): ALTER on the cluster. v0 says a downgrade with AllowDowngrade (read as a safe
downgrade, as Kafka's UpdateFeaturesRequest does); v1+ with UpgradeType. v0-1 answer each feature with the
request's one result when it succeeded, v2 only at the top (KAFKA-16308); a failure is the top-level error with no
per-feature results, as Kafka's QuorumController answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.handlers_admin import AdminApis, code_and_message
from broker.handlers_security import CLUSTER_DENIED
from metadata.features import SAFE_DOWNGRADE, UPGRADE
from metadata.requests import FeatureUpdate, UpdateFeaturesRequest as ControllerUpdateFeatures
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.apis import KafkaApis
    from broker.core import TopicPartition

UPDATE_FEATURES_VERSION_UPGRADE_TYPE = 1  # v1+: UpgradeType and ValidateOnly
UPDATE_FEATURES_VERSION_NO_RESULTS = 2  # v2: the top-level error alone


class FeatureApis:
    """UpdateFeatures (see the module docstring)."""

    def __init__(self, apis: "KafkaApis", admin: "AdminApis") -> None:
        self.apis = apis
        self.admin = admin

    def api_handlers(self):
        return [(ApiKey.UPDATE_FEATURES, 0, 2, self._update)]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Forwarded requests complete from the controller's callbacks."""

    def next_deadline_ms(self) -> int | None:
        return None

    def _update(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.UpdateFeaturesResponse
        names = [update.feature for update in request.feature_updates]

        def answer(code: int, message: str | None) -> Any:
            results = []
            if code == ErrorCode.NONE and header.api_version < UPDATE_FEATURES_VERSION_NO_RESULTS:
                results = [response_class.UpdatableFeatureResult(feature=name, error_code=code, error_message=None)
                           for name in names]
            return response_class(throttle_time_ms=0, error_code=code, error_message=message, results=results)

        if not self.apis.authorize_cluster(Op.ALTER):
            return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
        if not names:
            return answer(ErrorCode.INVALID_REQUEST, "No feature updates were given")
        updates = []
        for update in request.feature_updates:
            if header.api_version < UPDATE_FEATURES_VERSION_UPGRADE_TYPE:
                upgrade_type = SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
            else:
                upgrade_type = update.upgrade_type
            updates.append(FeatureUpdate(update.feature, update.max_version_level, upgrade_type))
        validate_only = header.api_version >= UPDATE_FEATURES_VERSION_UPGRADE_TYPE and request.validate_only
        controller_request = ControllerUpdateFeatures(tuple(updates), validate_only=validate_only)

        def build(results: list[Any]) -> Any:
            code, message = code_and_message(results[0] if results else None)
            return answer(code, message or None)

        return self.admin.forward(header, [controller_request], build)
