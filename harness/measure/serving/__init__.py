"""Measuring a serving engine: the machine's fingerprint and the measurement session of engine trials.

What a trial measures (both arms' per-seed requests/s, the requests' outcomes, the near-tie output
checks) is judged in :mod:`harness.verdict.engine`; nothing here forms a ratio or decides a status.
"""
