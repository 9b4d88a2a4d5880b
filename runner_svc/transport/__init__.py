"""gRPC edge of the runner: the RunnerService servicer, conversions, the error table."""
