"""Configuration values reach the strategies (``strategies`` section → strategy_from_config)."""

import numpy as np
import pandas as pd
import pytest
from _federation_fixtures import write_federation
from scipy.stats import wasserstein_distance

from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.genomic.data import load_federation
from rvfedprs.genomic.distance import strategy_distance
from rvfedprs.strategies import strategy_from_config

IDS = ["a", "b", "c", "d"]
W0 = {"head.bias": np.zeros(1, dtype=np.float32)}


def _config(strategies=None, train=None):
    return validate_config({"strategies": strategies or {}, "train": train or {}})


def _matrix():
    # d is far from everyone; a-b and c-d are the close pairs
    return np.array(
        [[0, 1, 4, 9], [1, 0, 3, 8], [4, 3, 0, 5], [9, 8, 5, 0]],
        dtype=float,
    )


@pytest.mark.parametrize(
    ("name", "options", "attribute", "value"),
    [
        ("scaffold", {"scaffold_server_lr": 0.7}, "server_lr", 0.7),
        ("fedsvrg", {"scaffold_server_lr": 0.4}, "server_lr", 0.4),
        ("fedatt", {"fedatt_step": 0.25}, "step", 0.25),
        ("ditto", {"ditto_lambda": 2.5}, "lam", 2.5),
    ],
)
def test_config_value_reaches_the_strategy(name, options, attribute, value):
    strategy = strategy_from_config(name, _config(options, {"momentum": 0.0}))
    assert getattr(strategy, attribute) == value
    default = strategy_from_config(name, _config(train={"momentum": 0.0}))
    assert getattr(default, attribute) != value


def test_fedavg_w_options_and_matrix_reach_the_strategy():
    config = _config({"omega": 0.1, "sample_weighted": False})
    strategy = strategy_from_config(
        "fedavg_w", config, distance=_matrix(), distance_clients=["a", "b", "c", "d"]
    )
    strategy.initialize(W0, ["d", "c", "b", "a"])
    assert strategy.omega == 0.1 and strategy.sample_weighted is False
    assert strategy.downweighted == "d"


def test_cluster_fedavg_options_reach_the_strategy():
    config = _config({"cluster_method": "agglomerative", "n_clusters": 2})
    strategy = strategy_from_config("cluster_fedavg", config, distance=_matrix())
    strategy.initialize(W0, IDS)
    clusters = strategy.clusters()
    # average linkage: {a, b} (1), then c joins them (mean 3.5 < 5), d alone
    assert clusters["a"] == clusters["b"] == clusters["c"] != clusters["d"]
    assert strategy.method == "agglomerative" and strategy.n_clusters == 2
    # the default, 000_* Algorithm 1, moves d's nearest neighbour c into d's cluster instead
    default = strategy_from_config("cluster_fedavg", _config(), distance=_matrix())
    default.initialize(W0, IDS)
    found = default.clusters()
    assert found["c"] == found["d"] != found["a"] == found["b"]


def test_distance_from_a_tsv_path(tmp_path):
    path = tmp_path / "distance_emd.tsv"
    order = ["c", "a", "d", "b"]
    idx = [IDS.index(c) for c in order]
    frame = pd.DataFrame(_matrix()[np.ix_(idx, idx)], index=order, columns=order)
    frame.rename_axis("client").to_csv(path, sep="\t")
    strategy = strategy_from_config("fedavg_w", _config({"distance": str(path)}))
    strategy.initialize(W0, IDS)
    np.testing.assert_array_equal(strategy.distance, _matrix())
    assert strategy.downweighted == "d"


def test_distance_method_without_a_matrix_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"strategies\.distance = 'emd' is a method"):
        strategy_from_config("fedavg_w", _config({"distance": "emd"}))


def test_scaffold_with_momentum_is_refused():
    with pytest.raises(ConfigError, match=r"train\.momentum = 0\.9; set train\.momentum: 0"):
        strategy_from_config("scaffold", _config(train={"momentum": 0.9}))


def test_bad_option_value_names_the_key():
    with pytest.raises(ConfigError, match="omega"):
        _config({"omega": 1.5})


def test_method_computed_on_the_federation(tmp_path):
    """``strategies.distance: emd`` on PRS → FedAvg-w down-weights the argmax column sum."""
    paths = write_federation(
        tmp_path, n_clients=4, n_clusters=2, samples_per_client=80, private_per_cluster=8
    )
    federation = load_federation(paths["data"])
    config = validate_config(
        {
            "strategies": {"distance": "emd"},
            "distance": {"domain": "genomics", "emd_metadata": ["prs"]},
        }
    )
    extra = strategy_distance("fedavg_w", config, federation, seed=0)
    assert strategy_distance("fedavg", config, federation, seed=0) == {}
    ids = federation.client_ids
    prs = [federation.train[c].prs for c in ids]
    oracle = np.array([[wasserstein_distance(a, b) for b in prs] for a in prs])
    np.testing.assert_allclose(extra["distance"], oracle, atol=1e-12)
    strategy = strategy_from_config("fedavg_w", config, **extra)
    strategy.initialize(W0, ids)
    assert strategy.downweighted == ids[int(np.argmax(oracle.sum(axis=0)))]
