"""How long a Dispatch reply is held, and what it says when let go (C9, R3).

A runner answers Dispatch after holding its reply up to the settle grace
(``reply_hold_ms``, C9): a turn that settles within it comes back settled on
the reply itself. A reply that comes back *accepted, not settled* is held here
a little longer, in up to three waits, so that the turn costs as few commits
as its length allows:

    CALLING --accepted, not settled--> SETTLE        (any other reply: DONE at once)
    SETTLE  --a commit--> DONE
            --settle_grace up, nothing seen--> START
            --settle_grace up, the settled row seen--> COMMIT
            --settle_grace up, a start seen--> DONE
    START   --a commit, a start, the settled row, or start_grace up-->
            COMMIT if the settled row was seen and nothing committed, else DONE
    COMMIT  --a commit, or dispatch_timeout up--> DONE

- ``SETTLE`` (C9, C3): up to ``settle_grace`` for a commit of the operation. A
  short turn settles meanwhile and the watch's settled row takes the
  operation DISPATCHING -> terminal in one commit; the reply, now stale, is
  delivered and discarded by the core (C8a).
- ``START`` (R3): entered only when the wait saw nothing (no commit, no start
  on the reply or the watch, no settled row): up to ``start_grace`` for the
  watch's confirmed start, so the RUNNING commit records ``STARTED`` without
  a commit of its own. A commit, a settled row or a start ends it.
- ``COMMIT`` (C9): the settled row already arrived and its terminal commit is
  only queued behind others (a loaded coordinator): up to ``dispatch_timeout``
  for that commit, rather than write a RUNNING that the next commit overwrites.

Then the reply is delivered, with the row of the confirmed start the watch
showed in its place when that start is from the incarnation the reply names
(R3, C8a). A crash meanwhile leaves DISPATCHING, which C12 resolves.

Every wait is measured from the moment it began, on a monotonic clock the
caller passes in (seconds, ``loop.time()`` in the shell): nothing here reads a
clock or awaits. The shell performs a :class:`Wait` by sleeping until its
``until`` or until an input it was told wakes the hold (``wakes``), then asks
:meth:`HeldReply.next` again.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from coordinator_svc.core.events import DispatchAccepted, DispatchRefused, DispatchUnknown
from coordinator_svc.core.model import Execution
from coordinator_svc.core.runner_view import RunnerOp

Reply = DispatchAccepted | DispatchRefused | DispatchUnknown

# The most waits one hold can take: one per phase, and one more for each in
# case a timer fires a hair before the clock reads its deadline. The shell
# bounds its loop by it (``HeldReply.cut`` past it).
MAX_WAITS = 8


@dataclass(frozen=True)
class HoldTimings:
    """The three waits' lengths, in seconds (``settle_grace`` <= 0: no hold)."""

    settle_grace: float
    start_grace: float
    dispatch_timeout: float


class Phase(enum.Enum):
    CALLING = "calling"  # the Dispatch is on the wire: only a start is remembered
    SETTLE = "settle"  # C9: waiting for a commit
    START = "start"  # R3: waiting for the watch's confirmed start
    COMMIT = "commit"  # C9: the settled row was seen; waiting for its commit
    DONE = "done"  # the reply goes back to the core


@dataclass(frozen=True)
class Wait:
    """Wait until ``until`` (the caller's monotonic seconds), or an input that ``wakes``."""

    until: float


@dataclass(frozen=True)
class Deliver:
    """The hold is over: this reply is the event the core reads next."""

    reply: Reply


@dataclass(frozen=True)
class ConfirmedStart:
    """A confirmed-start row the watch showed while the reply was on the way (R3)."""

    incarnation_id: str
    op: RunnerOp


# Where each input is remembered: a start from the moment the Dispatch is sent
# (the watch may show it before the reply comes back); a settled row or a
# commit only once the reply is held, as the shell did (an earlier one is
# not this hold's business: see the tests' pinned cases).
_HOLDING = frozenset({Phase.SETTLE, Phase.START, Phase.COMMIT})


