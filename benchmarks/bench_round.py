"""One FedCE round vs one FedAvg round: the cost of influence, Bloom filters and clustering.

Synthetic federation (default 10 clients × 10,000 samples, 5,000 rare variants with minor-allele
frequencies drawn log-uniform in [1e-4, 1e-2], so ~0.2% of dosage entries are non-zero, as for
real rare variants), the default model and local settings. Every phase is timed separately:

- client training (local_update without influence),
- client FedCE extras: influence accumulation and Bloom encoding,
- server: FedAvg aggregation vs FedCE (Jaccard matrix + clustering + asymmetric aggregation).

Usage: python benchmarks/bench_round.py [--clients 10] [--samples 10000] [--variants 5000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from rvfedprs.federation.seeds import derive_seed
from rvfedprs.genomic.client import ClientContext, build_model, fit_client, influential_bloom_bits
from rvfedprs.genomic.task import initial_parameters
from rvfedprs.model import set_parameters
from rvfedprs.strategies import get_strategy
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update


def synthetic_clients(n_clients, n_samples, n_variants, seed):
    rng = np.random.default_rng(seed)
    maf = np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), n_variants))
    clients = {}
    for k in range(n_clients):
        # cluster-specific frequency shifts (3 populations)
        shift = np.exp(rng.normal(0, 1.0, n_variants)) if k % 3 else 1.0
        p = np.clip(maf * shift, 0, 0.05)
        carriers = rng.random((n_samples, n_variants)) < 2 * p
        rows, cols = np.nonzero(carriers)
        rare = sp.csr_matrix(
            (np.ones(rows.size, np.float32), (rows, cols)), shape=(n_samples, n_variants)
        )
        y = (rng.random(n_samples) < 0.1).astype(np.float32)
        clients[f"c{k:02d}"] = ClientData(
            f"c{k:02d}",
            [f"c{k}_{i}" for i in range(n_samples)],
            rng.normal(size=n_samples).astype(np.float32),
            rare,
            y,
        )
    return clients


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--variants", type=int, default=5_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="best of N per client")
    args = parser.parse_args()

    t0 = time.perf_counter()
    clients = synthetic_clients(args.clients, args.samples, args.variants, args.seed)
    density = np.mean([c.rare.nnz / np.prod(c.rare.shape) for c in clients.values()])
    print(
        f"federation: {args.clients} clients x {args.samples} samples, {args.variants} rare "
        f"variants, dosage density {density:.4%} (built in {time.perf_counter() - t0:.1f} s)"
    )
    keys = [f"1:{i}:A:G" for i in range(args.variants)]
    model_config = {"common_hidden": [16], "rare_hidden": [64], "dropout": 0.0}
    training = LocalTrainingConfig(epochs=args.epochs, lr=0.05, momentum=0.9, batch_size=256)
    w0 = initial_parameters(args.variants, model_config, args.seed)
    ids = sorted(clients)

    # warm-up (imports, allocator)
    model = build_model(args.variants, model_config)
    set_parameters(model, w0)
    local_update(model, clients[ids[0]], training, random_seed=0)

    # Per client, interleaved (so machine load hits both alike), best of --repeat:
    # FedAvg client = fit_client without extras; FedCE client = fit_client with influence + Bloom.
    fedavg, fedce = get_strategy("fedavg"), get_strategy("fedce", top_k=200, n_clusters="auto")
    fedavg.initialize(w0, ids)
    fedce.initialize(w0, ids)
    avg_instr, ce_instr = fedavg.configure_fit(1, ids), fedce.configure_fit(1, ids)
    t_avg = t_ce = t_bloom = 0.0
    avg_results, ce_results = [], []
    for c in ids:
        ctx = ClientContext(clients[c], keys, model_config, training)
        seed = derive_seed(args.seed, 1, c)
        best_avg = best_ce = np.inf
        for _ in range(args.repeat):
            s = time.perf_counter()
            r_avg = fit_client(avg_instr[c], ctx, random_seed=seed)
            best_avg = min(best_avg, time.perf_counter() - s)
            s = time.perf_counter()
            r_ce = fit_client(ce_instr[c], ctx, random_seed=seed)
            best_ce = min(best_ce, time.perf_counter() - s)
        m = build_model(args.variants, model_config)
        set_parameters(m, ce_instr[c].parameters)
        infl = local_update(m, clients[c], training, influence=True, random_seed=seed).influence
        s = time.perf_counter()
        influential_bloom_bits(infl, keys, ce_instr[c].config)
        t_bloom += time.perf_counter() - s
        t_avg, t_ce = t_avg + best_avg, t_ce + best_ce
        avg_results.append(r_avg)
        ce_results.append(r_ce)
    s = time.perf_counter()
    fedavg.aggregate_fit(1, avg_results)
    server_avg = time.perf_counter() - s
    fedce.filters.update({r.client_id: r.bloom_bits for r in ce_results})
    t_cluster = np.inf
    for _ in range(3):  # the first call also pays for lazy imports
        s = time.perf_counter()
        fedce.recluster(ids)
        t_cluster = min(t_cluster, time.perf_counter() - s)
    s = time.perf_counter()
    fedce.aggregate_fit(1, ce_results)
    server_ce = time.perf_counter() - s
    print(f"fedce clusters: {fedce.clusters()}")

    round_avg, round_ce = t_avg + server_avg, t_ce + server_ce
    client_extra = t_ce - t_avg
    rows = [
        ("client round, all clients (sum)", t_avg, t_ce),
        ("  of which influence + Bloom (FedCE)", None, client_extra),
        ("  of which Bloom encoding alone", None, t_bloom),
        ("server: Jaccard + clustering", None, t_cluster),
        ("server: aggregate_fit (total)", server_avg, server_ce),
        ("round", round_avg, round_ce),
    ]
    print()
    print("| phase                                 | FedAvg (s) | FedCE (s) |")
    print("|---------------------------------------|-----------:|----------:|")
    for label, a, b in rows:
        a_txt = "-" if a is None else f"{a:.4f}"
        print(f"| {label:<37} | {a_txt:>10} | {b:9.4f} |")
    print()
    overhead = round_ce - round_avg
    print(
        f"FedCE overhead over FedAvg: {overhead:.3f} s = {100 * overhead / round_ce:.1f}% of the "
        f"FedCE round; server Jaccard + clustering = {100 * t_cluster / round_ce:.2f}% of the "
        f"round; server aggregate_fit = {100 * server_ce / round_ce:.2f}%"
    )


if __name__ == "__main__":
    main()
