"""The self-contained HTML page: plots inlined as data URIs, every number read from the store.

Why a template: the page is ``templates/report.html`` (with its pieces in ``templates/_macros.html``),
rendered by jinja2 with autoescape on, so every value read from the store (run ids, tuner specs,
reasons, gate details, device fingerprints) is escaped without anyone having to remember to. Python
here only prepares values and formats numbers; the markup lives in the templates.
"""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template

from harness.tuning.campaigns import reason_category
from harness.tuning.reports._data import ArmData, ReportData
from protocol import Protocol, is_released_digest

TEMPLATES = Path(__file__).with_name("templates")


def _speed(v: float | None, ci: tuple[float, float] | None = None) -> str:
    if v is None:
        return "none usable"
    return f"{v:.3f}x" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _held_out_legs(retests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The retest reports that are held-out legs with a measured ratio."""
    return [r["body"] for r in retests
            if isinstance(r["body"], dict) and r["body"].get("held_out") and r["body"].get("held_out_ratio") is not None]


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update({
        "speed": _speed,
        "fmt": format,                                   # Python's format spec: {{ x|fmt(".1%") }}
        "ratio": lambda v: f"{float(v):.3f}x",
        "pretty_json": lambda v: json.dumps(v, indent=2, sort_keys=True),
        "held_out_legs": _held_out_legs,
        "reason_category": reason_category,
    })
    return env


def _template(name: str) -> Template:
    return _environment().get_template(name)


def _confinement(by_arm: dict[str, str]) -> str:
    """The "candidate confined" cell (markup, already escaped)."""
    return str(_template("_macros.html").module.confinement(by_arm))  # type: ignore[attr-defined]


def _model_arms(data: ReportData) -> list[tuple[ArmData, dict[str, Any] | None]]:
    """The arms to introduce: (arm, its ``model_server`` config) for a model served locally (written by
    the tuner at run time), (arm, None) for a scripted fixture; other arms need no introduction."""
    out: list[tuple[ArmData, dict[str, Any] | None]] = []
    for a in data.arms:
        cfg = a.summary.campaign.config or {}
        served = cfg.get("model_server")
        if isinstance(served, dict):
            out.append((a, served))
        elif cfg.get("scripted"):
            out.append((a, None))
    return out


def render_html(data: ReportData, protocol: Protocol, best_png: Path, usability_png: Path) -> str:
    devices = {json.dumps(a.device, sort_keys=True) for a in data.arms}
    protocols = {(a.summary.campaign.protocol_version, a.summary.campaign.protocol_sha256) for a in data.arms}
    # issue 27: a run recorded under a draft (a digest not in protocol/_released.py) is said so at the top
    drafts = sorted((v, d) for v, d in protocols if not is_released_digest(d))
    return _template("report.html").render(
        data=data, protocol=protocol, model_arms=_model_arms(data), draft_protocols=drafts,
        report_protocol_draft=protocol.draft,
        devices=[json.dumps(json.loads(d), indent=2, sort_keys=True) for d in sorted(devices)],
        protocols=sorted(protocols),
        best_png=base64.b64encode(best_png.read_bytes()).decode("ascii"),
        usability_png=base64.b64encode(usability_png.read_bytes()).decode("ascii"),
    )
