"""The coordinator's driver: what the shell used to decide, as synchronous code.

The pure core (``coordinator_svc.core``) decides what one event does to one
operation. The driver decides everything around that decision that the
asyncio shell (``coordinator_svc.dispatcher``) used to decide on its own:
the order of a step's reads and writes, what a stale version or a lost lease
means, which turns a timer or the due scan may tick, how long a Dispatch
reply is held for the watch's settled row. It holds one memory record per
operation and takes the clock as an argument: no asyncio, no gRPC, no SQL
(``.importlinter`` holds it to that), so the deterministic simulation
(``tests/simulation``) runs the same code the coordinator ships.

The shell performs what the driver returns (a read, a commit, a runner call,
a timer) and feeds the outcome back; it holds no rules of its own.
"""
