"""FedCE-GLM's per-cluster selection of rare variants and its partially pooled effects (issue 40).

Oracles written from the formulas on the pooled training data, never from the sites' sums:

- the heterogeneous score test of variant j over the clusters m: the columns a_j · 1{cluster m}
  of every training sample, their scores U = Xᵀ (y − p) at the floor fitted on everybody and
  their efficient information Φ = Xᵀ W X − Xᵀ W Z (Zᵀ W Z)⁻¹ Zᵀ W X; the statistic Uᵀ Φ⁺ U is
  a χ² with rank(Φ) degrees of freedom;
- partial pooling: the pooled design [1, PRS, covariates, R, R · 1{m = 1}, …, R · 1{m = M}]
  with λ on the shared columns and λ_c on each cluster's, minimised by scipy's Newton.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy import stats
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from test_fedglm import (  # noqa: E402
    SECAGG_EXACT,
    _assert_serves_cluster_models,
    _joint_oracle,
    _pooled_ranking,
    _pooled_score_test,
    _scipy_oracle,
    _sklearn,
)

from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies import get_strategy  # noqa: E402
from rvfedprs.strategies.penalty_path import PenaltyPath, penalty_grid  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

N_FLIPPED = 4


@pytest.fixture(scope="module")
def flipped(tmp_path_factory):
    """Two ancestry clusters, six sites; four shared variants with opposite effects."""
    root = tmp_path_factory.mktemp("flipped")
    return write_federation(root, n_clients=6, n_clusters=2, covariates=("age",), seed=11,
                            flipped_shared=N_FLIPPED, samples_per_client=400)  # fmt: skip


def _run(federation, out: Path, *, secagg: bool = False, rounds: int = 40, **fedglm):
    sections = {
        "train": {"validation_fraction": 0, "data": str(federation["data"]),
                  "strategy": "fedce_glm", "rounds": rounds, "seed": 3, "progress": False},
        "evaluate": {"samples": str(federation["samples"]), "truth": str(federation["truth"])},
        "fedglm": fedglm,
        "fedce": {"n_clusters": 2},
    }  # fmt: skip
    if secagg:
        sections["secagg"] = SECAGG_EXACT
    return train(validate_config(sections), out)


def _pooled_by_cluster(data_dir: Path, assignment):
    """Training rows of every site in site order: floor design, dosages, y, cluster label."""
    federation = load_federation(data_dir)
    parts = [(glm_design(d, "floor").toarray(), d.rare.toarray().astype(np.float64), d.y,
              np.full(d.n_samples, assignment[c]))
             for c, d in sorted(federation.train.items())]  # fmt: skip
    return [np.concatenate(x) for x in zip(*parts, strict=True)]


def _heterogeneous_oracle(data_dir: Path, assignment, floor: np.ndarray) -> np.ndarray:
    """log p of the heterogeneous score test of every variant, from the pooled rows."""
    z, a, y, label = _pooled_by_cluster(data_dir, assignment)
    p = expit(z @ floor)
    w = p * (1 - p)
    projector = (z * w[:, None]) @ np.linalg.inv(z.T @ (z * w[:, None]))  # W Z H⁻¹
    groups = sorted(set(label))
    log_p = np.zeros(a.shape[1])
    for j in range(a.shape[1]):
        x = np.column_stack([a[:, j] * (label == m) for m in groups])
        score = x.T @ (y - p)
        wx = x * w[:, None]
        phi = x.T @ wx - (x.T @ projector) @ (z.T @ wx)
        values, vectors = np.linalg.eigh(phi)
        keep = values > 1e-10 * max(values.max(), 1e-300)
        if keep.any():
            statistic = float(np.sum((vectors[:, keep].T @ score) ** 2 / values[keep]))
            log_p[j] = stats.chi2.logsf(statistic, int(keep.sum()))
    return log_p


@pytest.mark.parametrize("secagg", [False, True])
def test_per_cluster_selection_equals_the_pooled_heterogeneous_test(flipped, tmp_path, secagg):
    """Clusters from the filters at the floor; the floor's sums per cluster give the oracle's test,
    which ranks every flipped variant in the top k where the pooled ranking does not."""
    k = 24  # the causal variants: 2 × (6 private + 4 shared) + 4 flipped
    result = _run(flipped, tmp_path, secagg=secagg, features="top_k", top_k=k, l2=3.0,
                  selection="clusters")  # fmt: skip
    strategy, screen = result.strategy, result.strategy.screen
    assert strategy.converged and strategy.fixed_clusters
    assert result.metrics["ari"] == pytest.approx(1.0)  # the true clusters, at the floor
    federation = load_federation(flipped["data"])
    pooled = pool_clients(federation.train)
    np.testing.assert_allclose(screen.floor, _sklearn(pooled, "floor", 0.0), atol=1e-6)
    oracle = _heterogeneous_oracle(flipped["data"], strategy.assignment, screen.floor)
    atol = 1e-5 if secagg else 1e-8
    np.testing.assert_allclose(screen.log_p, oracle, rtol=atol, atol=atol)
    expected = sorted(range(oracle.size), key=lambda j: (oracle[j], j))[:k]
    assert strategy.top.tolist() == expected
    # the flipped variants: found per cluster; the pooled score test ranks them low
    keys = pd.read_csv(flipped["data"] / "rare_variants.tsv", sep="\t")["variant_key"].tolist()
    table = pd.read_csv(flipped["truth"], sep="\t")
    effects = table.groupby("variant_key")["effect"].agg(["min", "max"])
    opposite = effects.index[(effects["min"] < 0) & (effects["max"] > 0)]
    flips = sorted(keys.index(v) for v in opposite)
    assert len(flips) == N_FLIPPED
    assert set(flips) <= set(strategy.top.tolist())
    pooled_top = _pooled_ranking(*_pooled_score_test(pooled, screen.floor), k)
    assert len(set(flips) & set(pooled_top)) < N_FLIPPED
    if secagg:  # every floor round summed per cluster: never one site's statistics, never all six
        sizes = [sorted(len(m) for m in e["secagg"].values()) for e in result.history]
        assert sizes[: strategy.offset] == [[3, 3]] * strategy.offset
    # the clusters stay: the joint fit from the floor is the pooled per-cluster fit on the top k
    top = strategy.top.tolist()

    def design(data):
        return glm_design(data, "top_k", None, top)

    got = np.concatenate([strategy.common, *[strategy.rare[m] for m in sorted(strategy.rare)]])
    want = _joint_oracle(flipped["data"], strategy, 3.0, "rare", design)
    np.testing.assert_allclose(got, want, atol=1e-5 if secagg else 1e-6)
    # the flipped variants' fitted effects have opposite signs in the two clusters
    column = {j: i for i, j in enumerate(top)}
    signs = {m: np.sign([strategy.rare[m][column[j]] for j in flips]) for m in strategy.rare}
    labels = sorted(signs)
    assert (signs[labels[0]] == -signs[labels[1]]).all()


def test_both_ranks_by_the_bonferroni_minimum_of_the_two_tests(flipped, tmp_path):
    result = _run(flipped, tmp_path, features="top_k", top_k=10, l2=3.0, selection="both")
    screen = result.strategy.screen
    federation = load_federation(flipped["data"])
    pooled = pool_clients(federation.train)
    score, variance = _pooled_score_test(pooled, screen.floor)
    statistic = np.where(variance > 1e-9, score**2 / np.where(variance > 1e-9, variance, 1), 0)
    pooled_log_p = np.where(statistic > 0, stats.chi2.logsf(statistic, 1), 0.0)
    clusters = _heterogeneous_oracle(flipped["data"], result.strategy.assignment, screen.floor)
    expected = np.minimum(0.0, np.log(2) + np.minimum(pooled_log_p, clusters))
    np.testing.assert_allclose(screen.log_p, expected, rtol=1e-7, atol=1e-8)
    assert result.strategy.top.tolist() == sorted(range(expected.size),
                                                  key=lambda j: (expected[j], j))[:10]  # fmt: skip


def _partial_oracle(data_dir: Path, strategy, l2: float, l2_cluster: float) -> np.ndarray:
    """(common, β̄, δ_1 … δ_M) minimising the pooled penalised log-loss."""
    federation = load_federation(data_dir)
    labels = sorted(strategy.rare)
    blocks, ys = [], []
    for client in sorted(federation.train):
        data = federation.train[client]
        x = glm_design(data, "dosages")
        width = 2 + data.n_covariates
        rare = x[:, width:]
        empty = sp.csr_matrix(rare.shape)
        mine = strategy.assignment[client]
        blocks.append(sp.hstack([x, *[rare if m == mine else empty for m in labels]]))
        ys.append(data.y)
    x, y = sp.vstack(blocks).tocsr(), np.concatenate(ys)
    p_rare = federation.train[sorted(federation.train)[0]].rare.shape[1]
    n_floor = x.shape[1] - (len(labels) + 1) * p_rare
    penalty = np.concatenate([np.zeros(n_floor), np.full(p_rare, l2),
                              np.full(len(labels) * p_rare, l2_cluster)])  # fmt: skip
    return _scipy_oracle(x, y, penalty)


@pytest.mark.parametrize("secagg", [False, True])
def test_partial_pooling_equals_the_pooled_random_effects_fit(flipped, tmp_path, secagg):
    """Every fit of the (λ, λ_c) grid converges; the last is the pooled oracle's fit."""
    result = _run(flipped, tmp_path, secagg=secagg, rounds=80, features="dosages",
                  l2=[4.0, 1.0], l2_cluster=[8.0, 2.0])  # fmt: skip
    strategy = result.strategy
    assert strategy.converged and result.metrics["ari"] == pytest.approx(1.0)
    path = strategy.path.summary()
    assert [f["l2"] for f in path] == [[4.0, 8.0], [4.0, 2.0], [1.0, 8.0], [1.0, 2.0]]
    labels = sorted(strategy.rare)
    want = _partial_oracle(flipped["data"], strategy, 1.0, 2.0)
    p_rare = strategy.shared.size
    got = np.concatenate([strategy.common, strategy.shared,
                          *[strategy.rare[m] - strategy.shared for m in labels]])  # fmt: skip
    np.testing.assert_allclose(got, want, atol=1e-5 if secagg else 1e-6)
    assert got.size == strategy.common.size + (len(labels) + 1) * p_rare
    _assert_serves_cluster_models(strategy, flipped["data"])  # β̄ + δ_m, with the GLM's logit


