"""Time of local training epochs with the sparse rare input: two nnz levels × two variant counts P.

Per-epoch time is (t(E=6) − t(E=1)) / 5 so the one-off O(h·P) costs of a round (copying the
parameters in and out) are separated from the per-step cost, which should depend on nnz only.
A dense forward+backward pass over one epoch is timed for comparison.

    python3 benchmarks/bench_sparse_epoch.py [--samples 2000] [--nnz-per-sample 10 40]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp
import torch

from rvfedprs.model import TwoPathwayModel
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update


def make_client(n: int, p: int, nnz_per_sample: int, seed: int = 0) -> ClientData:
    rng = np.random.default_rng(seed)
    # carriers drawn from the same 5,000 columns whatever P, so nnz and the carried set match
    pool = np.sort(rng.choice(p, size=min(p, 5000), replace=False))
    cols = rng.choice(pool, size=(n, nnz_per_sample))
    rows = np.repeat(np.arange(n), nnz_per_sample)
    rare = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols.ravel())), shape=(n, p))
    rare.sum_duplicates()
    prs = rng.normal(size=n).astype(np.float32)
    y = (rng.random(n) < 0.3).astype(np.float32)
    return ClientData("bench", np.arange(n).astype(str), prs, rare, y)


def time_update(data: ClientData, epochs: int) -> float:
    model = TwoPathwayModel(data.n_rare, random_seed=0)
    cfg = LocalTrainingConfig(
        epochs=epochs, lr=0.05, momentum=0.9, batch_size=128, proximal_mu=0.01
    )
    t0 = time.perf_counter()
    local_update(model, data, cfg, influence=True, random_seed=0)
    return time.perf_counter() - t0


def time_dense_epoch(data: ClientData, batch_size: int = 128) -> float:
    model = TwoPathwayModel(data.n_rare, random_seed=0)
    t0 = time.perf_counter()
    for start in range(0, data.n_samples, batch_size):
        rows = np.arange(start, min(start + batch_size, data.n_samples))
        prs, rare, y = data.batch(rows, sparse=False)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(prs, rare), y)
        loss.backward()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--nnz-per-sample", type=int, nargs="+", default=[10, 40])
    parser.add_argument("--variants", type=int, nargs="+", default=[10_000, 200_000])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"samples={args.samples} nnz/sample={args.nnz_per_sample} threads=1")
    cases = [(p, k) for k in args.nnz_per_sample for p in args.variants]
    print(
        f"{'P':>9} {'nnz':>8} {'epoch_s (sparse)':>17} {'round overhead_s':>17} "
        f"{'dense fwd+bwd epoch_s':>22}"
    )
    for p, nnz_per_sample in cases:
        data = make_client(args.samples, p, nnz_per_sample)
        time_update(data, 1)  # warm-up
        t1 = min(time_update(data, 1) for _ in range(2))
        t6 = min(time_update(data, 6) for _ in range(2))
        per_epoch = (t6 - t1) / 5
        dense = time_dense_epoch(data) if p <= 50_000 else float("nan")
        print(
            f"{p:>9} {data.rare.nnz:>8} {per_epoch:>17.4f} {t1 - per_epoch:>17.4f} {dense:>22.4f}"
        )


if __name__ == "__main__":
    main()
