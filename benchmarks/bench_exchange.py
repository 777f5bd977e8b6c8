"""Where a Flower exchange's time goes, and what a round costs on a loopback deployment.

Flower 1.41 runs every message in its own ``flwr-clientapp`` process
(``flwr/supernode/runtime/run_clientapp.py``). ``flower.clientapp: cold`` is Flower's way (a
fresh interpreter per message); ``warm`` (the default) forks each message's process from one
that imported Flower, the app and the tasks once
(:mod:`rvfedprs.federation.flower.warm_clientapp`). Three measurements:

1. **Stages of a cold ClientApp** — a fresh Python process per message, timed as the ClientApp
   path runs it: the interpreter, Flower's imports, the app module
   (:mod:`rvfedprs.federation.flower.client_app`), the task module (``get_task``), opening the
   site (reading its folder), then the work of a ``setup`` query (and whether torch was
   imported by then) and of a training round. Once alone, then ``--clients`` processes at once
   (what a round on one host starts).
2. **A warm ClientApp** — the executor's imports once, then per message a forked child: a
   ``setup`` query (open the site, answer) and a training round, each timed from the fork.
3. **A plain round end to end** — FedAvg on ``--clients`` sites, in-process and on a loopback
   ``flower-deploy`` with warm and with cold ClientApps (and ``flower-sim`` with ``--sim``),
   ``--repeat`` times, the engines alternating; the seconds of every exchange read from the
   run's traffic table (``metrics["traffic"]``, the history's per-round ``traffic``), the CPU
   seconds of the deployment's ServerApp and SuperLink processes (sampled every 0.2 s: what the
   server's asks for replies cost), and the medians per engine.

Usage: python benchmarks/bench_exchange.py [--clients 5] [--samples 250] [--rounds 2]
       [--repeat 3] [--data DIR] [--stages-only] [--sim] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
def clock():
    return [time.time(), time.process_time()]  # wall, and this process's CPU seconds
marks = {"interpreter": clock()}
import flwr.app, flwr.clientapp  # what flwr-clientapp itself imports
marks["flower imports"] = clock()
import rvfedprs.federation.flower.client_app  # the app Flower loads
marks["app module"] = clock()
if sys.argv[4] == "eager-opacus":  # as rvfedprs.training.dp imported it before the cut
    import opacus.accountants
from rvfedprs.federation.task import Request
from rvfedprs.strategies.base import FitInstruction
from rvfedprs.tasks import get_task
task = get_task("genomic")
marks["task module"] = clock()
data, client, settings = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
site = task.open_site({"data-dir": data, "client-id": client}, settings)
marks["open site"] = clock()
task.handle(Request("setup", {"task": "genomic"}), site, {})
marks["setup work"] = clock()
torch_at_setup = "torch" in sys.modules
instruction = FitInstruction(task.initial_parameters(settings, 1), {})
task.fit(instruction, site, settings, {}, random_seed=1)
marks["fit work"] = clock()
print(json.dumps({"marks": marks, "torch at setup": torch_at_setup}))
"""

#: A warm ClientApp executor's path: its imports once, then one forked child per message.
WARM = r"""
import json, os, sys, time
def clock():
    return [time.time(), time.process_time()]
start = clock()
from rvfedprs.federation.flower.warm_clientapp import PRELOAD, _preload
_preload(PRELOAD)
from rvfedprs.federation.task import Request
from rvfedprs.strategies.base import FitInstruction
from rvfedprs.tasks import get_task
task = get_task("genomic")
imported = clock()
data, client, settings = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
def message(kind):  # one forked child: open the site, answer; seconds from the fork
    read, write = os.pipe()
    forked = clock()
    if os.fork() == 0:
        os.close(read)
        child = time.process_time()
        site = task.open_site({"data-dir": data, "client-id": client}, settings)
        opened = clock()
        if kind == "setup":
            task.handle(Request("setup", {"task": "genomic"}), site, {})
        else:
            instruction = FitInstruction(task.initial_parameters(settings, 1), {})
            task.fit(instruction, site, settings, {}, random_seed=1)
        done = clock()
        os.write(write, json.dumps({
            "open site": round(opened[0] - forked[0], 3),
            "open site cpu": round(opened[1] - child, 3),
            "work": round(done[0] - opened[0], 3), "work cpu": round(done[1] - opened[1], 3),
            "total": round(done[0] - forked[0], 3), "total cpu": round(done[1] - child, 3),
        }).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        row = json.loads(pipe.read())
    os.wait()
    return row
rows = {"imports once": round(imported[0] - start[0], 3),
        "imports once cpu": round(imported[1] - start[1], 3)}
for n in range(2):
    rows[f"setup {n + 1}"] = message("setup")
    rows[f"fit {n + 1}"] = message("fit")
print(json.dumps(rows))
"""