def test_a_large_cluster_penalty_is_the_global_model_and_a_small_one_the_clusters(
    flipped, tmp_path
):
    """λ_c → ∞ leaves every cluster on the shared part; λ_c → 0 lets the flips flip."""
    tight = _run(flipped, tmp_path / "tight", features="dosages", l2=1.0, l2_cluster=1e6).strategy
    loose = _run(flipped, tmp_path / "loose", features="dosages", l2=1.0, l2_cluster=0.01).strategy
    a, b = sorted(tight.rare)
    assert np.abs(tight.rare[a] - tight.rare[b]).max() < 1e-3
    free = _run(flipped, tmp_path / "free", features="dosages", l2=0.01).strategy
    a, b = sorted(loose.rare)
    assert np.abs(loose.rare[a] - loose.rare[b]).max() > 2.0  # the flips flip
    np.testing.assert_allclose(loose.rare[a], free.rare[a], atol=0.1)
    np.testing.assert_allclose(loose.rare[b], free.rare[b], atol=0.1)


def test_penalty_grid_is_ordered_checked_and_restored():
    assert penalty_grid([1.0, 10.0], 3.0) == ((10.0, 3.0), (1.0, 3.0))
    refused = r"partial pooling needs l2 > 0 and l2_cluster > 0.*\[0.0\]"
    with pytest.raises(ValueError, match=refused):
        penalty_grid([1.0], [0.0])
    with pytest.raises(ValueError, match="partial pooling needs l2 > 0"):
        penalty_grid(0.0, 1.0)
    path = PenaltyPath([1.0, 10.0], cluster=[2.0, 5.0])
    assert path.l2 == (10.0, 5.0)
    path.converged({"coef": 1}, 3)
    restored = PenaltyPath.from_state_dict(path.state_dict())
    assert restored == path and restored.l2 == (10.0, 2.0)
    assert restored.served_at(3) == [10.0, 5.0] and restored.served_at(2) is None


