"""The Turnwire runner service: executes dispatched turns at most once (PROTOCOL.md §4, §6)."""
