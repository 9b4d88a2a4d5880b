"""The change feed wakes the watchers of the operation that changed, and only them."""

from __future__ import annotations

import asyncio

from coordinator_svc.feed import ChangeFeed


def test_a_commit_wakes_only_the_watchers_of_its_operation() -> None:
    """A change to op B leaves a watch on op A waiting; a change to op A wakes it."""

    async def main() -> None:
        feed = ChangeFeed()
        with feed.watching("op_a"):
            mark = feed.mark("op_a")
            waiter = asyncio.create_task(feed.wait_past("op_a", mark, at_most=10))
            await asyncio.sleep(0.05)
            feed.publish("op_b")
            await asyncio.sleep(0.05)
            assert not waiter.done()
            feed.publish("op_a")
            await asyncio.wait_for(waiter, 5)

    asyncio.run(main())


def test_a_change_between_mark_and_wait_is_not_lost() -> None:
    """The mark is read before the journal: a commit after it returns the wait at once."""

    async def main() -> None:
        feed = ChangeFeed()
        with feed.watching("op_a"):
            mark = feed.mark("op_a")
            feed.publish("op_a")
            await asyncio.wait_for(feed.wait_past("op_a", mark, at_most=10), 5)

    asyncio.run(main())


def test_wake_all_ends_every_wait_and_unwatched_operations_are_forgotten() -> None:
    """Shutdown wakes every watcher; leaving `watching` drops the operation's counter."""

    async def main() -> None:
        feed = ChangeFeed()
        with feed.watching("op_a"), feed.watching("op_c"):
            waits = [
                asyncio.create_task(feed.wait_past(op, feed.mark(op), at_most=10))
                for op in ("op_a", "op_c")
            ]
            await asyncio.sleep(0.05)
            feed.wake_all()
            await asyncio.wait_for(asyncio.gather(*waits), 5)
        assert feed.mark("op_a") == (0, 1)

    asyncio.run(main())
