"""Hearing other replicas' commits on PostgreSQL (issue 12, migration 0005).

Every insert of an operation and every write of its ``version`` (a commit, a
claim) sends ``NOTIFY turnwire_operations, '<operation id> <version>'``,
delivered when its transaction commits. ``ChangeListener`` keeps one
connection of its own listening, in a thread, and hands each (operation id,
version) to ``on_change`` on the event loop: the replica drops an older
cached copy and its watch streams wake at once for a change another replica
made. ``on_connected`` runs each time listening (re)starts: notifications
sent while nobody listened are lost, so the replica forgets its whole cache
then. Watchers also re-read the journal itself when their poll runs out with
nothing heard, so a lost notification costs latency, never a stale answer
for ever.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import psycopg
from sqlalchemy.engine import make_url

log = logging.getLogger("coordinator_svc.notifications")

CHANNEL = "turnwire_operations"
WAIT_SECONDS = 0.5  # how often the thread looks up from waiting to see if it should stop
RECONNECT_MIN, RECONNECT_MAX = 0.2, 5.0


def conninfo(journal_url: str) -> str:
    """psycopg's URI for a ``postgresql+psycopg://`` journal URL."""
    url = make_url(journal_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class ChangeListener:
    def __init__(
        self,
        journal_url: str,
        on_change: Callable[[str, int], None],
        on_connected: Callable[[], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._conninfo = conninfo(journal_url)
        self._on_change = on_change
        self._on_connected = on_connected
        self._loop = loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="journal-listen", daemon=True)
        self.heard = 0
        self.connected = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_SECONDS * 4 + RECONNECT_MAX)

    def _run(self) -> None:
        delay = RECONNECT_MIN
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    self._loop.call_soon_threadsafe(self._on_connected)
                    delay = RECONNECT_MIN
                    self._listen(conn)
            except psycopg.Error as error:
                self.connected.clear()
                if self._stop.is_set():
                    return
                log.warning("change notifications lost, reconnecting in %.1f s: %s", delay, error)
                self._stop.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX)

    def _listen(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while not self._stop.is_set():
            for notice in conn.notifies(timeout=WAIT_SECONDS):
                operation_id, _, version = notice.payload.rpartition(" ")
                if not operation_id or not version.isdigit():
                    log.warning("ignored a malformed change notification: %r", notice.payload)
                    continue
                self.heard += 1
                try:
                    self._loop.call_soon_threadsafe(self._on_change, operation_id, int(version))
                except RuntimeError:  # the loop closed: the coordinator is stopping
                    return
