"""Judging: from the collected evidence to a stored verdict.

* ``evaluate.py``: ``evaluate_candidate``, one candidate against its task's honest baseline, start to verdict;
* ``gates/``: the gates, pure functions of the evidence;
* ``result.py``: what one evaluation hands back to its caller (kernel and engine alike);
* ``quarantine.py``: the extended verification pass for a quarantined verdict;
* ``preflight.py``: the task-strength preflight (can a trivial candidate pass?).

Builds on ``harness.measure``; never imports ``harness.tuning`` or ``harness.science``.
"""
