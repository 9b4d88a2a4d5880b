"""How each cell's fault is injected: one driver per kind of injection.

A driver gets the Stage and the cell's Injection, submits one operation,
injects the fault at the cell's moment, undoes every process change (restarts
whatever it killed), clears the proxy rules once the fault has done its work,
and returns the operation id once that operation is terminal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.scenarios.cells import Injection
from tests.scenarios.restore import Restore, restorer, take_backup
from tests.scenarios.stage import Stage
from turnwire.client import OperationState

Driver = Callable[[Stage, Injection, str], Awaitable[str]]

S = OperationState


FIRST_PREFLIGHT_ENV = {"TURNWIRE_PREFLIGHT_FIRST_ATTEMPTS": "1"}


async def _prepare(stage: Stage, inj: Injection) -> None:
    await stage.install(inj.rules)
    if inj.first_preflight:
        await stage.restart_coordinator(hard=False, env=FIRST_PREFLIGHT_ENV)
    elif inj.reopen_watch:
        # A watch stream opened earlier is not subject to rules added later:
        # restart the coordinator (SIGTERM) so its watches open through them.
        await stage.restart_coordinator(hard=False)


async def _finish(stage: Stage, inj: Injection) -> None:
    await stage.clear_rules()
    if inj.first_preflight:
        await stage.restart_coordinator(hard=False)  # back to the default (C2a on)


async def proxy(stage: Stage, inj: Injection, key: str) -> str:
    """The rules do all the work; the coordinator must get past them by itself."""
    await _prepare(stage, inj)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_terminal(op_id)
    await _finish(stage, inj)
    return op_id


async def runner_crash_point(stage: Stage, inj: Injection, key: str) -> str:
    """Runner-1 restarted armed; it SIGKILLs itself at the point; restarted unarmed."""
    assert inj.crash_point is not None
    await stage.restart_runner(hard=False, env=stage.armed(inj.crash_point))
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_exit(stage.slot().process, inj.crash_point)
    await stage.restart_runner(hard=True, wipe_store=inj.wipe_store)
    await stage.wait_terminal(op_id)
    return op_id


async def coordinator_crash_point(stage: Stage, inj: Injection, key: str) -> str:
    """The coordinator restarted armed; it SIGKILLs itself at the point; restarted unarmed."""
    assert inj.crash_point is not None and stage.deployment.coordinator is not None
    await stage.restart_coordinator(hard=False, env=stage.armed(inj.crash_point))
    armed = stage.deployment.coordinator
    # The submit's reply may be lost to the crash; the same key retried after
    # the restart returns the same operation (§7).
    submitting = asyncio.create_task(stage.submit(key, inj.sleep_ms))
    await stage.wait_exit(armed, inj.crash_point)
    await stage.restart_coordinator(hard=True)
    op_id = await submitting
    await stage.wait_terminal(op_id)
    return op_id


async def runner_down_before_send(stage: Stage, inj: Injection, key: str) -> str:
    """Runner-1 is down when the operation's preflight goes out; back after it failed."""
    await stage.kill_runner()
    before = await stage.proxy_calls("GetOperationStatus")
    op_id = await stage.submit(key, inj.sleep_ms)
    for _ in range(200):  # until the preflight has hit the dead runner (bounded: 10 s)
        if await stage.proxy_calls("GetOperationStatus") > before:
            break
        await asyncio.sleep(0.05)
    op = await stage.get(op_id)
    assert op.attempt_count == 0, f"a Dispatch went out without a preflight answer: {op}"
    await stage.restart_runner(hard=True, wipe_store=inj.wipe_store)
    await stage.wait_terminal(op_id)
    return op_id


async def runner_kill_in_flight(stage: Stage, inj: Injection, key: str) -> str:
    """The Dispatch is held in the proxy; the runner dies under it; restarted later."""
    await stage.install(inj.rules)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_state(op_id, S.DISPATCHING)
    await stage.wait_all_fired()  # the Dispatch is held in the proxy: truly in flight
    await stage.kill_runner()
    await asyncio.sleep(1.2)  # the held Dispatch (800 ms) lands on the dead port
    await stage.clear_rules()
    await stage.restart_runner(hard=True, wipe_store=inj.wipe_store)
    await stage.wait_terminal(op_id)
    return op_id


