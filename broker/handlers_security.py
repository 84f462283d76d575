"""ACL and SCRAM-user administration (sans-IO): CreateAcls, DeleteAcls and AlterUserScramCredentials are
forwarded to the active controller (which writes the records); DescribeAcls and DescribeUserScramCredentials
are answered from this broker's metadata image, as Kafka's brokers do.

Authorization (Kafka's): creating and deleting ACLs and altering credentials need ALTER on the cluster,
describing them DESCRIBE on the cluster. Without an authorizer the ACL APIs answer SECURITY_DISABLED ("No
Authorizer is configured"), as Kafka's; the SCRAM APIs work either way (SASL may be on without ACLs).
Credentials are never described beyond mechanism and iteration count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.handlers_admin import AdminApis, code_and_message
from metadata.requests import (
    AclEntry,
    AclFilterEntry,
    AlterUserScramCredentialsRequest as ControllerAlterScram,
    CreateAclsRequest as ControllerCreateAcls,
    DeleteAclsRequest as ControllerDeleteAcls,
    ScramDeletion,
    ScramUpsertion,
)
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader
from partitions.errors import ErrorCode, KafkaError
from security.acl import AclFilter, AclOperation as Op, InvalidAclError, binding_of

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from broker.apis import KafkaApis
    from broker.core import TopicPartition

NO_AUTHORIZER = "No Authorizer is configured."
CLUSTER_DENIED = "Cluster authorization failed."


class SecurityApis:
    """ACLs and SCRAM credentials (see the module docstring)."""

    def __init__(self, apis: "KafkaApis", admin: "AdminApis") -> None:
        self.apis = apis
        self.admin = admin
        self.broker = apis.broker

    def api_handlers(self):
        return [
            (ApiKey.DESCRIBE_ACLS, 1, 3, self._describe_acls),
            (ApiKey.CREATE_ACLS, 1, 3, self._create_acls),
            (ApiKey.DELETE_ACLS, 1, 3, self._delete_acls),
            (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, self._describe_scram),
            (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, self._alter_scram),
            # The SASL exchange itself runs in the dispatcher (net/dispatcher.py), and so does a re-authentication
            # (KIP-368); a handshake reaches here only when it cannot begin one (a session without a lifetime,
            # or a second re-authentication within a second), and is refused as Kafka's KafkaApis does.
            (ApiKey.SASL_HANDSHAKE, 0, 1, self._sasl_again),
            (ApiKey.SASL_AUTHENTICATE, 0, 2, self._sasl_again),
        ]

    def _sasl_again(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            return messages.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
        return messages.SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=(
            "SASL authentication is not expected here (a plaintext listener, or the connection is authenticated)"),
            auth_bytes=b"", session_lifetime_ms=0)

    def poll(self, now_ms: int, changed: AbstractSet[TopicPartition]) -> None:
        """Forwarded requests complete from the controller's callbacks."""

    def next_deadline_ms(self) -> int | None:
        return None

    def _refusal(self, operation: Op) -> tuple[ErrorCode, str] | None:
        if self.apis.authorizer is None:
            return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
        if not self.apis.authorize_cluster(operation):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
        return None

    # ---- ACLs ----------------------------------------------------------------------------------------------

    def _describe_acls(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeAclsResponse
        refusal = self._refusal(Op.DESCRIBE)
        if refusal is not None:
            return response_class(throttle_time_ms=0, error_code=refusal[0], error_message=refusal[1], resources=[])
        acl_filter = AclFilter(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                               request.principal_filter, request.host_filter, request.operation,
                               request.permission_type)
        try:
            acl_filter.validate()
        except InvalidAclError as error:
            return response_class(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=str(error),
                                  resources=[])
        by_resource: dict[tuple[int, str, int], list] = {}
        for record in self.broker.image.acls.by_id.values():
            binding = binding_of(record)
            if acl_filter.matches(binding):
                by_resource.setdefault((binding.resource_type, binding.resource_name, binding.pattern_type), []).append(
                    response_class.AclDescription(principal=binding.principal, host=binding.host,
                                                  operation=binding.operation, permission_type=binding.permission_type))
        resources = [response_class.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                     for (t, n, p), acls in sorted(by_resource.items())]
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=resources)

    def _create_acls(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.CreateAclsResponse
        count = len(request.creations)
        refusal = self._refusal(Op.ALTER)
        if refusal is not None:
            return response_class(throttle_time_ms=0, results=[
                response_class.AclCreationResult(error_code=refusal[0], error_message=refusal[1])] * count)
        creations = tuple(AclEntry(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                                   c.operation, c.permission_type) for c in request.creations)

        def build(results: list[Any]) -> Any:
            answer = results[0] if results else None
            if answer is None or isinstance(answer, KafkaError):
                code, message = code_and_message(answer)
                entries = [response_class.AclCreationResult(error_code=code, error_message=message)] * count
            else:
                entries = [response_class.AclCreationResult(error_code=r.error_code, error_message=r.message or None)
                           for r in answer.results]
            return response_class(throttle_time_ms=0, results=entries)

        return self.admin.forward(header, [ControllerCreateAcls(creations)] if creations else [], build)

    def _delete_acls(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DeleteAclsResponse
        count = len(request.filters)
        refusal = self._refusal(Op.ALTER)
        if refusal is not None:
            return response_class(throttle_time_ms=0, filter_results=[response_class.DeleteAclsFilterResult(
                error_code=refusal[0], error_message=refusal[1], matching_acls=[])] * count)
        filters = tuple(AclFilterEntry(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                       f.principal_filter, f.host_filter, f.operation, f.permission_type)
                        for f in request.filters)

        def build(results: list[Any]) -> Any:
            answer = results[0] if results else None
            if answer is None or isinstance(answer, KafkaError):
                code, message = code_and_message(answer)
                entries = [response_class.DeleteAclsFilterResult(error_code=code, error_message=message,
                                                                 matching_acls=[])] * count
            else:
                entries = [response_class.DeleteAclsFilterResult(
                    error_code=r.error_code, error_message=r.message or None, matching_acls=[
                        response_class.DeleteAclsMatchingAcl(
                            error_code=ErrorCode.NONE, error_message=None, resource_type=m.resource_type,
                            resource_name=m.resource_name, pattern_type=m.pattern_type, principal=m.principal,
                            host=m.host, operation=m.operation, permission_type=m.permission_type)
                        for m in r.matching]) for r in answer.results]
            return response_class(throttle_time_ms=0, filter_results=entries)

        return self.admin.forward(header, [ControllerDeleteAcls(filters)] if filters else [], build)

    # ---- SCRAM credentials -----------------------------------------------------------------------------------

    def _scram_refusal(self, operation: Op) -> tuple[ErrorCode, str] | None:
        if self.apis.authorizer is not None and not self.apis.authorize_cluster(operation):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
        return None

    def _describe_scram(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.DescribeUserScramCredentialsResponse
        refusal = self._scram_refusal(Op.DESCRIBE)
        if refusal is not None:
            return response_class(throttle_time_ms=0, error_code=refusal[0], error_message=refusal[1], results=[])
        by_user: dict[str, list] = {}
        for (user, mechanism), record in self.broker.image.scram.credentials.items():
            by_user.setdefault(user, []).append(response_class.CredentialInfo(mechanism=mechanism,
                                                                              iterations=record.iterations))
        wanted = [u.name for u in request.users] if request.users else sorted(by_user)
        results = []
        for user in dict.fromkeys(wanted):
            if wanted.count(user) > 1:
                results.append(response_class.DescribeUserScramCredentialsResult(
                    user=user, error_code=ErrorCode.DUPLICATE_RESOURCE, error_message="Cannot describe the same user twice",
                    credential_infos=[]))
            elif user not in by_user:
                results.append(response_class.DescribeUserScramCredentialsResult(
                    user=user, error_code=ErrorCode.RESOURCE_NOT_FOUND, error_message="Attempt to describe a user "
                    "credential that does not exist", credential_infos=[]))
            else:
                results.append(response_class.DescribeUserScramCredentialsResult(
                    user=user, error_code=ErrorCode.NONE, error_message=None, credential_infos=by_user[user]))
        return response_class(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)

    def _alter_scram(self, header: RequestHeader, request: Any, now_ms: int) -> Any:
        response_class = messages.AlterUserScramCredentialsResponse
        users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
        refusal = self._scram_refusal(Op.ALTER)
        if refusal is not None:
            return response_class(throttle_time_ms=0, results=[response_class.AlterUserScramCredentialsResult(
                user=user, error_code=refusal[0], error_message=refusal[1]) for user in users])
        controller_request = ControllerAlterScram(
            deletions=tuple(ScramDeletion(d.name, d.mechanism) for d in request.deletions),
            upsertions=tuple(ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                             for u in request.upsertions))

        def build(results: list[Any]) -> Any:
            answer = results[0] if results else None
            if answer is None or isinstance(answer, KafkaError):
                code, message = code_and_message(answer)
                entries = [response_class.AlterUserScramCredentialsResult(user=u, error_code=code, error_message=message)
                           for u in users]
            else:
                entries = [response_class.AlterUserScramCredentialsResult(
                    user=r.user, error_code=r.error_code, error_message=r.message or None) for r in answer.results]
            return response_class(throttle_time_ms=0, results=entries)

        return self.admin.forward(header, [controller_request] if users else [], build)

