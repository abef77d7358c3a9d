"""The report's PNG plots (matplotlib, Agg backend: no display needed).

Two pictures carry the comparison: best-so-far usable speedup per iteration for each arm (with every
iteration's own reading, unusable ones marked by reason), and a strip per arm showing which iterations
were usable and why the others were not.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from harness.tuning.campaigns import REASON_CATEGORIES, reason_category  # noqa: E402
from harness.tuning.reports._data import ArmData  # noqa: E402

_ARM_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
_LINE_STYLES = ["-", "--", ":", "-."]
_REASON_COLOURS = {
    "usable": "#2ca02c", "no_submission": "#bdbdbd", "not_built": "#7f7f7f", "failed_to_run": "#8c564b",
    "incorrect": "#d62728", "gate_failed": "#9467bd", "quarantined": "#ff7f0e", "rejected": "#e377c2",
    "no_interval": "#c7c7c7", "ci_too_wide": "#ffbb78", "missing": "#ffffff",
}
_REASON_MARKERS = {"incorrect": "x", "gate_failed": "s", "quarantined": "^", "ci_too_wide": "D",
                   "rejected": "v", "failed_to_run": "X", "not_built": "P", "no_submission": "o", "no_interval": "d"}


def plot_best_so_far(arms: list[ArmData], path: Path) -> Path:
    """Best usable speedup after each iteration, per arm; every iteration's reading as a marker."""
    budget = max(a.summary.campaign.budget for a in arms)
    fig, ax = plt.subplots(figsize=(9, 5.2), dpi=110)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.text(budget + 0.4, 1.0, "honest baseline = 1.0x ", ha="right", va="top", fontsize=8)  # engine: its default
    used_reasons: set[str] = set()
    # One colour per tuner (or A/B arm), one line style per seed of it: arms of a comparison read apart.
    groups: dict[str, int] = {}
    seen_in_group: dict[str, int] = {}
    for n, arm in enumerate(arms):
        key = arm.summary.campaign.arm or arm.summary.campaign.tuner_spec
        colour = _ARM_COLOURS[groups.setdefault(key, len(groups)) % len(_ARM_COLOURS)]
        style = _LINE_STYLES[seen_in_group.get(key, 0) % len(_LINE_STYLES)]
        seen_in_group[key] = seen_in_group.get(key, 0) + 1
        xs = [i + 1 for i, v in enumerate(arm.curve) if v is not None]
        ys = [v for v in arm.curve if v is not None]
        label = f"{arm.label}: {arm.summary.usable_iterations}/{arm.summary.campaign.budget} usable"
        if xs:
            ax.step(xs, ys, where="post", color=colour, lw=2.2, ls=style, label=label)
        else:
            ax.plot([], [], color=colour, lw=2.2, ls=style, label=label + " (none usable)")
        for it in arm.iterations:
            if it.speedup is None:
                continue
            if it.usable:
                ax.scatter(it.idx + 1, it.speedup, color=colour, s=28, zorder=3)
            else:
                cat = reason_category(it.unusable_reason)
                used_reasons.add(cat)
                marker = _REASON_MARKERS.get(cat, "x")
                if marker in ("x", "X", "P"):
                    ax.scatter(it.idx + 1, it.speedup, color=colour, marker=marker, s=40, alpha=0.7, zorder=3)
                else:
                    ax.scatter(it.idx + 1, it.speedup, facecolors="none", edgecolors=colour, marker=marker, s=40,
                               alpha=0.7, zorder=3)
    ax.set_xlim(0.5, budget + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    from harness.tuning.subjects import ratio_label

    ax.set_ylabel(" / ".join(sorted({ratio_label(a.summary.campaign.kind) for a in arms})))
    ax.set_title("Best-so-far usable speedup per iteration (lines); each iteration's reading (markers)")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="grey", marker="o", ls="", label="usable iteration"))
    for cat in sorted(used_reasons):
        marker = _REASON_MARKERS.get(cat, "x")
        handles.append(Line2D([], [], color="grey", marker=marker, ls="", label=f"not usable: {cat}",
                                  markerfacecolor="grey" if marker in ("x", "X", "P") else "none"))
    ax.legend(handles=handles, fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_usability(arms: list[ArmData], path: Path) -> Path:
    """One row per arm, one cell per iteration, coloured by usable or by the reason it was not."""
    budget = max(a.summary.campaign.budget for a in arms)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(arms)), dpi=110)
    seen: set[str] = set()
    for row, arm in enumerate(arms):
        by_idx = {it.idx: it for it in arm.iterations}
        for i in range(arm.summary.campaign.budget):
            it = by_idx.get(i)
            cat = "missing" if it is None else ("usable" if it.usable else reason_category(it.unusable_reason))
            seen.add(cat)
            ax.add_patch(Rectangle((i + 0.55, row - 0.4), 0.9, 0.8, color=_REASON_COLOURS.get(cat, "#000000"),
                                       ec="black", lw=0.4))
    ax.set_xlim(0.5, budget + 0.5)
    ax.set_ylim(len(arms) - 0.4, -0.6)   # first arm on top, as in the legend of the other plot
    ax.set_yticks(range(len(arms)))
    ax.set_yticklabels([f"{a.label}\n{a.summary.usable_iterations}/{a.summary.campaign.budget} usable" for a in arms],
                       fontsize=8)
    ax.set_xticks(range(1, budget + 1))
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("iteration")
    ax.set_title("Which iterations were usable, and why the others were not")
    order = ["usable", *REASON_CATEGORIES, "missing"]
    patches = [Patch(facecolor=_REASON_COLOURS[c], edgecolor="black", label=c.replace("_", " "))
               for c in order if c in seen]
    ax.legend(handles=patches, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45 if len(arms) < 3 else -0.25),
              ncol=min(len(patches), 5), frameon=False)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path
