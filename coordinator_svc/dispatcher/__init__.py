"""The coordinator's dispatch engine: the shell around ``coordinator_svc.core.decide``.

``Dispatcher`` satisfies ``coordinator_svc.api.control.DispatchControl``.
"""

from coordinator_svc.dispatcher.engine import Dispatcher, utc_now
from coordinator_svc.dispatcher.metrics import DispatcherMetrics

__all__ = ["Dispatcher", "DispatcherMetrics", "utc_now"]
