"""``rvfedprs mia``: the privacy audit of a trained run (membership inference, channels).

Writes ``OUT/mia.json``, ``OUT/mia_scores.npz`` and (``mia.channels``) ``OUT/channels.json``
(:func:`rvfedprs.evaluation.attacks.audit_run`). This module only connects the library to the
run: it rebuilds the strategy and its network from the run's latest checkpoint, reruns the run's
training for the shadow federations, and plays one more round to see what the server receives.

The network is the run's (the checkpoint's ``model_config``): a burden ``model.rare_input``
reads the burden map of the federation's variant set, the same for the target and every shadow
federation; a top-k one reads the variants the run's warm start chose, and each shadow
federation, a run of its own, chooses its own in its own warm start and is scored through them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HELP = "audit a trained run: membership inference on every client's model, and the channels"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs mia``."""
    parser.add_argument("--config", type=Path, help="YAML configuration (sections mia, train)")
    parser.add_argument("--run", type=Path, required=True, help="folder of `rvfedprs train`")
    parser.add_argument("--out", type=Path, required=True, help="output folder (mia.json)")


def _trained_run(args: argparse.Namespace) -> dict[str, Any]:
    """The run's configuration, strategy (restored), network, federation, truth and seed."""
    from rvfedprs.config import load_config
    from rvfedprs.exceptions import InputDataError
    from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint
    from rvfedprs.genomic.data import load_federation
    from rvfedprs.genomic.task import network_model_config
    from rvfedprs.run import load_truth_from_config
    from rvfedprs.strategies import strategy_from_config

    path = latest_checkpoint(args.run)
    if path is None:
        raise InputDataError(f"no checkpoint in {args.run / 'checkpoints'} (run `rvfedprs train`)")
    checkpoint = load_checkpoint(path)
    extra = checkpoint.get("extra", checkpoint)
    trained = extra.get("config") or checkpoint.get("config")
    name = extra.get("strategy_name") or checkpoint.get("strategy_name")
    if trained is None or name is None:
        raise InputDataError(f"{path} records no configuration/strategy name")
    config = load_config(args.config, overrides={"train": {"data": trained["train"]["data"]}})
    strategy = strategy_from_config(name, trained)
    strategy.load_state_dict(checkpoint["strategy_state"])
    seed = config["mia"]["seed"]
    federation = load_federation(config["train"]["data"])
    network = extra.get("model_config")
    if network is None:  # a checkpoint that does not record its network
        network = network_model_config(federation.model_config(trained["model"]), trained)
    return {
        "config": config,
        "trained": trained,
        "name": name,
        "strategy": strategy,
        "model_config": dict(network),
        "round": int(checkpoint.get("round", trained["train"]["rounds"])),
        "federation": federation,
        "truth": load_truth_from_config(config),
        "seed": int(checkpoint.get("seed", 0)) if seed is None else int(seed),
    }


class _ShadowNetwork:
    """A shadow run's network: the engine hands it the run settings after the warm start."""

    def __init__(self) -> None:
        self.model_config: dict[str, Any] | None = None

    def prepare(self, settings: dict[str, Any]) -> None:
        """Keep the network of the settings after the warm start (a top-k input's variants)."""
        self.model_config = dict(settings["model"])

    def __call__(self, strategy, server_round: int) -> dict[str, Any]:
        """Nothing to add to the shadow round's history entry."""
        return {}


def _before_warm_start(model_config: dict[str, Any]) -> dict[str, Any]:
    """The run's network without the top-k variants its warm start chose (a burden map stays)."""
    projection = dict(model_config.get("rare_projection") or {})
    if "top_k" not in projection:
        return dict(model_config)
    del projection["top_k"]
    return {**model_config, "rare_projection": projection}


