"""Cluster FedAvg (000_* Algorithm 1)."""

import numpy as np
import pytest

from rvfedprs.strategies import FitResult, get_strategy
from rvfedprs.strategies.cluster_fedavg import assign_two_clusters


def test_algorithm1_k4_and_k5():
    d4 = np.array([[0, 1, 5, 1], [1, 0, 4, 2], [5, 4, 0, 6], [1, 2, 6, 0]], dtype=float)
    # i_max = 2; its nearest client is 1; two clients stay in C1
    assert assign_two_clusters(d4).tolist() == [0, 1, 1, 0]
    pts = np.array([0.0, 0.1, 0.2, 5.0, 5.3])
    d5 = np.abs(pts[:, None] - pts[None, :])
    labels = assign_two_clusters(d5)
    assert labels.sum() == 3 and labels[3] == 1 and labels[4] == 1  # paper: {1,2,3}{4,5}-like
    assert assign_two_clusters(np.array([[0, 1, 9], [1, 0, 8], [9, 8, 0]])).tolist() == [0, 0, 1]


def test_within_cluster_fedavg_oracle_and_order_invariance():
    rng = np.random.default_rng(0)
    ids = ["a", "b", "c", "d"]
    d = np.array([[0, 1, 5, 1], [1, 0, 4, 2], [5, 4, 0, 6], [1, 2, 6, 0]], dtype=float)
    s = get_strategy("cluster_fedavg", distance=d, distance_clients=ids)
    s.initialize({"w": np.zeros(3)}, ids)
    results = [
        FitResult(c, n, {"w": rng.normal(size=3)}) for c, n in zip(ids, [1, 2, 3, 4], strict=True)
    ]
    s.aggregate_fit(1, results[::-1])
    c = s.clusters()
    assert c["b"] == c["c"] != c["a"] == c["d"]
    exp = np.average(
        [results[1].parameters["w"], results[2].parameters["w"]], axis=0, weights=[2, 3]
    )
    np.testing.assert_allclose(s.parameters_for("c")["w"], exp)
    exp = np.average(
        [results[0].parameters["w"], results[3].parameters["w"]], axis=0, weights=[1, 4]
    )
    np.testing.assert_allclose(s.parameters_for("a")["w"], exp)
    state = s.state_dict()
    s2 = get_strategy("cluster_fedavg", distance=d, distance_clients=ids)
    s2.load_state_dict(state)
    np.testing.assert_array_equal(s2.parameters_for("a")["w"], s.parameters_for("a")["w"])


def test_agglomerative_on_any_matrix():
    pts = np.array([0.0, 0.1, 5.0, 5.1, 5.2])
    d = np.abs(pts[:, None] - pts[None, :])
    ids = list("abcde")
    s = get_strategy("cluster_fedavg", distance=d, distance_clients=ids, method="agglomerative")
    s.initialize({"w": np.zeros(1)}, ids)
    c = s.clusters()
    assert c["a"] == c["b"] and c["c"] == c["d"] == c["e"] and c["a"] != c["c"]
    with pytest.raises(Exception, match="method"):
        get_strategy("cluster_fedavg", method="kmeans")
