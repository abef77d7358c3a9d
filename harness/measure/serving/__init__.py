"""Measuring a serving engine: a trial of a flag configuration against the same engine's default launch.

``trial.py`` runs both arms (``run_engine_trial``) and returns typed facts only: each arm's per-seed
requests/s (its metrics), every request's outcome, and the near-tie output checks (``outputs.py``);
``client.py`` sends the seeded ``workload.py`` requests; ``process.py`` launches and pauses the engines;
``metrics.py`` summarises a run; ``session.py`` fingerprints the machine and opens the store session.
Nothing here forms a ratio or decides a status: :mod:`harness.verdict.engine` judges the facts.

Not a kernel timing loop (issue 29, "one timing loop per backend"): a trial times HTTP requests to a
separate engine process (time to first token and end to end, on the harness's monotonic clock, many
requests in flight at once), a different quantity from a kernel call's device or CPU time, so it does not
go through a measuring backend's loop (:mod:`harness.measure.timing`).
"""
