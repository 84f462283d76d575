"""Client quota administration (sans-IO): AlterClientQuotas is forwarded to the active controller (which
validates it and writes ClientQuotaRecords, metadata/quota_control.py); DescribeClientQuotas is answered from
this broker's metadata image, as Kafka's brokers do. Enforcement is broker/quotas.py.

Authorization (Kafka's): describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS.

DescribeClientQuotas filters (Kafka's ClientQuotaMetadataManager): each component names an entity type once
and matches it exactly (MatchType 0, a name), as its default (1) or as any named entity (2, not the default);
with `strict` an entity matches only if it has no other types than the components name. An empty filter
describes every entity unless strict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.handlers_admin import AdminApis, code_and_message
from broker.handlers_security import CLUSTER_DENIED
from metadata.image import QuotaEntity
from metadata.quota_control import CLIENT_ID, IP, USER
from metadata.records import QuotaEntityPart
from metadata.requests import AlterClientQuotasRequest as ControllerAlterQuotas, QuotaAlteration, QuotaOp
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from partitions.errors import ErrorCode, KafkaError
from security.acl import AclOperation as Op

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.apis import KafkaApis
    from broker.core import TopicPartition

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaApis:
    """DescribeClientQuotas and AlterClientQuotas (see the module docstring)."""

    def __init__(self, apis: "KafkaApis", admin: "AdminApis") -> None:
        self.apis = apis
        self.admin = admin
        self.broker = apis.broker

    def api_handlers(self):
        return [
            (ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, self._describe),
            (ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, self._alter),
        ]

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Forwarded requests complete from the controller's callbacks."""

    def next_deadline_ms(self) -> int | None:
        return None

    def _describe(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeClientQuotasResponse
        if not self.apis.authorize_cluster(Op.DESCRIBE_CONFIGS):
            return response_class(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  error_message=CLUSTER_DENIED, entries=None)
        components: dict[str, tuple[int, str | None]] = {}
        for component in request.components:
            error = _component_error(component, components)
            if error is not None:
                return response_class(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=error,
                                      entries=None)
            components[component.entity_type] = (component.match_type, component.match)
        entries = []
        for entity, values in self.broker.image.quotas.entities.items():
            if not _matches(entity, components, request.strict):
                continue
            entries.append(response_class.EntryData(
                entity=[response_class.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                values=[response_class.ValueData(key=k, value=v) for k, v in values.items()]))
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)

    def _alter(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.AlterClientQuotasResponse
        entities = [tuple(QuotaEntityPart(e.entity_type, e.entity_name) for e in entry.entity)
                    for entry in request.entries]

        def answer(code: int, message: str | None) -> Any:
            return response_class(throttle_time_ms=0, entries=[
                response_class.EntryData(error_code=code, error_message=message, entity=_wire_entity(response_class, e))
                for e in entities])

        if not self.apis.authorize_cluster(Op.ALTER_CONFIGS):
            return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
        controller_request = ControllerAlterQuotas(tuple(
            QuotaAlteration(entity, tuple(QuotaOp(op.key, float(op.value), op.remove) for op in entry.ops))
            for entity, entry in zip(entities, request.entries)), validate_only=request.validate_only)

        def build(results: list[Any]) -> Any:
            result = results[0] if results else None
            if result is None or isinstance(result, KafkaError):
                return answer(*code_and_message(result))
            return response_class(throttle_time_ms=0, entries=[
                response_class.EntryData(error_code=r.error_code, error_message=r.message or None,
                                         entity=_wire_entity(response_class, r.entity)) for r in result.results])

        return self.admin.forward(header, [controller_request] if entities else [], build)


def _wire_entity(response_class: Any, parts: tuple[QuotaEntityPart, ...]) -> list:
    return [response_class.EntityData(entity_type=p.entity_type, entity_name=p.entity_name) for p in parts]


def _component_error(component: Any, seen: dict) -> str | None:
    if component.entity_type in seen:
        return f"Duplicate entity type {component.entity_type} in the filter"
    if component.entity_type not in (USER, CLIENT_ID, IP):
        return f"Custom entity type {component.entity_type} not supported"
    if component.match_type == MATCH_EXACT and component.match is None:
        return f"An exact match of {component.entity_type} needs a name"
    if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
        return f"Unknown match type {component.match_type}"
    return None


def _matches(entity: QuotaEntity, components: dict[str, tuple[int, str | None]], strict: bool) -> bool:
    names = dict(entity)
    if strict and set(names) != set(components):
        return False
    for entity_type, (match_type, match) in components.items():
        if entity_type not in names:
            return False
        name = names[entity_type]
        if match_type == MATCH_EXACT and name != match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
        if match_type == MATCH_SPECIFIED and name is None:
            return False
    return True
