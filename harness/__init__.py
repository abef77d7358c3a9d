"""The harness: everything that measures, judges and stores, outside the tuner's reach.

The main verbs are exported here and loaded on first use (``harness.evaluate_candidate``), so a light
command does not import torch or the store's drivers until it needs them:

* measuring: :func:`open_measurement_session`, :func:`evaluate_candidate`, :func:`load_task`;
* numbers: :func:`rounds_ratio` (the one ratio estimator), :func:`measurement_set_ratio`;
* storing: :func:`open_store`;
* tuning bookkeeping: :func:`run_random_search`, :func:`compare_runs`;
* studies after the fact: :func:`remeasure_run`, :func:`retest_run`, :func:`run_anchors`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "open_measurement_session": "harness.measure.session",
    "evaluate_candidate": "harness.verdict.evaluate",
    "load_task": "harness.tasks",
    "rounds_ratio": "harness.stats",
    "measurement_set_ratio": "harness.stats",
    "open_store": "harness.store",
    "run_random_search": "harness.tuning.search",
    "compare_runs": "harness.tuning.compare",
    "remeasure_run": "harness.science.remeasure",
    "retest_run": "harness.science.retest",
    "run_anchors": "harness.science.anchors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
