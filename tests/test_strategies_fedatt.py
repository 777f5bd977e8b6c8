"""FedAtt (Ji et al. 2019, layer-wise) and the 002_* cosine variant against naive references."""

import numpy as np

from rvfedprs.strategies import FitResult, get_strategy


def _softmax(v):
    e = np.exp(v - v.max())
    return e / e.sum()


def test_layerwise_attention_oracle():
    rng = np.random.default_rng(0)
    w0 = {"l1": rng.normal(size=(3, 2)), "l2": rng.normal(size=4)}
    clients = [
        {k: v + rng.normal(scale=s, size=v.shape) for k, v in w0.items()} for s in (0.1, 1, 3)
    ]
    s = get_strategy("fedatt", step=0.7)
    s.initialize(w0, ["a", "b", "c"])
    s.aggregate_fit(
        1, [FitResult(c, 1, p) for c, p in zip("cab", clients[::-1], strict=True)][::-1]
    )
    # results are sorted by id: a, b, c ↔ clients reversed order given above
    order = [clients[2], clients[1], clients[0]]
    for name, ws in w0.items():
        dist = np.array([np.linalg.norm(ws - c[name]) for c in order])
        alpha = _softmax(dist)
        expected = ws - 0.7 * sum(a * (ws - c[name]) for a, c in zip(alpha, order, strict=True))
        np.testing.assert_allclose(s.parameters_for("a")[name], expected, rtol=1e-12)


def test_cosine_variant_oracle():
    rng = np.random.default_rng(1)
    w0 = {"l1": rng.normal(size=5), "l2": rng.normal(size=3)}
    clients = [{k: v + rng.normal(size=v.shape) for k, v in w0.items()} for _ in range(3)]
    s = get_strategy("fedatt_cosine")
    s.initialize(w0, ["a", "b", "c"])
    s.aggregate_fit(1, [FitResult(c, 5, p) for c, p in zip("abc", clients, strict=True)])
    cos = lambda x, y: x @ y / np.linalg.norm(x) / np.linalg.norm(y)  # noqa: E731
    scores = np.array([sum(cos(w0[n], c[n]) for n in w0) for c in clients])
    alpha = _softmax(scores)
    for n in w0:
        np.testing.assert_allclose(
            s.parameters_for("b")[n], sum(a * c[n] for a, c in zip(alpha, clients, strict=True))
        )


def test_identical_clients_fixed_point():
    w = {"l": np.arange(4.0)}
    s = get_strategy("fedatt")
    s.initialize({"l": np.zeros(4)}, ["a", "b"])
    s.aggregate_fit(1, [FitResult("a", 1, w), FitResult("b", 3, w)])
    np.testing.assert_allclose(s.parameters_for("a")["l"], w["l"])
