"""Protocol driver for the RV-FedPRS paper's evaluation (paper §III, SPEC §10).

Runs, for every seed, the compared strategies with the same model and budget, audits each
model a client ends with (LOSS and offline LiRA), attacks FedCE's Bloom filters (plain vs keyed
hashing), sweeps DP-SGD noise for FedCE without and with secure aggregation (privacy–utility,
with each setting's channel audit), runs small sensitivity grids, then
builds Tables II–V and the figures (``rvfedprs report``'s :func:`build_report`).

Layout of ``--out``::

    runs/main/<strategy>/seed<k>/        metrics.json, predictions.parquet, mia.json,
                                          mia_scores.npz, (fedce) jaccard.npz, bloom_attack.json
    runs/privacy/<label>/seed<k>/        the same for FedCE with plain/keyed filters, SecAgg,
                                          DP-SGD, SecAgg + DP (:func:`privacy_grid`), and
                                          channels.json (what the server infers per channel)
    runs/selected/<strategy>/seed<k>/    trained on 90% of each training split, evaluated at
                                          the round that did best on the other 10%
    runs/sensitivity/<factor>=<v>/seed<k>/
    report/                               tables (Markdown + CSV) and figures
    progress.log

Resumable: a run whose ``metrics.json`` exists is skipped (``metrics.json`` is written last).
``--shard K/N`` splits the runs between N driver calls on one ``--out`` (one core each).

Usage::

    python simulations/rvfedprs_paper/run.py --quick --data results \\
        --samples results/cohort/samples.tsv --truth results/cohort/truth/causal_variants.tsv \\
        --out simulations/rvfedprs_paper/results/demo_quick

From Snakemake, call :func:`main` with an argument list.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.config import load_config
from rvfedprs.evaluation import carrier_masks, evaluate_models, load_truth, predict_clients
from rvfedprs.evaluation.attacks import (
    audit_federation,
    bloom_membership_attack,
    carried_mask,
    channel_rows,
    plain_vs_keyed,
    reference_population,
    resolve_targets,
    train_reference_models,
)
from rvfedprs.evaluation.report import build_report
from rvfedprs.evaluation.selection import BestRound, split_validation
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.genomic.client import build_model
from rvfedprs.genomic.data import Federation, load_federation
from rvfedprs.genomic.task import local_training_config
from rvfedprs.genomic.view import next_round_view
from rvfedprs.model import set_parameters
from rvfedprs.plan import Privacy, RunPlan, enabled_secagg, run
from rvfedprs.provenance import jsonable, write_metrics
from rvfedprs.run import client_clusters, dp_epsilon
from rvfedprs.strategies import strategy_from_config
from rvfedprs.training import local_update, select_influential
from rvfedprs.training.dp import dp_schedule, dp_settings

log = logging.getLogger("rvfedprs_paper")

STRATEGIES = ("centralized", "local", "fedavg", "fedprox", "fedadam", "clustered", "fedce")
SECRET = b"rvfedprs-paper-shared-client-secret"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, help="base YAML configuration (sections train, ...)")
    p.add_argument("--data", type=Path, default=Path("results"), help="per-client inputs")
    p.add_argument("--samples", type=Path, help="samples.tsv (truth: clusters)")
    p.add_argument("--truth", type=Path, help="truth/causal_variants.tsv")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=int, default=5, help="number of seeds (0..N-1)")
    p.add_argument("--rounds", type=int, help="rounds (default train.rounds; --quick: 2)")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--quick", action="store_true", help="few rounds, 2 seeds, 1 MIA target")
    p.add_argument("--no-mia", action="store_true")
    p.add_argument("--no-privacy", action="store_true", help="skip the DP / keyed sweep")
    p.add_argument("--no-sensitivity", action="store_true")
    p.add_argument("--dp-batch-size", type=int, help="DP-SGD expected batch size")
    p.add_argument(
        "--selected",
        default="centralized,local,fedavg,fedce",
        help="strategies also run with the round chosen on validation data",
    )
    p.add_argument(
        "--validation-fraction",
        type=float,
        default=0.1,
        help="share of each client's training samples held out for that choice",
    )
    p.add_argument("--no-selected", action="store_true", help="skip the validation-selected runs")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="K/N",
                   help="run only every N-th run from the K-th (0-based): N driver calls with "
                        "K = 0..N-1 share the work; the report is written by each call from the "
                        "runs finished so far")  # fmt: skip
    for stage in ("selected", "privacy", "sensitivity"):
        p.add_argument(
            f"--{stage}-seeds", type=int, help=f"seeds of the {stage} runs (default --seeds)"
        )
    return p.parse_args(argv)


def _shard(text: str) -> tuple[int, int]:
    """``"K/N"`` → (K, N) with 0 ≤ K < N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected K/N, e.g. 0/2") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: need 0 <= K < N")
    return k, n


