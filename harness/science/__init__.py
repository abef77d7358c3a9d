"""Studies after the fact, which check the harness's own numbers.

* ``anchors.py``: external anchors (published figures the harness should agree with);
* ``prereg.py``: pre-registered A/B comparisons and the treatment-delivery checkpoint;
* ``retest.py``: the held-out retest of a run's certified best on another device or backend;
* ``remeasure.py``: re-measuring a run's verdicts in a fresh session (variance characterisation).

The top layer: builds on ``harness.tuning``, ``harness.verdict`` and ``harness.measure``; nothing below imports it.
"""