async def runner_kill_running(stage: Stage, inj: Injection, key: str) -> str:
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_started(op_id)
    await stage.restart_runner(hard=True, wipe_store=inj.wipe_store)
    await stage.wait_terminal(op_id)
    return op_id


async def coordinator_kill_in_flight(stage: Stage, inj: Injection, key: str) -> str:
    await stage.install(inj.rules)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_state(op_id, S.DISPATCHING)
    await stage.wait_all_fired()  # the Dispatch is held in the proxy: truly in flight
    await stage.restart_coordinator(hard=True)
    await stage.clear_rules()
    await stage.wait_terminal(op_id)
    return op_id


async def coordinator_kill_running(stage: Stage, inj: Injection, key: str) -> str:
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_started(op_id)
    await stage.restart_coordinator(hard=True)
    await stage.wait_terminal(op_id)
    return op_id


async def coordinator_kill_settling(stage: Stage, inj: Injection, key: str) -> str:
    """The runner settles the turn while no coordinator is there to hear it."""
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_started(op_id)
    await stage.kill_coordinator()
    await stage.wait_runner_settled(op_id)
    await stage.restart_coordinator(hard=True)
    await stage.wait_terminal(op_id)
    return op_id


async def _in_dispatch_unknown(stage: Stage, inj: Injection, key: str) -> str:
    await _prepare(stage, inj)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_reached(op_id, S.DISPATCH_UNKNOWN)
    await stage.wait_all_fired()  # a reconcile status call is being held: mid-reconcile
    return op_id


async def reconcile_runner_restart(stage: Stage, inj: Injection, key: str) -> str:
    op_id = await _in_dispatch_unknown(stage, inj, key)
    await stage.wait_runner_settled(op_id)
    await stage.restart_runner(hard=True, wipe_store=inj.wipe_store)
    await stage.clear_rules()
    await stage.wait_terminal(op_id)
    await _finish(stage, inj)
    return op_id


async def reconcile_coordinator_kill(stage: Stage, inj: Injection, key: str) -> str:
    op_id = await _in_dispatch_unknown(stage, inj, key)
    await stage.restart_coordinator(hard=True)
    await stage.clear_rules()
    await stage.wait_terminal(op_id)
    await _finish(stage, inj)
    return op_id


async def reconcile_cancel(stage: Stage, inj: Injection, key: str) -> str:
    op_id = await _in_dispatch_unknown(stage, inj, key)
    await stage.wait_started(op_id)
    await stage.api.cancel(op_id)
    await stage.wait_state(op_id, S.CANCELLING)
    await stage.clear_rules()
    await stage.wait_terminal(op_id)
    await _finish(stage, inj)
    return op_id


async def cancel_queued(stage: Stage, inj: Injection, key: str) -> str:
    await _prepare(stage, inj)
    before = await stage.proxy_calls("GetOperationStatus")
    op_id = await stage.submit(key, inj.sleep_ms)
    for _ in range(200):  # until a preflight was dropped (bounded: 10 s)
        if await stage.proxy_calls("GetOperationStatus") > before:
            break
        await asyncio.sleep(0.05)
    await stage.api.cancel(op_id)
    await stage.wait_terminal(op_id)
    await _finish(stage, inj)
    return op_id


async def cancel_dispatching(stage: Stage, inj: Injection, key: str) -> str:
    await stage.install(inj.rules)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_state(op_id, S.DISPATCHING)
    await stage.wait_all_fired()  # the Dispatch is held in the proxy: truly in flight
    await stage.api.cancel(op_id)
    await stage.wait_terminal(op_id)
    await stage.clear_rules()
    return op_id


