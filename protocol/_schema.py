"""Pydantic models of the frozen protocol.

Every model forbids unknown keys and is frozen: a typo in ``protocol.yaml`` is an error, and no code can
change a parameter after loading. The models describe shape only; provenance (the digest check) is
``_loader``'s job.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, PrivateAttr


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeedsParams(_Frozen):
    paired_seeds: PositiveInt
    extended_paired_seeds: PositiveInt
    correctness_trials: PositiveInt


class CpuTimingParams(_Frozen):
    threads: PositiveInt
    warmup_reps: int = Field(ge=0)
    timed_reps: PositiveInt
    min_timed_ns: PositiveInt
    interleave_rounds: PositiveInt
    malloc_mmap_threshold_bytes: PositiveInt
    block_warmup_calls: int = Field(ge=0)


class CudaTimingParams(_Frozen):
    warmup_ms: PositiveFloat
    # 1.8.0: the warm-up stops once its wall time passes warmup_ms times this (JUSTIFICATION 17); before
    # 1.8.0 the count came from the events' estimate alone
    warmup_wall_factor: PositiveFloat = 1e9
    rep_ms: PositiveFloat
    min_reps: PositiveInt
    max_reps: PositiveInt
    l2_flush_bytes: PositiveInt
    free_cache_above_bytes: PositiveInt
    graph_static_sets_max_bytes: PositiveInt
    graph_replay_below_us: PositiveFloat
    graph_replays: PositiveInt
    # launch-bound calls (host launch time >= this fraction of the event time) are timed by graph
    # replay too; 1.6.0 (JUSTIFICATION 10). The default keeps protocols before 1.6.0 loading unchanged.
    graph_replay_launch_bound: float = Field(default=float("inf"), gt=0)
    # 1.7.0 (JUSTIFICATION 16): a graph holds as many calls as their static sets fit in
    # graph_static_sets_max_bytes, up to graph_replays, and is taken only with at least this many.
    # The default (graph_replays itself in effect) keeps protocols before 1.7.0 loading unchanged.
    graph_replays_min: PositiveInt | None = None


class CeilingParams(_Frozen):
    cpu_copy_bytes: PositiveInt
    cpu_matmul_n: PositiveInt
    cuda_copy_bytes: PositiveInt
    cuda_matmul_n: PositiveInt
    reps: PositiveInt
    # 0: measured every session. N > 0: once a store holds ceilings rows of N sessions for a device
    # fingerprint, a session takes their maximum without measuring (a measurement only ever raises it).
    reuse_after_sessions: NonNegativeInt = 0


class TimingParams(_Frozen):
    interleave: bool
    cpu: CpuTimingParams
    cuda: CudaTimingParams
    ceilings: CeilingParams


class StatisticsParams(_Frozen):
    bootstrap_resamples: PositiveInt
    confidence_level: float = Field(gt=0.5, lt=1.0)
    bootstrap_seed: int
    # Per backend: SD on the log scale of the offset a pair of measuring processes adds to a kernel
    # time ratio. A backend not listed has no calibrated figure, and its intervals get no component.
    process_pair_log_sd: dict[Literal["cpu", "cuda", "mlx"], NonNegativeFloat] = Field(default_factory=dict)


Distribution = Literal["normal", "uniform", "negative", "zeros_mixed", "large", "noncontiguous"]
DTypeName = Literal["float64", "float32", "float16", "bfloat16"]


class Tolerance(_Frozen):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    rel_l2: float = Field(ge=0)


class CorrectnessParams(_Frozen):
    distributions: list[Distribution]
    large_magnitude: PositiveFloat
    allow_tf32: bool
    tolerances: dict[DTypeName, Tolerance]
    # 0: off. k > 0: a comparison that fails only on tolerance is judged again after the reference runs
    # a second time on the same input; where its two runs differ (a nondeterministic reference), the
    # candidate may differ by k times that spread more (max absolute error, and relative L2).
    reference_spread_factor: NonNegativeFloat = 0.0
    # How an adversarial class's inputs are made (JUSTIFICATION, 1.6.0 input classes): "factory" re-runs
    # the problem's own get_inputs with its continuous random draws taken from the class's distribution,
    # so the structure it builds (tril, symmetry, softmax, integer ranges) is kept; "redraw", the rule
    # before 1.6.0, redraws every floating-point input whole.
    class_inputs: Literal["factory", "redraw"] = "redraw"
    # True: a class on which the reference itself raises is skipped for that problem from then on and
    # recorded, never judged as the candidate's failure; False: it ends the evaluation as a reference failure.
    skip_classes_reference_fails: bool = False


class GateParams(_Frozen):
    anomaly_speedup: PositiveFloat
    physical_limit_slack: PositiveFloat
    physical_cpu_cache_factor: PositiveFloat
    # 1.7.0 (JUSTIFICATION 16): what a time below the inputs' bytes does when those bytes were counted
    # from a problem's inputs (not declared by its author): "reject" (the rule before 1.7.0) or
    # "quarantine" (a candidate may read only part of inputs whose structure the problem states).
    physical_counted_inputs: Literal["reject", "quarantine"] = "reject"
    escape_wall_over_timed_max: PositiveFloat
    escape_min_wall_ns: PositiveInt
    escape_side_cpu_max: PositiveFloat
    # The escape gate subtracts the candidate loop's own per-repetition harness time (1.6.0), credited at
    # most this many times the baseline loop's (the same harness code): a candidate that slows the
    # harness's own launches (a full launch queue) cannot hide escaped work in that figure.
    escape_harness_over_baseline_max: PositiveFloat = 2.0
    # 1.6.0: the extended pass times every call on inputs of their own storage; a re-evaluation whose
    # speedup falls below this fraction of the quarantined verdict's did not earn it honestly (0: off).
    extended_speedup_min_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    tamper_parent_over_worker_max: PositiveFloat
    timed_output_checks: PositiveInt
    strawman_ratio: PositiveFloat


class UsabilityParams(_Frozen):
    ci_relative_halfwidth_max: PositiveFloat


class NoiseParams(_Frozen):
    noise_floor: PositiveFloat


class SaturationParams(_Frozen):
    early_iterations: PositiveInt
    roofline_fraction_saturated: PositiveFloat


class TruncationParams(_Frozen):
    max_truncated_fraction: float = Field(ge=0, le=1)


class LimitParams(_Frozen):
    candidate_timeout_s: PositiveFloat
    candidate_memory_mb: PositiveInt
    reference_timeout_s: PositiveFloat
    candidate_source_max_bytes: PositiveInt


class SandboxParams(_Frozen):
    image: str
    pids_limit: PositiveInt
    memory_mb: PositiveInt
    cpus: PositiveFloat
    exec_timeout_s: PositiveFloat
    run_wallclock_s: PositiveFloat
    exec_output_cap_bytes: PositiveInt
    copy_out_max_bytes: PositiveInt
    copy_out_max_files: PositiveInt
    workspace_max_bytes: PositiveInt
    list_max_entries: PositiveInt
    tmp_max_bytes: PositiveInt


class EngineParams(_Frozen):
    requests_per_trial: PositiveInt
    startup_timeout_s: PositiveFloat
    request_timeout_s: PositiveFloat
    max_failed_fraction: float = Field(ge=0, le=1)
    output_match_min_fraction: float = Field(ge=0, le=1)
    output_tie_tolerance_nats: float = Field(ge=0)
    output_check_top_n: int = Field(ge=1, le=100)
    warmup_requests: int = Field(ge=0)
    reps_per_seed: PositiveInt


class AgentParams(_Frozen):
    max_output_tokens: PositiveInt
    max_tool_calls_per_iteration: PositiveInt
    model_timeout_s: PositiveFloat


class AnchorParams(_Frozen):
    default_band: PositiveFloat
    mlx_blas: Literal["openblas", "bundled"]
    mlx_blas_paths: list[str]


class Protocol(_Frozen):
    """The whole measurement protocol, as loaded from ``protocol.yaml``.

    Instances made by hand (``Protocol(**numbers)``) are *unverified*: ``is_verified`` is False and
    nothing that produces a result accepts them. Only :func:`protocol.load_protocol` returns a
    verified instance, after checking the file's digest against the lock.
    """

    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    seeds: SeedsParams
    timing: TimingParams
    statistics: StatisticsParams
    correctness: CorrectnessParams
    gates: GateParams
    usability: UsabilityParams
    noise: NoiseParams
    saturation: SaturationParams
    truncation: TruncationParams
    limits: LimitParams
    sandbox: SandboxParams
    engine: EngineParams
    agent: AgentParams
    anchors: AnchorParams

    _sha256: str | None = PrivateAttr(default=None)

    @property
    def sha256(self) -> str:
        """The digest of the file this protocol was loaded from; raises for an unverified protocol."""
        if self._sha256 is None:
            from protocol._errors import UnverifiedProtocolError

            raise UnverifiedProtocolError(
                "this Protocol was built from loose values, not loaded from a digest-checked file; "
                "use protocol.load_protocol()"
            )
        return self._sha256

    @property
    def is_verified(self) -> bool:
        return self._sha256 is not None

    def ref(self) -> "ProtocolRef":
        """The (version, digest) pair that every stored row carries."""
        return ProtocolRef(version=self.version, sha256=self.sha256)

    @property
    def draft(self) -> bool:
        """True when this protocol's digest is not a released one (``protocol/_released.py``).

        Why by digest and not by version: a draft can carry any version string (a bumped version with
        ``anomaly_speedup: 1000`` relocks cleanly), but only a released digest is a constant in code.
        Raises :class:`UnverifiedProtocolError` for a hand-built protocol, like :attr:`sha256`.
        """
        from protocol._released import RELEASED

        return self.sha256 not in set(RELEASED.values())


class ProtocolRef(_Frozen):
    """Version and digest of a verified protocol: what a stored row records."""

    version: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class LockEntry(_Frozen):
    version: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ProtocolLock(_Frozen):
    """``protocol.lock.json``: the current pin and every version's digest, oldest first."""

    version: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    history: list[LockEntry]
