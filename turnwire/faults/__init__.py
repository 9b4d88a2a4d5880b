"""Transport fault injection for Turnwire (a product, not a test helper).

One rule language (:mod:`turnwire.faults.rules`), applied two ways:

- :mod:`turnwire.faults.proxy`: a gRPC-aware forwarding proxy in its own
  process (``python -m turnwire.faults proxy``) or in-process
  (:func:`start_proxy`), with a control API (FaultControlService) to change
  rules while it runs;
- :mod:`turnwire.faults.interceptor`: a grpc.aio client interceptor.

Everything here listens on and talks to loopback only.
"""

from turnwire.faults.control import FaultControlClient
from turnwire.faults.interceptor import (
    FaultUnaryStreamInterceptor,
    FaultUnaryUnaryInterceptor,
    fault_interceptors,
)
from turnwire.faults.loopback import NonLoopbackAddressError
from turnwire.faults.proxy import FaultProxy, start_proxy
from turnwire.faults.rules import (
    Action,
    Decision,
    FaultStats,
    Phase,
    Rule,
    RuleError,
    RuleSet,
    RuleStatus,
    parse_rule,
    rule_from_json,
)

__all__ = [
    "Action",
    "Decision",
    "FaultControlClient",
    "FaultProxy",
    "FaultStats",
    "FaultUnaryStreamInterceptor",
    "FaultUnaryUnaryInterceptor",
    "NonLoopbackAddressError",
    "Phase",
    "Rule",
    "RuleError",
    "RuleSet",
    "RuleStatus",
    "fault_interceptors",
    "parse_rule",
    "rule_from_json",
    "start_proxy",
]
