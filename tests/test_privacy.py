"""DP-SGD with sparse per-sample clipping (rvfedprs.training.dp).

Oracles: a naive per-sample loop (one dense forward/backward per sample, explicit clipping and
SGD with momentum written out in numpy), the noise std σC/B, an explicit simulation of the
noise recursion of a column nobody carries, and a separately stepped opacus RDPAccountant.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from opacus.accountants import RDPAccountant

from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update
from rvfedprs.training.dp import DPState, dp_local_update, dp_schedule

P = 40


def _client(n=120, p=P, carried=30, density=0.05, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n, p)) < density).astype(np.float32)
    dense[rng.random((n, p)) < 0.2] *= 2.0  # some homozygous carriers
    dense[:, carried:] = 0.0  # variants carried.. are carried by nobody
    prs = rng.normal(size=n).astype(np.float32)
    y = (rng.random(n) < 0.4).astype(np.float32)
    return ClientData("c0", np.arange(n).astype(str), prs, sp.csr_matrix(dense), y)


def _reference_round(model, data, cfg, max_grad_norm, reference, random_seed):
    """Noise-free DP-SGD, one dense per-sample backward at a time (the naive oracle).

    Returns the trained parameters, the influence, the mean loss of the last epoch, the number
    of steps with an empty batch and the fraction of per-sample gradients that were clipped.
    """
    n = data.n_samples
    q, steps = dp_schedule(n, cfg.batch_size, cfg.epochs)
    denominator = max(1, round(q * n))
    rng = np.random.default_rng(random_seed)
    rare = data.rare.toarray()
    params = dict(model.named_parameters())
    w = {k: p.detach().double().numpy().copy() for k, p in params.items()}
    buf = {}
    pos_weight = None if cfg.pos_weight is None else torch.tensor(cfg.pos_weight)
    infl = np.zeros(data.n_rare)
    empty, clipped, seen = 0, 0, 0
    loss_sum, loss_n = 0.0, 0
    per_epoch = max(1, round(1 / q))
    for step in range(steps):
        rows = np.flatnonzero(rng.random(n) < q)
        empty += len(rows) == 0
        total = {k: np.zeros_like(v) for k, v in w.items()}
        for i in rows:
            logit = model(torch.tensor(data.prs[i : i + 1]), torch.tensor(rare[i : i + 1]))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logit, torch.tensor(data.y[i : i + 1]), pos_weight=pos_weight
            )
            grads = torch.autograd.grad(loss, list(params.values()))
            g = {k: gi.double().numpy() for k, gi in zip(params, grads, strict=True)}
            norm = np.sqrt(sum((gi**2).sum() for gi in g.values()))
            factor = min(1.0, max_grad_norm / (norm + 1e-6))
            clipped += factor < 1.0
            seen += 1
            for k in total:
                total[k] += factor * g[k]
            if step >= steps - per_epoch:
                loss_sum += float(loss.detach())
                loss_n += 1
        infl += np.linalg.norm(total["rare.input.weight"] / (q * n), axis=0)
        for k in w:
            d_p = total[k] / denominator + cfg.proximal_mu * (w[k] - reference[k])
            d_p += cfg.weight_decay * w[k]
            buf[k] = d_p if k not in buf else cfg.momentum * buf[k] + d_p
            w[k] = w[k] - cfg.lr * buf[k]
        set_parameters(model, {k: v.astype(np.float32) for k, v in w.items()})
    return w, infl, loss_sum / loss_n, empty, clipped / seen


def test_equals_naive_per_sample_loop_without_noise():
    data = _client(n=30, seed=4)
    cfg = LocalTrainingConfig(
        epochs=2,
        lr=0.2,
        momentum=0.7,
        batch_size=2,
        pos_weight=2.0,
        proximal_mu=0.1,
        weight_decay=0.01,
    )
    arch = {"common_hidden": (6, 4), "rare_hidden": (8, 5)}
    start = get_parameters(TwoPathwayModel(P, **arch, random_seed=1))
    ref = {k: v + 0.03 for k, v in start.items()}
    model = TwoPathwayModel(P, **arch, random_seed=1)
    state = DPState(1e-12, 0.8)
    got = dp_local_update(model, data, cfg, state, reference=ref, influence=True, random_seed=7)
    want, infl, loss, empty, frac = _reference_round(
        TwoPathwayModel(P, **arch, random_seed=1), data, cfg, 0.8, ref, 7
    )
    assert empty >= 1 and 0.1 < frac < 0.9  # empty Poisson batches and partial clipping occur
    for k in want:
        np.testing.assert_allclose(got.parameters[k], want[k], atol=2e-6, err_msg=k)
    np.testing.assert_allclose(got.influence, infl, rtol=1e-5, atol=1e-8)
    assert np.all(got.influence[30:] == 0) and got.influence[:30].sum() > 0
    assert got.loss == pytest.approx(loss, rel=1e-5)
    assert got.steps == dp_schedule(30, 2, 2)[1] == state.steps


def test_noise_std_per_coordinate_is_sigma_c_over_batch():
    """One full-batch step (q = 1), lr = 1: the noise moves every coordinate by N(0, (σC/B)²)."""
    n, p = 60, 3000
    data = _client(n=n, p=p, carried=1500, density=0.002, seed=1)
    carried = data.carried_variants()
    uncarried = np.setdiff1d(np.arange(p), carried)
    cfg = LocalTrainingConfig(epochs=1, lr=1.0, momentum=0.0, batch_size=n)
    sigma, c = 1.3, 0.5
    quiet = local_update(
        TwoPathwayModel(p, rare_hidden=(8,), random_seed=0),
        data,
        cfg,
        dp=DPState(1e-12, c),
        random_seed=3,
    ).parameters
    noisy = local_update(
        TwoPathwayModel(p, rare_hidden=(8,), random_seed=0),
        data,
        cfg,
        dp=DPState(sigma, c),
        random_seed=3,
    ).parameters
    expected = sigma * c / n
    diff_w = noisy["rare.input.weight"] - quiet["rare.input.weight"]
    tail = np.concatenate(
        [(noisy[k] - quiet[k]).ravel() for k in quiet if k != "rare.input.weight"]
    )
    for values, tol in ((diff_w[:, carried], 0.03), (diff_w[:, uncarried], 0.03), (tail, 0.12)):
        assert values.size > 60
        assert np.std(values) == pytest.approx(expected, rel=tol)
        assert abs(np.mean(values)) < 4 * expected / np.sqrt(values.size)


def test_uncarried_columns_get_the_noise_of_every_step():
    """Closed-form noise of a column nobody carries = an explicit step-by-step simulation."""
    n, p = 40, 2500
    data = _client(n=n, p=p, carried=20, density=0.1, seed=2)
    cfg = LocalTrainingConfig(
        epochs=2, lr=0.1, momentum=0.9, batch_size=10, proximal_mu=0.05, weight_decay=0.02
    )
    sigma, c = 0.8, 2.0
    start = get_parameters(TwoPathwayModel(p, rare_hidden=(8,), random_seed=0))
    ref = {k: v - 0.1 for k, v in start.items()}
    out = {}
    for s in (1e-12, sigma):
        model = TwoPathwayModel(p, rare_hidden=(8,), random_seed=0)
        out[s] = local_update(model, data, cfg, dp=DPState(s, c), reference=ref, random_seed=5)
    diff = (
        out[sigma].parameters["rare.input.weight"] - out[1e-12].parameters["rare.input.weight"]
    )[:, 20:]
    # explicit simulation: w0 = r = 0, fresh noise N(0, (σC/B)²) at every step
    q, steps = dp_schedule(n, cfg.batch_size, cfg.epochs)
    rng = np.random.default_rng(0)
    w, v = np.zeros(200_000), np.zeros(200_000)
    for t in range(steps):
        g = rng.normal(0.0, sigma * c / round(q * n), w.size)
        g += (cfg.weight_decay + cfg.proximal_mu) * w
        v = g if t == 0 else cfg.momentum * v + g
        w = w - cfg.lr * v
    assert np.std(diff) == pytest.approx(np.std(w), rel=0.03)
    assert abs(np.mean(diff)) < 4 * np.std(w) / np.sqrt(diff.size)
    # the noise-free part is the data-free recursion: identical between the two runs' seeds
    assert np.all(np.abs(diff) > 0)


def test_epsilon_is_cumulative_across_rounds():
    data = _client()
    state = DPState(noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5)
    assert state.epsilon() == 0.0
    model = TwoPathwayModel(P, random_seed=0)
    cfg = LocalTrainingConfig(epochs=2, lr=0.05, batch_size=30)
    local_update(model, data, cfg, dp=state, random_seed=1)
    eps1 = state.epsilon()
    local_update(model, data, cfg, dp=state, random_seed=2)
    local_update(model, data, cfg, dp=state, random_seed=3)
    eps3 = state.epsilon()
    assert 0 < eps1 < eps3
    q, steps = dp_schedule(data.n_samples, 30, 2)
    assert state.steps == 3 * steps and state.rounds == 3
    oracle = RDPAccountant()
    for _ in range(3 * steps):
        oracle.step(noise_multiplier=1.1, sample_rate=q)
    assert eps3 == pytest.approx(oracle.get_epsilon(delta=1e-5), rel=1e-12)
    # a fresh accountant for the last round alone would under-report
    single = RDPAccountant()
    for _ in range(steps):
        single.step(noise_multiplier=1.1, sample_rate=q)
    assert single.get_epsilon(delta=1e-5) < eps3
    # checkpoint round trip
    restored = DPState.from_state_dict(state.state_dict())
    assert restored.accountant.history == state.accountant.history
    assert restored.epsilon() == eps3


def test_names_unchanged_model_updated_and_no_hooks_left():
    data = _client()
    model = TwoPathwayModel(P, random_seed=0)
    before = get_parameters(model)
    state = DPState(1.0, 1.0)
    res = local_update(
        model, data, LocalTrainingConfig(batch_size=40), dp=state, influence=True, random_seed=0
    )
    assert list(res.parameters) == list(before)
    after = get_parameters(model)
    assert all(np.array_equal(after[k], res.parameters[k]) for k in after)
    assert not np.allclose(after["head.weight"], before["head.weight"])
    assert not any(p.grad is not None for p in model.parameters())
    assert not model._forward_hooks and not any(m._forward_hooks for m in model.modules())
    assert "rare_input" not in vars(model)
    # noise reaches every column, but the (pre-noise) influence stays zero where nobody carries
    assert not np.allclose(after["rare.input.weight"][:, 30:], before["rare.input.weight"][:, 30:])
    assert np.all(res.influence[30:] == 0) and np.all(res.influence[:30] >= 0)
    # deterministic with a seed
    res2 = local_update(
        TwoPathwayModel(P, random_seed=0),
        data,
        LocalTrainingConfig(batch_size=40),
        dp=DPState(1.0, 1.0),
        influence=True,
        random_seed=0,
    )
    assert all(np.array_equal(res.parameters[k], res2.parameters[k]) for k in after)


def test_dropout_and_a_client_without_carriers():
    data = _client(n=50, carried=0)
    cfg = LocalTrainingConfig(batch_size=10)
    runs = [
        local_update(
            TwoPathwayModel(P, dropout=0.3, random_seed=0),
            data,
            cfg,
            dp=DPState(0.5, 1.0),
            influence=True,
            random_seed=9,
        )
        for _ in range(2)
    ]
    for k in runs[0].parameters:
        np.testing.assert_array_equal(runs[0].parameters[k], runs[1].parameters[k])
    assert np.all(runs[0].influence == 0) and np.isfinite(runs[0].loss)


def test_negligible_noise_and_no_clipping_equals_plain_sgd():
    """q = 1 (full batch), σ·C → 0, C ≫ gradient norms: DP-SGD = full-batch SGD + FedProx."""
    data = _client(n=60)
    cfg = LocalTrainingConfig(epochs=3, lr=0.1, momentum=0.5, batch_size=60, proximal_mu=0.2)
    ref = {k: v + 0.05 for k, v in get_parameters(TwoPathwayModel(P, random_seed=3)).items()}
    plain = local_update(TwoPathwayModel(P, random_seed=3), data, cfg, reference=ref, random_seed=0)
    private = local_update(
        TwoPathwayModel(P, random_seed=3),
        data,
        cfg,
        reference=ref,
        dp=DPState(1e-12, 1e3),
        random_seed=0,
    )
    for k in plain.parameters:
        np.testing.assert_allclose(private.parameters[k], plain.parameters[k], atol=1e-5)


def test_clipping_bounds_the_update():
    """With σ tiny, one full-batch step moves the weights by at most lr·C."""
    data = _client(n=60)
    model = TwoPathwayModel(P, random_seed=0)
    before = get_parameters(model)
    cfg = LocalTrainingConfig(epochs=1, lr=1.0, momentum=0.0, batch_size=60)
    after = local_update(model, data, cfg, dp=DPState(1e-9, 0.01), random_seed=0).parameters
    step = np.sqrt(sum(((after[k] - before[k]) ** 2).sum() for k in before))
    assert 0 < step <= 0.01 + 1e-6


def test_bad_settings():
    with pytest.raises(ValueError, match="noise_multiplier must be > 0"):
        DPState(0.0, 1.0)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\)"):
        DPState(1.0, 1.0, delta=2.0)
    data = _client(n=20)
    with pytest.raises(InputDataError, match="client c0: 40 rare variants, model expects 41"):
        dp_local_update(TwoPathwayModel(P + 1), data, LocalTrainingConfig(), DPState(1.0, 1.0))
    with pytest.raises(ValueError, match="reference parameter names differ"):
        dp_local_update(
            TwoPathwayModel(P),
            data,
            LocalTrainingConfig(),
            DPState(1.0, 1.0),
            reference={"head.bias": np.zeros(1, np.float32)},
        )
