"""Measuring: the path from a candidate file to the facts the gates judge.

* ``runner/``: the measuring child processes (confinement, the worker protocol, the inputs, the fd
  channel and device-memory sharing);
* ``timing/``: the clocks and timed blocks used inside those children (CPU and CUDA);
* ``backends/``: measuring backends other than the default runner (the MLX runner);
* ``session.py``: a measurement session (device fingerprint, protocol, ceilings, long-lived workers);
* ``collect.py``: collecting one evaluation's evidence from the workers;
* ``correctness.py``: comparing a candidate's output with the reference's;
* ``evidence.py``: the facts the children report, which the gates read;
* ``device.py``: device fingerprints, measured ceilings, the roofline fraction, the measuring backends.

Nothing here judges: this package never imports ``harness.verdict``, ``harness.tuning`` or
``harness.science`` (an import-linter contract in ``pyproject.toml``).
"""
