"""The journal conformance suite: subclass one class, provide one fixture.

``JournalConformance`` holds every case of the ``ports.Journal`` contract;
``LeasingJournalConformance`` adds the §5 lease cases of
``ports.LeasingJournal``. Neither name starts with ``Test``, so pytest
collects only your subclass (name it ``Test...``), and with it every
inherited case. What the suite checks, and what a pass means, is in the
``turnwire.testing`` docstring.

Adding a case: a ``test_`` method on the case class of its topic
(``journal_cases_submit``, ``journal_cases_commit``, ``journal_cases_lease``,
``journal_cases_admin``, ``journal_cases_members``)
taking the ``journal_store`` fixture; every suite that includes that class
then runs it.
"""

from __future__ import annotations

from turnwire.testing.journal_cases_admin import AdminCases
from turnwire.testing.journal_cases_commit import CommitCases
from turnwire.testing.journal_cases_lease import LeaseCases
from turnwire.testing.journal_cases_members import MembershipCases
from turnwire.testing.journal_cases_submit import SubmitAndReadCases


class JournalConformance(SubmitAndReadCases, CommitCases, AdminCases, MembershipCases):
    """Every ``ports.Journal`` case. Subclass as ``Test<YourJournal>`` and
    override the ``journal_factory`` fixture (see ``journal_store.JournalFactory``)."""


class LeasingJournalConformance(JournalConformance, LeaseCases):
    """Every ``ports.Journal`` case plus the ``ports.LeasingJournal`` (§5) cases,
    for a journal that several coordinator replicas may share."""
