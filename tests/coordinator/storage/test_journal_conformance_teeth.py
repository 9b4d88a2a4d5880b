"""The public journal suite has teeth: a journal with one bug fails the cases for that bug.

Each broken journal below is the fake journal with one realistic mistake. It
runs through ``turnwire.testing.LeasingJournalConformance`` exactly as a user
runs their own backend (a test file in a fresh directory, plain pytest, no
conftest of ours), and exactly the cases that guard against that mistake
fail; every other case passes. The real fake journal, run the same way,
passes all of them, so the failures are the bug's, not the harness's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import datetime

import pytest

from coordinator_svc.core.model import Change, EventRecord, OperationRecord
from coordinator_svc.storage import FakeJournal
from turnwire.testing import JournalConformance, LeasingJournalConformance

pytest_plugins = ["pytester"]


def cases_of(suite: type) -> list[str]:
    """The case names a suite class holds (read from it: a new case needs no edit here)."""
    return sorted(name for name in dir(suite) if name.startswith("test_"))


ALL_CASES = cases_of(LeasingJournalConformance)


class VersionBlindJournal(FakeJournal):
    """Commit checks the state and the fencing token but not the version: a
    write from a stale read lands (an UPDATE without ``version`` in its WHERE)."""

    async def commit(self, change: Change) -> OperationRecord:
        current = await self.get(change.before.operation_id)
        if current is not None:
            stale_read = dataclasses.replace(change.before, version=current.version)
            change = dataclasses.replace(change, before=stale_read)
        return await super().commit(change)


class CheckThenInsertJournal(FakeJournal):
    """Submit looks the idempotency key up, then inserts after a round trip,
    with no unique index on (principal, key): racing submits make a row each."""

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        key = (operation.principal, operation.idempotency_key_digest)
        if await self.by_idempotency_key(*key) is None:
            await asyncio.sleep(0)  # the round trip between the lookup and the insert
            self._by_key.pop(key, None)  # no unique index: the insert sees no other row
        return await super().submit(operation, first_event)


class TakeoverKeepsTokenJournal(FakeJournal):
    """Claim takes over an expired lease without moving the fencing token, so
    the replica that lost the lease can still write (§5)."""

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        before = await self.get(operation_id)
        claimed = await super().claim(operation_id, owner, now, ttl_seconds)
        if claimed is None or before is None:
            return claimed
        kept = dataclasses.replace(claimed, fencing_token=before.fencing_token)
        self._operations[operation_id] = kept
        return kept


def run_suite(pytester: pytest.Pytester, journal: str) -> pytest.HookRecorder:
    """Run the public leasing suite against ``journal`` (a class of this module),
    from a test file of its own in pytester's fresh directory."""
    pytester.makepyfile(
        test_user_journal=f"""
        import pytest

        from turnwire.testing import LeasingJournalConformance, single_handle
        from {__name__} import {journal}


        class TestUserJournal(LeasingJournalConformance):
            @pytest.fixture
            def journal_factory(self):
                return single_handle({journal})
        """
    )
    return pytester.inline_run("-p", "no:cacheprovider")


def case_names(reports: Sequence[pytest.TestReport | pytest.CollectReport]) -> list[str]:
    return sorted(report.nodeid.rsplit("::", 1)[-1] for report in reports)


def test_the_real_fake_journal_passes_every_case(pytester: pytest.Pytester) -> None:
    passed, skipped, failed = run_suite(pytester, "FakeJournal").listoutcomes()
    assert case_names(passed) == ALL_CASES
    assert (skipped, failed) == ([], [])


@pytest.mark.parametrize(
    ("journal", "failing"),
    [
        pytest.param(
            "VersionBlindJournal",
            ["test_commit_with_stale_version_raises_and_changes_nothing"],
            id="commit-ignores-version",
        ),
        pytest.param(
            "CheckThenInsertJournal",
            ["test_concurrent_submits_with_one_key_make_one_row"],
            id="two-rows-for-one-key",
        ),
        pytest.param(
            "TakeoverKeepsTokenJournal",
            [
                "test_claim_takes_renews_refuses_and_fences_on_takeover",
                "test_commit_after_lease_takeover_raises_lease_lost",
            ],
            id="takeover-keeps-token",
        ),
    ],
)
def test_a_broken_journal_fails_exactly_the_cases_for_its_bug(
    pytester: pytest.Pytester, journal: str, failing: list[str]
) -> None:
    passed, skipped, failed = run_suite(pytester, journal).listoutcomes()
    assert case_names(failed) == failing
    assert case_names(passed) == sorted(set(ALL_CASES) - set(failing))
    assert skipped == []


def test_a_failing_case_shows_the_assertion_it_broke(pytester: pytest.Pytester) -> None:
    """The suite's modules are registered for pytest's assertion rewriting, so a
    user sees which comparison failed, not a bare AssertionError."""
    _, _, failed = run_suite(pytester, "CheckThenInsertJournal").listoutcomes()
    (report,) = failed
    assert "assert 8 == 1" in report.longreprtext


def test_a_suite_without_a_journal_factory_says_what_is_missing(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_user_journal="""
        from turnwire.testing import JournalConformance


        class TestUserJournal(JournalConformance):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=len(cases_of(JournalConformance)))
    result.stdout.fnmatch_lines(["*TestUserJournal must override the journal_factory fixture*"])


def test_a_coroutine_journal_factory_is_awaited(pytester: pytest.Pytester) -> None:
    """A backend that opens asynchronously (a connection pool) gives an async factory."""
    pytester.makepyfile(
        test_user_journal="""
        import pytest

        from coordinator_svc.storage import FakeJournal
        from turnwire.testing import JournalConformance


        class TestUserJournal(JournalConformance):
            @pytest.fixture
            def journal_factory(self):
                journal = FakeJournal()

                async def open_journal():
                    return journal

                return open_journal
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(cases_of(JournalConformance)))