def test_per_cluster_options_are_refused_where_they_mean_nothing(flipped, tmp_path):
    with pytest.raises(ConfigError, match="fedglm.selection 'clusters' ranks variants per cluster"):
        get_strategy("fedglm", features="top_k", top_k=3, selection="clusters")
    with pytest.raises(ConfigError, match="fedglm.l2_cluster 2.0 pools per-cluster effects"):
        get_strategy("fedglm", l2_cluster=2.0)
    with pytest.raises(ConfigError, match="selection 'clusters' ranks the top-k variants; features "
                                          "'dosages' has none"):  # fmt: skip
        get_strategy("fedce_glm", features="dosages", selection="clusters")
    with pytest.raises(ConfigError, match="selection 'per_site' unknown"):
        get_strategy("fedce_glm", features="top_k", glm_top_k=3, selection="per_site")
    with pytest.raises(ConfigError, match="l2_cluster"):
        validate_config({"fedglm": {"l2_cluster": 0}})


def test_a_per_cluster_run_stopped_in_the_floor_rounds_resumes_to_the_same_fit(flipped, tmp_path):
    whole = _run(flipped, tmp_path / "whole", features="top_k", top_k=6, l2=2.0,
                 selection="clusters", l2_cluster=1.0).strategy  # fmt: skip
    part = _run(flipped, tmp_path / "part", rounds=1, features="top_k", top_k=6, l2=2.0,
                selection="clusters", l2_cluster=1.0).strategy  # fmt: skip
    assert part.screening and part.assignment == whole.assignment
    sections = dict(features="top_k", top_k=6, l2=2.0, selection="clusters", l2_cluster=1.0)
    config = validate_config({
        "train": {"validation_fraction": 0, "data": str(flipped["data"]), "strategy": "fedce_glm",
                  "rounds": 40, "seed": 3, "progress": False},
        "evaluate": {"samples": str(flipped["samples"]), "truth": str(flipped["truth"])},
        "fedglm": sections, "fedce": {"n_clusters": 2},
    })  # fmt: skip
    resumed = train(config, tmp_path / "part", resume=True).strategy
    assert resumed.converged and resumed.top.tolist() == whole.top.tolist()
    for m in whole.rare:
        np.testing.assert_allclose(resumed.rare[m], whole.rare[m], rtol=0, atol=1e-12)


