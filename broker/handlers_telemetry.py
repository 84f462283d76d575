"""Client telemetry APIs (sans-IO; KIP-714): GetTelemetrySubscriptions and PushTelemetry, served when the node
has somewhere to show what clients push (its metrics endpoint, as Kafka serves them only with a telemetry
receiver; otherwise ApiVersions leaves them out and clients push nothing), and ListClientMetricsResources,
the subscriptions' names. The subscriptions themselves are CLIENT_METRICS config resources, altered and
described with the config APIs (broker/handlers_admin.py). broker/telemetry.py has the semantics.

Authorization (Kafka's): the telemetry requests need none; ListClientMetricsResources needs DESCRIBE_CONFIGS
on the cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.telemetry import ACCEPTED_COMPRESSION_TYPES, TELEMETRY_MAX_BYTES, ClientMetricsManager
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from net.protocol.types import NULL_UUID
from partitions.errors import ErrorCode
from security.acl import AclOperation as Op

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.apis import KafkaApis
    from broker.core import TopicPartition


class TelemetryApis:
    def __init__(self, apis: "KafkaApis", manager: ClientMetricsManager, serve_telemetry: bool) -> None:
        self.apis = apis
        self.manager = manager
        self.serve_telemetry = serve_telemetry
        # The simulator's checkers (simulations/telemetry_sim.py): observer(kind, request, client attributes,
        # error code, image, manager, instance or None) with every answer, as given.
        self.observer: Any = None

    def api_handlers(self):
        handlers = [(ApiKey.LIST_CONFIG_RESOURCES, 0, 0, self._list_client_metrics_resources)]
        if self.serve_telemetry:
            handlers += [(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0, self._get_telemetry_subscriptions),
                         (ApiKey.PUSH_TELEMETRY, 0, 0, self._push_telemetry)]
        return handlers

    def poll(self, now_ms: int, changed: "AbstractSet[TopicPartition]") -> None:
        """Nothing here is deferred."""

    def next_deadline_ms(self) -> int | None:
        return None

    def _attributes(self, header: RequestHeader) -> dict[str, str | None]:
        name, version = self.apis.client_software
        return {"client_id": header.client_id or "", "client_software_name": name,
                "client_software_version": version, "client_source_address": self.apis.client_host.lstrip("/") or None,
                "client_source_port": None}

    def _get_telemetry_subscriptions(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.GetTelemetrySubscriptionsResponse
        self.manager.refresh(self.apis.broker.image)
        attributes = self._attributes(header)
        code, instance = self.manager.get_subscriptions(request.client_instance_id, attributes, now_ms)
        if self.observer is not None:
            self.observer("get", request, attributes, code, self.apis.broker.image, self.manager, instance)
        if code != ErrorCode.NONE:
            return response_class(throttle_time_ms=0, error_code=code, client_instance_id=NULL_UUID, subscription_id=0,
                                  accepted_compression_types=[], push_interval_ms=0, telemetry_max_bytes=0,
                                  delta_temporality=False, requested_metrics=[])
        return response_class(
            throttle_time_ms=0, error_code=ErrorCode.NONE, client_instance_id=instance.instance_id,
            subscription_id=instance.subscription_id, accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES),
            push_interval_ms=instance.push_interval_ms, telemetry_max_bytes=TELEMETRY_MAX_BYTES,
            delta_temporality=False, requested_metrics=list(instance.metrics))

    def _push_telemetry(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        self.manager.refresh(self.apis.broker.image)
        attributes = self._attributes(header)
        code = self.manager.push(request.client_instance_id, request.subscription_id, request.terminating,
                                 request.compression_type, bytes(request.metrics or b""), attributes, now_ms)
        if self.observer is not None:
            self.observer("push", request, attributes, code, self.apis.broker.image, self.manager, None)
        return messages.PushTelemetryResponse(throttle_time_ms=0, error_code=code)

    def _list_client_metrics_resources(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.ListConfigResourcesResponse
        if not self.apis.authorize_cluster(Op.DESCRIBE_CONFIGS):
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  config_resources=[])
        self.manager.refresh(self.apis.broker.image)
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, config_resources=[
            response_class.ConfigResource(resource_name=name) for name in self.manager.subscription_names()])