def _config(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {"train": {"data": str(args.data), "progress": False}}
    if args.rounds is not None:
        overrides["train"]["rounds"] = args.rounds
    elif args.quick:
        overrides["train"]["rounds"] = 2
    if args.quick:
        overrides["mia"] = {"targets": 1, "n_reference": 2}
        overrides["dp"] = {"epsilon_targets": [2.0, 16.0]}
    if args.dp_batch_size is not None:
        overrides.setdefault("dp", {})["batch_size"] = args.dp_batch_size
    evaluate = {}
    if args.samples is not None:
        evaluate["samples"] = str(args.samples)
    if args.truth is not None:
        evaluate["truth"] = str(args.truth)
    if evaluate:
        overrides["evaluate"] = evaluate
    return load_config(args.config, overrides=overrides)


class Context:
    """Data, truth, shared settings and per-seed LiRA reference models of one driver call."""

    def __init__(self, config: dict[str, Any], federation: Federation, truth) -> None:
        self.config = config
        self.federation = federation
        self.truth = truth
        self.model_config = self.federation.model_config(config["model"])
        fed = federation
        self.training = local_training_config(
            config["train"],
            n_samples=sum(d.n_samples for d in fed.train.values()),
            n_cases=sum(float(d.y.sum()) for d in fed.train.values()),
        )
        self.train_carriers = self.test_carriers = None
        if truth is not None and truth.causal is not None:
            self.train_carriers = carrier_masks(fed.train, fed.variant_keys, truth)
            self.test_carriers = carrier_masks(fed.test, fed.variant_keys, truth)
        self.targets = resolve_targets(config["mia"]["targets"], fed.client_ids)
        self._references: dict[int, dict[str, list]] = {}

    def references(self, seed: int) -> dict[str, list]:
        """OUT models per target for this seed (trained once, shared by every strategy)."""
        if "lira" not in self.config["mia"]["attacks"]:
            return {}
        if seed not in self._references:
            mia = self.config["mia"]
            epochs = mia["reference_epochs"] or (
                self.config["train"]["rounds"] * self.config["train"]["local_epochs"]
            )
            out = {}
            for target in self.targets:
                t0 = time.time()
                population = reference_population(
                    {
                        **_prefixed(self.federation.train, "tr:"),
                        **_prefixed(self.federation.test, "te:"),
                    },  # fmt: skip
                    exclude=[f"tr:{target}", f"te:{target}"],
                )
                out[target] = train_reference_models(
                    population,
                    n_models=mia["n_reference"],
                    model_config=self.model_config,
                    training=replace(self.training, epochs=int(epochs)),
                    random_seed=derive_seed(seed, "lira", target),
                )
                log.info("seed %d: %d LiRA reference models for %s in %.0f s", seed,
                         mia["n_reference"], target, time.time() - t0)  # fmt: skip
            self._references[seed] = out
        return self._references[seed]


def _prefixed(datasets, prefix):
    return {prefix + k: v for k, v in datasets.items()}


def _save_json(path: Path, record: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(record), indent=2) + "\n")


def _predictions_frame(ctx: Context, parameters_for) -> pd.DataFrame:
    fed = ctx.federation
    model = build_model(fed.n_rare, ctx.model_config)
    predictions = predict_clients(parameters_for, fed.test, model)
    frames = []
    for c in sorted(predictions):
        carrier = ctx.test_carriers[c] if ctx.test_carriers is not None else False
        frames.append(pd.DataFrame({"client": c, "sample_id": fed.test[c].sample_ids,
                                    "y": fed.test[c].y.astype(int), "p": predictions[c],
                                    "carrier": carrier}))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def _influential_sets(ctx: Context, strategy, seed: int) -> dict[str, list[str]]:
    """Each client's reported set V_k, recomputed with one more local round from its final
    personalised model (the filters themselves carry no readable list)."""
    fed, fedce = ctx.federation, ctx.config["fedce"]
    out = {}
    for c in fed.client_ids:
        model = build_model(fed.n_rare, ctx.model_config)
        set_parameters(model, strategy.parameters_for(c))
        result = local_update(model, fed.train[c], ctx.training, influence=True,
                              random_seed=derive_seed(seed, "influence", c))  # fmt: skip
        chosen = select_influential(result.influence, top_k=fedce["top_k"],
                                    relative_threshold=fedce["relative_threshold"])  # fmt: skip
        out[c] = [fed.variant_keys[i] for i in chosen]
    return out


