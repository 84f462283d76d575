"""structlog, configured once at the edge: JSON lines when stderr is not a terminal, a console renderer when
it is. One event name per line; context (node_id, topic, partition) is bound by the caller."""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False


def configure_logging(level: str = "info", json_lines: bool | None = None) -> None:
    """Configure structlog for this process (idempotent)."""
    global _configured
    if _configured:
        return
    _configured = True
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(**context):
    return structlog.get_logger().bind(**context)