def cold_stages(
    data: Path, clients: list[str], settings: dict, variant: str = "as-is"
) -> list[dict[str, float]]:
    """Seconds per stage of one cold ClientApp process per client, all started at once.

    Each stage's wall seconds, and its CPU seconds (``<stage> cpu``: the process's own, which
    other load on the host changes far less).

    ``variant="eager-opacus"`` imports opacus with the task module, as before the cut.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.time()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", STAGES, json.dumps(str(data)), c, json.dumps(settings), variant],
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
        printed = json.loads(out.strip().splitlines()[-1])
        marks = printed["marks"]
        previous, cpu, row = started, 0.0, {"torch at setup": printed["torch at setup"]}
        for name, (stamp, used) in marks.items():
            row[name] = round(stamp - previous, 3)
            row[f"{name} cpu"] = round(used - cpu, 3)
            previous, cpu = stamp, used
        row["total"], row["total cpu"] = round(previous - started, 3), round(cpu, 3)
        rows.append(row)
    return rows


def warm_stages(data: Path, client: str, settings: dict) -> dict:
    """Seconds of a warm executor's imports, then of two queries and two rounds, each forked."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", WARM, json.dumps(str(data)), client, json.dumps(settings)],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def compare(data: Path, clients: list[str], settings: dict, repeats: int) -> dict:
    """Mean seconds per stage, eager opacus against as-is, alone and all at once, alternating."""
    rows: dict = {}
    for _ in range(repeats):
        for variant in ("eager-opacus", "as-is"):
            for mode, who in (("alone", clients[:1]), ("together", clients)):
                rows.setdefault(f"{variant} {mode}", []).extend(
                    cold_stages(data, who, settings, variant)
                )
    return {
        key: {stage: round(sum(r[stage] for r in found) / len(found), 2) for stage in found[0]}
        for key, found in rows.items()
    }


class DeploymentCPU:
    """CPU seconds (user + system) of this process's ServerApp and SuperLink descendants, sampled.

    ``seconds[name]`` sums the last sample of every process whose command line holds
    ``flwr-serverapp`` (``serverapp``) or ``flower-superlink`` (``superlink``).
    """

    NAMES = {"serverapp": "flwr-serverapp", "superlink": "flower-superlink"}

    def __init__(self, every: float = 0.2) -> None:
        import threading

        self.every = every
        self.seen: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.every):
            for child in me.children(recursive=True):
                try:
                    line = " ".join(child.cmdline())
                    for name, marker in self.NAMES.items():
                        if marker in line:
                            times = child.cpu_times()
                            self.seen[name, child.pid] = times.user + times.system
                except psutil.Error:
                    continue

    def __enter__(self) -> DeploymentCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def seconds(self, name: str) -> float | None:
        found = [cpu for (who, _), cpu in self.seen.items() if who == name]
        return round(sum(found), 2) if found else None