def run_one(
    ctx: Context,
    name: str,
    seed: int,
    run_dir: Path,
    *,
    experiment: str = "main",
    label: str | None = None,
    config_overrides: dict[str, Any] | None = None,
    dp: dict[str, float] | None = None,
    bloom_key: bytes | None = None,
    extra: dict[str, Any] | None = None,
    audit: bool = True,
    bloom_audit: bool = False,
    channels: bool = False,
    validation_fraction: float | None = None,
) -> dict[str, Any] | None:
    """Train, evaluate and audit one (strategy, seed); skipped when metrics.json exists.

    ``config_overrides`` may turn secure aggregation on (``{"secagg": {"enabled": True}}``).
    With ``channels`` one more round is played and what the server would receive audited
    (``channels.json``, :func:`~rvfedprs.evaluation.attacks.channel_rows`); the record gets the
    update channel's TPR/FPR of carried-variant recovery as this run's server sees it (every
    client's own update, or with secure aggregation only the sums).

    With ``validation_fraction`` the run trains on the rest of every client's training split and
    is evaluated (and audited) with the models of the round that did best on the held-out part
    (:mod:`rvfedprs.evaluation.selection`); the split depends on the seed only, so runs of one
    seed are paired.
    """
    if (run_dir / "metrics.json").is_file():
        log.info("skip %s (done)", run_dir)
        return None
    t0 = time.time()
    fed = ctx.federation
    selection = None
    if validation_fraction:
        fed, validation = split_validation(fed, validation_fraction, random_seed=seed)
        selection = BestRound(validation, fed.n_rare, ctx.model_config)
    config = json.loads(json.dumps(ctx.config))
    for section, values in (config_overrides or {}).items():
        config[section].update(values)
    config["train"]["validation_fraction"] = 0.0  # held out above, by this driver's own split
    strategy = strategy_from_config(name, config)
    training = ctx.training
    if dp is not None and dp.get("batch_size"):
        training = replace(training, batch_size=int(dp["batch_size"]))
    dp_run = None if dp is None else dp_settings({**dp, "enabled": True})
    secure = bool(config["secagg"]["enabled"])
    plan = RunPlan(
        task="genomic",
        data=fed,
        strategy=strategy,
        rounds=config["train"]["rounds"],
        seed=seed,
        privacy=Privacy(secagg=enabled_secagg(config), dp=dp_run, bloom_key=bloom_key),
        model=ctx.model_config,
        training=training,
        config=config,
        evaluate_round=selection,
    )
    result = run(plan)
    parameters_for = strategy.parameters_for if selection is None else selection.parameters_for
    metrics = evaluate_models(
        parameters_for,
        client_clusters(strategy, fed.client_ids),
        fed.test,
        fed.variant_keys,
        ctx.model_config,
        truth=ctx.truth,
        score_clusters=strategy.forms_clusters,
    )
    record = {
        "strategy": name,
        "seed": seed,
        "experiment": experiment,
        "label": label or name,
        **metrics,
        "history": result.history,
        **(extra or {}),
    }
    if selection is not None:
        record.update(
            validation_fraction=validation_fraction,
            best_round=selection.best_round,
            best_validation_auc=selection.best_value,
            n_validation=sum(d.n_samples for d in selection.validation.values()),
        )
    record.update(dp_epsilon(result.client_state), secure_aggregation=secure)
    run_dir.mkdir(parents=True, exist_ok=True)
    _predictions_frame(ctx, parameters_for).to_parquet(run_dir / "predictions.parquet", index=False)
    if getattr(strategy, "similarity_", None) is not None:
        np.savez(run_dir / "jaccard.npz", similarity=strategy.similarity_,
                 clients=np.asarray(strategy.similarity_clients_))  # fmt: skip
    if audit and ctx.config["mia"]["attacks"]:
        rows, scores = audit_federation(
            parameters_for,
            fed.train,
            fed.test,
            ctx.targets,
            ctx.model_config,
            attacks=ctx.config["mia"]["attacks"],
            references=ctx.references(seed),
            train_carriers=ctx.train_carriers
            if selection is None
            else carrier_masks(fed.train, fed.variant_keys, ctx.truth),
            test_carriers=ctx.test_carriers,
            fpr_levels=ctx.config["mia"]["fpr_levels"],
            random_seed=derive_seed(seed, "mia"),
        )
        _save_json(run_dir / "mia.json", {"strategy": name, "seed": seed,
                                           "experiment": experiment, "label": label or name,
                                           "rows": rows})  # fmt: skip
        np.savez(run_dir / "mia_scores.npz",
                 **{f"{c}__{k}": v for c, s in scores.items() for k, v in s.items()})  # fmt: skip
        general = [r for r in rows if r["subset"] == "general" and r["attack"] == "loss"]
        if general:
            record["mia_loss_advantage"] = float(np.mean([r["advantage"] for r in general]))
    if bloom_audit and name == "fedce":
        spec = strategy.spec
        reported = _influential_sets(ctx, strategy, seed)
        carried = {
            c: [fed.variant_keys[j] for j in fed.train[c].carried_variants()]
            for c in fed.client_ids
        }
        rows = plain_vs_keyed(reported, fed.variant_keys, capacity=spec.capacity,
                              error_rate=spec.error_rate, secret=SECRET,
                              carried=carried)  # fmt: skip
        # the filters actually sent in the last round, tested against the carried variants
        sent = [
            {"client": c, "hashing": "keyed" if bloom_key else "plain", "source": "last_round",
             **bloom_membership_attack(bits, fed.variant_keys, [], spec, carried=carried[c])}
            for c, bits in sorted(strategy.filters.items())
        ]  # fmt: skip
        _save_json(run_dir / "bloom_attack.json", {"seed": seed, "rows": rows,
                                                    "last_round": sent})  # fmt: skip
    if channels:
        view = next_round_view(strategy, fed, model_config=ctx.model_config, training=training,
                               server_round=config["train"]["rounds"] + 1, random_seed=seed,
                               bloom_key=bloom_key, dp=dp_run)  # fmt: skip
        if view is not None:
            carried = {c: carried_mask(fed.train[c]) for c in view.sent}
            rows = channel_rows(view, carried, fed.variant_keys)
            _save_json(run_dir / "channels.json", {"strategy": name, "seed": seed,
                                                    "experiment": experiment,
                                                    "label": label or name,
                                                    "rows": rows})  # fmt: skip
            seen = [r for r in rows
                    if r["channel"] == "update" and r["secure_aggregation"] == secure]  # fmt: skip
            for key in ("tpr", "fpr", "advantage"):
                record[f"update_channel_{key}"] = float(np.mean([r[key] for r in seen]))
    record["wall_s"] = time.time() - t0
    write_metrics(run_dir, record)
    log.info("%s %s seed %d: auc=%.4f carrier_auc=%s (%.0f s)", experiment, label or name, seed,
             record["auc"], record.get("carrier_auc"), record["wall_s"])  # fmt: skip
    return record


