"""The cost of secure aggregation: a SecAgg round against a plain round, wall time and bytes.

Synthetic federation as in ``bench_round.py`` (default 10 clients × 10,000 samples, 5,000 rare
variants; here 3 populations with their own frequency shifts, so that FedCE finds 3 clusters),
the default model (16/64 hidden), 1 local epoch, batch 256, one torch thread; FedAvg and FedCE
(3 clusters, top_k 200); the in-process engine, which runs the same server loop, site code and
protocol as the Flower engines, every site one after the other.
Plain and secure runs alternate (``--repeat`` times each) so that machine load hits both alike;
every run trains ``--rounds`` rounds and the per-round wall time is the median over rounds 2..R
(round 1 pays for lazy imports) of the time between round ends. ``protocol s`` is the time of the
four SecAgg exchanges (key agreement, shares, masking, unmasking) per round: the secure round's
extra work besides holding the update, since its training is the plain round's.

Every run is a run plan (:func:`rvfedprs.plan.run`) on synthetic data already standardised.
Bytes on the wire: :class:`~rvfedprs.federation.metering.MeteredTransport` encodes every message
a round exchanges as the Flower engines do and measures its protobuf ``RecordDict`` (message
metadata and TLS framing not counted); per client and round, server → client (down) and client →
server (up).

Usage: python benchmarks/bench_secagg.py [--clients 10] [--samples 10000] [--variants 5000]
       [--rounds 3] [--repeat 1] [--strategies fedavg fedce] [--clusters 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from rvfedprs.config import validate_config
from rvfedprs.genomic.data import Federation
from rvfedprs.plan import Privacy, RunPlan, enabled_secagg
from rvfedprs.plan import run as run_plan
from rvfedprs.strategies import get_strategy
from rvfedprs.training import ClientData, LocalTrainingConfig


def synthetic_clients(n_clients, n_samples, n_variants, seed, populations=3):
    """``bench_round.py``'s federation, with one allele-frequency shift per population.

    Client k belongs to population k mod ``populations``; its carriers are drawn at the base
    minor-allele frequencies (log-uniform in [1e-4, 1e-2]) times its population's shift, so
    that FedCE finds the populations as clusters (and every cluster has 3 or more members).
    """
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    maf = np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), n_variants))
    shifts = [np.exp(rng.normal(0, 1.5, n_variants)) for _ in range(populations)]
    clients = {}
    for k in range(n_clients):
        p = np.clip(maf * shifts[k % populations], 0, 0.05)
        rows, cols = np.nonzero(rng.random((n_samples, n_variants)) < 2 * p)
        rare = sp.csr_matrix(
            (np.ones(rows.size, np.float32), (rows, cols)), shape=(n_samples, n_variants)
        )
        y = (rng.random(n_samples) < 0.1).astype(np.float32)
        ids = [f"c{k}_{i}" for i in range(n_samples)]
        prs = rng.normal(size=n_samples).astype(np.float32)
        clients[f"c{k:02d}"] = ClientData(f"c{k:02d}", ids, prs, rare, y)
    return clients


def run(federation, strategy_name, secure, args, model_config, training):
    """One run of ``args.rounds`` rounds; per-round times, bytes per client and round."""
    config = validate_config(
        {
            "model": model_config,
            "secagg": {"enabled": secure},
            "fedce": {"top_k": 200, "n_clusters": args.clusters},
        }
    )
    fedce = {k: config["fedce"][k] for k in ("top_k", "n_clusters", "bloom_capacity")}
    strategy = get_strategy(strategy_name, **(fedce if strategy_name == "fedce" else {}))
    ends, cpu = [time.perf_counter()], [time.process_time()]

    def tick(strategy, server_round):
        ends.append(time.perf_counter())
        cpu.append(time.process_time())
        return {}

    plan = RunPlan(
        task="genomic",
        data=federation,
        strategy=strategy,
        rounds=args.rounds,
        seed=args.seed,
        privacy=Privacy(secagg=enabled_secagg(config)),
        model=model_config,
        training=training,
        config=config,
        evaluate_round=tick,
    )
    traffic = run_plan(plan).metrics["traffic"]  # every exchange, the floor's included
    rounds, cpu_rounds = np.diff(ends), np.diff(cpu)
    total = traffic["total"]
    n = len(federation.client_ids) * args.rounds
    later = slice(1, None) if len(rounds) > 1 else slice(None)
    protocol_s = sum(v["seconds"] for step, v in traffic.items() if step.startswith("secagg."))
    return {
        "round_s": float(np.median(rounds[later])),
        "cpu_s": float(np.median(cpu_rounds[later])),
        "down": float(total["bytes_sent"]) / n,
        "up": float(total["bytes_received"]) / n,
        "protocol_s": float(protocol_s) / args.rounds,
        "clusters": strategy.clusters(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--variants", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategies", nargs="+", default=["fedavg", "fedce"])
    parser.add_argument("--clusters", type=int, default=3, help="FedCE n_clusters")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: no spinning)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    clients = synthetic_clients(args.clients, args.samples, args.variants, args.seed)
    keys = [f"1:{i}:A:G" for i in range(args.variants)]
    federation = Federation(Path("."), keys, clients, {}, prs_mean=0.0, prs_sd=1.0)
    model_config = {"common_hidden": [16], "rare_hidden": [64], "dropout": 0.0}
    training = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.9, batch_size=256)
    print(
        f"federation: {args.clients} clients x {args.samples} samples, {args.variants} rare "
        f"variants (built in {time.perf_counter() - t0:.1f} s); {args.rounds} rounds per run, "
        f"{args.repeat} run(s) per mode"
    )
    rows = []
    for name in args.strategies:
        got = {False: [], True: []}
        for _ in range(args.repeat):
            for secure in (False, True):
                got[secure].append(run(federation, name, secure, args, model_config, training))
        plain, secure = got[False], got[True]
        p = statistics.median(r["round_s"] for r in plain)
        s = statistics.median(r["round_s"] for r in secure)
        proto = statistics.median(r["protocol_s"] for r in secure)
        pc = statistics.median(r["cpu_s"] for r in plain)
        sc = statistics.median(r["cpu_s"] for r in secure)
        rows.append((name, p, s, proto, pc, sc, plain[0], secure[0]))
        print(f"{name}: clusters {secure[0]['clusters']}")
    print()
    print(
        "| strategy | plain round s | SecAgg round s | × plain | of which protocol s "
        "| CPU s plain / SecAgg | × plain (CPU) "
        "| plain down/up MB per client | SecAgg down/up MB per client | × plain bytes |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, p, s, proto, pc, sc, pl, se in rows:
        plain_b, secure_b = pl["down"] + pl["up"], se["down"] + se["up"]
        print(
            f"| {name} | {p:.2f} | {s:.2f} | {s / p:.2f} | {proto:.2f} "
            f"| {pc:.2f} / {sc:.2f} | {sc / pc:.2f} "
            f"| {pl['down'] / 1e6:.2f} / {pl['up'] / 1e6:.2f} "
            f"| {se['down'] / 1e6:.2f} / {se['up'] / 1e6:.2f} | {secure_b / plain_b:.2f} |"
        )


if __name__ == "__main__":
    main()
