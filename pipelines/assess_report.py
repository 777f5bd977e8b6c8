"""Rule ``assess_report``: the workflow's PRS assessed per site and pooled, as ``rvfedprs assess``.

Gathers every site's prepared samples (``results/clients/{client}/samples.parquet``: PRS,
phenotype, covariates) into one table (``results/prepare/assess_inputs.tsv``: ``sample_id,
client, phenotype, prs``, the covariates and, with the ancestry step, ``population, Z_norm1,
Z_norm2``) and runs :func:`rvfedprs.evaluation.assess.run_assessment` on it, so that the report
equals ``rvfedprs assess`` on that table. With the ancestry step (``results/ancestry/``) the PRS
is also normalised on the reference PCs (pgsc_calc's Z_norm1, Z_norm2; fitted on the reference
panel's scores), both normalised scores are assessed beside it, and the report adds the
projected PCs coloured by assigned population and the scores by population. The phenotype's
kind is the prepared federation's (``results/outcome.json``): a quantitative trait is assessed by
its R²s and β per SD (:mod:`rvfedprs.evaluation.assess_quantitative`).
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.ancestry import UNDETERMINED, normalise_prs
from rvfedprs.ancestry.run import read_prs
from rvfedprs.evaluation.assess import ReportSection, png_base64, run_assessment
from rvfedprs.exceptions import InputDataError
from rvfedprs.genomic.data import read_outcome
from rvfedprs.rulelog import logged_rule
from rvfedprs.tsv import write_tsv

logger = logging.getLogger("assess_report")

TITLE = "Polygenic score assessment: the workflow's PRS"
#: The normalised scores (pgsc_calc's names), assessed beside the raw ``prs``.
NORMALISED = ("Z_norm1", "Z_norm2")


def prepared_samples(paths: Sequence[str | Path], split: str) -> pd.DataFrame:
    """Every site's ``samples.parquet`` in one table with its ``client`` (the folder name).

    ``split`` is ``all`` or ``test`` (the test split alone).
    """
    parts = []
    for path in paths:
        table = pd.read_parquet(path)
        table.insert(1, "client", Path(path).parent.name)
        parts.append(table)
    samples = pd.concat(parts, ignore_index=True)
    if split == "test":
        samples = samples[samples["split"] == "test"].reset_index(drop=True)
    return samples.drop(columns="split")


def normalised(
    samples: pd.DataFrame, pcs: pd.DataFrame, reference_prs: pd.DataFrame, n_pcs: int
) -> pd.DataFrame:
    """``Z_norm1, Z_norm2`` of the samples' ``prs`` (and of the reference panel's own scores).

    Parameters
    ----------
    samples : DataFrame
        ``sample_id, prs`` of the prepared samples.
    pcs : DataFrame
        ``results/ancestry/pcs.tsv``.
    reference_prs : DataFrame
        The reference panel's scores, indexed by sample id (one column).
    n_pcs : int
        The PCs the score is regressed on.

    Returns
    -------
    DataFrame
        ``sample_id, source, population, raw, Z_norm1, Z_norm2``: the reference panel's rows
        (population = its label) then the samples' (population = assigned).
    """
    names = [f"PC{i + 1}" for i in range(n_pcs)]
    reference = pcs[pcs["source"] == "reference"].set_index("sample_id")
    target = pcs[pcs["source"] == "target"].set_index("sample_id")
    unprojected = pd.Index(samples["sample_id"]).difference(target.index)
    if len(unprojected):
        raise InputDataError(
            f"{len(unprojected)} prepared samples are not in the ancestry projection "
            f"(e.g. {', '.join(unprojected[:3])}): rerun the ancestry rule"
        )
    ref_prs = reference_prs.iloc[:, 0].reindex(reference.index).to_numpy(np.float64)
    ref_pcs = reference[names].to_numpy(np.float64)
    rows = []
    for source, ids, pc, raw, population in (
        ("reference", reference.index, ref_pcs, ref_prs, reference["population"]),
        (
            "target",
            pd.Index(samples["sample_id"]),
            target.loc[samples["sample_id"], names].to_numpy(np.float64),
            samples["prs"].to_numpy(np.float64),
            target.loc[samples["sample_id"], "population"],
        ),
    ):
        z1, z2 = normalise_prs(ref_pcs, ref_prs, pc, raw)
        rows.append(
            pd.DataFrame(
                {
                    "sample_id": ids,
                    "source": source,
                    "population": population.to_numpy(),
                    "raw": raw,
                    "Z_norm1": z1,
                    "Z_norm2": z2,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def _colours(populations: Sequence[str]) -> dict[str, Any]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if len(populations) <= 10 else "tab20"]
    return {p: cmap(i % cmap.N) for i, p in enumerate(populations)}


def _pca_figure(pcs: pd.DataFrame) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [("PC1", "PC2")] + ([("PC1", "PC3")] if "PC3" in pcs else [])
    reference = pcs[pcs["source"] == "reference"]
    target = pcs[pcs["source"] == "target"]
    colour = _colours(sorted(reference["population"].astype(str).unique()))
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.6 * len(pairs), 5), squeeze=False)
    for ax, (x, y) in zip(axes[0], pairs, strict=True):
        for name, part in reference.groupby("population"):
            ax.scatter(part[x], part[y], s=5, alpha=0.2, color=colour[str(name)])
        for name, part in target.groupby("population"):
            style = (
                {"marker": "x", "color": "black", "s": 16, "linewidths": 0.6}
                if name == UNDETERMINED
                else {"color": colour.get(str(name), "grey"), "s": 12, "edgecolors": "black",
                      "linewidths": 0.3}
            )  # fmt: skip
            ax.scatter(part[x], part[y], label=f"{name} ({len(part)})", **style)
        # a few far-out samples would squeeze the rest into a line: the central 99% is shown
        for axis, limit in ((x, ax.set_xlim), (y, ax.set_ylim)):
            low, high = pcs[axis].quantile([0.005, 0.995])
            limit(low - 0.1 * (high - low), high + 0.1 * (high - low))
        ax.set(xlabel=x, ylabel=y)
    axes[0, 0].set_title("Cohort samples (outlined) on the reference panel (faint)", fontsize=10)
    axes[0, -1].legend(
        title="assigned (n)", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0)
    )
    fig.tight_layout()
    return png_base64(fig)


def _score_figure(scores: pd.DataFrame) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = scores[scores["source"] == "target"]
    populations = sorted(target["population"].astype(str).unique())
    colour = _colours(sorted(scores.loc[scores["source"] == "reference", "population"].unique()))
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.45 * len(populations) + 1.6), sharey=True)
    for ax, column, label in zip(
        axes,
        ("raw", *NORMALISED),
        ("raw PRS", "Z_norm1 (mean adjusted)", "Z_norm2 (mean and variance adjusted)"),
        strict=True,
    ):
        values = [target.loc[target["population"] == p, column].to_numpy() for p in populations]
        boxes = ax.boxplot(
            values, orientation="horizontal", patch_artist=True, showfliers=False, widths=0.6,
            whis=(5, 95),
        )  # fmt: skip
        for box, population in zip(boxes["boxes"], populations, strict=True):
            box.set(facecolor=colour.get(population, "lightgrey"), alpha=0.6)
        for median in boxes["medians"]:
            median.set_color("black")
        if column == "Z_norm2":
            ax.axvline(0, color="grey", lw=0.8, ls="--")
        ax.set(xlabel=label)
    axes[0].set_yticks(range(1, len(populations) + 1), populations)
    axes[0].invert_yaxis()
    axes[0].set_ylabel("assigned population")
    fig.tight_layout()
    return png_base64(fig)


def _mean_sd(values: pd.Series) -> str:
    return f"{values.mean():.2f} ({values.std(ddof=1):.2f})" if len(values) > 1 else ""


def ancestry_sections(samples: pd.DataFrame, pcs: pd.DataFrame, scores: pd.DataFrame):
    """The report's ancestry sections: PCs by assigned population, normalised PRS.

    Parameters
    ----------
    samples : DataFrame
        ``client, population`` of the samples assessed.
    pcs : DataFrame
        ``results/ancestry/pcs.tsv``.
    scores : DataFrame
        :func:`normalised`'s table.

    Returns
    -------
    list of ReportSection
    """
    counts = pd.crosstab(samples["client"], samples["population"])
    counts = counts.reset_index().rename(columns={"client": "site"}).rename_axis(columns=None)
    summary = (
        scores.groupby(["source", "population"])
        .agg(
            n=("raw", "size"),
            raw=("raw", _mean_sd),
            **{name: (name, _mean_sd) for name in NORMALISED},
        )
        .reset_index()
    )
    summary["source"] = summary["source"].map({"reference": "reference panel", "target": "cohort"})
    summary = summary.rename(
        columns={c: f"{c} mean (SD)" for c in ("raw", *NORMALISED)}
    ).sort_values(["source", "population"], ascending=[False, True])
    return [
        ReportSection(
            "Genetic ancestry",
            "Every sample projected onto the reference panel's principal components (OADP, "
            "not shrunk) and given the population a random forest on the reference PCs finds "
            "most probable, when that probability reaches the threshold (else undetermined), "
            "as pgsc_calc does (faint dots: the reference panel, coloured by its labels; axes "
            "span the central 99% of the samples). Only public reference data meets a site's "
            "genotypes; the table counts each site's samples by assigned population.",
            png=_pca_figure(pcs),
            table=counts,
        ),
        ReportSection(
            "PRS normalised for ancestry",
            "pgsc_calc's normalisations, fitted on the reference panel: Z_norm1 is the PRS less "
            "its regression on the PCs (the mean adjusted for ancestry); Z_norm2 divides Z_norm1 "
            "by the SD a gamma regression of its square on the PCs predicts (the variance "
            "adjusted too): mean 0 and SD 1 within each reference population as far as the "
            "PCs capture ancestry (the reference panel's rows of the table show how far). The "
            "table gives mean (SD) by population; the boxes, the cohort's samples by assigned "
            "population (middle half; whiskers 5th to 95th percentile). Z_norm1 and Z_norm2 are "
            "assessed in the table above beside the raw PRS.",
            png=_score_figure(scores),
            table=summary,
        ),
    ]


def main(
    *,
    samples: Sequence[str | Path],
    settings: Mapping[str, Any],
    covariates: Sequence[str],
    out: str | Path,
    inputs_table: str | Path,
    ancestry: Mapping[str, str | Path] | None = None,
    n_normalisation_pcs: int = 4,
    outcome: str | Path | None = None,
) -> pd.DataFrame:
    """Assess the workflow's PRS and write the report.

    Parameters
    ----------
    samples : sequence of paths
        Every site's ``samples.parquet``.
    settings : mapping
        The ``assess`` section (``split``, ``prevalence``, ``federated``).
    covariates : sequence of str
        ``pipeline.covariates`` (columns of ``samples.parquet``).
    out : path
        The report folder (``assess.{tsv,md,html}``, ``provenance.json``).
    inputs_table : path
        The assessed table written (the ``--scores``, ``--phenotypes``, ``--covariates`` and
        ``--samples`` of an equal ``rvfedprs assess``).
    ancestry : mapping, optional
        ``pcs``, ``reference_prs``: the ancestry rule's outputs.
    n_normalisation_pcs : int
        PCs the PRS is normalised on.
    outcome : path, optional
        The federation's ``outcome.json`` (default: beside ``clients/``; absent: binary).

    Returns
    -------
    DataFrame
        The assessment table.
    """
    folder = Path(samples[0]).parents[2] if outcome is None else Path(outcome).parent
    kind = read_outcome(folder)
    table = prepared_samples(samples, settings["split"])
    score_columns = ["prs"]
    sections: list[ReportSection] = []
    if ancestry is not None:
        pcs = pd.read_csv(ancestry["pcs"], sep="\t", dtype={"sample_id": str, "population": str})
        scores = normalised(table, pcs, read_prs(ancestry["reference_prs"]), n_normalisation_pcs)
        target = scores[scores["source"] == "target"].set_index("sample_id")
        table = table.join(
            target[["population", *NORMALISED]], on="sample_id", validate="one_to_one"
        )
        score_columns += list(NORMALISED)
        sections = ancestry_sections(table, pcs, scores)
    write_tsv(table, inputs_table, float_format="%.10g")
    logger.info(
        "%d samples at %d sites (%s split, %s phenotype); scores %s", len(table),
        table["client"].nunique(), settings["split"], kind.kind, score_columns,
    )  # fmt: skip
    result, _ = run_assessment(
        inputs_table,
        inputs_table,
        out,
        prevalence=settings["prevalence"],
        federated=settings["federated"],
        title=TITLE,
        sections=sections,
        phenotype="phenotype",
        phenotype_kind=kind,
        score_columns=score_columns,
        covariates=inputs_table if covariates else None,
        covariate_columns=list(covariates) or None,
        samples=inputs_table,
        group_column="client",
        id_column="sample_id",
    )
    statistics = ("auc", "or_per_sd") if kind.kind == "binary" else ("incremental_r2", "r2")
    for row in result[result["site"] == "pooled"].to_dict("records"):
        logger.info("%s pooled: n=%d %s", row["score"], row["n"],
                    " ".join(f"{key}={row[key]:.4f}" for key in statistics))  # fmt: skip
    return result


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            samples=snakemake.input.samples,
            settings=snakemake.params.settings,
            covariates=snakemake.params.covariates,
            out=snakemake.params.out,
            inputs_table=snakemake.output.inputs,
            ancestry=(
                {"pcs": snakemake.input.pcs, "reference_prs": snakemake.input.reference_prs}
                if snakemake.input.get("pcs")
                else None
            ),
            n_normalisation_pcs=snakemake.params.n_normalisation_pcs,
            outcome=snakemake.input.outcome,
        )
