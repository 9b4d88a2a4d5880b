"""The runner's pure core: row transitions, admission, stop reasons, settlement.

No grpc, no SQLAlchemy, no asyncio, no clock, no generated stubs: the shell
(``runner_svc.service``) loads facts, asks the core, and performs the answer.
"""
