"""``rvfedprs mia``: membership-inference audit of a trained run (LOSS and offline LiRA)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "audit a trained run's client models with membership-inference attacks (Table V)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs mia``."""
    parser.add_argument("--config", type=Path, help="YAML configuration (sections mia, train)")
    parser.add_argument("--run", type=Path, required=True, help="folder of `rvfedprs train`")
    parser.add_argument("--out", type=Path, required=True, help="output folder (mia.json)")


def run(args: argparse.Namespace) -> int:
    """Rebuild the run's strategy from its latest checkpoint and attack its target clients."""
    from rvfedprs.config import load_config
    from rvfedprs.evaluation import carrier_masks
    from rvfedprs.evaluation.attacks import (
        audit_federation,
        reference_population,
        train_reference_models,
    )
    from rvfedprs.exceptions import InputDataError
    from rvfedprs.federation.data import load_federation
    from rvfedprs.federation.inprocess import derive_seed, latest_checkpoint, load_checkpoint
    from rvfedprs.run import jsonable, load_truth_from_config, training_config
    from rvfedprs.strategies import strategy_from_config

    path = latest_checkpoint(args.run)
    if path is None:
        raise InputDataError(f"no checkpoint in {args.run / 'checkpoints'} (run `rvfedprs train`)")
    checkpoint = load_checkpoint(path)
    trained = checkpoint.get("extra", checkpoint).get("config") or checkpoint.get("config")
    name = checkpoint.get("extra", checkpoint).get("strategy_name") or checkpoint.get(
        "strategy_name"
    )
    if trained is None or name is None:
        raise InputDataError(f"{path} records no configuration/strategy name")
    config = load_config(args.config, overrides={"train": {"data": trained["train"]["data"]}})
    strategy = strategy_from_config(name, trained)
    strategy.load_state_dict(checkpoint["strategy_state"])
    federation = load_federation(config["train"]["data"])
    truth = load_truth_from_config(config)
    mia = config["mia"]
    seed = mia["seed"] if mia["seed"] is not None else int(checkpoint.get("seed", 0))
    targets = mia["targets"]
    targets = federation.client_ids[:targets] if isinstance(targets, int) else list(targets)
    model_config = dict(trained["model"])
    references = {}
    if "lira" in mia["attacks"]:
        from dataclasses import replace

        epochs = (
            mia["reference_epochs"] or trained["train"]["rounds"] * trained["train"]["local_epochs"]
        )
        pool = {**{"tr:" + k: v for k, v in federation.train.items()},
                **{"te:" + k: v for k, v in federation.test.items()}}  # fmt: skip
        for t in targets:
            references[t] = train_reference_models(
                reference_population(pool, exclude=[f"tr:{t}", f"te:{t}"]),
                n_models=mia["n_reference"],
                model_config=model_config,
                training=replace(training_config(config, federation), epochs=int(epochs)),
                random_seed=derive_seed(seed, "lira", t),
            )
    carriers = {}
    if truth is not None and truth.causal is not None:
        carriers = {
            "train_carriers": carrier_masks(federation.train, federation.variant_keys, truth),
            "test_carriers": carrier_masks(federation.test, federation.variant_keys, truth),
        }
    rows, _ = audit_federation(
        strategy.parameters_for,
        federation.train,
        federation.test,
        targets,
        model_config,
        attacks=mia["attacks"],
        references=references,
        fpr_levels=mia["fpr_levels"],
        random_seed=derive_seed(seed, "mia"),
        **carriers,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "mia.json"
    out.write_text(
        json.dumps(jsonable({"strategy": name, "seed": seed, "rows": rows}), indent=2) + "\n"
    )
    print(f"mia: {len(rows)} rows -> {out}")
    return 0
