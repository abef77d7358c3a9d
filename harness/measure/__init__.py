"""Measuring: the path from a candidate file to the facts the gates judge.

* ``runner/``: the measuring child processes (confinement, the worker protocol, the inputs, the fd
  channel);
* ``timing/``: the clocks and timed blocks used inside those children (CPU and CUDA);
* ``backends/``: the measuring backends, one module each behind one protocol (``cpu``, ``cuda``, ``mlx`` and
  its runner), found by name in ``BACKENDS``, and the output transport (``_share``, ``_vmm``);
* ``session.py``: a measurement session (device fingerprint, protocol, ceilings, long-lived workers);
* ``collect.py``: collecting one evaluation's evidence from the workers;
* ``correctness.py``: comparing a candidate's output with the reference's;
* ``evidence.py``: the facts the children report, which the gates read;
* ``device.py``: device fingerprints, measured ceilings, the roofline fraction, a backend's availability;
* ``cost.py``: a task's FLOP and byte count, run in its own process started as a measuring child is.

Nothing here judges: this package never imports ``harness.verdict``, ``harness.tuning`` or
``harness.science`` (an import-linter contract in ``pyproject.toml``).
"""
