"""Flotilla's PySpark data source: `spark.register(session)` makes format `flotilla` available.

    from spark import register
    register(session)
    session.readStream.format("flotilla").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "events").load()

The options and schema are Spark's Kafka source's (see spark/source.py). pyspark >= 4.2 and pyarrow are
needed (the `spark` extra). Spark runs the source in Python worker processes started with PYSPARK_PYTHON (or
`spark.pyspark.python`), `python3` from PATH when unset; `register` checks that this interpreter can import
pyarrow and this package, and fails with a message saying what to set when it cannot.
"""

from __future__ import annotations

import os
import subprocess
import sys

WORKER_CHECK_SECONDS_MAX = 60


class WorkerPythonError(RuntimeError):
    """Spark's Python workers would run an interpreter that cannot load the flotilla data source."""


def _worker_python(session) -> str:
    configured = session.sparkContext.getConf().get("spark.pyspark.python")
    return configured or getattr(session.sparkContext, "pythonExec", None) or \
        os.environ.get("PYSPARK_PYTHON") or "python3"


def check_worker_python(session) -> None:
    """Raise WorkerPythonError unless the workers' interpreter imports pyarrow and the data source."""
    python = _worker_python(session)
    same = os.path.realpath(python) == os.path.realpath(sys.executable) if os.path.isabs(python) else False
    if same:
        return
    probe = "import pyarrow, spark.columns, spark.source"
    try:
        result = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                                timeout=WORKER_CHECK_SECONDS_MAX, cwd=os.getcwd())
        failed = result.returncode != 0
        detail = result.stderr.strip().splitlines()[-1:] if failed else []
    except (OSError, subprocess.TimeoutExpired) as error:
        failed, detail = True, [str(error)]
    if failed:
        raise WorkerPythonError(
            f"Spark's Python workers run {python!r}, which cannot import pyarrow and the flotilla data source "
            f"({'; '.join(detail)}). Set PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python) before "
            "the SparkSession is created.")


def register(session) -> None:
    """Register format `flotilla` with `session`. Raises WorkerPythonError (see check_worker_python)."""
    from spark.source import FlotillaDataSource

    check_worker_python(session)
    session.dataSource.register(FlotillaDataSource)


__all__ = ["register", "check_worker_python", "WorkerPythonError"]
