import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from rvfedprs.bloom import BloomSpec, encode
from rvfedprs.clustering import ClientClusterer, canonical_labels, match_labels, nearest_cluster
from rvfedprs.similarity import to_distance
from rvfedprs.similarity.jaccard import jaccard_matrix

SPEC = BloomSpec()


def _planted(groups=(4, 3, 5), seed=0, core=150, noise=40):
    """Clients of a group share a core of group-specific variants plus private noise."""
    rng = np.random.default_rng(seed)
    sets, truth = [], []
    for g, size in enumerate(groups):
        core_ids = [f"{g + 1}:{i}:A:G" for i in range(core)]
        for _ in range(size):
            keep = rng.choice(core, size=int(core * 0.8), replace=False)
            own = [f"X:{rng.integers(10**9)}:C:T" for _ in range(noise)]
            sets.append([core_ids[i] for i in keep] + own)
            truth.append(g)
    return [encode(s, SPEC) for s in sets], np.array(truth)


@pytest.mark.parametrize("n_clusters", [3, "auto", None])
def test_recovers_planted_groups(n_clusters):
    bits, truth = _planted()
    d = to_distance(jaccard_matrix(bits, SPEC), "similarity")
    threshold = 0.8 if n_clusters is None else None
    model = ClientClusterer(n_clusters, distance_threshold=threshold).fit(d)
    assert model.n_clusters_ == 3
    assert adjusted_rand_score(truth, model.labels_) == 1.0
    np.testing.assert_array_equal(model.labels_, canonical_labels(truth))
    if n_clusters == "auto":
        assert max(model.silhouette_, key=model.silhouette_.get) == 3


def test_auto_single_cluster_when_all_similar():
    bits, _ = _planted(groups=(6,), noise=5)
    d = to_distance(jaccard_matrix(bits, SPEC), "similarity")
    assert d.max() < 0.5
    assert ClientClusterer("auto").fit(d).n_clusters_ == 1


def test_label_permutation_and_client_order_invariance():
    bits, truth = _planted(seed=3)
    d = to_distance(jaccard_matrix(bits, SPEC), "similarity")
    labels = ClientClusterer("auto").fit(d).labels_
    perm = np.random.default_rng(1).permutation(len(truth))
    labels_perm = ClientClusterer("auto").fit(d[np.ix_(perm, perm)]).labels_
    # same partition; labels canonical (first-appearance order) in each ordering
    assert adjusted_rand_score(labels[perm], labels_perm) == 1.0
    np.testing.assert_array_equal(canonical_labels(labels[perm]), labels_perm)


def test_match_labels_keeps_identity():
    previous = np.array([0, 0, 0, 1, 1, 2, 2])
    current = np.array([1, 1, 0, 2, 2, 0, 0])  # same partition but one client moved, relabelled
    np.testing.assert_array_equal(match_labels(previous, current), [0, 0, 2, 1, 1, 2, 2])
    # a new cluster gets a fresh label above the previous ones
    current = np.array([5, 5, 5, 7, 8, 9, 9])
    np.testing.assert_array_equal(match_labels(previous, current), [0, 0, 0, 1, 3, 2, 2])
    # mappings: clients that joined or left are handled
    prev = {"a": 4, "b": 4, "c": 9, "gone": 9}
    cur = {"a": 0, "b": 0, "c": 1, "new": 1}
    assert match_labels(prev, cur) == {"a": 4, "b": 4, "c": 9, "new": 9}
    # matching is invariant to how the current round happened to number its clusters
    rng = np.random.default_rng(0)
    base = rng.integers(0, 4, size=30)
    relabel = np.array([3, 0, 2, 1])
    np.testing.assert_array_equal(match_labels(previous=base, current=relabel[base]), base)
    with pytest.raises(ValueError, match="previous has 2 labels and current 3"):
        match_labels([0, 1], [0, 1, 1])


def test_nearest_cluster_places_unseen_client():
    bits, truth = _planted(groups=(3, 3, 3), seed=5)
    new_bits, _ = _planted(groups=(1, 1, 1), seed=9)
    members = {lab: [bits[i] for i in np.flatnonzero(truth == lab)] for lab in range(3)}
    for g in range(3):
        assert nearest_cluster(new_bits[g], members, SPEC) == g
    with pytest.raises(ValueError, match="no clusters"):
        nearest_cluster(new_bits[0], {}, SPEC)


def test_bad_inputs():
    d = np.array([[0, 0.5], [0.5, 0]])
    with pytest.raises(ValueError, match="n_clusters = 3 exceeds the number of clients 2"):
        ClientClusterer(3).fit(d)
    with pytest.raises(ValueError, match="linkage 'ward' unknown"):
        ClientClusterer(2, linkage="ward").fit(d)
    with pytest.raises(ValueError, match="not symmetric"):
        ClientClusterer(2).fit(np.array([[0, 0.5], [0.1, 0]]))
    with pytest.raises(ValueError, match="must be square"):
        ClientClusterer(2).fit(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="positive integer or 'auto'"):
        ClientClusterer("three").fit(d)
    assert ClientClusterer("auto").fit(np.zeros((1, 1))).n_clusters_ == 1
    assert ClientClusterer("auto").fit(np.array([[0, 0.9], [0.9, 0]])).n_clusters_ == 2
