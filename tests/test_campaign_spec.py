"""CampaignSpec: a campaign is validated where it is built, before any store or session is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.errors import CampaignError


def test_a_non_positive_budget_is_refused_where_the_spec_is_built(tmp_path: Path) -> None:
    for budget in (0, -3):
        with pytest.raises(CampaignError, match="positive number of iterations"):
            CampaignSpec(task="gelu", tuner="random", budget=budget, seed=1, store=tmp_path / "atb.sqlite")
    assert not (tmp_path / "atb.sqlite").exists()


def test_an_empty_tuner_and_a_task_of_the_wrong_type_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CampaignError, match="needs a tuner spec"):
        CampaignSpec(task="gelu", tuner="  ", budget=1, seed=1, store=tmp_path / "atb.sqlite")
    with pytest.raises(CampaignError, match="task name, a task file or a loaded subject"):
        CampaignSpec(task=42, tuner="random", budget=1, seed=1, store=tmp_path / "atb.sqlite")


def test_unknown_fields_are_refused_and_a_spec_is_frozen(tmp_path: Path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="budgett"):
        CampaignSpec(task="gelu", tuner="random", budget=1, seed=1, store=tmp_path / "a.sqlite", budgett=2)  # type: ignore[call-arg]
    spec = CampaignSpec(task="gelu", tuner="random", budget=1, seed=1, store=tmp_path / "a.sqlite")
    with pytest.raises(ValidationError):
        spec.budget = 5  # type: ignore[misc]
    assert spec.store_target == tmp_path / "a.sqlite" and isinstance(spec.store_target, Path)
    assert CampaignSpec(task="gelu", tuner="random", budget=1, seed=1, store="sqlite:///x.db").store_target == "sqlite:///x.db"


def test_a_random_spec_runs_the_seeded_search_and_reports_each_iteration(tmp_path: Path) -> None:
    seen: list[int] = []
    spec = CampaignSpec(task="relu", tuner="random", budget=2, seed=3, store=tmp_path / "atb.sqlite")
    summary = run_campaign(spec, on_iteration=lambda i, knobs, res: seen.append(i))
    assert summary.iterations_recorded == 2 and seen == [0, 1]
    assert (summary.campaign.tuner_spec, summary.campaign.seed, summary.campaign.budget) == ("random", 3, 2)
