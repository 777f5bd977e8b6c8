import numpy as np
import pytest
import scipy.sparse as sp
from opacus.accountants import RDPAccountant

from rvfedprs.model import TwoPathwayModel, get_parameters
from rvfedprs.privacy import DPState, dp_schedule
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update

P = 40


def _client(n=120, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n, P)) < 0.05).astype(np.float32)
    dense[:, 30:] = 0.0  # variants 30.. are carried by nobody
    rare = sp.csr_matrix(dense)
    prs = rng.normal(size=n).astype(np.float32)
    y = (rng.random(n) < 0.4).astype(np.float32)
    return ClientData("c0", np.arange(n).astype(str), prs, rare, y)


def test_epsilon_is_cumulative_across_rounds():
    data = _client()
    state = DPState(noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5)
    assert state.epsilon() == 0.0
    model = TwoPathwayModel(P, random_seed=0)
    cfg = LocalTrainingConfig(epochs=2, lr=0.05, batch_size=30)
    local_update(model, data, cfg, dp=state, random_seed=1)
    eps1 = state.epsilon()
    local_update(model, data, cfg, dp=state, random_seed=2)
    eps2 = state.epsilon()
    assert 0 < eps1 < eps2
    q, steps = dp_schedule(data.n_samples, 30, 2)
    assert state.steps == 2 * steps and state.rounds == 2
    oracle = RDPAccountant()
    for _ in range(2 * steps):
        oracle.step(noise_multiplier=1.1, sample_rate=q)
    assert eps2 == pytest.approx(oracle.get_epsilon(delta=1e-5), rel=1e-12)
    # a fresh accountant for the second round alone would under-report
    single = RDPAccountant()
    for _ in range(steps):
        single.step(noise_multiplier=1.1, sample_rate=q)
    assert single.get_epsilon(delta=1e-5) < eps2
    # checkpoint round trip
    restored = DPState.from_state_dict(state.state_dict())
    assert restored.epsilon() == eps2 and restored.epsilon(1e-3) < eps2


def test_names_unchanged_model_updated_and_hooks_removed():
    data = _client()
    model = TwoPathwayModel(P, random_seed=0)
    before = get_parameters(model)
    state = DPState(1.0, 1.0)
    res = local_update(
        model, data, LocalTrainingConfig(batch_size=40), dp=state, influence=True, random_seed=0
    )
    assert list(res.parameters) == list(before)
    assert all(not n.startswith("_module") for n in res.parameters)
    after = get_parameters(model)
    assert all(np.array_equal(after[k], res.parameters[k]) for k in after)
    assert not np.allclose(after["head.weight"], before["head.weight"])
    assert not any(
        hasattr(p, "grad_sample") and p.grad_sample is not None for p in model.parameters()
    )
    assert not model._forward_hooks and not model.rare.input._forward_hooks
    # noise reaches every column, but the (pre-noise) influence stays zero where nobody carries
    assert not np.allclose(after["rare.input.weight"][:, 30:], before["rare.input.weight"][:, 30:])
    assert np.all(res.influence[30:] == 0) and np.all(res.influence[:30] >= 0)
    # deterministic with a seed
    model2 = TwoPathwayModel(P, random_seed=0)
    res2 = local_update(
        model2,
        data,
        LocalTrainingConfig(batch_size=40),
        dp=DPState(1.0, 1.0),
        influence=True,
        random_seed=0,
    )
    assert all(np.array_equal(res.parameters[k], res2.parameters[k]) for k in after)


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
