"""The exact federated GLMs against FedAvg: rounds, bytes on the wire and wall time (issue 29).

On a prepared federation (the demo workflow's ``results/`` by default), every method runs on
the in-process engine (its run plan, :func:`rvfedprs.plan.run`), whose transport is measured
(:class:`~rvfedprs.federation.metering.MeteredTransport`): every message encoded as Flower would
put it on the wire:

- ``floor``: FedGLM on [PRS, covariates], the fit every network now starts from;
- ``fedglm (burden)``: FedGLM on [PRS, covariates, region burdens] (fixed windows);
- ``fedce_glm (burden)``: FedCE's clusters with per-cluster burden coefficients;
- ``fedavg``: the two-pathway network, ``--fedavg-rounds`` rounds of local SGD (default
  ``--rounds``; fewer at paper scale, where a round moves 2 × 29.5 MB per site: bytes per site
  and round stay comparable).

Each row starts from a random network (``model.start_from_floor: false``) so that it counts its
own rounds only; the floor's cost is its own row. Reported per method: rounds, wall time,
megabytes sent to and received from the sites (all rounds, all sites), per-round-per-site
bytes, the pooled test AUC (context, not a comparison: see comparison.md and the map) and the
1-minute load average before and after the run (the machine is shared: wall times under load
are upper bounds).

Usage: python benchmarks/bench_glm.py [--data results] [--window 100000] [--rounds 16]
       [--fedavg-rounds N] [--out benchmarks/results/glm_demo.json]

Paper scale (the cohort of simulations/rvfedprs_paper/results/paper_cohort/, regenerated)::

    python benchmarks/bench_glm.py --data WORKDIR/results --fedavg-rounds 10 \
        --out benchmarks/results/glm_paper.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_readers import save_results  # noqa: E402

from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.evaluation import evaluate_models  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import plan as genomic_plan  # noqa: E402
from rvfedprs.plan import run  # noqa: E402


def measure(federation, name: str, config: dict, rounds: int) -> dict:
    """One run of strategy ``name``: rounds, seconds, bytes, pooled test AUC."""
    config = validate_config(config)
    config["model"]["start_from_floor"] = False
    config["train"].update(strategy=name, seed=1, rounds=rounds, engine="inprocess")
    plan = genomic_plan(config, data=federation)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    result = run(plan)
    seconds = time.perf_counter() - start
    load_after = os.getloadavg()[0]
    traffic = result.metrics["traffic"]["total"]
    sent, received = float(traffic["bytes_sent"]), float(traffic["bytes_received"])
    n_rounds, n_sites = len(result.history), len(federation.client_ids)
    auc = evaluate_models(plan.strategy.parameters_for, {}, federation.test,
                          federation.variant_keys, plan.model)["auc"]  # fmt: skip
    return {
        "rounds": n_rounds,
        "seconds": round(seconds, 2),
        "mb_sent": round(sent / 1e6, 3),
        "mb_received": round(received / 1e6, 3),
        "kb_per_site_round": round((sent + received) / max(n_rounds * n_sites, 1) / 1e3, 1),
        "auc": round(float(auc), 4),
        "converged": bool(getattr(plan.strategy, "converged", True)),
        "load_1min": [round(load_before, 2), round(load_after, 2)],
    }


def to_markdown(rows: list[dict], cohort: str) -> str:
    """The table of BENCHMARKS.md."""
    lines = [
        f"Cohort: {cohort}.",
        "",
        "| method | rounds | wall (s) | MB to sites | MB from sites | kB per site and round "
        "| pooled test AUC | load (1 min, before → after) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['rounds']}{'' if r['converged'] else ' (not converged)'} "
            f"| {r['seconds']:.1f} | {r['mb_sent']:.2f} | {r['mb_received']:.2f} "
            f"| {r['kb_per_site_round']:.1f} | {r['auc']:.3f} | {_load(r)} |"
        )
    return "\n".join(lines)


def _load(row: dict) -> str:
    """``before → after`` of a row's 1-minute load average (rows older than the field: —)."""
    load = row.get("load_1min")
    return "—" if load is None else f"{load[0]:.1f} → {load[1]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="results", help="a prepared federation")
    parser.add_argument("--window", type=int, default=100_000, help="burden window (bp)")
    parser.add_argument("--rounds", type=int, default=16, help="FedAvg's rounds; GLMs' budget")
    parser.add_argument("--fedavg-rounds", type=int, help="FedAvg's rounds (default --rounds)")
    parser.add_argument("--clusters", type=int, default=4, help="fedce_glm's n_clusters")
    parser.add_argument("--out", default="benchmarks/results/glm_demo.json")
    args = parser.parse_args()
    fedavg_rounds = args.rounds if args.fedavg_rounds is None else args.fedavg_rounds
    if args.rounds < 1 or fedavg_rounds < 1:
        parser.error(f"--rounds {args.rounds} / --fedavg-rounds {fedavg_rounds}: need >= 1")
    torch.set_num_threads(1)
    federation = load_federation(args.data)
    base = {"train": {"data": args.data, "progress": False},
            "burden": {"window_bp": args.window}}  # fmt: skip
    runs = [
        ("floor (fedglm, floor)", "fedglm", {"fedglm": {"features": "floor", "l2": 0.0}}),
        ("fedglm (burden)", "fedglm", {"fedglm": {"features": "burden", "l2": 1.0}}),
        ("fedce_glm (burden)", "fedce_glm",
         {"fedglm": {"features": "burden", "l2": 1.0}, "fedce": {"n_clusters": args.clusters}}),
        (f"fedavg ({fedavg_rounds} rounds)", "fedavg", {}),
    ]  # fmt: skip
    rows = []
    for label, name, sections in runs:
        rounds = fedavg_rounds if name == "fedavg" else args.rounds
        row = {"method": label, **measure(federation, name, {**base, **sections}, rounds)}
        print(row, flush=True)
        rows.append(row)
    cohort = (
        f"{args.data}: {len(federation.client_ids)} sites, "
        f"{sum(d.n_samples for d in federation.train.values())} training samples, "
        f"{federation.n_rare} rare variants; burden windows of {args.window} bp"
    )
    save_results(args.out, cohort, rows, to_markdown(rows, cohort))


if __name__ == "__main__":
    main()
