"""A tuned study: B configurations of each strategy, chosen on the sites' validation samples.

With ``study.budget`` B > 1 the coordinator runs each strategy of ``train.compare`` B times, once
per configuration of the protocol's equal-budget grid
(:func:`~rvfedprs.protocol.grids.configurations`, the same grids and the same B as the scenario
map's in-process tuning), each a whole run at ``OUT/tuning/{strategy}/trial_{i}/`` with its own
``metrics.json``. Every trial chooses its round on the sites' validation summaries, the floor
the first candidate (:class:`~rvfedprs.genomic.validation.SiteValidation`), so its score is the
best of the floor and its rounds; the strategy's result is the trial with the best score (the
earliest on a tie): its folder is copied to ``OUT/train/{strategy}/`` and its ``metrics.json``
there says so (``tuning``). The test split is never read by a choice: every trial is evaluated
on it, as a run is, but only validation scores are compared.

Choices are compared over the sites each trial was validated on; when a site was lost during
tuning the trials' scores come from different sites, which the table (``validated_sites``) and
a warning name.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.config import deep_merge, validate_config
from rvfedprs.exceptions import ConfigError

__all__ = [
    "TRIALS_DIR",
    "study_configurations",
    "trial_config",
    "trial_score",
    "choose_trial",
    "copy_chosen",
]

log = logging.getLogger(__name__)

#: The coordinator's folder of the trials, ``OUT/tuning/{strategy}/trial_{i}/``.
TRIALS_DIR = "tuning"


def study_configurations(strategy: str, config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The configurations the study runs ``strategy`` with: ``[{}]`` (as configured) when B = 1.

    Raises
    ------
    ConfigError
        When B > 1 and the run holds out no validation samples (nothing to choose on), or the
        strategy has no tuning grid (named, with the grids there are).
    """
    budget = int(config["study"]["budget"])
    if budget == 1:
        return [{}]
    if not float(config["train"]["validation_fraction"]) > 0:
        raise ConfigError(
            f"study.budget {budget} chooses among configurations on the sites' validation "
            "samples: set train.validation_fraction > 0 (it is 0)"
        )
    from rvfedprs.protocol.grids import configurations

    features = (config.get("fedglm") or {}).get("features")
    return configurations(
        strategy, budget, random_seed=int(config["study"]["grid_seed"]), glm_features=features
    )


def trial_config(config: Mapping[str, Any], configuration: Mapping[str, Any]) -> dict[str, Any]:
    """The validated configuration of one trial: ``configuration`` (dotted keys) over ``config``."""
    from rvfedprs.protocol.grids import configuration_overrides

    if not configuration:
        return dict(config)
    return validate_config(deep_merge(config, configuration_overrides(configuration)))


def trial_score(summary: Mapping[str, Any]) -> float:
    """A finished trial's validation score (higher is better): its chosen round's."""
    return float(summary["validation"]["score"])


def choose_trial(
    strategy: str,
    trials: Sequence[Mapping[str, Any]],
    table: Path,
) -> int:
    """The index of the trial with the best validation score (the first on a tie).

    ``trials``: per trial ``configuration`` and its study summary (``summary``: with
    ``validation``). Writes the tuning table (one row per trial, ``chosen`` marked) to
    ``table``; warns when the trials were validated on different sites.
    """
    scores = [trial_score(t["summary"]) for t in trials]
    chosen = max(range(len(trials)), key=lambda i: (scores[i], -i))
    rows = []
    for index, trial in enumerate(trials):
        validation = trial["summary"]["validation"]
        rows.append(
            {
                "trial": index + 1,
                "configuration": ", ".join(f"{k}={v}" for k, v in trial["configuration"].items()),
                "metric": validation["metric"],
                "validation_score": scores[index],
                "selected_round": validation["selected_round"],
                "validated_sites": ",".join(validation["sites"]),
                "chosen": index == chosen,
            }
        )
    table.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(table, sep="\t", index=False)
    site_sets = {row["validated_sites"] for row in rows}
    if len(site_sets) > 1:
        log.warning(
            "%s: its trials were validated on different sites (%s): a site was lost during "
            "tuning, and the scores compared come from different samples",
            strategy,
            " | ".join(sorted(site_sets)),
        )
    log.info(
        "%s: trial %d of %d chosen on validation (%s %.4f; %s)",
        strategy,
        chosen + 1,
        len(trials),
        rows[chosen]["metric"],
        scores[chosen],
        rows[chosen]["configuration"] or "as configured",
    )
    return chosen


def copy_chosen(trial_out: Path, strategy_out: Path, tuning: Mapping[str, Any]) -> None:
    """Put the chosen trial's folder at the strategy's, its ``metrics.json`` with ``tuning``.

    Checkpoints and provenance are copied; the metrics file is written by the one writer of
    metrics files.
    """
    from rvfedprs.provenance import write_metrics

    shutil.rmtree(strategy_out, ignore_errors=True)
    shutil.copytree(trial_out, strategy_out, ignore=shutil.ignore_patterns("metrics.json"))
    metrics = json.loads((trial_out / "metrics.json").read_text())
    write_metrics(strategy_out, {**metrics, "tuning": dict(tuning)})
