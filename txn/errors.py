"""Typed errors of the txn package, with Kafka's codes (partitions/errors.py holds the table and the base class).

Named as Kafka names its exceptions; `retriable` comes from partitions.errors.RETRIABLE_CODES, so it matches
Kafka's RetriableException hierarchy.
"""

from __future__ import annotations

from partitions.errors import ErrorCode, KafkaError


def _error_class(name: str, code: ErrorCode) -> type[KafkaError]:
    return type(name, (KafkaError,), {"code": code, "__doc__": f"Kafka error {code.name} ({int(code)})."})


OutOfOrderSequenceError = _error_class("OutOfOrderSequenceError", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
InvalidProducerEpochError = _error_class("InvalidProducerEpochError", ErrorCode.INVALID_PRODUCER_EPOCH)
UnknownProducerIdError = _error_class("UnknownProducerIdError", ErrorCode.UNKNOWN_PRODUCER_ID)
InvalidTxnStateError = _error_class("InvalidTxnStateError", ErrorCode.INVALID_TXN_STATE)
TransactionCoordinatorFencedError = _error_class("TransactionCoordinatorFencedError",
                                                 ErrorCode.TRANSACTION_COORDINATOR_FENCED)
# InitProducerId answers this while a broker waits for its next producer-id block (Kafka does the same:
# older clients treat REQUEST_TIMED_OUT as fatal, COORDINATOR_LOAD_IN_PROGRESS as retriable).
CoordinatorLoadInProgressError = _error_class("CoordinatorLoadInProgressError", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


class CorruptProducerSnapshotError(KafkaError):
    """A producer-state snapshot file failed its CRC or structure checks. Never sent to a client: recovery
    deletes the file and falls back to an older snapshot or a scan of the log."""

    code = ErrorCode.CORRUPT_MESSAGE
