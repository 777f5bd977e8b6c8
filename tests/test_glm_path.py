"""A GLM's validation candidates are the floor and converged fits along its λ path (issue 40).

Oracles: the pooled penalised fit by scipy (the floor's columns unpenalised) at every λ of the
path; the floor from the pooled unpenalised logistic regression.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _federation_fixtures import write_federation  # noqa: E402
from test_fedglm import _rare_penalty, _scipy_oracle, _sklearn  # noqa: E402

from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.model import (  # noqa: E402
    get_parameters,
    linear_floor,
    linear_parameters,
    model_from_config,  # noqa: E402
)
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies.penalty_path import PenaltyPath, penalty_values  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

PATH = [0.5, 50.0, 5.0]


@pytest.fixture(scope="module")
def federation_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("glm_path")
    return write_federation(root, n_clients=4, n_clusters=2, covariates=("age", "sex"))["data"]


def _run(data: Path, out: Path, strategy: str, validation: float, **fedglm):
    config = validate_config({
        "train": {"validation_fraction": validation, "data": str(data), "strategy": strategy,
                  "rounds": 60, "seed": 3, "progress": False},
        "fedglm": fedglm, "fedce": {"n_clusters": 2},
    })  # fmt: skip
    return train(config, out)


def test_linear_floor_reads_back_the_floor_and_nothing_else():
    parameters = get_parameters(model_from_config(30, {}, random_seed=1))
    width = parameters["common.fc0.weight"].shape[1]
    coef = np.linspace(-0.5, 0.7, width)
    assert linear_floor(parameters) is None  # a random initialisation is no floor
    for trainable in (True, False):
        floor = linear_parameters(parameters, intercept=-1.25, common_coef=coef,
                                  trainable=trainable)  # fmt: skip
        np.testing.assert_allclose(linear_floor(floor), [-1.25, *coef], atol=1e-6)
    with_rare = linear_parameters(parameters, intercept=-1.25, common_coef=coef,
                                  rare_coef=np.ones(30))  # fmt: skip
    assert linear_floor(with_rare) is None  # the specialist adds to the logit


def test_penalty_values_are_distinct_largest_first_and_checked():
    assert penalty_values(PATH) == (50.0, 5.0, 0.5)
    assert penalty_values(3) == (3.0,)
    for bad in ([], [-1.0], [float("inf")], [True]):
        with pytest.raises(ValueError, match="l2"):
            PenaltyPath(bad)


def test_fedglm_path_fits_every_lambda_to_convergence_from_the_floor(federation_dir, tmp_path):
    result = _run(federation_dir, tmp_path, "fedglm", 0.0, features="dosages", l2=PATH)
    strategy = result.strategy
    pooled = pool_clients(load_federation(federation_dir).train)
    x = glm_design(pooled, "dosages")
    n_floor = 2 + pooled.n_covariates
    fits = strategy.path.fits
    assert [f["l2"] for f in fits] == [50.0, 5.0, 0.5] and strategy.finished
    for fit in fits:  # each candidate is the pooled penalised fit at its λ
        expected = _scipy_oracle(x, pooled.y, _rare_penalty(x.shape[1], n_floor, fit["l2"]))
        np.testing.assert_allclose(fit["coef"], expected, rtol=0, atol=1e-6)
    rounds = [f["round"] for f in fits]
    assert rounds == sorted(rounds) and len(result.history) == rounds[-1]
    # warm starts: the first λ starts at the floor, so it converges in a few rounds
    assert rounds[0] <= 6
    floor = _sklearn(pooled, "floor", 0.0)  # the template the GLM started from is the floor
    np.testing.assert_allclose(linear_floor(strategy.template), floor, atol=1e-5)
    assert strategy.summary()["path"] == [{"l2": f["l2"], "round": f["round"]} for f in fits]


@pytest.mark.parametrize("strategy_name", ["fedglm", "fedce_glm"])
def test_every_served_model_is_the_floor_or_a_converged_fit(
    federation_dir, tmp_path, strategy_name, monkeypatch
):
    """Round by round, the model a validation choice sees changes only where a fit converged."""
    from rvfedprs.evaluation.selection import RoundSelection

    served: list[dict[str, np.ndarray]] = []
    score = RoundSelection.__call__

    def record(self, strategy, server_round):
        client = sorted(strategy.client_ids)[0]
        served.append({k: v.copy() for k, v in strategy.parameters_for(client).items()})
        return score(self, strategy, server_round)

    monkeypatch.setattr(RoundSelection, "__call__", record)
    result = _run(federation_dir, tmp_path, strategy_name, 0.2, features="dosages", l2=PATH)
    seen = [np.concatenate([v.ravel() for v in p.values()]) for p in served]
    fit_rounds = [f["round"] for f in result.strategy.path.fits]
    assert len(fit_rounds) == 3 and len(seen) == fit_rounds[-1]
    changes = [r for r in range(2, len(seen) + 1) if not np.array_equal(seen[r - 1], seen[r - 2])]
    assert set(changes) <= set(fit_rounds)  # no half-way iterate is ever served
    if fit_rounds[0] > 1:  # before the first fit converged: the floor the run started from
        assert linear_floor(served[0]) is not None


@pytest.mark.parametrize("strategy_name", ["fedglm", "fedce_glm"])
def test_a_path_stopped_between_two_lambdas_resumes_to_the_same_fits(
    federation_dir, tmp_path, strategy_name
):
    def config(rounds):
        return validate_config({
            "train": {"validation_fraction": 0.2, "data": str(federation_dir),
                      "strategy": strategy_name, "rounds": rounds, "seed": 3, "progress": False},
            "fedglm": {"features": "dosages", "l2": PATH}, "fedce": {"n_clusters": 2},
        })  # fmt: skip

    whole = train(config(60), tmp_path / "whole").strategy
    first = whole.path.fits[0]["round"]
    part = train(config(first + 1), tmp_path / "part").strategy  # one λ done, one under way
    assert len(part.path.fits) == 1 and not part.finished
    resumed = train(config(60), tmp_path / "part", resume=True).strategy
    assert resumed.path == whole.path
    for kept, again in zip(whole.path.fits, resumed.path.fits, strict=True):
        flat = [np.ravel(v) for v in (kept["coef"], again["coef"]) if isinstance(v, np.ndarray)]
        if flat:
            np.testing.assert_allclose(flat[1], flat[0], rtol=0, atol=1e-12)
        else:
            np.testing.assert_allclose(again["coef"]["common"], kept["coef"]["common"], atol=1e-12)
            for label, rare in kept["coef"]["rare"].items():
                np.testing.assert_allclose(again["coef"]["rare"][label], rare, atol=1e-12)
    client = sorted(whole.client_ids)[0]
    for name, value in whole.parameters_for(client).items():
        np.testing.assert_array_equal(resumed.parameters_for(client)[name], value)


def test_the_run_record_names_the_path_and_the_lambda_chosen_on_validation(
    federation_dir, tmp_path
):
    """metrics.json carries each converged fit's λ and the λ of the round validation chose."""
    import json

    result = _run(federation_dir, tmp_path, "fedglm", 0.2, features="dosages", l2=PATH)
    record = json.loads((tmp_path / "metrics.json").read_text())
    fits = result.strategy.path.fits
    assert record["penalty_path"]["fits"] == [{"l2": f["l2"], "round": f["round"]} for f in fits]
    picked = record["selection"]["selected_round"]
    by_then = [f["l2"] for f in fits if f["round"] <= picked]
    assert record["penalty_path"]["chosen_l2"] == (by_then[-1] if by_then else None)
    assert sorted(f["l2"] for f in fits) == sorted(PATH)


