"""Is an honest site ever flagged by SecAgg's norm check? (issue 42 acceptance)

Under secure aggregation every site scales its round update Δw_k to L2 norm ≤ B
(``secagg.update_norm_bound``) before weighting, quantising and masking it; the server refuses
a sum whose norm exceeds B·Σω_k (``secagg_implausible``) and group-tests for the member that did
not clip. An honest site must never trip that check, and should rarely need to scale down
(``secagg_norm_clipped``), since a scaled-down update is a changed model.

One cohort of the scenario map (``simulations/scenario_map/run.py``: its ``load_scenarios``,
``cohort_of`` and ``build_cohort``, i.e. ``rvfedprs simulate --scenario S`` and the Snakemake
prepare; the ``sign_conflict`` scenario, inference cohort 0, under the map's master seed) is
built in ``--work`` (kept: a second call reuses it). On its prepared federation every strategy
trains ``--rounds`` rounds with ``secagg.enabled: true`` for train.seed 1..``--seeds``, from the
floor warm start as ``rvfedprs train`` does (the genomic run plan, :func:`rvfedprs.plan.run`,
in-process), with the map's base configuration of each method (``_base_config``: the GLMs'
top-k rare features). Per run and round the record keeps every ``secagg_implausible``,
``secagg_norm_clipped``, ``secagg_clipped`` and ``failed`` entry of the history.

The server never sees an update, so the norms come from the sites: the in-process transport
here (:class:`Watching`) reads, at each secure sum's key (or share) step, the update its site
holds and computes ||Δw_k|| over the sum's tensors — the vector the site clips — and keeps each
mask reply's ``norm_clipped``/``clipped`` flags. That covers the floor's secure rounds too
(whose history the run does not return); they are reported apart (``floor``). Nothing in the
product code is changed: the transport only reads.

Usage (from the repository root; ~1 min to build the cohort, then the runs)::

    OMP_NUM_THREADS=1 python benchmarks/bench_secagg_honest.py [--work /tmp/secagg_honest]
        [--scenario sign_conflict] [--seeds 10] [--rounds 20]
        [--strategies fedavg fedce fedprox fedce_glm] [--out benchmarks/results/secagg_honest.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rvfedprs.config import deep_merge, validate_config
from rvfedprs.federation.inprocess import InProcessTransport
from rvfedprs.federation.secagg.protocol import STEP_KEYS, STEP_MASK, STEP_SHARE
from rvfedprs.federation.secagg.site import held
from rvfedprs.federation.task import WARM_START_RUN
from rvfedprs.genomic.data import load_federation
from rvfedprs.genomic.engine import plan as genomic_plan
from rvfedprs.plan import run
from rvfedprs.tasks import get_task

REPO = Path(__file__).resolve().parents[1]
#: The history entries that name a site (or a sum) the norm check or the protocol acted on.
FLAGS = ("secagg_implausible", "secagg_norm_clipped", "secagg_clipped", "failed")


def scenario_map():
    """``simulations/scenario_map/run.py`` as a module (its cohort functions are reused)."""
    path = REPO / "simulations" / "scenario_map" / "run.py"
    spec = importlib.util.spec_from_file_location("scenario_map_run", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class Watching(InProcessTransport):
    """The in-process engine, reading the norm of every update a secure sum is asked to take.

    ``norms[label][group][client]``: ||Δw_k|| over the group's tensors (the largest, when a
    round sums a group again for group testing); ``flags[label][group][client]``: the mask
    reply's ``norm_clipped`` and ``clipped`` (entries clipped to ±c after weighting).
    ``label`` is the sum's ``run R round N`` (group tests carry their own suffix: folded in).
    """

    def __init__(self, task, sites) -> None:
        super().__init__(task, sites)
        self.norms: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        self.flags: dict[str, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))

    def subset(self, client_ids):  # noqa: D102 (one transport: every norm lands here)
        return self

    def query(self, requests, settings):  # noqa: D102
        if requests:
            step = next(iter(requests.values())).step
            if step in (STEP_KEYS, STEP_SHARE):
                for client, request in requests.items():
                    for sid, session in request.payload.get("sessions", {}).items():
                        self._norm(client, sid, session.get("open", session))
        replies, failures = super().query(requests, settings)
        if requests and next(iter(requests.values())).step == STEP_MASK:
            for client, reply in replies.items():
                for sid, answer in (reply.get("sessions") or {}).items():
                    label, group = _where(sid)
                    self.flags[label][group][client] = {
                        "norm_clipped": int(answer.get("norm_clipped", 0)),
                        "clipped": int(answer.get("clipped", 0)),
                    }
        return replies, failures

    def _norm(self, client: str, sid: str, definition: dict) -> None:
        if "tensors" not in definition or not definition.get("weighted", True):
            return
        vector = held(self.step_state.get(client, {}), str(definition["held"]))
        if vector is None:
            return
        flat = np.concatenate([np.ravel(vector[t]).astype(np.float64)
                               for t in definition["tensors"]])  # fmt: skip
        label, group = _where(sid)
        found = self.norms[label][group]
        found[client] = max(found.get(client, 0.0), float(np.linalg.norm(flat)))


def _where(sid: str) -> tuple[str, str]:
    """``(run R round N, group)`` of a session id ``label/group/token``."""
    label, group, _ = sid.rsplit("/", 2)
    return label.split(" group test")[0].split(" again")[0], group


def _round_of(label: str) -> tuple[bool, int]:
    """(is the floor's, round number) of ``run R round N``."""
    words = label.split()
    return int(words[1]) == WARM_START_RUN, int(words[3])


def one_run(federation, data: Path, cohort, smap, name: str, seed: int, rounds: int) -> dict:
    """Strategy ``name`` with SecAgg on, train.seed ``seed``: its flags and honest norms."""
    config = smap._base_config(name, cohort)
    config = validate_config(
        deep_merge(
            config,
            {
                "train": {
                    "data": str(data),
                    "strategy": name,
                    "seed": seed,
                    "rounds": rounds,
                    "engine": "inprocess",
                    "progress": False,
                },
                "secagg": {"enabled": True},
            },
        )  # fmt: skip
    )
    plan = genomic_plan(config, data=federation)
    task = get_task(plan.task)
    transport = Watching(task, task.plan_sites(plan))
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    error = None
    history: list[dict] = []
    try:
        history = run(plan, transport=transport).history
    except Exception as exc:  # a refused run is a finding, not a crash of the benchmark
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    bound = float(config["secagg"]["update_norm_bound"])
    per_round, floor = [], []
    for label in sorted(transport.norms, key=_round_of):
        is_floor, number = _round_of(label)
        groups = transport.norms[label]
        norm_clipped = sorted(
            c for g in transport.flags[label].values() for c, f in g.items() if f["norm_clipped"]
        )
        row = {
            "round": number,
            "max_norm": round(max(max(g.values()) for g in groups.values()), 6),
            "max_norm_by_group": {g: round(max(v.values()), 6) for g, v in sorted(groups.items())},
            "argmax": max(((n, c, g) for g, v in groups.items() for c, n in v.items()))[1:],
            "over_bound": sorted({c for v in groups.values() for c, n in v.items() if n > bound}),
            "site_norm_clipped": norm_clipped,
        }
        (floor if is_floor else per_round).append(row)
    flagged = [
        {"round": e.get("round"), **{k: e[k] for k in FLAGS if k in e}}
        for e in history
        if any(k in e for k in FLAGS)
    ]
    return {
        "strategy": name,
        "seed": seed,
        "rounds": len(history),
        "floor_rounds": len(floor),
        "error": error,
        "flagged_rounds": flagged,
        "max_norm": max((r["max_norm"] for r in per_round), default=None),
        "max_norm_floor": max((r["max_norm"] for r in floor), default=None),
        "per_round": per_round,
        "floor": floor,
        "seconds": round(seconds, 1),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def summarise(runs: list[dict], bound: float) -> list[dict]:
    """One row per strategy: runs, rounds, flags, largest honest norm vs B."""
    rows = []
    for name in dict.fromkeys(r["strategy"] for r in runs):
        mine = [r for r in runs if r["strategy"] == name]
        flagged = [f for r in mine for f in r["flagged_rounds"]]
        norms = [x["max_norm"] for r in mine for x in r["per_round"]]
        floor = [x["max_norm"] for r in mine for x in r["floor"]]
        rows.append({
            "strategy": name,
            "runs": len(mine),
            "errors": sum(r["error"] is not None for r in mine),
            "rounds": sum(r["rounds"] for r in mine),
            "floor_rounds": sum(r["floor_rounds"] for r in mine),
            "flagged_rounds": len(flagged),
            "implausible": sum("secagg_implausible" in f for f in flagged),
            "norm_clipped": sum("secagg_norm_clipped" in f for f in flagged),
            "entry_clipped": sum("secagg_clipped" in f for f in flagged),
            "failed": sum("failed" in f for f in flagged),
            "site_norm_clipped": sum(len(x["site_norm_clipped"]) for r in mine
                                     for x in r["per_round"] + r["floor"]),
            "max_norm": max(norms, default=None),
            "median_round_max_norm": float(np.median(norms)) if norms else None,
            "max_norm_floor": max(floor, default=None),
            "margin": None if not norms else round(bound / max(norms), 2),
            "seconds": round(sum(r["seconds"] for r in mine), 1),
        })  # fmt: skip
    return rows


def to_markdown(rows: list[dict], meta: dict) -> str:
    """The table of BENCHMARKS.md."""
    lines = [
        f"{meta['cohort']}; B = {meta['bound']:g}; seeds 1..{meta['seeds']}, "
        f"{meta['rounds_asked']} rounds each; {meta['wall_s'] / 60:.0f} min wall, load "
        f"{meta['load_1min'][0]:.1f} → {meta['load_1min'][1]:.1f}.",
        "",
        "| strategy | runs | rounds | flagged rounds (implausible / norm-clipped / entries "
        "clipped / failed) | largest honest ‖Δw_k‖ (median of round maxima) | B / largest "
        "| floor's largest | wall (s) |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        err = f" ({r['errors']} refused)" if r["errors"] else ""
        lines.append(
            f"| {r['strategy']}{err} | {r['runs']} | {r['rounds']} | {r['flagged_rounds']} "
            f"({r['implausible']} / {r['norm_clipped']} / {r['entry_clipped']} / {r['failed']}) "
            f"| {_num(r['max_norm'])} ({_num(r['median_round_max_norm'])}) "
            f"| {r['margin'] if r['margin'] is not None else '—'} "
            f"| {_num(r['max_norm_floor'])} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _git() -> dict[str, Any]:
    def out(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout

    return {"commit": out("rev-parse", "HEAD").strip(),
            "dirty": [line[3:] for line in out("status", "--porcelain").splitlines()]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/secagg_honest"),
                        help="where the cohort is built (kept and reused)")  # fmt: skip
    parser.add_argument("--scenario", default="sign_conflict", help="a scenario of the map")
    parser.add_argument("--map-seed", type=int, default=20261123, help="the map's master seed")
    parser.add_argument("--seeds", type=int, default=10, help="train.seed 1..N per strategy")
    parser.add_argument("--rounds", type=int, default=20, help="training rounds of every run")
    parser.add_argument("--strategies", nargs="+",
                        default=["fedavg", "fedce", "fedprox", "fedce_glm"])  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/secagg_honest.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    smap = scenario_map()
    _, spec = smap.load_scenarios(args.scenario)
    where = argparse.Namespace(out=args.work, prepared=None, seed=args.map_seed,
                               simulator_path=None)  # fmt: skip
    cohort = smap.cohort_of(where, spec, args.scenario, "c", 0)
    t0 = time.perf_counter()
    smap.build_cohort(cohort, spec, None)
    build_s = time.perf_counter() - t0
    federation = load_federation(cohort.data)
    n_train = sum(d.n_samples for d in federation.train.values())
    description = (
        f"scenario map `{args.scenario}` cohort c00 (seed {cohort.seed}): "
        f"{len(federation.client_ids)} sites, {n_train} training samples, "
        f"{federation.n_rare} rare variants"
    )
    print(description, f"(built/reused in {build_s:.0f} s)", flush=True)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    runs = []
    for seed in range(1, args.seeds + 1):  # every strategy per seed: a cut-short run is even
        for name in args.strategies:
            result = one_run(federation, cohort.data, cohort, smap, name, seed, args.rounds)
            print(
                f"{name} seed {seed}: {result['rounds']} rounds (+{result['floor_rounds']} "
                f"floor), flagged {len(result['flagged_rounds'])}, max ||Δw|| "
                f"{result['max_norm']}, floor {result['max_norm_floor']}, "
                f"{result['seconds']} s{'; ' + result['error'] if result['error'] else ''}",
                flush=True,
            )
            runs.append(result)
            _save(args, description, runs, start, load_before, cohort, build_s, final=False)
    _save(args, description, runs, start, load_before, cohort, build_s, final=True)


def _save(args, description, runs, start, load_before, cohort, build_s, *, final) -> None:
    bound = float(validate_config({})["secagg"]["update_norm_bound"])  # every run's B
    meta = {
        "cohort": description,
        "cohort_folder": str(cohort.folder),
        "build_s": round(build_s, 1),
        "bound": bound,
        "seeds": args.seeds,
        "rounds_asked": args.rounds,
        "strategies": args.strategies,
        "complete": final,
        "wall_s": round(time.perf_counter() - start, 1),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "git": _git(),
        "command": " ".join(sys.argv),
    }
    rows = summarise(runs, bound)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**meta, "rows": rows, "runs": runs}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(rows, meta) + "\n")
    if final:
        print(to_markdown(rows, meta))


if __name__ == "__main__":
    main()
