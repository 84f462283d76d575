"""Client-side errors, and the one place where a wire error code becomes a typed exception.

`error_from_code(code, message)` returns the `partitions.errors` subclass that carries `code` (or a bare
`KafkaError(message, code)` where none exists; an unknown number becomes UNKNOWN_SERVER_ERROR).
`NetworkError` is a broken or refused connection (retriable, as Kafka's NetworkException);
`ConnectError` is a connect that failed before anything was sent, and
`NoBrokersAvailableError` (a ConnectError) means no known or bootstrap broker could be reached at all.
"""

from __future__ import annotations

from partitions import errors as partition_errors
from partitions.errors import ErrorCode, KafkaError


class NetworkError(KafkaError):
    """The connection to a broker failed, was refused, or closed while requests were in flight."""

    code = ErrorCode.NETWORK_EXCEPTION


class ConnectError(NetworkError):
    """A connection could not be established; no request was sent on it."""


class NoBrokersAvailableError(ConnectError):
    """Not one broker (known or bootstrap) accepted a connection: the cluster is unreachable."""


def _classes_by_code() -> dict[ErrorCode, type[KafkaError]]:
    table: dict[ErrorCode, type[KafkaError]] = {}
    for value in vars(partition_errors).values():
        if isinstance(value, type) and issubclass(value, KafkaError) and value is not KafkaError:
            table.setdefault(value.code, value)
    return table


_CLASSES_BY_CODE = _classes_by_code()


def error_from_code(code: int, context: str = "", detail: str | None = None) -> KafkaError:
    """The typed exception for wire error `code` (not raised; the caller raises or returns it). Its message
    reads "context: CODE_NAME: detail" (parts left out when empty)."""
    try:
        error_code = ErrorCode(code)
        name = error_code.name
    except ValueError:
        error_code, name = ErrorCode.UNKNOWN_SERVER_ERROR, f"unknown error code {code}"
    text = ": ".join(part for part in (context, name, detail) if part)
    error_class = _CLASSES_BY_CODE.get(error_code) if name == error_code.name else None
    if error_class is None:
        return KafkaError(text, error_code)
    return error_class(text)


def raise_for_code(code: int, detail: str | None = None, context: str = "") -> None:
    """Raise the typed exception for `code` unless it is NONE; `context` names the operation and resource,
    `detail` is the broker's error message."""
    if code != ErrorCode.NONE:
        raise error_from_code(code, context, detail)
