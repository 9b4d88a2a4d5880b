"""What operators see from outside a process: metrics, traces and structured logs (issue 13)."""
