"""The synchronous SDK on a channel traced by opentelemetry-instrumentation-grpc.

Its sync client interceptor hands streaming calls back as plain generators
with no ``cancel()``; the SDK's ``wait``/``watch`` used to fail on them with
AttributeError (docs/TRACING.md). A live coordinator and runner in-process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.instrumentation.grpc import client_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel

from tests.sdk.live_stack import TOKEN, LiveStack
from turnwire.client import OperationState, TurnwireClient


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with LiveStack(Path(tmp_path_factory.mktemp("traced-sync"))) as stack:
        yield stack


def test_the_sync_sdk_waits_and_watches_on_a_traced_channel(live: LiveStack) -> None:
    # instrumentation-grpc ships no annotations for these two.
    interceptor = client_interceptor()  # type: ignore[no-untyped-call]
    channel = intercept_channel(grpc.insecure_channel(live.address), interceptor)  # type: ignore[no-untyped-call]
    with TurnwireClient(live.address, TOKEN, channel=channel) as client:
        submitted = client.submit(items=["traced"])
        operation_id = submitted.operation.operation_id
        final = client.wait(operation_id, timeout=20)
        assert final.state is OperationState.SUCCEEDED
        # A watch left early (after its first event) must end its stream too.
        first = next(iter(client.watch(operation_id)))
        assert first.sequence == 1
    channel.close()
