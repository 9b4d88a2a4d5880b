"""The message-size chain, in one place (README "Message limits").

Every byte a client submits must reach a runner inside one Dispatch, so the
limits are derived from one number, the runners' receive limit:

    runner max receive        R  (runner --max-receive-bytes; GetRunnerInfo
                                  reports it as max_receive_message_bytes)
    coordinator -> runner     R  (the coordinator checks every Dispatch against R
      max send                    before sending it: a bigger one is never sent)
    largest envelope          R - DISPATCH_FRAMING_BYTES (room for the Dispatch's
                                  other fields: operation id, digest, incarnation,
                                  fencing token, attempt, dispatch stamp)
    largest SubmitTurn        envelope + SUBMIT_KEY_ROOM (the request carries the
      request                     idempotency key the envelope does not)
    client -> coordinator     envelope + SUBMIT_SLACK_BYTES (gRPC's own limit sits
      max receive                 above, so an oversized turn gets the typed
                                  TURN_INVALID answer, not a bare RESOURCE_EXHAUSTED)

The coordinator and the runner read the same setting,
``TURNWIRE_RUNNER_MAX_RECEIVE_BYTES`` (coordinator ``--runner-max-receive-bytes``,
runner ``--max-receive-bytes``), default gRPC's own 4 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass

# gRPC's default max receive message length.
DEFAULT_RUNNER_MAX_RECEIVE_BYTES = 4 * 1024 * 1024
# A DispatchRequest besides its envelope: operation_id (at most 255 bytes, the
# runner's own bound) 258, envelope tag and length 6, digest 66, incarnation
# 34, fencing token 11, attempt 6, dispatch stamp 11: 392 bytes. The rest is
# room for fields added later.
DISPATCH_FRAMING_BYTES = 1024
# SubmitTurnRequest minus the envelope's Turn fields: the idempotency key (at
# most 255 characters, 1020 bytes of UTF-8) with its tag and length, the Turn's
# own tag and length, max_attempts. The envelope's extra fields (operation id,
# principal) only make it bigger, so a request over envelope + this never fits.
SUBMIT_KEY_ROOM = 2048
# gRPC's receive limit on the coordinator sits this far above the largest
# envelope, so requests a little too big are answered with a typed error.
SUBMIT_SLACK_BYTES = 64 * 1024
# Below this, no turn worth running fits.
MIN_RUNNER_MAX_RECEIVE_BYTES = 64 * 1024


@dataclass(frozen=True)
class MessageLimits:
    """The chain derived from the runners' receive limit (see the module doc)."""

    runner_max_receive_bytes: int = DEFAULT_RUNNER_MAX_RECEIVE_BYTES

    def __post_init__(self) -> None:
        if self.runner_max_receive_bytes < MIN_RUNNER_MAX_RECEIVE_BYTES:
            raise ValueError(
                f"the runner receive limit must be at least {MIN_RUNNER_MAX_RECEIVE_BYTES} "
                f"bytes, got {self.runner_max_receive_bytes}"
            )

    @property
    def dispatch_max_send_bytes(self) -> int:
        """The largest Dispatch the coordinator sends (the runners' receive limit)."""
        return self.runner_max_receive_bytes

    @property
    def max_envelope_bytes(self) -> int:
        """The largest envelope the coordinator accepts at SubmitTurn."""
        return self.runner_max_receive_bytes - DISPATCH_FRAMING_BYTES

    @property
    def max_submit_request_bytes(self) -> int:
        """SubmitTurn requests bigger than this cannot make an envelope that fits."""
        return self.max_envelope_bytes + SUBMIT_KEY_ROOM

    @property
    def coordinator_max_receive_bytes(self) -> int:
        """gRPC's receive limit on TurnService."""
        return self.max_envelope_bytes + SUBMIT_SLACK_BYTES


def parse_byte_count(text: str) -> int:
    """``4194304``, ``4096K``/``4096KiB``, ``4M``/``4MiB`` -> bytes (binary units)."""
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    factor = 1
    if cleaned.endswith("K"):
        factor, cleaned = 1024, cleaned[:-1]
    elif cleaned.endswith("M"):
        factor, cleaned = 1024 * 1024, cleaned[:-1]
    if not cleaned.isdigit():
        raise ValueError(f"a byte count must be digits with K or M, got {text!r}")
    return int(cleaned) * factor
