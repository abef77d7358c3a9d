"""Judging: from the collected evidence to a stored verdict.

* ``evaluate.py``: ``evaluate_candidate``, one candidate against its task's honest baseline, start to verdict;
* ``engine.py``: ``evaluate_engine_candidate``, the same for a serving-engine configuration (its trial only measures);
* ``gates/``: the gates of every subject kind, pure functions of the evidence, in one registry;
* ``result.py``: what one evaluation hands back to its caller (kernel and engine alike);
* ``quarantine.py``: the extended verification pass for a quarantined verdict;
* ``preflight.py``: the task-strength preflight (can a trivial candidate pass?).

Builds on ``harness.measure``; never imports ``harness.tuning`` or ``harness.science``.
"""