@dataclass(frozen=True)
class HeldReply:
    """One operation's Dispatch reply, from the send until it is delivered (C9, R3).

    Immutable: every input returns the next value. ``until`` is the current
    wait's deadline (meaningful in SETTLE, START and COMMIT only).
    """

    timings: HoldTimings
    phase: Phase = Phase.CALLING
    reply: Reply | None = None
    until: float = 0.0
    start: ConfirmedStart | None = None
    saw_settled: bool = False
    saw_commit: bool = False

    # --- inputs -----------------------------------------------------------------

    def replied(self, reply: Reply, now: float) -> HeldReply:
        """The runner answered at ``now``. Only an accepted, unsettled reply is held
        (C9), and only when there is a settle grace; anything else is delivered."""
        if self.phase is not Phase.CALLING:
            return self  # one reply per Dispatch: a second says nothing new
        held = isinstance(reply, DispatchAccepted) and not reply.op.settled
        if held and self.timings.settle_grace > 0:
            until = now + self.timings.settle_grace
            return dataclasses.replace(self, phase=Phase.SETTLE, reply=reply, until=until)
        return dataclasses.replace(self, phase=Phase.DONE, reply=reply)

    def start_seen(self, incarnation_id: str, op: RunnerOp) -> HeldReply:
        """The watch showed a confirmed start (R3) of the row, from ``incarnation_id``.

        Kept from the send on, the latest one over any earlier, whatever its
        incarnation: which incarnation counts is decided on delivery (C8a).
        """
        if self.phase is Phase.DONE:
            return self
        return dataclasses.replace(self, start=ConfirmedStart(incarnation_id, op))

    def settled_seen(self) -> HeldReply:
        """The watch delivered the row settled (its terminal commit is now queued)."""
        if self.phase not in _HOLDING:
            return self
        return dataclasses.replace(self, saw_settled=True)

    def committed(self) -> HeldReply:
        """Someone committed a change of the operation (ends the hold, C9)."""
        if self.phase not in _HOLDING:
            return self
        return dataclasses.replace(self, saw_commit=True)

    # --- outputs ----------------------------------------------------------------

    @property
    def wakes(self) -> bool:
        """The current wait has ended on what was seen, before its deadline.

        SETTLE and COMMIT end only on a commit; START on a commit, a settled
        row, or a start from any incarnation (the shell's start wait woke on
        each). An input that does not end the wait is remembered for later.
        """
        if self.phase is Phase.START:
            return self.saw_commit or self.saw_settled or self.start is not None
        if self.phase in (Phase.SETTLE, Phase.COMMIT):
            return self.saw_commit
        return False

    def next(self, now: float) -> tuple[HeldReply, Wait | Deliver]:
        """What to do at ``now``: wait on, or deliver. Moves through every phase
        that has ended by ``now``; a :class:`Wait` returned is always open."""
        current = self
        for _ in range(len(Phase)):  # each pass leaves a phase, or returns
            if current.phase is Phase.CALLING:
                raise ValueError("no reply yet: nothing to hold or deliver")
            if current.phase is Phase.DONE:
                return current, Deliver(current.delivered())
            if not current.wakes and now < current.until:
                return current, Wait(current.until)
            current = current._ended(now)
        raise AssertionError("a hold left more phases than it has")  # pragma: no cover

    def cut(self) -> HeldReply:
        """Deliver now, whatever is still awaited (the shell's wait bound, MAX_WAITS)."""
        if self.reply is None:
            raise ValueError("no reply yet: nothing to deliver")
        return dataclasses.replace(self, phase=Phase.DONE)

    def delivered(self) -> Reply:
        """The reply, or in its place the confirmed-start row the watch showed from
        the same incarnation (R3: the RUNNING commit then records STARTED; C8a: a
        row from another incarnation says nothing about this reply)."""
        reply = self.reply
        if reply is None:
            raise ValueError("no reply yet: nothing to deliver")
        start = self.start
        if (
            not isinstance(reply, DispatchAccepted)
            or reply.op.settled
            or start is None
            or start.incarnation_id != reply.incarnation_id
        ):
            return reply
        return dataclasses.replace(reply, op=start.op)

    # --- transitions ------------------------------------------------------------

    def _ended(self, now: float) -> HeldReply:
        """The current wait is over (woken or past its deadline): the next phase."""
        t = self.timings
        if self.saw_commit:
            return self._to(Phase.DONE)  # the commit came: the reply is stale or due
        if self.phase is Phase.SETTLE and not self._seen_anything():
            return self._to(Phase.START, now + t.start_grace)
        if self.phase in (Phase.SETTLE, Phase.START) and self.saw_settled:
            return self._to(Phase.COMMIT, now + t.dispatch_timeout)
        return self._to(Phase.DONE)

    def _seen_anything(self) -> bool:
        """A start (the reply's own, or one the watch showed from any incarnation) or
        the settled row: no wait for the start is needed."""
        reply = self.reply
        started = isinstance(reply, DispatchAccepted) and reply.op.execution is Execution.STARTED
        return started or self.start is not None or self.saw_settled

    def _to(self, phase: Phase, until: float = 0.0) -> HeldReply:
        return dataclasses.replace(self, phase=phase, until=until)


class HeldReplies:
    """The held reply of every operation whose Dispatch is on the way, by id.

    Each input returns whether the operation's waiting shell must wake
    (``HeldReply.wakes``); an input for an operation with no Dispatch on the
    way is dropped.
    """

    def __init__(self, timings: HoldTimings) -> None:
        self.timings = timings
        self._held: dict[str, HeldReply] = {}

    def __contains__(self, operation_id: str) -> bool:
        return operation_id in self._held

    def sending(self, operation_id: str) -> None:
        """A Dispatch of the operation is about to go on the wire."""
        self._held[operation_id] = HeldReply(self.timings)

    def replied(self, operation_id: str, reply: Reply, now: float) -> None:
        self._held[operation_id] = self._held[operation_id].replied(reply, now)

    def start_seen(self, operation_id: str, incarnation_id: str, op: RunnerOp) -> bool:
        held = self._held.get(operation_id)
        return held is not None and self._put(operation_id, held.start_seen(incarnation_id, op))

    def settled_seen(self, operation_id: str) -> bool:
        held = self._held.get(operation_id)
        return held is not None and self._put(operation_id, held.settled_seen())

    def committed(self, operation_id: str) -> bool:
        held = self._held.get(operation_id)
        return held is not None and self._put(operation_id, held.committed())

    def next(self, operation_id: str, now: float) -> Wait | Deliver:
        held, step = self._held[operation_id].next(now)
        self._held[operation_id] = held
        return step

    def cut(self, operation_id: str) -> Reply:
        """Deliver now (the shell's wait bound): what ``next`` would deliver at the end."""
        return self._held[operation_id].cut().delivered()

    def done(self, operation_id: str) -> None:
        """The Dispatch is over (delivered, failed or cancelled): forget it."""
        self._held.pop(operation_id, None)

    def _put(self, operation_id: str, held: HeldReply) -> bool:
        self._held[operation_id] = held
        return held.wakes
