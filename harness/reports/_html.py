"""The self-contained HTML page: plots inlined as data URIs, every number read from the store."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from harness.campaigns import reason_category
from harness.reports._data import ArmData, ReportData
from protocol import Protocol


def _e(x: object) -> str:
    return html.escape(str(x))


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}" style="max-width:100%">'


def _speed(v: float | None, ci: tuple[float, float] | None = None) -> str:
    if v is None:
        return "none usable"
    return f"{v:.3f}x" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _held_out(arm: ArmData) -> str:
    """Home ratio beside the held-out ratio; a leg that measured nothing does not count as one."""
    if arm.summary.best_speedup is None:
        return "no certified result"
    legs = [r["body"] for r in arm.retests
            if isinstance(r["body"], dict) and r["body"].get("held_out") and r["body"].get("held_out_ratio") is not None]
    if not legs:
        return ("<b>certified on the tuning device only: no held-out retest leg</b> "
                "(run <code>atb retest RUN --backend mlx|cpu|cuda</code> to add one)")
    return "; ".join(
        f"home {float(b['home_ratio']):.3f}x, held-out on {_e(str(b.get('held_out_backend')))} "
        f"{float(b['held_out_ratio']):.3f}x ({_e(str(b.get('label', '')))})" for b in legs)


def _truncation(arm: ArmData) -> str:
    """An external agent (``atb mcp serve``) makes its model calls where the harness cannot see them: its
    truncated fraction is not 0%, it is unknown, and the page must say so."""
    if (arm.summary.campaign.config or {}).get("external_agent"):
        return ("<b>not observable</b>: external agent over MCP (its model calls never pass through the harness; "
                "the run keeps a hash-chained tool-call log instead of a transcript)")
    return f"{arm.summary.truncated_fraction:.1%}"


def _arm_rows(data: ReportData) -> str:
    rows = []
    for a in data.arms:
        s = a.summary
        out = s.outcome
        outcome = "unfinished" if out is None else out.status + (f": {out.reason}" if out.reason else "")
        reasons = ", ".join(f"{k} {v}" for k, v in s.unusable_reasons.items()) or "none"
        rows.append(
            f"<tr><td>{_e(a.label)}<br><code>{_e(s.campaign.id)}</code></td>"
            f"<td>{s.usable_iterations} / {s.campaign.budget}</td>"
            f"<td>{_e(_speed(s.best_speedup, s.best_ci))}</td>"
            f"<td>{'' if s.best_iteration is None else s.best_iteration + 1}</td>"
            f"<td>{_e(reasons)}</td><td>{_truncation(a)}</td>"
            f"<td>{s.tokens_in} / {s.tokens_out}; ${s.cost_usd:.4f}</td><td>{_e(outcome)}</td>"
            f"<td>{_held_out(a)}</td></tr>")
    return ("<table><tr><th>arm</th><th>usable / budget</th><th>best speedup [CI]</th><th>best at iteration</th>"
            "<th>unusable, by reason</th><th>truncated calls</th><th>tokens in / out; cost</th><th>outcome</th>"
            "<th>held-out leg</th></tr>" + "".join(rows) + "</table>")


def _comparison(data: ReportData) -> str:
    if data.comparison_refusal:
        return f"<p class='bad'>These runs cannot be compared: {_e(data.comparison_refusal)}</p>"
    c = data.comparison
    if c is None:
        return ""
    rel = "n/a" if c.relative_difference is None else f"{c.relative_difference:+.1%}"
    return (f"<h2>Comparison</h2><p class='verdict'>verdict: <b>{_e(c.verdict)}</b> &mdash; {_e(c.explanation)}</p>"
            f"<p>difference of best speedups (second vs first): {rel}; noise floor {c.noise_floor:.0%}; intervals "
            f"overlap: {c.intervals_overlap}. Iterations to reach the other's best: first run "
            f"{c.a.iterations_to_reach_other_best or 'never'}, second run {c.b.iterations_to_reach_other_best or 'never'}."
            f"</p><p>saturation: {_e(c.saturation.reason or 'not saturated')}</p>")


def _gate_log(data: ReportData) -> str:
    rows = []
    for a in data.arms:
        for it in a.iterations:
            gates = " ".join(
                f"<span class='{'ok' if g.get('passed') else 'bad'}' title='{_e(g.get('detail', ''))}'>"
                f"{_e(g.get('name'))}{'' if g.get('passed') else ' FAILED'}</span>" for g in it.gates) or "(no verdict)"
            reading = "" if it.speedup is None else _speed(it.speedup, (it.ci_low, it.ci_high)
                                                           if it.ci_low is not None and it.ci_high is not None else None)
            rows.append(f"<tr><td>{_e(a.label)}</td><td>{it.idx + 1}</td><td>{_e(it.status or '-')}</td>"
                        f"<td>{_e(reading)}</td><td>{'yes' if it.usable else _e(reason_category(it.unusable_reason))}"
                        f"</td><td>{_e(it.unusable_reason)}</td><td>{gates}</td>"
                        f"<td><code>{_e((it.candidate_sha256 or '')[:12])}</code></td><td>{_confinement(it.confinement)}</td></tr>")
    return ("<h2>Gate log</h2><table><tr><th>arm</th><th>iteration</th><th>verdict</th><th>speedup [CI]</th>"
            "<th>usable</th><th>reason</th><th>gates</th><th>candidate</th><th>candidate confined</th></tr>"
            + "".join(rows) + "</table>")


def _confinement(by_arm: dict[str, str]) -> str:
    """How the candidate's measuring child was confined; an unconfined one is shown as a warning, since
    its verdict rests on the candidate not having reached the store or the other processes."""
    c = by_arm.get("candidate", "")
    if not c:
        return "-"
    if c.startswith("unconfined"):
        return f"<span class='bad'><b>UNCONFINED</b> {_e(c)}</span>"
    return f"<span class='ok'>{_e(c)}</span>"


def _provenance(data: ReportData, protocol: Protocol) -> str:
    devices = {json.dumps(a.device, sort_keys=True) for a in data.arms}
    protos = {(a.summary.campaign.protocol_version, a.summary.campaign.protocol_sha256) for a in data.arms}
    dev_html = "".join(f"<pre>{_e(json.dumps(json.loads(d), indent=2, sort_keys=True))}</pre>" for d in sorted(devices))
    proto_html = ", ".join(f"{_e(v)} <code>{_e(d)}</code>" for v, d in sorted(protos))
    return (f"<h2>Provenance</h2><p>protocol: {proto_html} (this report was made under "
            f"{_e(protocol.version)} <code>{_e(protocol.sha256)}</code>)</p><p>device fingerprint"
            f"{'s (they differ!)' if len(devices) > 1 else ''}:</p>{dev_html}")


def _ab(data: ReportData) -> str:
    if not data.ab_outcomes:
        return ""
    parts = []
    for r in data.ab_outcomes:
        b = r["body"]
        parts.append(f"<p class='verdict'>A/B <code>{_e(b.get('registration_id'))}</code>: <b>{_e(b.get('status'))}"
                     f"</b> &mdash; {_e(b.get('explanation'))}</p>")
        ev = b.get("delivery", {}).get("evidence", {})
        if ev:
            parts.append(f"<pre>{_e(json.dumps(ev, indent=2, sort_keys=True))}</pre>")
    return "<h2>Pre-registered A/B outcome</h2>" + "".join(parts)


_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 6px;
vertical-align:top}th{background:#f3f3f3}.ok{color:#2c7a2c;margin-right:.5em}.bad{color:#b22;margin-right:.5em}
.verdict{font-size:16px}pre{background:#f7f7f7;padding:.5em;font-size:12px;overflow:auto}"""


