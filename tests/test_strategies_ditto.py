"""Ditto (Li et al. 2021): global FedAvg + personal models."""

import numpy as np
import pytest

from rvfedprs.strategies import FitResult, get_strategy
from rvfedprs.strategies.ditto import LAMBDA_KEY, PERSONAL_KEY, PERSONAL_PREFIX


def test_global_fedavg_and_personal_models_kept():
    s = get_strategy("ditto", lam=0.5)
    s.initialize({"w": np.zeros(2)}, ["a", "b"])
    ins = s.configure_fit(1, ["a", "b"])
    assert ins["a"].config[LAMBDA_KEY] == 0.5
    np.testing.assert_array_equal(ins["a"].config[PERSONAL_KEY]["w"], np.zeros(2))
    results = [
        FitResult("a", 1, {"w": np.array([1.0, 1.0]), PERSONAL_PREFIX + "w": np.array([5.0, 0.0])}),
        FitResult("b", 3, {"w": np.array([3.0, 3.0]), PERSONAL_PREFIX + "w": np.array([0.0, 7.0])}),
    ]
    s.aggregate_fit(1, results)
    np.testing.assert_allclose(s.global_parameters()["w"], [2.5, 2.5])
    np.testing.assert_allclose(s.parameters_for("a")["w"], [5.0, 0.0])
    np.testing.assert_allclose(s.parameters_for("b")["w"], [0.0, 7.0])
    ins = s.configure_fit(2, ["a"])
    np.testing.assert_allclose(ins["a"].parameters["w"], [2.5, 2.5])
    np.testing.assert_allclose(ins["a"].config[PERSONAL_KEY]["w"], [5.0, 0.0])
    s2 = get_strategy("ditto")
    s2.load_state_dict(s.state_dict())
    np.testing.assert_allclose(s2.parameters_for("b")["w"], [0.0, 7.0])


def test_client_without_personal_model_is_an_error():
    s = get_strategy("ditto")
    s.initialize({"w": np.zeros(2)}, ["a"])
    with pytest.raises(ValueError, match="no personal model"):
        s.aggregate_fit(1, [FitResult("a", 1, {"w": np.ones(2)})])
