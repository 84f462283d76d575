"""`SyncKafkaClient`: the KafkaClient's calls, blocking, for threads that are not trio (Spark executors, CLIs).

Theory of operation: the first call starts one background thread running one trio loop, which opens a
`KafkaClient` and parks until `close()`. Each blocking call hands its coroutine to that loop with
`trio.from_thread.run` (with the loop's trio token), so any number of threads may call at once and their
requests are pipelined on the shared connections; results and exceptions (typed KafkaErrors) come back to the
calling thread as themselves.

The object pickles as its configuration only (bootstrap servers, client id, timeouts): an unpickled copy
(e.g. on a Spark executor) starts its own thread and connections lazily on its first call. `close()` (or
leaving a `with` block) stops the loop and joins the thread; a closed client refuses calls.
"""

from __future__ import annotations

import threading
from typing import Any

import trio

from net.client.aio import KafkaClient

THREAD_START_SECONDS_MAX = 30
THREAD_STOP_SECONDS_MAX = 30


class ClientClosedError(RuntimeError):
    """A call on a SyncKafkaClient after close()."""


class SyncKafkaClient:
    """Blocking facade over KafkaClient; takes KafkaClient's arguments (see net.client.aio.KafkaClient)."""

    def __init__(self, bootstrap_servers, client_id: str = "flotilla-client", request_timeout_ms: int = 30_000,
                 **options: Any) -> None:
        self._config = {"bootstrap_servers": bootstrap_servers, "client_id": client_id,
                        "request_timeout_ms": request_timeout_ms, **options}
        KafkaClient(**self._config)  # validates the configuration now, in the caller's thread
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._client: KafkaClient | None = None
        self._stop: trio.Event | None = None
        self._startup_error: BaseException | None = None
        self._closed = False

    # Pickling: configuration only.

    def __getstate__(self) -> dict:
        return {"config": dict(self._config)}

    def __setstate__(self, state: dict) -> None:
        self._config = state["config"]
        self._reset_runtime()

    # Lifecycle.

    def __enter__(self) -> "SyncKafkaClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _ensure_started(self) -> None:
        with self._lock:
            if self._closed:
                raise ClientClosedError("the client is closed")
            if self._thread is not None and self._thread.is_alive():
                return
            ready = threading.Event()
            self._thread = threading.Thread(target=self._run_loop, args=(ready,), name="flotilla-client",
                                            daemon=True)
            self._thread.start()
            if not ready.wait(THREAD_START_SECONDS_MAX):
                raise RuntimeError(f"the client thread did not start within {THREAD_START_SECONDS_MAX} s")
            if self._startup_error is not None:
                raise self._startup_error

    def _run_loop(self, ready: threading.Event) -> None:
        async def main() -> None:
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            async with KafkaClient(**self._config) as client:
                self._client = client
                ready.set()
                await self._stop.wait()

        try:
            trio.run(main)
        except BaseException as error:  # handed to the starting thread; nothing else would see it
            self._startup_error = error
        finally:
            self._client = None
            ready.set()

    def close(self) -> None:
        """Close the connections and stop the thread (idempotent)."""
        with self._lock:
            self._closed = True
            thread, token, stop = self._thread, self._token, self._stop
        if thread is None or not thread.is_alive() or token is None or stop is None:
            return
        try:
            trio.from_thread.run_sync(stop.set, trio_token=token)
        except trio.RunFinishedError:
            pass
        thread.join(THREAD_STOP_SECONDS_MAX)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self._ensure_started()
        client = self._client
        if client is None:
            raise ClientClosedError("the client thread has stopped")
        return trio.from_thread.run(lambda: getattr(client, name)(*args, **kwargs), trio_token=self._token)

    # The calls: same names, arguments and results as KafkaClient's.

    def metadata(self, *args, **kwargs):
        return self._call("metadata", *args, **kwargs)

    def topic_metadata(self, *args, **kwargs):
        return self._call("topic_metadata", *args, **kwargs)

    def partitions_for(self, *args, **kwargs):
        return self._call("partitions_for", *args, **kwargs)

    def leader_for(self, *args, **kwargs):
        return self._call("leader_for", *args, **kwargs)

    def produce(self, *args, **kwargs):
        return self._call("produce", *args, **kwargs)

    def produce_records(self, *args, **kwargs):
        return self._call("produce_records", *args, **kwargs)

    def fetch(self, *args, **kwargs):
        return self._call("fetch", *args, **kwargs)

    def list_offsets(self, *args, **kwargs):
        return self._call("list_offsets", *args, **kwargs)

    def delete_records(self, *args, **kwargs):
        return self._call("delete_records", *args, **kwargs)

    def create_topics(self, *args, **kwargs):
        return self._call("create_topics", *args, **kwargs)

    def delete_topics(self, *args, **kwargs):
        return self._call("delete_topics", *args, **kwargs)

    def create_partitions(self, *args, **kwargs):
        return self._call("create_partitions", *args, **kwargs)

    def describe_configs(self, *args, **kwargs):
        return self._call("describe_configs", *args, **kwargs)

    def alter_configs(self, *args, **kwargs):
        return self._call("alter_configs", *args, **kwargs)

    def describe_cluster(self, *args, **kwargs):
        return self._call("describe_cluster", *args, **kwargs)

    def send(self, *args, **kwargs):
        return self._call("send", *args, **kwargs)


for _name in ("metadata", "topic_metadata", "partitions_for", "leader_for", "produce", "produce_records", "fetch", "list_offsets",
              "delete_records", "create_topics", "delete_topics", "create_partitions", "describe_configs",
              "alter_configs", "describe_cluster", "send"):
    getattr(SyncKafkaClient, _name).__doc__ = f"Blocking KafkaClient.{_name}: " + (
        getattr(KafkaClient, _name).__doc__ or "")
