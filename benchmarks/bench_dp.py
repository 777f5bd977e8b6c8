"""One DP-SGD client-round: the old dense opacus path vs sparse per-sample (ghost) clipping.

The old path (kept here only as the baseline, it is no longer in the library) fed the rare
dosages dense through opacus' ``GradSampleModule``, which materialises a (batch × h × P)
per-sample gradient of ``rare.input.weight`` at every step.  The new
:func:`rvfedprs.training.dp.dp_local_update` clips with ``‖δ_i‖·‖a_i‖`` and sums ``(c ⊙ Δ)ᵀ A`` as a
sparse product on the carried columns; columns nobody carries get their noise in closed form.

Clients: the real demo client (``--data`` folder of the pipeline, training split of
``--client``) and a synthetic client of ``--samples`` samples × ``--variants`` variants with the
demo client's non-zero fraction.  Settings are the train defaults (lr 0.05, momentum 0.9, batch
64, 1 local epoch, FedProx μ 0.01) with σ = 1, C = 1 and influence on.  Both paths draw the same
Poisson batches; with σ = 1e-12 their trained parameters are compared (max |Δ|).  A third row
pads the demo client with columns nobody carries (``--pad-to``): only the once-per-round
O(h·P) part should grow.

    python3 benchmarks/bench_dp.py [--data results] [--client client01] [--old-max-variants 70000]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from rvfedprs.genomic.data import load_federation
from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.training import (
    RARE_INPUT,
    ClientData,
    LocalResult,
    LocalTrainingConfig,
    _loss_fn,
    column_norms,
)
from rvfedprs.training.dp import DPState, dp_local_update, dp_schedule


def dense_opacus_update(model, data, config, dp, *, influence=False, random_seed=0):
    """The previous implementation of ``dp_local_update`` (dense input, opacus per-sample grads)."""
    start = get_parameters(model)
    ref = {k: torch.as_tensor(v) for k, v in start.items()}
    n = data.n_samples
    q, steps = dp_schedule(n, config.batch_size, config.epochs)
    expected_batch = q * n
    work = copy.deepcopy(model)
    gsm = GradSampleModule(work, batch_first=True, loss_reduction="mean")
    named = dict(work.named_parameters())
    sgd = torch.optim.SGD(
        work.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
    )
    optimizer = DPOptimizer(
        sgd,
        noise_multiplier=dp.noise_multiplier,
        max_grad_norm=dp.max_grad_norm,
        expected_batch_size=max(1, int(round(expected_batch))),
        loss_reduction="mean",
        generator=torch.Generator().manual_seed(int(random_seed)),
    )
    optimizer.attach_step_hook(dp.accountant.get_optimizer_hook_fn(sample_rate=q))
    loss_fn = _loss_fn(config)
    mu = float(config.proximal_mu)
    rng = np.random.default_rng(random_seed)
    infl = torch.zeros(data.n_rare, dtype=torch.float64) if influence else None
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            torch.manual_seed(int(random_seed))
            gsm.train()
            for _ in range(steps):
                rows = np.flatnonzero(rng.random(n) < q)
                prs, rare, y = data.batch(rows, sparse=False)
                optimizer.zero_grad(set_to_none=True)
                logits = gsm(prs, rare)
                loss = loss_fn(logits, y) if len(rows) else logits.sum() * 0.0
                loss.backward()
                if not optimizer.pre_step():
                    continue
                if infl is not None and named[RARE_INPUT].summed_grad is not None:
                    infl += column_norms(
                        named[RARE_INPUT].summed_grad.detach().double() / expected_batch
                    )
                if mu > 0:
                    with torch.no_grad():
                        for name, p in named.items():
                            p.grad.add_(p - ref[name], alpha=mu)
                optimizer.original_optimizer.step()
    finally:
        gsm._close()
    set_parameters(model, get_parameters(work))
    return LocalResult(get_parameters(model), n, math.nan, infl, steps)


def synthetic_client(n: int, p: int, density: float, seed: int = 0) -> ClientData:
    """``n`` samples × ``p`` variants, carrier rates log-uniform in [1e-4, 1e-2] scaled to a mean
    of ``density``; a sample drawn twice for a variant is homozygous (dosage 2)."""
    rng = np.random.default_rng(seed)
    rates = np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), p))
    counts = rng.binomial(n, np.minimum(1.0, rates * density / rates.mean()))
    cols = np.repeat(np.arange(p), counts)
    rows = rng.integers(0, n, cols.size)
    rare = sp.csr_matrix((np.ones(cols.size, np.float32), (rows, cols)), shape=(n, p))
    prs = rng.normal(size=n).astype(np.float32)
    y = (rng.random(n) < 0.3).astype(np.float32)
    return ClientData("synthetic", np.arange(n).astype(str), prs, rare, y)


def timed(fn, data, cfg, sigma, seed=0):
    model = TwoPathwayModel(data.n_rare, random_seed=0)
    state = DPState(sigma, 1.0)
    t0 = time.perf_counter()
    res = fn(model, data, cfg, state, influence=True, random_seed=seed)
    return time.perf_counter() - t0, res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="results")
    parser.add_argument("--client", default="client01")
    parser.add_argument("--samples", type=int, default=800)
    parser.add_argument("--variants", type=int, default=100_000)
    parser.add_argument("--pad-to", type=int, default=200_000, help="demo padded to P columns")
    parser.add_argument("--density", type=float, default=None, help="default: the demo's")
    parser.add_argument("--old-max-variants", type=int, default=70_000)
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.9, batch_size=64, proximal_mu=0.01)
    fed = load_federation(args.data, clients=[args.client])
    demo = fed.train[args.client]
    density = args.density or demo.rare.nnz / (demo.n_samples * demo.n_rare)
    clients = {
        f"demo {args.client}": demo,
        "synthetic": synthetic_client(args.samples, args.variants, density),
        f"demo {args.client} + zero columns": ClientData(
            demo.client_id,
            demo.sample_ids,
            demo.prs,
            sp.hstack([demo.rare, sp.csr_matrix((demo.n_samples, args.pad_to - demo.n_rare))]),
            demo.y,
        ),
    }
    rows = []
    for label, data in clients.items():
        q, steps = dp_schedule(data.n_samples, cfg.batch_size, cfg.epochs)
        row = {
            "client": label,
            "samples": data.n_samples,
            "variants": data.n_rare,
            "nnz": int(data.rare.nnz),
            "carried": int(data.carried_variants().size),
            "steps": steps,
            "load_1min": os.getloadavg()[0],
        }
        new_t, new_res = min(
            (timed(dp_local_update, data, cfg, 1.0) for _ in range(3)), key=lambda r: r[0]
        )
        quiet_t, quiet = timed(dp_local_update, data, cfg, 1e-12)
        row["new_s"] = round(new_t, 3)
        if data.n_rare <= args.old_max_variants:
            old_t, old = timed(dense_opacus_update, data, cfg, 1e-12)
            row["old_s"] = round(old_t, 2)
            row["speedup"] = round(old_t / new_t, 1)
            row["max_abs_diff_params"] = float(
                max(np.abs(old.parameters[k] - quiet.parameters[k]).max() for k in old.parameters)
            )
            row["max_rel_diff_influence"] = float(
                np.max(np.abs(old.influence.numpy() - quiet.influence))
                / np.max(np.abs(old.influence.numpy()))
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
