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

Usage: python benchmarks/bench_flower.py [--clients 10] [--rounds 4] [--strategy fedavg]
       [--samples 300] [--engines inprocess flower-sim flower-deploy]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.data import load_federation  # noqa: E402
from rvfedprs.federation.flower.launch import run_flower  # noqa: E402
from rvfedprs.federation.inprocess import run_inprocess  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402

SEED = 3


def _checkpoint_times(out: Path, rounds: int) -> np.ndarray:
    return np.array(
        [(out / "checkpoints" / f"round_{r:03d}.pt").stat().st_mtime for r in range(1, rounds + 1)]
    )


def run_engine(engine, federation, config, rounds, out):
    name = config["train"]["strategy"]
    strategy = strategy_from_config(name, config)
    t0 = time.time()
    if engine == "inprocess":
        t = config["train"]
        result = run_inprocess(
            federation,
            strategy,
            rounds=rounds,
            model_config=config["model"],
            training=LocalTrainingConfig(
                epochs=t["local_epochs"],
                lr=t["lr"],
                momentum=t["momentum"],
                batch_size=t["batch_size"],
                pos_weight=t["pos_weight"],
                weight_decay=t["weight_decay"],
            ),
            random_seed=SEED,
            out=out,
        )
    else:
        result = run_flower(
            engine,
            federation=federation,
            strategy=strategy,
            config=config,
            rounds=rounds,
            random_seed=SEED,
            out=out,
            timeout=3600,
        )
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
    parser.add_argument(
        "--engines", nargs="+", default=["inprocess", "flower-sim", "flower-deploy"]
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = write_federation(
            root,
            n_clients=args.clients,
            n_clusters=3,
            samples_per_client=args.samples,
            private_per_cluster=20,
            n_shared=18,
            causal_private=4,
            causal_shared=3,
        )
        federation = load_federation(paths["data"])
        config = load_config(
            None,
            overrides={
                "train": {
                    "strategy": args.strategy,
                    "rounds": args.rounds,
                    "seed": SEED,
                    "data": str(paths["data"]),
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
    print(
        f"\n{args.clients} clients × {args.samples} samples, {args.strategy}, {args.rounds} rounds"
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
