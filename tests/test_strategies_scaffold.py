"""SCAFFOLD Option II (Karimireddy et al. 2020) against a hand-written reference."""

import numpy as np
import pytest

from rvfedprs.strategies import FitResult, get_strategy
from rvfedprs.strategies.scaffold import CORRECTION_KEY


def _quadratic_client(x, target, c_minus_ck, steps, lr):
    """K SGD steps on 0.5‖y − target‖² with the SCAFFOLD correction."""
    y = x.copy()
    for _ in range(steps):
        y = y - lr * ((y - target) + c_minus_ck)
    return y


def test_two_rounds_match_reference():
    targets = {"a": np.array([1.0, -2.0]), "b": np.array([3.0, 0.5]), "c": np.array([-1.0, 1.0])}
    steps, lr = 5, 0.1
    s = get_strategy("scaffold")
    s.initialize({"w": np.zeros(2)}, list(targets))
    # reference state
    x, c = np.zeros(2), np.zeros(2)
    ck = {k: np.zeros(2) for k in targets}
    for t in (1, 2):
        ins = s.configure_fit(t, list(targets))
        results, new_ck = [], {}
        for k, target in targets.items():
            np.testing.assert_allclose(ins[k].config[CORRECTION_KEY]["w"], c - ck[k], atol=1e-6)
            y = _quadratic_client(x, target, c - ck[k], steps, lr)
            results.append(FitResult(k, 10, {"w": y}, {"local_steps": steps, "lr": lr}))
            new_ck[k] = ck[k] - c + (x - y) / (steps * lr)
        s.aggregate_fit(t, results)
        x = x + np.mean([r.parameters["w"] - x for r in results], axis=0)
        c = c + np.mean([new_ck[k] - ck[k] for k in targets], axis=0)
        ck = new_ck
        np.testing.assert_allclose(s.parameters_for("a")["w"], x)
        np.testing.assert_allclose(s.c["w"], c)
    # with the corrections, the fixed point is the minimiser of the mean objective
    for t in range(3, 60):
        ins = s.configure_fit(t, list(targets))
        xs = s.parameters_for("a")["w"]
        results = [
            FitResult(
                k,
                10,
                {"w": _quadratic_client(xs, tg, ins[k].config[CORRECTION_KEY]["w"], steps, lr)},
                {"local_steps": steps, "lr": lr},
            )
            for k, tg in targets.items()
        ]
        s.aggregate_fit(t, results)
    np.testing.assert_allclose(
        s.parameters_for("a")["w"], np.mean(list(targets.values()), axis=0), atol=1e-4
    )


def test_missing_metrics_is_an_error():
    s = get_strategy("fedsvrg")
    s.initialize({"w": np.zeros(2)}, ["a"])
    with pytest.raises(ValueError, match="local_steps"):
        s.aggregate_fit(1, [FitResult("a", 1, {"w": np.ones(2)})])
