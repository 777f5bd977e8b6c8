"""A burden GLM sends its region map to each site once per run, not every round (issue 29).

The map goes as packed arrays in a site's first GLM instruction; later instructions name it by
fingerprint and the site uses the copy in its client state. The traffic must drop by at least
the map's size per site from round 2 on, the fit must not change (the pooled oracle of
tests/test_fedglm.py), a site that lost the map must say so, and the server resend it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.burden import burden_from_config  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.federation.checkpoints import (  # noqa: E402
    decode_client_state,
    encode_client_state,
)
from rvfedprs.federation.flower.records import encode_config  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies.burden_delivery import (  # noqa: E402
    HELD_KEY,
    BurdenDelivery,
    site_burden,
)
from rvfedprs.strategies.fedglm import penalty_vector  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

BURDEN = {"window_bp": 100, "max_maf": 0.05}


@pytest.fixture(scope="module")
def federation_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("delivery")
    return write_federation(root, n_clients=4, n_clusters=2, covariates=("age", "sex"))["data"]


@pytest.fixture(scope="module")
def burden(federation_dir):
    return burden_from_config(federation_dir, validate_config({"burden": BURDEN})["burden"])


def _train(data: Path, out: Path, rounds: int = 30, **options):
    config = validate_config(
        {
            "train": {"validation_fraction": 0, "data": str(data), "strategy": "fedglm",
                      "rounds": rounds, "seed": 3, "progress": False},
            "fedglm": {"features": "burden", "l2": 0.5},
            "burden": BURDEN,
        }
    )  # fmt: skip
    return train(config, out, **options)


def _newton_oracle(federation_dir, burden) -> np.ndarray:
    pooled = pool_clients(load_federation(federation_dir).train)
    x = glm_design(pooled, "burden", burden.matrix)
    penalty = penalty_vector(x.shape[1], 0.5, "rare", pooled.n_covariates)
    beta = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        gradient = x.T @ (p - pooled.y) + penalty * beta
        hessian = (x.T @ (x.multiply((p * (1 - p))[:, None]))).toarray() + np.diag(penalty)
        beta = beta - np.linalg.solve(hessian, gradient)
    return beta


def test_the_map_crosses_once_and_the_fit_is_unchanged(federation_dir, burden, tmp_path):
    result = _train(federation_dir, tmp_path)
    assert result.strategy.converged and len(result.history) >= 3
    sent = [entry["traffic"]["fit"]["bytes_sent"] for entry in result.history]
    _, arrays = encode_config({"glm": {"burden": burden.to_arrays()}})
    map_bytes = sum(a.nbytes for a in arrays.values()) * 4  # four sites
    assert map_bytes > 4 * 8 * burden.matrix.nnz
    for later in sent[1:]:
        assert later <= sent[0] - map_bytes
    np.testing.assert_allclose(
        result.strategy.coef, _newton_oracle(federation_dir, burden), rtol=0, atol=1e-6
    )


def test_a_site_without_the_map_says_so_and_is_sent_it_again(burden):
    delivery = BurdenDelivery(burden)
    first = delivery.glm_config("site1")
    assert set(first["burden"]) == {"rows", "cols", "weights", "shape"}
    assert first["burden"]["rows"].dtype == np.int32
    delivery.received(["site1", "site2"])
    later = delivery.glm_config("site1")
    assert later == {"burden_fingerprint": delivery.fingerprint}
    assert "burden" in delivery.glm_config("site3")  # a site that never replied

    state: dict = {}
    matrix = site_burden(first, state, "site1")
    assert (matrix != burden.matrix).nnz == 0
    assert site_burden(later, state, "site1") is matrix  # the held copy
    with pytest.raises(
        ConfigError, match=r"client site2 does not hold the burden map .* holds none"
    ):
        site_burden(later, {}, "site2")
    # site2 failed that round: only site1 replied, so site2 is sent the map again
    delivery.received(["site1"])
    assert "burden" in delivery.glm_config("site2")
    assert "burden" not in delivery.glm_config("site1")


def test_a_map_that_does_not_match_its_fingerprint_is_refused(burden):
    sent = BurdenDelivery(burden).glm_config("site1")
    tampered = {**sent["burden"], "weights": sent["burden"]["weights"] * 2}
    with pytest.raises(ConfigError, match="does not match its fingerprint"):
        site_burden({**sent, "burden": tampered}, {}, "site1")


def test_a_checkpoint_keeps_only_the_fingerprint_of_a_held_map(burden):
    state: dict = {}
    site_burden(BurdenDelivery(burden).glm_config("site1"), state, "site1")
    saved = encode_client_state({"site1": state})
    assert "rows" not in str(saved)
    restored = decode_client_state(saved)["site1"]
    later = {"burden_fingerprint": state[HELD_KEY].fingerprint}
    with pytest.raises(ConfigError, match="a restarted site or a resumed run"):
        site_burden(later, restored, "site1")


def test_a_resumed_burden_glm_sends_the_map_again_and_reaches_the_same_fit(
    federation_dir, tmp_path
):
    whole = _train(federation_dir, tmp_path / "whole")
    _train(federation_dir, tmp_path / "part", rounds=2)
    resumed = _train(federation_dir, tmp_path / "part", resume=True)
    assert resumed.strategy.converged
    np.testing.assert_allclose(resumed.strategy.coef, whole.strategy.coef, rtol=0, atol=1e-12)
    # the first round after the resume carries the map again (the server forgot who holds it)
    sent = [entry["traffic"]["fit"]["bytes_sent"] for entry in resumed.history]
    assert sent[2] > sent[3] and sent[2] == pytest.approx(sent[0], rel=0.01)