def _model_arms(data: ReportData) -> str:
    """Say plainly what each model arm is: a model served locally (from its campaign config, written by
    the tuner at run time), or a scripted fixture. A reader must never take a 135M local model, or a
    script, for a frontier model."""
    lines = []
    for a in data.arms:
        cfg = a.summary.campaign.config or {}
        served = cfg.get("model_server")
        if isinstance(served, dict):
            lines.append(
                f"<p class='bad'><b>The LLM arm {_e(a.label)} (<code>{_e(a.summary.campaign.id)}</code>) is "
                f"{_e(str(served.get('about', served.get('name', '?'))))}, a small model served locally</b> by "
                f"{_e(str(served.get('server', 'llama-server')))} at <code>{_e(str(served.get('base_url', '')))}</code> "
                f"(GGUF SHA-256 <code>{_e(str(served.get('gguf_sha256', ''))[:16])}…</code>, server "
                f"<code>{_e(' '.join(str(served.get('server_version', '')).split())[:120])}</code>; answers taken by "
                f"the declared text protocol <code>{_e(str(served.get('text_protocol', '')))}</code> where it sent "
                "no tool call). It is a weak tuner by design: this run shows that every path is real, not how a "
                "capable model would tune.</p>")
        elif cfg.get("scripted"):
            lines.append(f"<p>The arm {_e(a.label)} (<code>{_e(a.summary.campaign.id)}</code>) replays scripted "
                         "model turns (a fixture), not a real model.</p>")
    return "<h2>Who the arms are</h2>" + "".join(lines) if lines else ""


def render_html(data: ReportData, protocol: Protocol, best_png: Path, usability_png: Path) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>AutoTuneBench report: {_e(data.title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>AutoTuneBench report</h1><p>{_e(data.title)}</p>"
            + _model_arms(data) + _comparison(data) + _ab(data) + "<h2>Runs</h2>" + _arm_rows(data)
            + _img(best_png, "best-so-far speedup per iteration") + _img(usability_png, "usable iterations")
            + _gate_log(data) + _provenance(data, protocol)
            + "<p><small>Every number on this page was read from the results store; speedups are against the "
              "honest baseline and only usable iterations count toward best-so-far.</small></p></body></html>")
