"""Imaging module: MedMNIST loader, Dirichlet partition, CNN, metrics, client, CLI."""

from pathlib import Path

import numpy as np
import pytest
import torch

from rvfedprs.exceptions import InputDataError
from rvfedprs.imaging.cnn import SmallCNN
from rvfedprs.imaging.loader import load_medmnist
from rvfedprs.imaging.metrics import classification_metrics
from rvfedprs.imaging.partition import dirichlet_partition, fixed_count_partition

REAL = (
    Path(__file__).resolve().parents[1]
    / ".."
    / "shared"
    / "data"
    / "medmnist_pneumoniamnist"
    / "pneumoniamnist.npz"
)


def _write_npz(path, n=(60, 12, 12), size=8, n_classes=2, seed=0, **override):
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, m in zip(("train", "val", "test"), n, strict=True):
        y = rng.integers(0, n_classes, m).astype(np.uint8)
        x = rng.integers(0, 100, size=(m, size, size)).astype(np.uint8)
        x[y == 1, : size // 2] += 150  # class 1 is bright on top: learnable
        arrays[f"{split}_images"] = x
        arrays[f"{split}_labels"] = y[:, None]
    arrays.update(override)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(path, **arrays)
    return path


def test_loader_shapes_and_scaling(tmp_path):
    d = load_medmnist(_write_npz(tmp_path / "x.npz"))
    assert d.splits["train"].images.shape == (60, 1, 8, 8)
    assert d.splits["train"].images.dtype == np.float32 and d.splits["train"].images.max() <= 1
    assert d.splits["val"].labels.shape == (12,) and d.n_classes == 2
    assert len(d.pooled()) == 84


def test_loader_rejects_bad_keys_and_shapes(tmp_path):
    with pytest.raises(InputDataError, match=r"missing key\(s\) \['val_labels'\]"):
        load_medmnist(_write_npz(tmp_path / "a.npz", val_labels=None))
    with pytest.raises(InputDataError, match=r"'train_labels' has shape \(60, 2\)"):
        load_medmnist(_write_npz(tmp_path / "b.npz", train_labels=np.zeros((60, 2), np.uint8)))
    with pytest.raises(InputDataError, match=r"'test_images' has shape \(12, 8\)"):
        load_medmnist(_write_npz(tmp_path / "c.npz", test_images=np.zeros((12, 8), np.uint8)))
    with pytest.raises(InputDataError, match="not found"):
        load_medmnist(tmp_path / "missing.npz")


def test_dirichlet_partition_disjoint_seeded_nonempty():
    labels = np.repeat([0, 1, 2], 100)
    parts = dirichlet_partition(labels, 4, alpha=0.1, random_seed=3)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(300))
    assert min(len(p) for p in parts) >= 1
    again = dirichlet_partition(labels, 4, alpha=0.1, random_seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))

    # small alpha = skewed clients, large alpha = near-uniform class mix
    def skew(ps):
        return np.mean([np.max(np.bincount(labels[p], minlength=3)) / len(p) for p in ps])

    assert skew(parts) > skew(dirichlet_partition(labels, 4, alpha=100.0, random_seed=3))
    with pytest.raises(InputDataError, match="cannot give"):
        dirichlet_partition(labels[:3], 4, alpha=1.0, random_seed=0)


def test_fixed_count_partition_exact_counts_and_errors():
    labels = np.repeat([0, 1, 2], [10, 20, 5])
    counts = np.array([[3, 0, 5], [7, 12, 0]])
    parts = fixed_count_partition(labels, counts, random_seed=4)
    got = np.array([np.bincount(labels[p], minlength=3) for p in parts])
    np.testing.assert_array_equal(got, counts)
    assert len(np.intersect1d(parts[0], parts[1])) == 0  # disjoint; 8 class-1 left unassigned
    again = fixed_count_partition(labels, counts, random_seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = fixed_count_partition(labels, counts, random_seed=5)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))
    with pytest.raises(InputDataError, match="ask for 21 samples of class 1; the data hold 20"):
        fixed_count_partition(labels, np.array([[0, 21, 0]]), random_seed=0)
    with pytest.raises(InputDataError, match=r"shape \(clients, 3 classes\), got \(2, 2\)"):
        fixed_count_partition(labels, np.ones((2, 2), dtype=int), random_seed=0)
    with pytest.raises(InputDataError, match="non-negative integers"):
        fixed_count_partition(labels, np.array([[1, -1, 0]]), random_seed=0)
    with pytest.raises(InputDataError, match="at least one sample"):
        fixed_count_partition(labels, np.array([[1, 1, 0], [0, 0, 0]]), random_seed=0)


def test_cnn_matches_table_6_layers():
    m = SmallCNN(1, 2, image_size=28, random_seed=0)
    counts = {n: p.numel() for n, p in m.named_parameters()}
    assert counts["conv1.weight"] + counts["conv1.bias"] == 160
    assert counts["conv2.weight"] + counts["conv2.bias"] == 4640
    assert counts["fc2.weight"] + counts["fc2.bias"] == 65
    # documented decision (cnn.py): one 2x2 pool as the layer list says, so fc1 sees
    # 32 * 14 * 14 = 6272 features on 28x28 images, not the tables' 1568 (= 32 * 7 * 7)
    assert m.fc1.in_features == 32 * 14 * 14
    assert counts["fc1.weight"] + counts["fc1.bias"] == 6272 * 64 + 64 != 100_416
    assert SmallCNN(1, 2, image_size=14).fc1.in_features == 1568
    assert m(torch.zeros(5, 1, 28, 28)).shape == (5,)
    m7 = SmallCNN(3, 7, image_size=28)
    assert counts_sum(m7, "conv1") == 448 and counts_sum(m7, "fc2") == 455
    assert m7(torch.zeros(2, 3, 28, 28)).shape == (2, 7)
    a = SmallCNN(1, 2, random_seed=5).conv1.weight
    b = SmallCNN(1, 2, random_seed=5).conv1.weight
    assert torch.equal(a, b)


def counts_sum(model, prefix):
    return sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))


def test_metrics_against_sklearn():
    from sklearn.metrics import f1_score, log_loss, roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 50)
    p = np.clip(y * 0.6 + rng.uniform(0, 0.4, 50), 0, 1)
    m = classification_metrics(y, p, 2)
    assert m["roc_auc"] == pytest.approx(roc_auc_score(y, p))
    assert m["f1"] == pytest.approx(f1_score(y, p >= 0.5))
    assert m["log_loss"] == pytest.approx(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)))
    y3 = rng.integers(0, 3, 60)
    p3 = rng.dirichlet(np.ones(3), 60)
    m3 = classification_metrics(y3, p3, 3)
    assert m3["accuracy"] == pytest.approx(np.mean(p3.argmax(1) == y3))
    assert np.isnan(classification_metrics(np.ones(4, int), np.full(4, 0.7), 2)["roc_auc"])