def _shadow_trainer(run: dict[str, Any], training):
    """Rerun the target's training (strategy, rounds, settings) on other training sets.

    Each shadow federation runs the target's plan with its own training sets and seed (the
    strategy's distance matrix recomputed on them), in this process, with the target's DP
    settings and Bloom key and the clients' optimiser settings ``training``; without the
    configuration (so without secure aggregation), as shadows have always trained. It starts
    from the target's network before its warm start, so a top-k input's warm start chooses the
    shadow's own variants; its models come back with that network
    (:class:`~rvfedprs.evaluation.attacks.ShadowModels`).
    """
    from dataclasses import replace

    from rvfedprs.evaluation.attacks import ShadowModels
    from rvfedprs.genomic.distance import strategy_distance
    from rvfedprs.plan import run as run_plan
    from rvfedprs.strategies import strategy_from_config
    from rvfedprs.tasks import get_task

    trained, federation = run["trained"], run["federation"]
    task = get_task("genomic")
    start = _before_warm_start(run["model_config"])

    def train_shadow(sets, seed):
        shadow = replace(federation, train=dict(sets))
        distance = strategy_distance(run["name"], trained, shadow, seed)
        strategy = strategy_from_config(run["name"], trained, **distance)
        target = task.plan(trained, data=shadow, strategy=strategy)
        network = _ShadowNetwork()
        run_plan(replace(
            target, seed=seed, engine="inprocess", training=training, config=None, out=None,
            privacy=replace(target.privacy, secagg=None), model=start, evaluate_round=network,
        ))  # fmt: skip
        chosen = network.model_config  # None where the engine had no warm start to hand on
        return ShadowModels(strategy.parameters_for, start if chosen is None else chosen)

    return train_shadow


def _next_round(run: dict[str, Any], training):
    """One more round from the checkpoint: what every client sends the server."""
    from rvfedprs.bloom import read_bloom_key
    from rvfedprs.genomic.view import next_round_view
    from rvfedprs.training import dp_settings

    federation, trained = run["federation"], run["trained"]
    return next_round_view(
        run["strategy"], federation, model_config=run["model_config"],
        training=training, server_round=run["round"] + 1, random_seed=run["seed"],
        bloom_key=read_bloom_key(trained["fedce"]["bloom_key_file"]),
        dp=dp_settings(trained.get("dp")),
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Restore the run, audit it, write mia.json, mia_scores.npz and channels.json."""
    import logging

    import numpy as np

    from rvfedprs.evaluation.attacks import SHADOW_ATTACKS, audit_run, resolve_attacks
    from rvfedprs.genomic.task import training_config
    from rvfedprs.run import jsonable

    found = _trained_run(args)
    config, trained, federation = found["config"], found["trained"], found["federation"]
    training = training_config(trained, federation, dp=True)
    settings = dict(config["mia"])
    if settings["reference_epochs"] is None:
        settings["reference_epochs"] = trained["train"]["rounds"] * trained["train"]["local_epochs"]
    shadows = set(resolve_attacks(settings["attacks"])) & set(SHADOW_ATTACKS)
    log = logging.getLogger("rvfedprs.mia")
    result = audit_run(
        found["strategy"].parameters_for, federation.train, federation.test,
        federation.variant_keys, found["model_config"], settings,
        record={"strategy": found["name"], "seed": found["seed"]},
        random_seed=found["seed"], truth=found["truth"], training=training,
        train_shadow=_shadow_trainer(found, training) if shadows else None,
        round_view=_next_round(found, training) if settings["channels"] else None,
        on_shadow=lambda s: log.info("shadow federation %d/%d trained", s + 1,
                                     settings["n_shadow"]),
    )  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mia.json").write_text(json.dumps(jsonable(result.mia), indent=2) + "\n")
    np.savez(args.out / "mia_scores.npz", **result.scores)
    if result.channels is not None:
        text = json.dumps(jsonable(result.channels), indent=2) + "\n"
        (args.out / "channels.json").write_text(text)
    print(f"mia: {len(result.mia['rows'])} rows -> {args.out / 'mia.json'}")
    return 0
