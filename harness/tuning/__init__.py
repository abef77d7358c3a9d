"""Tuning bookkeeping: what is tuned, the runs, and how runs compare.

* ``subjects/``: the Subject protocol (a kernel or an engine configuration: brief, search space,
  session, evaluation, stored kind) and ``load_subject``;
* ``campaigns/``: campaign rows, iterations, usability and summaries;
* ``search/``: the random-search baseline tuner;
* ``compare.py``: comparing two runs (usable iterations, best speedup with its interval, noise);
* ``reports/``: the HTML and plot reports of runs.

Builds on ``harness.verdict`` and ``harness.measure``; never imports ``harness.science``.
"""
