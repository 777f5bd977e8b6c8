"""``rvfedprs associate``: run the federated association and write its table and plots.

The strategy :class:`~rvfedprs.strategies.fedassoc.FedAssociation` runs as any run plan on any
engine (in-process, ``flower-sim``, ``flower-deploy``; in the clear or under secure aggregation):
every site fits the floor with the others and sends its association sums; only sums reach the
server. From them :func:`associate` writes into ``out``:

- ``associations.tsv`` — :mod:`rvfedprs.association.table`'s rows;
- ``qq.png`` — observed against expected −log10 p of the single-variant score tests (pooled and
  heterogeneous) and of the units' ACAT-O, each with its λ_GC;
- ``manhattan.png`` — single-variant and unit (ACAT-O) p-values along the genome, with the
  Bonferroni line of each;
- ``summary.json`` — the floor, the groups, counts of what was tested and what was not, λ_GC;
- ``provenance.json``;
- on a Flower engine, ``run/`` — the run's ``flower/`` files and checkpoints (an in-process run,
  seconds long, writes none: writing one would be most of its cost, torch's import included).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.association.table import HETEROGENEOUS, POOLED, association_table, lambda_gc
from rvfedprs.exceptions import InputDataError

__all__ = ["AssociationResult", "associate", "read_masks"]

log = logging.getLogger(__name__)


@dataclass
class AssociationResult:
    """What :func:`associate` wrote and computed."""

    table: pd.DataFrame
    summary: dict[str, Any]
    strategy: Any
    files: dict[str, Path]


def read_masks(config: Mapping[str, Any], variants: pd.DataFrame) -> dict[str, np.ndarray]:
    """``{"all": every variant, mask: its variants...}`` from ``associate.masks``.

    A mask is a 0/1 column of ``burden.annotations`` (joined on the variant key) or, without
    that file, of ``rare_variants.tsv``; a variant without a value is outside the mask (counted).

    Raises
    ------
    InputDataError
        For a mask column found in neither.
    """
    from rvfedprs.burden import read_annotations, variant_mask

    masks = {"all": np.ones(len(variants), bool)}
    annotations = config["burden"].get("annotations")
    for column in config["associate"]["masks"]:
        if not annotations and column not in variants.columns:
            raise InputDataError(
                f"associate.masks: {column!r} is not a column of rare_variants.tsv (columns "
                f"{list(variants.columns)}) and burden.annotations is not set"
            )
        table = read_annotations(annotations, column) if annotations else None
        values = variant_mask(variants, column, table)
        unannotated = int(np.isnan(values).sum())
        masks[column] = values == 1.0
        if unannotated:
            log.warning("associate.masks %s: %d variants have no value and are outside it",
                        column, unannotated)  # fmt: skip
    return masks


def associate(config: Mapping[str, Any], out: str | Path) -> AssociationResult:
    """Run the federated association of ``config`` (its ``associate`` section) into ``out``.

    Parameters
    ----------
    config : mapping
        A validated configuration; ``associate.data`` (default ``train.data``) is the prepared
        federation, ``train.engine`` the engine, ``secagg`` whether the sums are secure.
    out : str or Path
        The output folder (module docstring).

    Returns
    -------
    AssociationResult

    Raises
    ------
    ConfigError, InputDataError
        For bad settings or inputs (named), or a floor that did not converge.
    """
    from rvfedprs.config import validate_config
    from rvfedprs.plan import run
    from rvfedprs.provenance import write_provenance
    from rvfedprs.tasks import get_task

    config = validate_config(dict(config))
    section = config["associate"]
    data = section["data"] or config["train"]["data"]
    run_config = {
        **config,
        "train": {**config["train"], "data": data, "strategy": "fedassoc",
                  "rounds": int(section["rounds"]), "validation_fraction": 0.0},
        "model": {**config["model"], "start_from_floor": False},
    }  # fmt: skip
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    in_process = config["train"]["engine"] == "inprocess"
    plan = get_task("genomic").plan(run_config, None if in_process else out / "run")
    plan = replace(plan, evaluate_round=_no_evaluation)
    result = run(plan)
    strategy = result.strategy
    if strategy.phase != "done":
        raise InputDataError(
            f"the floor's federated fit did not converge in {section['rounds']} rounds "
            "(raise associate.rounds; is the outcome separable by the PRS and covariates?)"
        )
    variants = pd.read_csv(Path(data) / "rare_variants.tsv", sep="\t", dtype={"chrom": str})
    scores = strategy.scores()
    masks = read_masks(config, variants)
    table = association_table(
        scores, variants, group_names=strategy.group_names,
        maf_cutoffs=section["maf_cutoffs"], masks=masks,
        collapse_mac=float(section["collapse_mac"]), beta=tuple(section["beta"]),
    )  # fmt: skip
    files = {"associations": out / "associations.tsv"}
    table.to_csv(files["associations"], sep="\t", index=False, float_format="%.6g",
                 na_rep="NA")  # fmt: skip
    summary = _summary(strategy, scores, table, variants)
    from rvfedprs.association.plots import manhattan_plot, qq_plot

    files["qq"] = qq_plot(table, out / "qq.png")
    files["manhattan"] = manhattan_plot(table, variants, strategy.layout, out / "manhattan.png")
    files["summary"] = out / "summary.json"
    files["summary"].write_text(json.dumps(summary, indent=2) + "\n")
    write_provenance(
        out, command="rvfedprs associate", parameters=config, seed=plan.seed,
        inputs=[Path(data) / "rare_variants.tsv", Path(data) / "clients.tsv"],
        extra={k: str(v) for k, v in files.items()},
    )  # fmt: skip
    for line in _headline(summary):
        log.info(line)
    return AssociationResult(table, summary, strategy, files)


def _no_evaluation(strategy: Any, server_round: int) -> dict[str, float]:
    return {}


def _summary(strategy, scores, table: pd.DataFrame, variants: pd.DataFrame) -> dict[str, Any]:
    single = table[(table["test"] == "score") & (table["group"] == POOLED)]
    het = table[table["test"] == "score_het"]
    acat = table[(table["test"] == "acat_o") & (table["group"] == POOLED)]
    mac = scores.mac.sum(axis=0)
    tested_units = set(table.loc[table["test"] == "acat_o", "unit"])
    in_units = np.zeros(len(variants), bool)
    for cols in strategy.layout.members:
        in_units[cols] = True
    return {
        "floor": strategy.floor.tolist(),
        "floor_rounds": int(strategy.search.iterations),
        "floor_sites": list(strategy.floor_sites),
        "floor_refits": [dict(r) for r in strategy.refits],
        # the floor's dispersion φ (1: logistic; a linear floor's residual variance, which
        # scales every score variance)
        "dispersion": float(strategy.dispersion),
        "groups": {
            name: {
                "sites": sorted(c for c, g in strategy.site_group.items() if g == m),
                "samples": int(scores.samples[m]),
                # the summed phenotype: cases for a binary trait (a standardised trait sums
                # to ~0 and is not reported)
                **({} if strategy.estimates_dispersion else {"cases": int(scores.cases[m])}),
            }
            for m, name in enumerate(strategy.group_names)
        },  # fmt: skip
        "variants": int(len(variants)),
        "variants_tested": int(len(single)),
        "variants_not_carried": int(np.sum(mac <= 0)),
        "variants_in_no_unit": int(np.sum(~in_units)) if strategy.layout.n_units else None,
        "units": int(strategy.layout.n_units),
        "units_tested": len(tested_units),
        "units_untested": sorted(set(strategy.layout.names) - tested_units),
        "lambda_gc": {
            "score": lambda_gc(single["p"].to_numpy(float)),
            "score_het": lambda_gc(het["p"].to_numpy(float)),
            "acat_o": lambda_gc(acat["p"].to_numpy(float)),
        },  # fmt: skip
        "bonferroni": {
            "variants": 0.05 / max(len(single), 1),
            "units": 0.05 / max(len(tested_units), 1),
        },  # fmt: skip
        "top_variants": _top(single),
        "top_variants_het": _top(het),
        "top_units": _top(acat),
        "top_units_het": _top(table[table["test"] == "acat_o_het"]),
        "heterogeneous_group": HETEROGENEOUS,
    }


def _top(frame: pd.DataFrame, n: int = 10) -> list[dict[str, Any]]:
    best = frame.dropna(subset=["p"]).nsmallest(n, "p")
    return [{"unit": r.unit, "p": float(r.p), "mac": float(r.mac)} for r in best.itertuples()]


def _headline(summary: Mapping[str, Any]) -> list[str]:
    lam = summary["lambda_gc"]
    no_unit = summary["variants_in_no_unit"]
    outside = f" ({no_unit} variants in no unit)" if no_unit else ""
    lines = [
        f"associate: {summary['variants_tested']} of {summary['variants']} rare variants tested "
        f"({summary['variants_not_carried']} carried by nobody in the training data), "
        f"{summary['units_tested']} of {summary['units']} units{outside}; groups "
        f"{list(summary['groups'])}; lambda_GC {lam['score']:.3f}"
    ]
    for refit in summary["floor_refits"]:
        lines.append(f"  round {refit['round']}: {refit['lost']} lost; floor refitted without")
    best_of = (("variant", "top_variants"), ("variant (het)", "top_variants_het"),
               ("unit ACAT-O", "top_units"), ("unit ACAT-O (het)", "top_units_het"))  # fmt: skip
    for label, key in best_of:
        if summary[key]:
            best = summary[key][0]
            lines.append(f"  best {label}: {best['unit']} p = {best['p']:.3g}")
    return lines
