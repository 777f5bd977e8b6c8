"""FedAvg-w (000_* eq. 2–3) against np.average."""

import numpy as np
import pytest

from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies import FitResult, get_strategy
from rvfedprs.strategies.fedavg_w import most_distant_client, read_distance_tsv

D = np.array([[0, 1, 5, 1], [1, 0, 4, 2], [5, 4, 0, 6], [1, 2, 6, 0]], dtype=float)
IDS = ["a", "b", "c", "d"]


def _results(rng):
    return [
        FitResult(c, n, {"w": rng.normal(size=(2, 3))})
        for c, n in zip(IDS, [10, 20, 30, 40], strict=True)
    ]


def test_most_distant_is_largest_column_sum():
    assert most_distant_client(D) == 2


@pytest.mark.parametrize("omega", [0.1, 0.3, 0.5])
def test_oracle_weighted_average(omega):
    rng = np.random.default_rng(0)
    s = get_strategy("fedavg_w", distance=D, distance_clients=IDS, omega=omega)
    s.initialize({"w": np.zeros((2, 3))}, IDS)
    results = _results(rng)
    s.aggregate_fit(1, results[::-1])
    weights = [10, 20, omega * 30, 40]
    expected = np.average([r.parameters["w"] for r in results], axis=0, weights=weights)
    np.testing.assert_allclose(s.parameters_for("a")["w"], expected, rtol=1e-12)
    assert s.downweighted == "c"


def test_matrix_reordered_and_tsv(tmp_path):
    order = [3, 1, 0, 2]
    ids = [IDS[i] for i in order]
    s = get_strategy("fedavg_w", distance=D[np.ix_(order, order)], distance_clients=ids)
    s.initialize({"w": np.zeros(1)}, IDS)
    np.testing.assert_array_equal(s.distance, D)
    path = tmp_path / "d.tsv"
    path.write_text(
        "client\t"
        + "\t".join(IDS)
        + "\n"
        + "\n".join(c + "\t" + "\t".join(map(str, row)) for c, row in zip(IDS, D, strict=True))
        + "\n"
    )
    m, ids2 = read_distance_tsv(path)
    assert ids2 == IDS and np.array_equal(m, D)
    s2 = get_strategy("fedavg_w", distance=str(path))
    s2.initialize({"w": np.zeros(1)}, IDS)
    assert s2.downweighted == "c"


def test_errors():
    with pytest.raises(ConfigError, match="omega"):
        get_strategy("fedavg_w", omega=0.0)
    s = get_strategy("fedavg_w")
    with pytest.raises(ConfigError, match="distance matrix"):
        s.initialize({"w": np.zeros(1)}, IDS)
    s = get_strategy("fedavg_w", distance=D, distance_clients=["a", "b", "c", "x"])
    with pytest.raises(ConfigError, match="differ from federation"):
        s.initialize({"w": np.zeros(1)}, IDS)