async def cancel_running(stage: Stage, inj: Injection, key: str) -> str:
    await stage.install(inj.rules)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_started(op_id)
    await stage.api.cancel(op_id)
    await stage.wait_terminal(op_id)
    await stage.clear_rules()
    return op_id


async def cancel_after_settle(stage: Stage, inj: Injection, key: str) -> str:
    await _prepare(stage, inj)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_runner_settled(op_id)
    await stage.api.cancel(op_id)
    await stage.wait_terminal(op_id)
    await stage.clear_rules()
    return op_id


async def cancel_twice(stage: Stage, inj: Injection, key: str) -> str:
    await stage.install(inj.rules)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_started(op_id)
    await stage.api.cancel(op_id)
    await stage.wait_state(op_id, S.CANCELLING)
    await asyncio.gather(*(stage.api.cancel(op_id) for _ in range(3)))
    await stage.wait_terminal(op_id)
    await stage.clear_rules()
    return op_id


async def _cancelling(stage: Stage, inj: Injection, key: str) -> str:
    await stage.install(inj.rules)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_started(op_id)
    await stage.api.cancel(op_id)
    await stage.wait_state(op_id, S.CANCELLING)
    return op_id


async def cancelling_then_runner_restart(stage: Stage, inj: Injection, key: str) -> str:
    op_id = await _cancelling(stage, inj, key)
    await stage.restart_runner(hard=True, wipe_store=inj.wipe_store)
    await stage.clear_rules()
    await stage.wait_terminal(op_id)
    return op_id


async def cancelling_then_coordinator_kill(stage: Stage, inj: Injection, key: str) -> str:
    op_id = await _cancelling(stage, inj, key)
    await stage.restart_coordinator(hard=True)
    await stage.clear_rules()
    await stage.wait_terminal(op_id)
    return op_id


async def _restore_after_kill(stage: Stage, inj: Injection, backup: Path) -> None:
    assert inj.restore is not None
    await stage.restart_runner(hard=True, replace_store=restorer(backup, Restore(inj.restore)))


async def _backup(stage: Stage, inj: Injection) -> Path:
    assert inj.restore is not None
    store = stage.slot().store
    return await asyncio.to_thread(
        take_backup, store, store.parent / "backups", Restore(inj.restore)
    )


async def restore_after_settle(stage: Stage, inj: Injection, key: str) -> str:
    """Issue 8.1 as reported: a backup taken before the turn; the reply, the
    watch and the status calls lost; the turn runs and settles; runner-1 is
    SIGKILLed and started again on the restored store."""
    backup = await _backup(stage, inj)
    op_id = await _in_dispatch_unknown(stage, inj, key)
    await stage.wait_runner_settled(op_id)
    await _restore_after_kill(stage, inj, backup)
    await stage.clear_rules()
    await stage.wait_terminal(op_id)
    await _finish(stage, inj)
    return op_id


async def restore_while_running(stage: Stage, inj: Injection, key: str) -> str:
    """A backup taken before the turn; runner-1 SIGKILLed while the executor runs
    and started again on the restored store."""
    backup = await _backup(stage, inj)
    op_id = await stage.submit(key, inj.sleep_ms)
    await stage.wait_started(op_id)
    await _restore_after_kill(stage, inj, backup)
    await stage.wait_terminal(op_id)
    return op_id


DRIVERS: dict[str, Driver] = {
    name: globals()[name]
    for name in (
        "proxy",
        "runner_crash_point",
        "coordinator_crash_point",
        "runner_down_before_send",
        "runner_kill_in_flight",
        "runner_kill_running",
        "coordinator_kill_in_flight",
        "coordinator_kill_running",
        "coordinator_kill_settling",
        "reconcile_runner_restart",
        "reconcile_coordinator_kill",
        "reconcile_cancel",
        "cancel_queued",
        "cancel_dispatching",
        "cancel_running",
        "cancel_after_settle",
        "cancel_twice",
        "cancelling_then_runner_restart",
        "cancelling_then_coordinator_kill",
        "restore_after_settle",
        "restore_while_running",
    )
}
