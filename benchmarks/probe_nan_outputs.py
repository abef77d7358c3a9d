"""Probe: does a KernelBench problem's own code give NaN on one of the harness's input draws?

Why: on the H200, 90_cumprod and 98_KLDivLoss were rejected in A/A because the candidate's output (the
reference's own code) held NaN where the reference's did not. This computes the problem's output for
one (seed, distribution) with the harness's own input maker, in this process, with TF32 off and on,
twice each, and prints one JSON line per run: NaN and infinity counts, and a digest of the output's
bytes. Same digests everywhere mean the computation is reproducible and the difference lies in the
measuring path; differing digests mean the computation itself is not.

    python benchmarks/probe_nan_outputs.py PROBLEM.py SEED DISTRIBUTION [--device cuda]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("seed", type=int)
    ap.add_argument("distribution")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch

    from harness.measure.runner._inputs import make_inputs
    from protocol import load_protocol

    spec = importlib.util.spec_from_file_location("probe_problem", args.problem)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    large = float(load_protocol().correctness.large_magnitude)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = mod.Model(*mod.get_init_inputs())
    for tf32 in (False, True, False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        inputs = make_inputs(torch, mod.get_inputs, args.seed, args.distribution, large, args.device)
        with torch.no_grad():
            out = model(*inputs)
        outs = out if isinstance(out, (tuple, list)) else [out]
        row = {"problem": Path(args.problem).stem, "seed": args.seed, "distribution": args.distribution, "tf32": tf32}
        for i, o in enumerate(outs):
            flat = o.detach().reshape(-1)
            row[f"out{i}"] = {"nan": int(torch.isnan(flat).sum()), "inf": int(torch.isinf(flat).sum()),
                              "numel": flat.numel(), "first": float(flat[0]) if flat.numel() else None,
                              "sha256": hashlib.sha256(flat.cpu().numpy().tobytes()).hexdigest()[:16]}
        for j, t in enumerate(inputs):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                row[f"in{j}"] = {"zeros": int((t == 0).sum()), "min": float(t.min()), "max": float(t.max()),
                                 "contiguous": t.is_contiguous()}
        print(json.dumps(row), flush=True)
        del inputs, out, outs
        torch.cuda.empty_cache() if args.device == "cuda" else None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
