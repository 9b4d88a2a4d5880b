"""The coordinator's pure core: states, legal edges, decisions.

No grpc, no SQLAlchemy, no asyncio, no clock: time comes in as an argument.
"""