def test_a_partially_pooled_fedce_glm_records_its_grid_and_the_pair_chosen(
    federation_dir, tmp_path
):
    """FedCE-GLM's metrics.json: every (λ, λ_c) fit of its grid, the pair served where chosen,
    and the per-cluster top-k variants it ranked at the floor."""
    import json

    result = _run(federation_dir, tmp_path, "fedce_glm", 0.2, features="top_k", top_k=5,
                  selection="clusters", l2=[5.0, 0.5], l2_cluster=[50.0, 5.0])  # fmt: skip
    record = json.loads((tmp_path / "metrics.json").read_text())
    fits = record["penalty_path"]["fits"]
    assert [f["l2"] for f in fits] == [[5.0, 50.0], [5.0, 5.0], [0.5, 50.0], [0.5, 5.0]]
    assert [f["round"] for f in fits] == sorted(f["round"] for f in fits)
    # every fit converged after the floor's rounds (no candidate is the floor's iterate)
    assert min(f["round"] for f in fits) > result.strategy.offset
    picked = record["selection"]["selected_round"]
    by_then = [f["l2"] for f in fits if f["round"] <= picked]
    assert record["penalty_path"]["chosen_l2"] == (by_then[-1] if by_then else None)


def test_served_at_is_the_last_fit_converged_by_a_round():
    path = PenaltyPath(PATH)
    assert path.served_at(10) is None  # before any fit: the floor
    path.converged(np.zeros(2), 3)
    path.converged(np.ones(2), 7)
    assert [path.served_at(r) for r in (2, 3, 6, 7, float("inf"))] == [None, 50.0, 50.0, 5.0, 5.0]
