"""Below-chance and below-floor warnings (rvfedprs/evaluation/checks.py)."""

import pytest

from rvfedprs.evaluation.checks import Z95, auc_warnings


def test_nothing_to_say_for_a_model_above_chance_and_floor():
    assert auc_warnings("fedce", 0.62, se=0.02, floor_auc=0.60, client_auc={"a": 0.55}) == []


def test_below_chance_pooled_and_per_site_with_intervals():
    found = auc_warnings("x", 0.42, se=0.02, client_auc={"a": 0.49, "b": 0.7},
                         client_se={"a": 0.05})  # fmt: skip
    assert found[0] == "x: pooled test AUC 0.420 [0.381, 0.459] is below 0.5 (chance)"
    assert found[1] == "x: site a test AUC 0.490 [0.392, 0.588] is below 0.5"
    assert len(found) == 2


@pytest.mark.parametrize(("auc", "warned"), [(0.56, False), (0.55, True)])
def test_below_the_floor_only_beyond_the_interval(auc, warned):
    se = 0.02 / Z95  # the interval reaches exactly 0.02 above the AUC
    found = auc_warnings("fedavg", auc, se=se, floor_auc=0.575)
    assert bool(found) == warned
    if warned:
        assert "below the PRS-only floor 0.575 beyond its 95% interval" in found[0]


def test_missing_values_are_not_warnings():
    assert auc_warnings("x", float("nan"), se=None, floor_auc=None, client_auc={"a": None}) == []
