"""Baseline sabotage: a candidate that patches torch to slow the reference must not affect the baseline.

The defence is structural: the baseline is timed in a process that never imports the candidate. This
gate checks that the structure held (the baseline process reported its own pid, different from the
candidate's, with no candidate module loaded and its integrity intact) and refuses the attempt itself
(a candidate that replaces torch functions or registers kernels over ``aten`` ops), which would be a
sabotage wherever the two shared a process.
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.verdict.gates._base import TIMER_NAMES, gate, is_torch_op_check
from harness.verdict.gates._source import SourceScan, matching, scan_source
from protocol import Protocol

NAME = "baseline_sabotage"

# Torch attributes an honest candidate may set: tuning knobs, not replacements of compute functions.
# Precision flags (allow_tf32, fp32_precision, ...) are the precision gate's business.
ALLOWED_TORCH_OVERWRITES = (
    "torch._dynamo.config", "torch._inductor.config", "torch._functorch.config",
    "torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic", "torch.backends.cudnn.enabled",
    "torch.backends.mkldnn.enabled", "torch.backends.opt_einsum",
)
PRECISION_FLAG_SUFFIXES = ("allow_tf32", "fp32_precision", "allow_fp16_reduced_precision_reduction",
                           "allow_bf16_reduced_precision_reduction")


def torch_patches(scan: SourceScan) -> list[str]:
    """Lines where the source replaces a torch function or overrides an aten kernel."""
    out: list[str] = []

    patched = [r for r in matching(scan.overwrites, prefixes=("torch",))
               if not r.name.startswith(ALLOWED_TORCH_OVERWRITES)
               and not r.name.endswith(PRECISION_FLAG_SUFFIXES)
               and not r.name.startswith(TIMER_NAMES)]
    if patched:
        out.append(f"the candidate replaces torch functions globally ({scan.where(patched)})")
    for callee, consts, line in scan.call_args:
        if callee in ("torch.library.Library", "torch.library.impl", "torch.library.register_kernel",
                      "torch.library.register_fake") and any(c == "aten" or c.startswith("aten::") for c in consts):
            out.append(f"the candidate overrides an aten kernel ({callee} at line {line})")
    return out


@gate(NAME)
def sabotage_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    base = evidence.baseline_integrity
    cand = evidence.candidate_integrity
    problems: list[str] = []
    if base.pid <= 0:
        problems.append("the baseline worker did not report its integrity facts (pid 0), so its isolation "
                        "from the candidate cannot be confirmed")
    elif cand.pid > 0 and base.pid == cand.pid:
        problems.append(f"the baseline ran in the candidate's process (pid {base.pid}): candidate code could "
                        "have slowed it")
    if base.candidate_modules_in_baseline:
        problems.append(f"candidate modules were loaded in the baseline process: "
                        f"{sorted(base.candidate_modules_in_baseline)}")
    broken_base = sorted(n for n, intact in base.checks.items() if not intact)
    if broken_base:
        problems.append(f"in the baseline process {', '.join(broken_base)} were not the originals")
    broken = sorted(n for n, intact in cand.checks.items() if not intact and is_torch_op_check(n))
    if broken:
        problems.append(f"after candidate code ran, torch functions {', '.join(broken)} had been replaced: "
                        "a patch meant to slow the reference")
    scan = scan_source(evidence.candidate_source)
    if scan.parse_error:
        problems.append(f"the candidate source does not parse ({scan.parse_error}); it cannot be scanned")
    problems += torch_patches(scan)
    return problems, (f"baseline timed in its own process (pid {base.pid}, candidate pid {cand.pid}) with no "
                      "candidate module loaded; the candidate patches no torch function")
