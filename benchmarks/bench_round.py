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

from rvfedprs.federation.client import (
    ClientContext,
    build_model,
    fit_client,
    influential_bloom_bits,
)
from rvfedprs.federation.inprocess import derive_seed, initial_parameters
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

    timings = {}
    for name in ("fedavg", "fedce"):
        strategy = (
            get_strategy(name, top_k=200, n_clusters="auto")
            if name == "fedce"
            else get_strategy(name)
        )
        strategy.initialize(w0, ids)
        instructions = strategy.configure_fit(1, ids)
        results = []
        client_time = extras = 0.0
        for c in ids:
            ctx = ClientContext(clients[c], keys, model_config, training)
            seed = derive_seed(args.seed, 1, c)
            s = time.perf_counter()
            if name == "fedavg":
                results.append(fit_client(instructions[c], ctx, random_seed=seed))
                client_time += time.perf_counter() - s
            else:
                # split the FedCE client into plain training, influence, and Bloom encoding
                m = build_model(args.variants, model_config)
                set_parameters(m, instructions[c].parameters)
                local_update(m, clients[c], training, random_seed=seed)
                plain = time.perf_counter() - s
                s = time.perf_counter()
                result = fit_client(instructions[c], ctx, random_seed=seed)
                with_all = time.perf_counter() - s
                s = time.perf_counter()
                m = build_model(args.variants, model_config)
                set_parameters(m, instructions[c].parameters)
                infl = local_update(m, clients[c], training, influence=True, random_seed=seed)
                influence_time = time.perf_counter() - s
                s = time.perf_counter()
                influential_bloom_bits(infl.influence, keys, instructions[c].config)
                bloom_time = time.perf_counter() - s
                client_time += plain
                extras += max(with_all - plain, 0.0)
                timings.setdefault("fedce_influence", 0.0)
                timings["fedce_influence"] += max(influence_time - plain, 0.0)
                timings.setdefault("fedce_bloom", 0.0)
                timings["fedce_bloom"] += bloom_time
                results.append(result)
        s = time.perf_counter()
        if name == "fedce":
            strategy.filters.update({r.client_id: r.bloom_bits for r in results})
            strategy.recluster([r.client_id for r in results])  # timed alone for the table
            recluster = time.perf_counter() - s
            s = time.perf_counter()
        strategy.aggregate_fit(1, results)
        server = time.perf_counter() - s
        timings[name] = {
            "client": client_time,
            "extras": extras,
            "server": server,
            "recluster": recluster if name == "fedce" else 0.0,
        }
        if name == "fedce":
            print(f"fedce clusters: {strategy.clusters()}")

    avg, ce = timings["fedavg"], timings["fedce"]
    round_avg = avg["client"] + avg["server"]
    round_ce = ce["client"] + ce["extras"] + ce["server"]
    overhead = round_ce - round_avg
    print()
    print("| phase                                   | FedAvg (s) | FedCE (s) |")
    print("|-----------------------------------------|-----------:|----------:|")
    print(
        f"| client training, all clients (sum)      | {avg['client']:10.3f} | {ce['client']:9.3f} |"
    )
    print(
        f"| client influence accumulation (sum)     | {'-':>10} | "
        f"{timings['fedce_influence']:9.3f} |"
    )
    print(
        f"| client Bloom encoding (sum)             | {'-':>10} | {timings['fedce_bloom']:9.4f} |"
    )
    print(f"| client extras, measured end to end      | {'-':>10} | {ce['extras']:9.3f} |")
    print(f"| server: Jaccard + clustering            | {'-':>10} | {ce['recluster']:9.4f} |")
    print(
        f"| server: aggregate_fit (total)           | {avg['server']:10.4f} | {ce['server']:9.4f} |"
    )
    print(f"| round                                   | {round_avg:10.3f} | {round_ce:9.3f} |")
    print()
    print(
        f"FedCE overhead: {overhead:.3f} s = {100 * overhead / round_ce:.1f}% of the FedCE round "
        f"({100 * overhead / round_avg:.1f}% over FedAvg); server clustering+filters: "
        f"{100 * ce['recluster'] / round_ce:.2f}% of the round"
    )


if __name__ == "__main__":
    main()
