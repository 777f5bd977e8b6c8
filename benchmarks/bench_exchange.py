"""Where a Flower exchange's time goes, and what a round costs on a loopback deployment.

A deployment's SuperNode starts a fresh ``flwr-clientapp`` process for every message (Flower
1.41: one message per process, ``flwr/supernode/runtime/run_clientapp.py``). Two measurements:

1. **Stages of a cold ClientApp** — a fresh Python process per message, timed as the ClientApp
   path runs it: the interpreter, Flower's imports, the app module
   (:mod:`rvfedprs.federation.flower.client_app`), the task module (``get_task``), opening the
   site (reading its folder), then the work of a ``setup`` query and of a training round. Once
   alone, then ``--clients`` processes at once (what a round on one host starts).
2. **A plain round end to end** — FedAvg on ``--clients`` sites, in-process and on a loopback
   ``flower-deploy`` (and ``flower-sim`` with ``--sim``), the seconds of every exchange read from
   the run's traffic table (``metrics["traffic"]``, the history's per-round ``traffic``).

Usage: python benchmarks/bench_exchange.py [--clients 5] [--samples 250] [--rounds 2]
       [--data DIR] [--stages-only] [--sim] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
SEED = 3

#: One cold ClientApp's path, as a child process: prints the clock after every stage.
STAGES = r"""
import json, sys, time
marks = {"interpreter": time.time()}
import flwr.app, flwr.clientapp  # what flwr-clientapp itself imports
marks["flower imports"] = time.time()
import rvfedprs.federation.flower.client_app  # the app Flower loads
marks["app module"] = time.time()
from rvfedprs.federation.task import Request
from rvfedprs.strategies.base import FitInstruction
from rvfedprs.tasks import get_task
task = get_task("genomic")
marks["task module"] = time.time()
data, client, settings = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
site = task.open_site({"data-dir": data, "client-id": client}, settings)
marks["open site"] = time.time()
task.handle(Request("setup", {"task": "genomic"}), site, {})
marks["setup work"] = time.time()
instruction = FitInstruction(task.initial_parameters(settings, 1), {})
task.fit(instruction, site, settings, {}, random_seed=1)
marks["fit work"] = time.time()
print(json.dumps(marks))
"""


def cold_stages(data: Path, clients: list[str], settings: dict) -> list[dict[str, float]]:
    """Seconds per stage of one cold ClientApp process per client, all started at once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.time()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", STAGES, json.dumps(str(data)), c, json.dumps(settings)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for c in clients
    ]
    rows = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode:
            raise RuntimeError(f"stage child failed ({child.returncode})")
        marks = json.loads(out.strip().splitlines()[-1])
        times, previous, row = list(marks.items()), started, {}
        for name, stamp in times:
            row[name] = round(stamp - previous, 3)
            previous = stamp
        row["total"] = round(previous - started, 3)
        rows.append(row)
    return rows


def run_round(engine: str, federation, config, rounds: int, out: Path) -> dict:
    """One FedAvg run; the seconds of its exchanges from its traffic table."""
    from rvfedprs.genomic.engine import run_flower, run_inprocess
    from rvfedprs.genomic.task import local_training_config
    from rvfedprs.strategies import strategy_from_config

    strategy = strategy_from_config("fedavg", config)
    start = time.time()
    if engine == "inprocess":
        train = federation.train.values()
        result = run_inprocess(
            federation,
            strategy,
            rounds=rounds,
            model_config=config["model"],
            training=local_training_config(
                config["train"],
                n_samples=sum(d.n_samples for d in train),
                n_cases=sum(float(d.y.sum()) for d in train),
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
    traffic = result.metrics.get("traffic", {})
    return {
        "engine": engine,
        "wall_s": round(time.time() - start, 2),
        "setup_s": traffic.get("setup", {}).get("seconds"),
        "round_s": [e["traffic"]["fit"]["seconds"] for e in result.history],
        "round_bytes": [
            e["traffic"]["fit"]["bytes_sent"] + e["traffic"]["fit"]["bytes_received"]
            for e in result.history
        ],
        "traffic": traffic,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--samples", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data", type=Path, help="an existing per-client folder (read only)")
    parser.add_argument("--stages-only", action="store_true", help="skip the end-to-end runs")
    parser.add_argument("--sim", action="store_true", help="also run flower-sim")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    from _federation_fixtures import write_federation

    from rvfedprs.config import load_config
    from rvfedprs.genomic.data import load_federation
    from rvfedprs.genomic.engine import genomic_settings
    from rvfedprs.genomic.task import local_training_config

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.data is not None:
            data = args.data.resolve()
        else:
            data = write_federation(
                root, n_clients=args.clients, n_clusters=2, samples_per_client=args.samples,
                private_per_cluster=20, n_shared=18,
            )["data"]  # fmt: skip
        federation = load_federation(data)
        config = load_config(
            None,
            overrides={
                "train": {"strategy": "fedavg", "rounds": args.rounds, "seed": SEED,
                          "data": str(data)},
                "model": {"start_from_floor": False},
            },
        )  # fmt: skip
        train = federation.train.values()
        training = local_training_config(
            config["train"],
            n_samples=sum(d.n_samples for d in train),
            n_cases=sum(float(d.y.sum()) for d in train),
        )
        settings = genomic_settings(federation, model_config=config["model"], training=training)
        settings = json.loads(json.dumps(settings, default=float))
        clients = federation.client_ids
        report: dict = {
            "clients": len(clients),
            "training_samples": sum(d.n_samples for d in train),
            "n_rare": federation.n_rare,
            "load_average": os.getloadavg()[0],
            "cold_alone": cold_stages(data, clients[:1], settings)[0],
            "cold_together": cold_stages(data, clients, settings),
        }
        print(json.dumps({k: report[k] for k in ("cold_alone", "cold_together")}, indent=1))
        if not args.stages_only:
            engines = ["inprocess", "flower-deploy"] + (["flower-sim"] if args.sim else [])
            report["runs"] = []
            for engine in engines:
                row = run_round(engine, federation, config, args.rounds, root / engine)
                report["runs"].append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "traffic"}))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
