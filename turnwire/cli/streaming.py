"""``--stream`` for ``turnwire submit --wait`` and ``turnwire watch`` (PROTOCOL.md §12).

The turn's streamed output is printed as it arrives: each chunk's raw text
straight to stdout (no newline added, flushed at once, so tokens show as they
come), a gap said on stderr (what was lost and where the stream goes on),
then a blank line and the usual final summary of the operation. With
``--json`` every chunk and gap is a JSON line instead, then the operation's.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from turnwire.cli import render
from turnwire.client import Operation, OutputChunk, OutputGap, RetryLater, TurnwireClient


class StreamResume(Exception):
    """The stream could not go on: the client's error and how to resume."""

    def __init__(self, error: RetryLater, hint: str) -> None:
        super().__init__(f"{error}; {hint}")
        self.error = error
        self.hint = hint


def print_stream(
    client: TurnwireClient,
    operation_id: str,
    after_offset: int,
    timeout: float | None,
    *,
    as_json: bool,
) -> Operation:
    """Print the output of ``operation_id`` after ``after_offset``; the terminal operation."""
    offset = after_offset
    wrote_text = False
    final: Operation | None = None
    try:
        for item in client.stream(operation_id, after_offset, timeout=timeout):
            if isinstance(item, OutputChunk):
                offset = item.offset
                if as_json:
                    _json_line({"chunk": _chunk_json(item)})
                else:
                    sys.stdout.write(item.text)
                    sys.stdout.flush()
                    wrote_text = True
            elif isinstance(item, OutputGap):
                offset = item.next_offset - 1 if item.next_offset else offset
                if as_json:
                    _json_line(
                        {
                            "gap": {
                                "after_offset": item.after_offset,
                                "next_offset": item.next_offset,
                            }
                        }
                    )
                else:
                    print(
                        f"turnwire: {operation_id}: {item.describe()}", file=sys.stderr, flush=True
                    )
            else:
                final = item
    except RetryLater as error:
        raise StreamResume(
            error, f"resume with: turnwire watch {operation_id} --stream --after-offset {offset}"
        ) from None
    if final is None:  # pragma: no cover - stream() always ends with the operation
        raise AssertionError("the stream ended without the operation")
    if as_json:
        _json_line(render.operation_json(final))
    else:
        if wrote_text:
            sys.stdout.write("\n")
        sys.stdout.write("\n" + render.operation_detail(final) + "\n")
        sys.stdout.flush()
    return final


def _chunk_json(chunk: OutputChunk) -> dict[str, Any]:
    return {
        "offset": chunk.offset,
        "content_type": chunk.content_type,
        "text": chunk.text,
        "emitted_at": chunk.emitted_at.isoformat() if chunk.emitted_at else None,
    }


def _json_line(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    sys.stdout.flush()
