import numpy as np
import pytest
import scipy.sparse as sp
import torch

from rvfedprs.model import (
    TwoPathwayModel,
    get_parameters,
    model_from_config,
    set_parameters,
)
from rvfedprs.training import to_torch_sparse


def _batch(n=40, p=300, density=0.02, seed=0):
    rng = np.random.default_rng(seed)
    rare = sp.random(n, p, density=density, format="csr", random_state=seed, dtype=np.float32)
    rare.data[:] = rng.integers(1, 3, size=rare.nnz).astype(np.float32)
    prs = torch.from_numpy(rng.normal(size=n).astype(np.float32))
    return prs, rare


def test_parameter_names_and_shapes():
    model = TwoPathwayModel(300, common_hidden=(8, 4), rare_hidden=(32, 16), random_seed=0)
    params = get_parameters(model)
    names = list(params)
    assert all(n.split(".")[0] in {"common", "rare", "head"} for n in names)
    assert params["rare.input.weight"].shape == (32, 300)
    assert params["head.weight"].shape == (1, 4 + 16)
    assert [n for n in names if n.startswith("head.")] == ["head.weight", "head.bias"]
    assert {"rare.input.weight", "rare.fc1.weight"} <= set(names)
    assert len([n for n in names if n.startswith("common.")]) == 4


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_forward_backward_equals_dense(layout):
    prs, rare = _batch()
    dense = torch.from_numpy(rare.toarray())
    sparse = to_torch_sparse(rare)
    if layout == "csr":
        sparse = sparse.to_sparse_csr()
    y = torch.from_numpy((np.arange(40) % 2).astype(np.float32))
    grads = []
    outs = []
    for x in (dense, sparse):
        model = TwoPathwayModel(300, random_seed=3)
        out = model(prs, x)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(out, y)
        loss.backward()
        outs.append(out.detach().numpy())
        grads.append({n: p.grad.numpy().copy() for n, p in model.named_parameters()})
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    for name in grads[0]:
        np.testing.assert_allclose(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-6)
    # a column nobody carries gets an exactly zero gradient on the sparse path
    empty = np.flatnonzero(np.asarray(rare.sum(axis=0)).ravel() == 0)
    assert empty.size > 0
    assert np.all(grads[1]["rare.input.weight"][:, empty] == 0)


def test_seeded_init_is_deterministic_and_leaves_global_rng():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = get_parameters(TwoPathwayModel(50, random_seed=7))
    assert torch.equal(before, torch.get_rng_state())
    b = get_parameters(TwoPathwayModel(50, random_seed=7))
    c = get_parameters(TwoPathwayModel(50, random_seed=8))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["rare.input.weight"], c["rare.input.weight"])


def test_set_parameters_roundtrip_and_errors():
    src = TwoPathwayModel(20, random_seed=1)
    dst = TwoPathwayModel(20, random_seed=2)
    set_parameters(dst, get_parameters(src))
    prs, rare = _batch(n=5, p=20, density=0.3)
    x = to_torch_sparse(rare)
    assert torch.equal(src(prs, x), dst(prs, x))
    params = get_parameters(src)
    params["rare.input.weight"] = np.zeros((64, 21), dtype=np.float32)
    with pytest.raises(ValueError, match=r"'rare.input.weight' has shape \(64, 21\)"):
        set_parameters(dst, params)
    del params["head.bias"]
    with pytest.raises(ValueError, match=r"missing \['head.bias'\]"):
        set_parameters(dst, params)


def test_bad_inputs():
    with pytest.raises(ValueError, match="n_rare must be >= 1"):
        TwoPathwayModel(0)
    model = TwoPathwayModel(10, random_seed=0)
    with pytest.raises(ValueError, match="rare input has 11 columns, the model expects 10"):
        model(torch.zeros(2), torch.zeros(2, 11))


def test_dropout_layers_present_only_when_requested():
    assert not any(isinstance(m, torch.nn.Dropout) for m in TwoPathwayModel(5).modules())
    model = TwoPathwayModel(5, dropout=0.2)
    assert sum(isinstance(m, torch.nn.Dropout) for m in model.modules()) == 2


def test_covariates_enter_the_common_backbone():
    model = TwoPathwayModel(5, n_covariates=3, random_seed=0)
    assert model.common.fc0.weight.shape[1] == 4  # PRS + 3 covariates
    prs, rare = torch.zeros(2), torch.zeros(2, 5)
    covariates = torch.tensor([[0.0, 0.0, 0.0], [1.0, -2.0, 3.0]])
    logits = model(prs, rare, covariates=covariates)
    assert logits.shape == (2,) and logits[0] != logits[1]  # only the covariates differ
    with pytest.raises(ValueError, match="expects 3 covariates, the batch holds 0"):
        model(prs, rare)
    with pytest.raises(ValueError, match="expects 0 covariates, the batch holds 3"):
        TwoPathwayModel(5, random_seed=0)(prs, rare, covariates=covariates)
    assert model_from_config(5, {"n_covariates": 3}).config()["n_covariates"] == 3
