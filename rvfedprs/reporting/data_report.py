"""The data report of the preparation pipeline: per-client counts, matching, MAF, PRS.

:func:`write_data_report` reads the pipeline's outputs (``clients.tsv``, the variant table,
``score_match.tsv``, ``exclusions.tsv`` and each client's ``samples.parquet``), draws PNG figures
and writes one self-contained HTML page (figures embedded) beside them. A binary phenotype is
reported by cases and controls; a quantitative one by the trait's mean and sd per client.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.outcomes import Outcome, outcome
from rvfedprs.reporting.html_page import html_page, png_img

__all__ = ["write_data_report", "match_summary"]


def match_summary(match: pd.DataFrame) -> pd.DataFrame:
    """Count scoring-file variants by match outcome.

    Parameters
    ----------
    match : pandas.DataFrame
        The match log; its outcome column is the first of ``status``, ``match``, ``matched``.

    Returns
    -------
    pandas.DataFrame
        ``outcome, n_variants, share``, largest first.
    """
    column = next((c for c in ("status", "match", "matched", "outcome") if c in match), None)
    if column is None:
        return pd.DataFrame({"outcome": ["(all)"], "n_variants": [len(match)], "share": [1.0]})
    counts = match[column].astype(str).value_counts()
    return pd.DataFrame(
        {
            "outcome": counts.index,
            "n_variants": counts.to_numpy(),
            "share": (counts / max(len(match), 1)).round(4).to_numpy(),
        }
    )


def _figure_maf(variants: pd.DataFrame, rare_maf_max: float, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maf = variants["maf"].astype(float)
    maf = maf[np.isfinite(maf) & (maf > 0)]
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    if len(maf):
        bins = np.logspace(np.log10(max(maf.min(), 1e-5)), np.log10(0.5), 40)
        classes = variants.loc[maf.index, "class"]
        for name, colour in (("common", "#4c72b0"), ("rare", "#dd8452"), ("excluded", "#999")):
            values = maf[classes == name]
            if len(values):
                ax.hist(
                    values, bins=bins, color=colour, alpha=0.85, label=f"{name} ({len(values)})"
                )
        ax.set_xscale("log")
    ax.axvline(rare_maf_max, color="k", linestyle="--", linewidth=1)
    ax.text(rare_maf_max, ax.get_ylim()[1] * 0.95, f" rare_maf_max = {rare_maf_max}", va="top")
    ax.set_xlabel("global minor-allele frequency (summed over clients, log scale)")
    ax.set_ylabel("variants")
    ax.set_title("Minor-allele frequency spectrum")
    ax.legend(frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure_prs(samples: Mapping[str, pd.DataFrame], path: Path, binary: bool = True) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(samples)
    height = max(3.0, 0.45 * len(names) + 1.5)
    fig, ax = plt.subplots(figsize=(8, height), constrained_layout=True)
    # (phenotype, colour, offset): controls and cases, or every sample of a quantitative trait
    groups = ((0, "#4c72b0", -0.17), (1, "#c44e52", 0.17)) if binary else ((None, "#4c72b0", 0),)
    for row, name in enumerate(names):
        table = samples[name]
        for label, colour, offset in groups:
            rows = table["phenotype"] == label if binary else slice(None)
            values = table.loc[rows, "prs"].to_numpy(dtype=float)
            if len(values) == 0:
                continue
            parts = ax.violinplot(
                values,
                positions=[row + offset],
                orientation="horizontal",
                widths=0.32 if binary else 0.64,
                showmedians=True,
            )
            for body in parts["bodies"]:
                body.set_facecolor(colour)
                body.set_alpha(0.6)
            for key in ("cmedians", "cmins", "cmaxes", "cbars"):
                parts[key].set_color(colour)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("PRS (SUM of weight × effect-allele dosage)")
    ax.set_title("PRS per client" + (": controls (blue) and cases (red)" if binary else ""))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure_clients(clients: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, 2, figsize=(10, max(3.0, 0.35 * len(clients) + 1.5)), constrained_layout=True
    )
    y = np.arange(len(clients))
    cases = pd.to_numeric(clients.get("n_cases"), errors="coerce")
    if cases is not None and cases.notna().all():
        controls = clients["n_samples"] - cases
        axes[0].barh(y, controls, color="#4c72b0", label="controls")
        axes[0].barh(y, cases, left=controls, color="#c44e52", label="cases")
        axes[0].legend(frameon=False, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    else:  # a quantitative phenotype: no cases
        axes[0].barh(y, clients["n_samples"], color="#4c72b0")
    axes[0].set_yticks(y, clients["client"])
    axes[0].invert_yaxis()
    axes[0].set_title("Samples per client")
    if "n_rare_carried" in clients:
        axes[1].barh(y, clients["n_rare_carried"], color="#dd8452")
        axes[1].set_yticks(y, clients["client"])
        axes[1].invert_yaxis()
        axes[1].set_xlabel("rare variants with ≥1 carrier in the client")
        axes[1].set_title("Rare variants carried")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, border=0, float_format=lambda x: f"{x:.4g}", na_rep="")


def _img(path: Path, alt: str) -> str:
    return png_img(base64.b64encode(path.read_bytes()).decode(), alt)


def write_data_report(
    *,
    clients: str | Path,
    variants: str | Path,
    score_match: str | Path,
    exclusions: str | Path,
    client_samples: Mapping[str, str | Path],
    out_html: str | Path,
    rare_maf_max: float = 0.01,
    title: str = "rvfedprs data report",
    kind: str | Outcome = "binary",
) -> Path:
    """Draw the figures and write the HTML data report.

    Parameters
    ----------
    clients : path
        ``results/clients.tsv``.
    variants : path
        The global variant table (``maf``, ``class``, ``qc_pass`` per variant).
    score_match : path
        ``results/logs/score_match.tsv``.
    exclusions : path
        ``results/logs/exclusions.tsv``.
    client_samples : mapping of str to path
        Client name → its ``samples.parquet``.
    out_html : path
        The report; figures go to ``figures/`` beside it.
    rare_maf_max : float
        The rare/common threshold, drawn on the MAF spectrum.
    title : str
        Page title.
    kind : {"binary", "quantitative"} or Outcome
        The phenotype's kind (``outcome.json``): PRS by cases and controls, or the trait's mean
        and sd per client in the clients table (``n_cases`` left out).

    Returns
    -------
    Path
        The HTML file written.
    """
    out_html = Path(out_html)
    figures = out_html.parent / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    clients_table = pd.read_csv(clients, sep="\t", dtype={"client": str})
    variants_table = pd.read_csv(variants, sep="\t", low_memory=False)
    match_table = pd.read_csv(score_match, sep="\t", dtype=str)
    excluded = pd.read_csv(exclusions, sep="\t", dtype=str, keep_default_na=False)
    samples = {name: pd.read_parquet(path) for name, path in client_samples.items()}

    binary = outcome(kind).kind == "binary"
    prs_rows = []
    for name, table in samples.items():
        if not binary:
            prs_rows.append(
                {"client": name, "n": len(table), "mean": table["prs"].mean(),
                 "sd": table["prs"].std()}
            )  # fmt: skip
            continue
        for label in (0, 1):
            values = table.loc[table["phenotype"] == label, "prs"]
            prs_rows.append(
                {
                    "client": name,
                    "group": "cases" if label else "controls",
                    "n": len(values),
                    "mean": values.mean(),
                    "sd": values.std(),
                }
            )
    fig_clients = _figure_clients(clients_table, figures / "clients.png")
    fig_maf = _figure_maf(variants_table, rare_maf_max, figures / "maf_spectrum.png")
    fig_prs = _figure_prs(samples, figures / "prs_by_client.png", binary=binary)
    if binary:
        phenotype_note = f"{int(clients_table.get('n_cases', pd.Series(dtype=float)).sum())} cases"
    else:  # the trait's mean and sd per client instead of its cases
        trait = {name: table["phenotype"].astype(float) for name, table in samples.items()}
        clients_table = clients_table.drop(columns="n_cases", errors="ignore")
        clients_table["trait_mean"] = clients_table["client"].map(
            {k: v.mean() for k, v in trait.items()}
        )
        clients_table["trait_sd"] = clients_table["client"].map(
            {k: v.std() for k, v in trait.items()}
        )
        pooled = pd.concat(list(trait.values())) if trait else pd.Series(dtype=float)
        phenotype_note = f"quantitative trait, mean {pooled.mean():.4g}, sd {pooled.std():.4g}"

    n_variants = len(variants_table)
    classes = (
        variants_table["class"].value_counts().reindex(["common", "rare", "excluded"], fill_value=0)
    )
    matches = match_summary(match_table)
    excluded_summary = (
        excluded.groupby(["step", "kind"]).size().rename("n").reset_index()
        if len(excluded)
        else pd.DataFrame({"step": [], "kind": [], "n": []})
    )
    totals = clients_table.drop(columns="client").sum(numeric_only=True)
    parts = [
        f"<p>{len(clients_table)} clients, {int(totals.get('n_samples', 0))} samples "
        f"({phenotype_note}); {n_variants} variants read: "
        f"{classes['common']} common, {classes['rare']} rare (rare-dosage columns), "
        f"{classes['excluded']} excluded.</p>",
        "<h2>Clients</h2>",
        "<p class='note'>carriers = samples with at least one rare allele (with thousands of "
        "rare variants, nearly every sample); rare carried = rare variants with at least one "
        "carrier in the client; rare alleles per sample = the mean rare-allele count"
        + ("" if binary else "; trait mean and sd over the client's samples (sample sd)")
        + ".</p>",
        _table_html(clients_table),
        _img(fig_clients, "samples per client"),
        "<h2>Scoring-file variant matching</h2>",
        _table_html(matches),
        "<h2>Minor-allele frequency spectrum</h2>",
        _img(fig_maf, "MAF spectrum"),
        "<h2>PRS distributions</h2>",
        _table_html(pd.DataFrame(prs_rows)),
        _img(fig_prs, "PRS per client"),
        "<h2>Exclusions</h2>",
        "<p class='note'>Every excluded sample, client and variant is listed with its reason "
        "in <code>results/logs/exclusions.tsv</code>.</p>",
        _table_html(excluded_summary)
        if len(excluded_summary)
        else "<p><strong>None</strong>: no sample, client or variant was excluded.</p>",
    ]
    out_html.write_text(html_page(title, parts))
    return out_html