def calibrate_noise(target_epsilon: float, ctx: Context, delta: float, batch_size: int) -> float:
    """σ giving ``target_epsilon`` after all rounds for the smallest client (the largest q)."""
    from opacus.accountants.utils import get_noise_multiplier

    n = min(d.n_samples for d in ctx.federation.train.values())
    q, steps = dp_schedule(n, batch_size, ctx.config["train"]["local_epochs"])
    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta,
                                      sample_rate=q, steps=steps * ctx.config["train"]["rounds"],
                                      accountant="rdp"))  # fmt: skip


def privacy_grid(ctx: Context) -> list[tuple[str, dict, dict | None, bytes | None, dict]]:
    """(label, config overrides, DP settings, Bloom key, record extras) of the privacy rows.

    FedCE with plain filters, keyed filters, secure aggregation (keyed filters), and for every
    ``dp.epsilon_targets`` value DP-SGD without and with secure aggregation (keyed filters).
    """
    config = ctx.config
    dp_cfg = config["dp"]
    batch = dp_cfg["batch_size"] or config["train"]["batch_size"]
    secure = {"secagg": {"enabled": True}}
    clear = {"epsilon": float("inf")}
    grid = [
        ("plain", {}, None, None, {**clear, "hashing": "plain"}),
        ("keyed", {}, None, SECRET, {**clear, "hashing": "keyed"}),
        ("secagg", secure, None, SECRET, {**clear, "hashing": "keyed"}),
    ]
    for eps in dp_cfg["epsilon_targets"]:
        sigma = calibrate_noise(eps, ctx, dp_cfg["delta"], batch)
        dp = {"noise_multiplier": sigma, "max_grad_norm": dp_cfg["max_grad_norm"],
              "delta": dp_cfg["delta"], "batch_size": batch}  # fmt: skip
        extra = {"target_epsilon": eps, "noise_multiplier": sigma, "hashing": "keyed"}
        grid.append((f"dp_eps{eps:g}", {}, dp, SECRET, extra))
        grid.append((f"secagg_dp_eps{eps:g}", secure, dp, SECRET, extra))
    return grid


