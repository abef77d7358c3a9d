"""The report shows how each iteration's candidate was confined, and an unconfined one as a warning."""

from __future__ import annotations

from harness.tuning.reports._html import _confinement


def test_an_unconfined_candidate_is_flagged_in_the_report() -> None:
    cell = _confinement({"candidate": "unconfined:bwrap not found", "reference": "unconfined:bwrap not found"})
    assert "UNCONFINED" in cell and "bwrap not found" in cell and "class='bad'" in cell


def test_a_confined_candidate_is_shown_with_its_mechanisms() -> None:
    cell = _confinement({"candidate": "bwrap:userns+pidns+netns+seccomp"})
    assert "UNCONFINED" not in cell and "seccomp" in cell


def test_a_verdict_from_before_confinement_was_recorded_shows_nothing() -> None:
    assert _confinement({}) == "-"


def test_descriptors_are_escaped() -> None:
    assert "<script>" not in _confinement({"candidate": "unconfined:<script>"})
