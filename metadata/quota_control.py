"""The controller's client quota requests (Kafka's ClientQuotaControlManager): AlterClientQuotas.

A pure function of the current image, as the rest of the QuorumController: it validates each entry and returns
the records to commit and the per-entity results. Kafka's rules:
- an entity is one or two parts of the types `user` and `client-id`, each at most once, a name that is None
  (the type's default entity) or not empty; anything else fails that entity with INVALID_REQUEST;
- an entity named twice in one request fails (the later entry), and so does a key set twice for one entity;
- a value is for a known key, above 0, and integral for the byte rates (Kafka's LONG quota configs;
  request_percentage and controller_mutation_rate are DOUBLEs);
- only what changes is written: setting the current value or removing a quota that is not there writes nothing.
Entities of type `ip` (KIP-612) stand alone (never with `user` or `client-id`), name an IP address in its
canonical form (Kafka also takes a host name it can resolve; a controller here does no lookups) or none for
the default, and take one key, `connection_creation_rate` (an INT), which user and client-id entities do not
take; net/connections.py enforces it on each broker's listeners, broker/quotas.py the others.
"""

from __future__ import annotations

import ipaddress
import math

from metadata.image import MetadataImage, QuotaEntity, quota_entity
from metadata.records import ClientQuotaRecord, MetadataRecord, QuotaEntityPart
from metadata.requests import AlterClientQuotasRequest, AlterClientQuotasResponse, QuotaAlteration, QuotaAlterationResult
from partitions.errors import ErrorCode

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
ENFORCED_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
IP_KEYS = (CONNECTION_CREATION_RATE,)
DOUBLE_KEYS = (REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
entity_name_chars_max = 1024


def alter_client_quotas(image: MetadataImage, request: AlterClientQuotasRequest
                        ) -> tuple[list[MetadataRecord], AlterClientQuotasResponse]:
    records: list[MetadataRecord] = []
    results: list[QuotaAlterationResult] = []
    seen: set[QuotaEntity] = set()
    for entry in request.entries:
        error = _entity_error(entry.entity)
        entity = quota_entity(entry.entity) if error is None else None
        if error is None and entity in seen:
            error = f"Ignoring duplicate entity {describe_entity(entity)}"
        if entity is not None:
            seen.add(entity)
        new_records: list[MetadataRecord] = []
        if error is None:
            error = _changes(image, entity, entry, new_records)
        if error is None:
            records.extend(new_records)
        results.append(QuotaAlterationResult(entry.entity, ErrorCode.INVALID_REQUEST if error else ErrorCode.NONE,
                                             error or ""))
    return ([] if request.validate_only else records), AlterClientQuotasResponse(tuple(results))


def _entity_error(parts: tuple[QuotaEntityPart, ...]) -> str | None:
    if not parts:
        return "Invalid empty client quota entity"
    types: set[str] = set()
    for part in parts:
        if part.entity_type in types:
            return f"Invalid client quota entity, duplicate entity entry {part.entity_type}"
        types.add(part.entity_type)
        if part.entity_type not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {part.entity_type}"
        if part.entity_name is not None and not part.entity_name:
            return f"Empty {part.entity_type} not supported"
        if part.entity_name is not None and len(part.entity_name) > entity_name_chars_max:
            return f"{part.entity_type} name longer than {entity_name_chars_max} characters"
    if IP in types:
        if types != {IP}:
            return "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
        name = parts[0].entity_name
        canonical = None if name is None else _canonical_ip(name)
        if name is not None and canonical != name:
            return (f"{name} is not a valid IP" if canonical is None else
                    f"{name} is not an IP in its canonical form (write {canonical})")
    return None


def _canonical_ip(name: str) -> str | None:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return None


def _changes(image: MetadataImage, entity: QuotaEntity, entry: QuotaAlteration, out: list[MetadataRecord]) -> str | None:
    keys: set[str] = set()
    current = image.quotas.entities.get(entity, {})
    parts = tuple(QuotaEntityPart(entity_type, name) for entity_type, name in entity)
    for op in entry.ops:
        if op.key in keys:
            return f"Duplicate quota key {op.key} not updating quota for this entity {describe_entity(entity)}"
        keys.add(op.key)
        if op.remove:
            if op.key in current:
                out.append(ClientQuotaRecord(parts, op.key, 0.0, remove=True))
            continue
        error = _value_error(op.key, op.value, is_ip=any(entity_type == IP for entity_type, _ in entity))
        if error is not None:
            return error
        if current.get(op.key) != op.value:
            out.append(ClientQuotaRecord(parts, op.key, float(op.value)))
    return None


def _value_error(key: str, value: float, is_ip: bool) -> str | None:
    if key not in (IP_KEYS if is_ip else ENFORCED_KEYS):
        return f"Invalid configuration key {key}"
    if not math.isfinite(value) or value <= 0.0:
        return f"Quota {key} must be greater than 0"
    if key in DOUBLE_KEYS:
        return None
    if key in IP_KEYS and value > INT_MAX:
        return f"Proposed value for {key} is too large for an INT."
    if value > LONG_MAX:
        return f"Proposed value for {key} is too large for a LONG."
    if value != math.floor(value):
        return f"Proposed value for {key} must be an integer, not {value}"
    return None


def describe_entity(entity: QuotaEntity) -> str:
    """"user=alice, client-id=<default>": an entity's (type, name) parts as people read them."""
    return ", ".join(f"{entity_type}={'<default>' if name is None else name}" for entity_type, name in entity)
