"""The Riyadi et al. comparison on a MedMNIST file (Algorithm 1 of Riyadi et al.).

Pool train+val+test, optionally subsample (seeded, stratified), Dirichlet(α) partition over K
clients, per-client stratified split (or K-fold CV), then for every strategy run the rounds and
record at the evaluation rounds the mean over clients of each client's metrics on its own test
split, using the model the client would use (global model; its own for Local, its personal
model for Ditto, its cluster's for cluster FedAvg).

Every strategy of a fold is a run plan (:func:`rvfedprs.imaging.plan.plan`); the clients train
in this process (``engine="inprocess"``: :func:`rvfedprs.plan.run`, one plan after another) or
on Flower (``flower-sim``, ``flower-deploy``: the fold's plans in one Flower job,
:func:`rvfedprs.plan.run_plans`; same rows for the same seed); :func:`federation_from_section`
is the one place that builds a fold's clients, so that a Flower client process rebuilds exactly
its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation import ENGINES
from rvfedprs.imaging.engine import evaluate_clients, mean_metrics
from rvfedprs.imaging.federation import benchmark_data, federation_from_section
from rvfedprs.imaging.loader import MedMNIST
from rvfedprs.imaging.metrics import METRIC_NAMES
from rvfedprs.imaging.plan import plan, strategy_distance
from rvfedprs.imaging.task import strategy_for
from rvfedprs.plan import run, run_plans

log = logging.getLogger(__name__)

__all__ = [
    "run_benchmark",
    "write_benchmark",
    "build_strategy",
    "strategy_distance",
    "results_table",
    "check_engine",
]


def build_strategy(name: str, section: Mapping[str, Any], clients, random_seed: int):
    """The strategy ``name`` with its options from the ``imaging`` section."""
    return strategy_for(name, section, **strategy_distance(name, section, clients, random_seed))


def run_benchmark(
    dataset: MedMNIST,
    section: Mapping[str, Any],
    *,
    random_seed: int,
    progress=None,
    class_counts: np.ndarray | None = None,
    engine: str = "inprocess",
    flower: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
) -> dict[str, Any]:
    """Run every strategy of ``section["strategies"]``.

    ``class_counts`` (K, C) replaces the Dirichlet draw by a fixed per-client class mix
    (:func:`~rvfedprs.imaging.partition.fixed_count_partition`); images it leaves out are
    counted in ``n_unassigned``.

    Parameters
    ----------
    dataset : MedMNIST
    section : mapping
        The validated ``imaging`` section.
    random_seed : int
    progress : callable, optional
        Called with every evaluated row as soon as it exists.
    class_counts : array of int, shape (K, C), optional
    engine : {"inprocess", "flower-sim", "flower-deploy"}
        Where the clients train: one after another in this process, or on Flower (one Flower
        SuperLink, and for ``flower-deploy`` one SuperNode per client, for the whole benchmark;
        one Flower run per fold holding every strategy, :func:`rvfedprs.plan.run_plans`).
        Same rows for the same seed; on Flower a strategy's rows arrive when its fold's run
        ends.
    flower : mapping, optional
        The ``flower`` configuration section (Flower engines; defaults when None).
    out : str or Path, optional
        Output folder; the Flower engines need it (``OUT/flower`` holds the processes' logs,
        ``OUT/flower-runs/fold<k>/`` each fold's Flower run: job and status in ``flower/``,
        each strategy's last checkpoint in ``<strategy>/checkpoints/``).

    Returns
    -------
    dict
        ``clients`` (per fold: sizes and class counts), ``history`` (rows: strategy, fold,
        round, metrics…), ``n_images``, ``n_unassigned`` (images in no client).

    Raises
    ------
    ConfigError
        For an unknown engine, or a Flower engine without ``out``.
    """
    from contextlib import nullcontext
    from dataclasses import replace

    check_engine(engine)
    if engine != "inprocess" and out is None:
        raise ConfigError(f"engine {engine!r} needs an output folder (out)")
    data = benchmark_data(dataset, section, random_seed)
    folds = list(range(section["cv_folds"])) if section.get("cv_folds") else [None]
    rounds = int(section["rounds"])
    eval_rounds = set(section.get("eval_rounds") or range(1, rounds + 1)) | {rounds}
    rows: list[dict[str, Any]] = []
    client_info: dict[str, Any] = {}
    session = nullcontext(None)
    if engine != "inprocess":
        from rvfedprs.imaging.engine import imaging_session

        n_clients = (
            section["n_clients"] if class_counts is None else int(np.asarray(class_counts).shape[0])
        )
        session = imaging_session(
            engine,
            Path(out) / "flower",
            data_file=dataset.path,
            client_ids=[f"client_{k + 1}" for k in range(n_clients)],
            flower=flower,
        )
    with session as link:
        for fold in folds:
            clients = federation_from_section(
                data,
                dataset.n_classes,
                section,
                random_seed=random_seed,
                fold=fold,
                class_counts=class_counts,
            )
            client_info[str(fold if fold is not None else 0)] = {
                cid: {
                    "n_train": len(c.train),
                    "n_test": len(c.test),
                    "train_class_counts": np.bincount(
                        c.train.labels, minlength=dataset.n_classes
                    ).tolist(),
                }
                for cid, c in clients.items()
            }
            plans = []
            fold_out = (
                None if out is None else Path(out).resolve() / "flower-runs" / f"fold{fold or 0}"
            )
            for name in section["strategies"]:
                planned = plan(
                    {"imaging": section, "flower": flower},
                    None if engine == "inprocess" else fold_out / name,
                    clients=clients,
                    strategy=name,
                    seed=random_seed,
                    engine=engine,
                    data_file=dataset.path,
                    fold=fold,
                    class_counts=class_counts,
                )

                def evaluate(strat, t, _name=name, _fold=fold, _clients=clients):
                    if t not in eval_rounds:
                        return {}
                    per_client = evaluate_clients(strat, _clients)
                    row = {"strategy": _name, "fold": _fold or 0, "round": t}
                    row.update(mean_metrics(per_client))
                    row["per_client"] = per_client
                    rows.append(row)
                    if progress is not None:
                        progress(row)
                    return {}

                planned = replace(planned, evaluate_round=evaluate, superlink=link)
                if engine == "inprocess":
                    run(planned)
                else:
                    plans.append(planned)
            if plans:  # one Flower run per fold: every strategy, in the same order
                run_plans(plans, out=fold_out)
    n_assigned = sum(
        info["n_train"] + info["n_test"] for info in client_info[str(folds[0] or 0)].values()
    )
    return {
        "n_images": len(data),
        "n_unassigned": len(data) - n_assigned,
        "clients": client_info,
        "history": rows,
    }


def write_benchmark(
    config: Mapping[str, Any], out: str | Path, *, class_counts_file: str | Path | None = None
):
    """Run the comparison of ``config["imaging"]``; write its tables, metrics and provenance.

    Writes ``table.csv``/``table.md`` (mean over folds at rounds 1, R/2 and R),
    ``metrics.json`` (every evaluated row, the partition, timings) and ``provenance.json``.
    Every evaluated round is also appended to ``progress.jsonl`` (and a line printed) as soon as
    it is computed, so an interrupted run keeps what it had evaluated (on a Flower engine, when
    each strategy's run ends: the rounds are evaluated from its checkpoints).

    Parameters
    ----------
    config : mapping
        Validated configuration (sections ``imaging`` and ``flower``); ``imaging.seed`` None
        draws a seed, recorded in the outputs.
    out : str or Path
    class_counts_file : str or Path, optional
        A fixed per-client class mix (:func:`~rvfedprs.imaging.partition.read_class_counts`)
        instead of a Dirichlet draw.

    Returns
    -------
    pandas.DataFrame
        The table written.
    """
    import json
    import time

    import torch

    from rvfedprs.imaging.loader import load_medmnist
    from rvfedprs.imaging.partition import read_class_counts
    from rvfedprs.provenance import draw_seed, jsonable, write_metrics, write_provenance

    config = dict(config)
    section = config["imaging"]
    seed = draw_seed(section["seed"])
    section["seed"] = seed
    if section["torch_threads"]:
        torch.set_num_threads(int(section["torch_threads"]))
    dataset = load_medmnist(section["data"])
    class_counts = None
    if class_counts_file is not None:
        class_counts = read_class_counts(class_counts_file, dataset.n_classes)
        section["n_clients"] = int(class_counts.shape[0])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if section.get("eval_rounds"):
        section["eval_rounds"] = [r for r in section["eval_rounds"] if r <= section["rounds"]]
    progress_file = out / "progress.jsonl"
    progress_file.write_text("")
    start = time.time()

    def progress(row: dict[str, Any]) -> None:
        row = {"elapsed_s": round(time.time() - start, 1), **row}
        with progress_file.open("a") as handle:
            handle.write(json.dumps(jsonable(row)) + "\n")
        print(
            f"[{row['elapsed_s']:8.1f}s] {row['strategy']} fold {row['fold']} round {row['round']}:"
            f" accuracy {row['accuracy']:.4f} log-loss {row['log_loss']:.4f}",
            flush=True,
        )

    result = run_benchmark(
        dataset,
        section,
        random_seed=seed,
        progress=progress,
        class_counts=class_counts,
        engine=section["engine"],
        flower=config.get("flower"),
        out=out,
    )
    if result["n_unassigned"]:
        log.warning("%d of %d images are in no client", result["n_unassigned"], result["n_images"])
    wall_s = time.time() - start
    rounds = section["rounds"]
    marks = sorted({1, max(1, rounds // 2), rounds})
    table = results_table(result["history"], marks)
    table.to_csv(out / "table.csv", index=False)
    (out / "table.md").write_text(table.to_markdown(index=False, floatfmt=".4f") + "\n")
    metrics = {
        "seed": seed,
        "config": section,
        "dataset": str(dataset.path),
        "wall_s": round(wall_s, 1),
        "torch_version": torch.__version__,
        "class_counts": None if class_counts is None else class_counts.tolist(),
        "class_counts_file": None if class_counts_file is None else str(class_counts_file),
        **result,
    }
    write_metrics(out, metrics)
    write_provenance(
        out,
        command="imaging",
        parameters=section,
        seed=seed,
        inputs=[section["data"], *([str(class_counts_file)] if class_counts_file else [])],
    )
    log.info("wrote %s: %d strategies × %d rounds", out, len(section["strategies"]), rounds)
    return table


def check_engine(engine: str) -> None:
    """Fail clearly on an engine name that is not one of :data:`ENGINES`."""
    if engine not in ENGINES:
        raise ConfigError(f"imaging.engine {engine!r} unknown; choose from {list(ENGINES)}")


def results_table(history: list[dict[str, Any]], rounds: list[int]):
    """Mean over folds per (strategy, round) at ``rounds`` (pandas DataFrame)."""
    import pandas as pd

    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "per_client"} for r in history])
    frame = frame[frame["round"].isin(rounds)]
    return frame.groupby(["strategy", "round"], sort=False)[list(METRIC_NAMES)].mean().reset_index()