def test_per_cluster_selection_of_a_quantitative_trait_scales_by_the_residual_variance(tmp_path):
    """A linear floor: Var(U) = φ (XᵀX − XᵀZ (ZᵀZ)⁻¹ ZᵀX), φ = RSS / (n − q); the per-cluster
    test's degrees of freedom differ by variant, so φ changes the ranking, not only the scale."""
    federation = write_federation(tmp_path / "q", n_clients=6, n_clusters=2, covariates=("age",),
                                  seed=11, flipped_shared=N_FLIPPED,
                                  kind="quantitative")  # fmt: skip
    result = _run(federation, tmp_path / "run", features="top_k", top_k=12, l2=3.0,
                  selection="clusters")  # fmt: skip
    screen = result.strategy.screen
    z, a, y, label = _pooled_by_cluster(federation["data"], result.strategy.assignment)
    residual = y - z @ screen.floor
    phi = residual @ residual / (len(y) - z.shape[1])
    projector = z @ np.linalg.inv(z.T @ z)
    expected = np.zeros(a.shape[1])
    for j in range(a.shape[1]):
        x = np.column_stack([a[:, j] * (label == m) for m in sorted(set(label))])
        covariance = phi * (x.T @ x - (x.T @ projector) @ (z.T @ x))
        values, vectors = np.linalg.eigh(covariance)
        keep = values > 1e-10 * max(values.max(), 1e-300)
        if keep.any():
            statistic = float(np.sum((vectors[:, keep].T @ (x.T @ residual)) ** 2 / values[keep]))
            expected[j] = stats.chi2.logsf(statistic, int(keep.sum()))
    np.testing.assert_allclose(screen.log_p, expected, rtol=1e-7, atol=1e-8)
    assert result.strategy.top.tolist() == sorted(range(expected.size),
                                                  key=lambda j: (expected[j], j))[:12]  # fmt: skip
