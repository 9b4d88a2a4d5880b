"""Conformance suites for your own implementation of a Turnwire port.

The journal conformance suite
=============================

The coordinator keeps its durable journal behind one port,
``coordinator_svc.ports.Journal`` (``LeasingJournal`` adds the §5 lease).
Turnwire ships three adapters (in memory, SQLite, PostgreSQL) and every one
of them passes this suite in Turnwire's own CI. A journal of your own (another
database, a cache in front of ours) proves itself the same way. This file
proves Turnwire's SQLite journal; put your store and your journal in the
fixture's last three lines::

    # test_my_journal.py
    import pytest

    from coordinator_svc.storage import migrate, open_journal
    from turnwire.testing import LeasingJournalConformance


    class TestMyJournal(LeasingJournalConformance):
        @pytest.fixture
        def journal_factory(self, tmp_path):
            url = f"sqlite:///{tmp_path / 'journal.db'}"
            migrate(url)  # a fresh, empty store for every case
            return lambda: open_journal(url)  # each call: another handle on that store

Then ``python -m pytest test_my_journal.py``: plain pytest (8 or later; it is
not installed with turnwire), no plugin to register; each case runs its
scenario with ``asyncio.run``. Subclass ``JournalConformance`` instead if
your journal takes no §5 leases (no ``claim``: one coordinator per journal).
``journal_factory`` returns a ``JournalFactory``: it is called inside the
case's event loop and may be a coroutine function; the cases that race two
writers call it a second time for a second handle on the same store, like a
second replica (``single_handle(make)`` serves one handle to both, for a
journal that must be its store's only writer). The suite closes every handle
it opened, once.

What it checks, by the rules of ``docs/PROTOCOL.md``:

- C1: submit stores the operation, its exact envelope bytes and event 1
  together; what was fixed at acceptance (envelope, digests, principal, ids)
  never changes; a commit for an unknown id, or a second operation with a
  used id, writes nothing.
- §1, §7: an idempotency key is unique per principal: the same key and
  request is a replay of the original, another request is
  ``IdempotencyKeyReused`` and changes nothing, and concurrent submits with
  one key from two handles store one operation.
- §7, §8.8: another principal's operation reads exactly like an unknown id;
  listings are per principal, ordered, filtered by state and resumable.
- §2, §8.6, C10: only legal edges are written; a terminal state and its
  outcome never change (only the release is recorded after it); every state
  and execution value can be stored.
- C4, C13: a commit is one atomic compare-and-set: the row with version + 1,
  the event that explains it with the next sequence, the attempt written
  ahead with ``DISPATCHING`` and closed later, attempt numbers in order;
  anything else is refused and writes nothing.
- §5: a write from a stale version is ``StaleVersion``, and of racing writes
  from one version exactly one wins. With leases: ``claim`` takes a free,
  expired or own lease, refuses a live one, moves the fencing token on a
  take-over, and a write under the old token is ``LeaseLost``; of racing
  claims exactly one wins; ``renew_leases`` extends exactly the owner's open
  leases (a lapsed one too) without moving version or token; ``orphans``
  lists open operations with no owner or another owner's lapsed lease,
  oldest first; ``expire_leases`` ends a name prefix's leases but the one
  kept; ``live_leases`` names a prefix's other owners with live leases and
  the latest expiry of each (§5 O1-O3, O6).
- C10, C12: ``due`` and ``in_state`` find what a restart and the release
  loop must act on.
- Storage: naive datetimes are refused and aware ones read back in UTC; a
  closed journal refuses every call with ``JournalUnavailable``. With
  leases: ``commits`` counts write transactions (submit, commit, claim), not
  reads, replays or refusals.

What a pass means: at the port, on these scenarios, your journal answers
exactly as the coordinator relies on, races included, each assertion the
same one Turnwire's own adapters pass. What it does not mean: races are
sampled (a handful of concurrent writers from two handles), not every
interleaving; nothing here kills a process or cuts power, so durability
("durable before the reply", C1) and failing closed when the database dies
mid-write are yours to prove; neither are schema migrations, performance, or
a write retried after its connection died (§5's PostgreSQL rule) covered.
And it checks the journal, not the coordinator around it: a leasing pass
says claims behave as §5 needs, not that a deployment of several replicas
is safe.

Adding a case: see ``turnwire.testing.journal_conformance``. The record
builders the cases use are public too (``turnwire.testing.records``).

The test kit
============

Turnwire's own tests stand the system up in one of two ways, both here:

- ``turnwire.testing.stack``: ``Stack``, runners and coordinators in one event
  loop (real gRPC on 127.0.0.1:0, SQLite files in one directory or a PostgreSQL
  URL), and ``StackThread`` to serve one to synchronous code;
- ``turnwire.testing.processes``: ``ServiceProcess``, each service its own
  process ended by its PID (``turnwire.testing.replicas``: coordinator replicas
  on one PostgreSQL journal, on the same launcher as ``turnwire up``).

``turnwire.testing.runner_gateway.InProcessRunner`` is the one fake of the
coordinator's runner-gateway port: a real runner called in process, passing
the contract suite the gRPC adapter passes. ``turnwire.testing.dispatcher_rig.Rig``
puts the coordinator's dispatcher alone on a journal, against Stack runners;
``turnwire.testing.postgres.PostgresCluster`` is a throwaway PostgreSQL
server (the tests' journal, and the benchmarks' in bench/). These import both services, so
install Turnwire whole (not the client extra alone) to use them.
"""

import pytest

# Before the modules are imported: a failing case then shows pytest's
# detailed assertion message, not a bare AssertionError.
pytest.register_assert_rewrite(
    "turnwire.testing.records",
    "turnwire.testing.journal_store",
    "turnwire.testing.journal_cases_submit",
    "turnwire.testing.journal_cases_commit",
    "turnwire.testing.journal_cases_lease",
    "turnwire.testing.journal_cases_admin",
    "turnwire.testing.journal_cases_members",
    "turnwire.testing.journal_conformance",
)

from turnwire.testing import records  # noqa: E402
from turnwire.testing.journal_conformance import (  # noqa: E402
    JournalConformance,
    LeasingJournalConformance,
)
from turnwire.testing.journal_store import (  # noqa: E402
    JournalFactory,
    JournalStore,
    single_handle,
)

__all__ = [
    "JournalConformance",
    "JournalFactory",
    "JournalStore",
    "LeasingJournalConformance",
    "records",
    "single_handle",
]