def sensitivity_grid(quick: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(factor, value, fedce overrides); h2_rare needs re-simulation and is not included.

    Bloom settings keep the capacity at least the default top_k (1,000 keys), which a filter
    must hold; top_k values keep the capacity at the default 2,000 or above.
    """
    clusters = [2, 3, 4, "auto"] if not quick else [2, 4, "auto"]
    grid = [("n_clusters", str(m), {"n_clusters": m}) for m in clusters]
    for cap, err in [(1000, 0.01), (2000, 0.001), (2000, 0.1)] if not quick else [(2000, 0.1)]:
        grid.append(("bloom", f"{cap}/{err}", {"bloom_capacity": cap, "bloom_error_rate": err}))
    for k in [50, 200, 2000] if not quick else [50]:
        grid.append(("top_k", str(k), {"top_k": k, "bloom_capacity": max(2000, k)}))
    return grid


def main(argv: Sequence[str] | None = None) -> int:
    """Run the protocol; returns 0."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    handlers = [logging.FileHandler(args.out / "progress.log"), logging.StreamHandler(sys.stderr)]
    handlers[0].setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    for handler in handlers:
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        return _protocol(args)
    finally:  # a later call (h2_rare.py, Snakemake) must not log into this run's file
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()


def _protocol(args: argparse.Namespace) -> int:
    out = args.out
    config = _config(args)
    if args.no_mia:
        config["mia"]["attacks"] = []
    seeds = list(range(2 if args.quick and args.seeds == 5 else args.seeds))
    strategies = [s for s in args.strategies.split(",") if s]
    federation = load_federation(config["train"]["data"])
    truth = None
    if config["evaluate"]["samples"] is not None:
        truth = load_truth(config["evaluate"]["truth"], config["evaluate"]["samples"])
    ctx = Context(config, federation, truth)
    (out / "config.json").write_text(json.dumps(jsonable(config), indent=2) + "\n")
    log.info("driver: %d clients, %d rare variants, seeds %s, strategies %s, rounds %d",
             len(federation.client_ids), federation.n_rare, seeds, strategies,
             config["train"]["rounds"])  # fmt: skip
    runs = out / "runs"
    counter = itertools.count()
    shard, n_shards = args.shard

    def mine() -> bool:
        """Whether the next run in the driver's fixed order belongs to this shard."""
        return next(counter) % n_shards == shard

    for seed in seeds:
        for name in [s for s in strategies if mine()]:
            run_one(ctx, name, seed, runs / "main" / name / f"seed{seed}",
                    bloom_audit=True)  # fmt: skip

    def stage_seeds(stage: str) -> list[int]:
        n = getattr(args, f"{stage}_seeds")
        return seeds if n is None else list(range(n))

    if not args.no_selected:
        for seed in stage_seeds("selected"):
            for name in [s for s in args.selected.split(",") if s and mine()]:
                run_one(ctx, name, seed, runs / "selected" / name / f"seed{seed}",
                        experiment="selected", audit=False,
                        validation_fraction=args.validation_fraction)  # fmt: skip
    if not args.no_privacy:
        for seed in stage_seeds("privacy"):
            for label, overrides, dp, bloom_key, extra in filter(
                lambda _: mine(), privacy_grid(ctx)
            ):
                run_one(ctx, "fedce", seed, runs / "privacy" / label / f"seed{seed}",
                        experiment="privacy", label=label, config_overrides=overrides, dp=dp,
                        bloom_key=bloom_key, extra=extra, channels=True)  # fmt: skip
    if not args.no_sensitivity:
        for seed in stage_seeds("sensitivity"):
            for factor, value, overrides in filter(lambda _: mine(), sensitivity_grid(args.quick)):
                run_one(ctx, "fedce", seed, runs / "sensitivity" / f"{factor}={value}".replace(
                    "/", "_") / f"seed{seed}", experiment="sensitivity", label=f"{factor}={value}",
                    config_overrides={"fedce": overrides}, audit=False,
                    extra={"factor": factor, "value": value})  # fmt: skip
    paths = build_report(runs, out / "report", config, truth=truth)
    log.info("report: %s", ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
