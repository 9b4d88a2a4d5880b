"""The coordinator's public TurnService (PROTOCOL.md §7): auth, acceptance (C1),
the gRPC servicer, record <-> proto conversion and the error table."""