def run_round(engine: str, federation, config, rounds: int, out: Path) -> dict:
    """One FedAvg run (the configuration's run plan); its exchanges' seconds from its traffic.

    ``engine`` ``flower-deploy:warm`` / ``flower-deploy:cold`` sets ``flower.clientapp``; a
    suffix ``@S`` sets ``flower.node_poll_seconds`` to S (``@flower``: null, Flower's own 3 s),
    then ``~R`` ``flower.reply_poll_seconds`` to R (3: Flower's own wait between asks); a last
    ``+secagg`` turns secure aggregation on. A round's seconds are those of all its exchanges
    (the training one and, under SecAgg, its four protocol steps).
    """
    from dataclasses import replace

    from rvfedprs.genomic.engine import plan as genomic_plan
    from rvfedprs.genomic.task import local_training_config
    from rvfedprs.plan import run

    label = engine
    engine, secure, _ = engine.partition("+secagg")
    if secure:
        config = {**config, "secagg": {**config["secagg"], "enabled": True}}
    engine, _, reply_poll = engine.partition("~")
    if reply_poll:
        config = {**config, "flower": {**config["flower"], "reply_poll_seconds": float(reply_poll)}}
    engine, _, poll = engine.partition("@")
    if poll:
        seconds = None if poll == "flower" else float(poll)
        config = {**config, "flower": {**config["flower"], "node_poll_seconds": seconds}}
    engine, _, clientapp = engine.partition(":")
    if clientapp:
        config = {**config, "flower": {**config["flower"], "clientapp": clientapp}}
    plan = replace(genomic_plan(config, out, data=federation), engine=engine)
    if engine == "inprocess":
        train = federation.train.values()
        plan = replace(
            plan,
            training=local_training_config(
                config["train"],
                n_samples=sum(d.n_samples for d in train),
                n_cases=sum(float(d.y.sum()) for d in train),
            ),
        )
    else:
        plan = replace(plan, timeout=3600)
    start = time.time()
    with DeploymentCPU() as cpu:
        result = run(plan)
    traffic = result.metrics.get("traffic", {})
    return {
        "engine": label,
        "load_average": round(os.getloadavg()[0], 1),
        "wall_s": round(time.time() - start, 2),
        "serverapp_cpu_s": cpu.seconds("serverapp"),
        "superlink_cpu_s": cpu.seconds("superlink"),
        "setup_s": traffic.get("setup", {}).get("seconds"),
        "round_s": [e["traffic"]["total"]["seconds"] for e in result.history],
        "round_bytes": [
            e["traffic"]["total"]["bytes_sent"] + e["traffic"]["total"]["bytes_received"]
            for e in result.history
        ],
        "traffic": traffic,
    }


def medians(runs: list[dict]) -> dict:
    """Per engine: the median setup exchange, first round and later rounds (seconds)."""
    out: dict = {}
    for engine in dict.fromkeys(r["engine"] for r in runs):
        mine = [r for r in runs if r["engine"] == engine]
        setups = [r["setup_s"] for r in mine if r["setup_s"] is not None]
        later = [s for r in mine for s in r["round_s"][1:]]
        out[engine] = {
            "runs": len(mine),
            "setup_s": round(statistics.median(setups), 2) if setups else None,
            "round1_s": round(statistics.median(r["round_s"][0] for r in mine), 2),
            "later_rounds_s": round(statistics.median(later), 2) if later else None,
            "rounds_s": round(statistics.median(s for r in mine for s in r["round_s"]), 2),
            "serverapp_cpu_s": [r.get("serverapp_cpu_s") for r in mine],
            "superlink_cpu_s": [r.get("superlink_cpu_s") for r in mine],
            "wall_s": [r["wall_s"] for r in mine],
            "load_average": [r["load_average"] for r in mine],
        }
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--samples", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="runs per engine, alternating")
    parser.add_argument(
        "--engines", nargs="+",
        default=["inprocess", "flower-deploy:warm", "flower-deploy:cold"],
        help="flower-deploy:warm|cold sets flower.clientapp; a suffix @S sets "
        "flower.node_poll_seconds (@flower: Flower's own 3 s), then ~R "
        "flower.reply_poll_seconds (~3: Flower's own wait between asks for replies)",
    )  # fmt: skip
    parser.add_argument("--data", type=Path, help="an existing per-client folder (read only)")
    parser.add_argument("--stages-only", action="store_true", help="skip the end-to-end runs")
    parser.add_argument("--sim", action="store_true", help="also run flower-sim")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--compare", type=int, default=0, metavar="N",
        help="N alternating repeats of the cold stages with opacus imported eagerly (as before "
        "the cut) and as the code imports it now, under the same load",
    )  # fmt: skip
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
            "warm": warm_stages(data, clients[0], settings),
        }
        shown = ("cold_alone", "cold_together", "warm")
        print(json.dumps({k: report[k] for k in shown}, indent=1))
        if args.compare:
            report["compare"] = compare(data, clients, settings, args.compare)
            print(json.dumps(report["compare"], indent=1))
        if not args.stages_only:
            engines = list(args.engines) + (["flower-sim"] if args.sim else [])
            report["runs"] = []
            for repeat in range(args.repeat):
                for engine in engines:
                    out = (
                        root
                        / f"{engine.replace(':', '-').replace('@', '-').replace('~', '-')}-{repeat}"
                    )
                    row = run_round(engine, federation, config, args.rounds, out)
                    report["runs"].append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "traffic"}))
            report["medians"] = medians(report["runs"])
            print(json.dumps(report["medians"], indent=1))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
