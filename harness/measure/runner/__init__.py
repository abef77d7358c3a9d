"""Child processes that run task and candidate code, and the parent's handle on them."""

from harness.measure.runner._inputs import TASK_DISTRIBUTION, buffer_seed
from harness.measure.runner._reaper import reap_stale
from harness.measure.runner._worker import Role, Worker, WorkerDied

__all__ = ["TASK_DISTRIBUTION", "Role", "Worker", "WorkerDied", "buffer_seed", "reap_stale"]
