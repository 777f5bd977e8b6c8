"""Per-round overhead of the Flower engines against the in-process engine.

A synthetic federation in the pipeline layout (default 10 clients × 300 samples, 3 clusters),
FedAvg or FedCE, R rounds (default 4), the same seed on every engine. For each engine:

- ``startup``: from the call until the first round's checkpoint minus that round's work — the
  processes (SuperLink, SuperNodes / Ray), ``flwr run`` and the setup query;
- ``per round``: the mean time between consecutive round checkpoints (rounds 2..R), i.e. the
  steady-state cost of a round: local training + messaging (+ a ClientApp process per message in
  a deployment);
- ``overhead``: per round minus the in-process per round.

It also checks that the final weights agree with the in-process engine.

With ``--data DIR`` it runs on an existing per-client folder instead (e.g. the demo cohort's
``results/``, read only; ``--clients``/``--samples`` are then ignored), and ``--config FILE``
takes the model and training settings from an rvfedprs configuration (strategy, rounds, seed
and data still come from the command line).

Usage: python benchmarks/bench_flower.py [--clients 10] [--rounds 4] [--strategy fedavg]
       [--samples 300] [--data results] [--engines inprocess flower-sim flower-deploy]
       [--work DIR] [--config FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import plan as genomic_plan  # noqa: E402
from rvfedprs.plan import run  # noqa: E402

SEED = 3


def _checkpoint_times(out: Path, rounds: int) -> np.ndarray:
    return np.array(
        [(out / "checkpoints" / f"round_{r:03d}.pt").stat().st_mtime for r in range(1, rounds + 1)]
    )


def run_engine(engine, federation, config, rounds, out):
    """The configuration's run plan on ``engine`` (every round's checkpoint kept in-process)."""
    plan = genomic_plan(config, out, data=federation)
    flower = engine != "inprocess"
    plan = dataclasses.replace(
        plan, engine=engine, rounds=rounds, seed=SEED, timeout=3600 if flower else None,
        keep_checkpoints=plan.keep_checkpoints if flower else None,
    )  # fmt: skip
    t0 = time.time()
    result = run(plan)
    total = time.time() - t0
    stamps = _checkpoint_times(out, rounds)
    per_round = float(np.diff(stamps).mean()) if rounds > 1 else float("nan")
    startup = float(stamps[0] - t0 - (per_round if rounds > 1 else 0.0))
    return result, {"total": total, "startup": startup, "per_round": per_round}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--strategy", default="fedavg")
    parser.add_argument("--data", type=Path, help="existing per-client folder (read only)")
    parser.add_argument(
        "--engines", nargs="+", default=["inprocess", "flower-sim", "flower-deploy"]
    )
    parser.add_argument("--work", type=Path, help="keep every engine's output (logs) here")
    parser.add_argument(
        "--config", type=Path, help="rvfedprs config (model, train settings; default: defaults)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if args.work is None else args.work.resolve()
        root.mkdir(parents=True, exist_ok=True)
        if args.data is not None:
            data = args.data.resolve()
        else:
            data = write_federation(
                root,
                n_clients=args.clients,
                n_clusters=3,
                samples_per_client=args.samples,
                private_per_cluster=20,
                n_shared=18,
                causal_private=4,
                causal_shared=3,
            )["data"]
        federation = load_federation(data)
        config = load_config(
            args.config,
            overrides={
                "train": {
                    "strategy": args.strategy,
                    "rounds": args.rounds,
                    "seed": SEED,
                    "data": str(data),
                },
                "fedce": {"n_clusters": 3},
            },
        )
        rows, reference = [], None
        for engine in args.engines:
            result, timing = run_engine(engine, federation, config, args.rounds, root / engine)
            weights = result.strategy.parameters_for(federation.client_ids[0])
            if reference is None:
                reference = weights
            diff = max(float(np.abs(weights[k] - reference[k]).max()) for k in reference)
            rows.append((engine, timing, diff))
            print(f"{engine}: done in {timing['total']:.1f} s", file=sys.stderr)
    base = next((t["per_round"] for e, t, _ in rows if e == "inprocess"), float("nan"))
    n_train = sum(d.n_samples for d in federation.train.values())
    print(
        f"\n{len(federation.client_ids)} clients, {n_train} training samples, "
        f"{federation.n_rare} rare variants ({data}), {args.strategy}, {args.rounds} rounds"
    )
    print(
        f"{'engine':<15}{'total s':>10}{'startup s':>11}{'per round s':>13}"
        f"{'overhead s':>12}{'max |Δw|':>11}"
    )
    for engine, t, diff in rows:
        print(
            f"{engine:<15}{t['total']:>10.1f}{t['startup']:>11.1f}{t['per_round']:>13.2f}"
            f"{t['per_round'] - base:>12.2f}{diff:>11.1e}"
        )


if __name__ == "__main__":
    main()
