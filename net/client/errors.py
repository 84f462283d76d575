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


def error_from_code(code: int, message: str | None = None) -> KafkaError:
    """The typed exception for wire error `code` (not raised; the caller raises or returns it)."""
    try:
        error_code = ErrorCode(code)
    except ValueError:
        detail = f": {message}" if message else ""
        return KafkaError(f"unknown error code {code}{detail}", ErrorCode.UNKNOWN_SERVER_ERROR)
    text = message or error_code.name
    error_class = _CLASSES_BY_CODE.get(error_code)
    if error_class is None:
        return KafkaError(text, error_code)
    return error_class(text)


def raise_for_code(code: int, message: str | None = None, context: str = "") -> None:
    """Raise the typed exception for `code` unless it is NONE; `context` names the resource."""
    if code != ErrorCode.NONE:
        raise error_from_code(code, f"{context}: {message}" if context and message else (message or context))
