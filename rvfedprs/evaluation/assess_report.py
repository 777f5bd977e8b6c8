"""The assessment's report: readable table, figures, ``assess.tsv`` / ``.md`` / ``.html``.

:func:`write_assessment` writes the table of :func:`.assess_statistics.assess_scores` as TSV, as
Markdown with the readable cells (:func:`readable_table`) and as one HTML page with the ROC,
risk-by-decile and score-by-group figures embedded (the page skeleton and CSS of
:mod:`rvfedprs.reporting.html_page`, shared with the data report); :func:`run_assessment` is
the ``rvfedprs assess`` command's whole run, inputs to ``provenance.json``.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation import assess_quantitative as quantitative
from rvfedprs.evaluation.assess_inputs import AssessData, load_assess_data
from rvfedprs.evaluation.assess_statistics import POOLED, assess_scores
from rvfedprs.evaluation.prs_metrics import Z95
from rvfedprs.outcomes import BINARY, QUANTITATIVE, Outcome
from rvfedprs.reporting.html_page import html_page, png_img

__all__ = [
    "HOW_TO_READ",
    "readable_table",
    "ReportSection",
    "png_base64",
    "write_assessment",
    "run_assessment",
]


HOW_TO_READ = (
    "How to read this table. AUC: the chance that a random case scores higher than a random "
    "control (0.5 = no discrimination), with DeLong's 95% interval. OR per SD: the odds ratio "
    "for one standard deviation more score, from a logistic regression on the standardised "
    "score and the covariates (Wald 95% interval). Top 10% OR: the odds of being a case among "
    "the 10% highest scores against the other 90% (Woolf's interval; not covariate-adjusted). "
    "R² Nagelkerke: what the score adds to a covariates-only logistic model (Nagelkerke's "
    "pseudo-R², difference of the two models). R² liability: the observed-scale incremental R² "
    "of a linear model turned to the liability scale for population prevalence K (Lee et al. "
    "2012); it depends on K, and on the case fraction of the sample. Each site's row uses its "
    "own samples (its score standardised within it); the pooled row uses all of them "
    "(a site's liability R² uses K with the site's own case fraction)."
)


def _fmt(value: float, digits: int = 3) -> str:
    return "" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _interval(row: Mapping[str, Any], key: str, digits: int = 3) -> str:
    if not np.isfinite(row[key]):
        return "–"
    return (
        f"{_fmt(row[key], digits)} ({_fmt(row[key + '_lo'], digits)}–"
        f"{_fmt(row[key + '_hi'], digits)})"
    )


#: A binary phenotype's readable columns: (header, statistic, digits, with its interval).
_READABLE = (
    ("AUC (95% CI)", "auc", 3, True),
    ("OR per SD (95% CI)", "or_per_sd", 2, True),
    ("Top 10% OR (95% CI)", "or_top_decile", 2, True),
    ("R² Nagelkerke", "r2_nagelkerke", 4, False),
    ("R² liability", "r2_liability", 4, False),
)


def readable_table(table: pd.DataFrame, kind: Outcome = BINARY) -> pd.DataFrame:
    """The assessment as text cells: estimate (95% interval), R² with 4 decimals.

    ``kind`` picks the columns: AUC and odds ratios, or (quantitative) the R²s and β per SD
    (:data:`.assess_quantitative.READABLE`); a statistic absent from ``table`` is left out.
    """
    out = pd.DataFrame({"score": table["score"], "site": table["site"]})
    if kind == BINARY:
        out["n (cases)"] = [f"{r.n} ({r.n_cases})" for r in table.itertuples()]
    else:
        out["n"] = table["n"]
    spec = _READABLE if kind == BINARY else quantitative.READABLE
    for header, key, digits, interval in spec:
        if key in table:
            out[header] = [
                _interval(r, key, digits) if interval else _fmt(r[key], digits)
                for _, r in table.iterrows()
            ]
    if table["note"].astype(bool).any():
        out["note"] = table["note"]
    return out


def _markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.to_numpy()]
    return "\n".join([header, rule, *body])


def png_base64(fig) -> str:
    """``fig`` as a base64 PNG (for an ``<img>``), the figure closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _figures(data: AssessData, table: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(title, caption, base64 PNG) of the ROC curves, risk by decile and score by group.

    A quantitative trait's: :func:`.assess_quantitative.trait_figures`.
    """
    if data.outcome == QUANTITATIVE:
        pooled = table[table["site"] == POOLED].set_index("score")
        figures = quantitative.trait_figures(data.frame, data.scores, data.grouped, pooled)
        return [(title, caption, png_base64(fig)) for title, caption, fig in figures]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    frame, y = data.frame, data.frame["phenotype"].to_numpy()
    pooled = table[table["site"] == POOLED].set_index("score")
    figures = []

    fig, ax = plt.subplots(figsize=(5.2, 5))
    for name in data.scores:
        fpr, tpr, _ = roc_curve(y, frame[name].to_numpy(np.float64))
        ax.plot(fpr, tpr, label=f"{name} (AUC {_fmt(pooled.loc[name, 'auc'])})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set(
        xlabel="False positive rate (1 − specificity)",
        ylabel="True positive rate (sensitivity)",
        title="ROC curve, pooled samples",
    )
    ax.legend(fontsize=8, loc="lower right")
    figures.append(
        (
            "ROC curves",
            "One curve per score over all samples assessed; the dashed "
            "diagonal is a score that ranks at random.",
            png_base64(fig),
        )
    )

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, name in enumerate(data.scores):
        decile = pd.qcut(frame[name].rank(method="first"), 10, labels=False) + 1
        grouped = pd.Series(y).groupby(decile.to_numpy())
        rate, count = grouped.mean(), grouped.size()
        half = Z95 * np.sqrt(rate * (1 - rate) / count)
        offset = (i - (len(data.scores) - 1) / 2) * 0.08
        ax.errorbar(rate.index + offset, rate, yerr=half, marker="o", capsize=3, label=name)
    ax.axhline(y.mean(), color="grey", lw=0.8, ls="--", label=f"overall ({y.mean():.1%})")
    ax.set_xticks(range(1, 11))
    ax.set(
        xlabel="Score decile (1 = lowest)",
        ylabel="Case fraction",
        title="Risk by score decile, pooled samples",
    )
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0, decimals=0))
    ax.legend(fontsize=8)
    figures.append(
        (
            "Risk by score decile",
            "The share of cases in each tenth of the score "
            "distribution, with 95% binomial intervals. A useful score rises from left "
            "to right.",
            png_base64(fig),
        )
    )

    if data.grouped:
        groups = sorted(frame["group"].unique())
        fig, axes = plt.subplots(
            len(data.scores),
            1,
            squeeze=False,
            figsize=(7.5, (0.42 * len(groups) + 1.3) * len(data.scores)),
        )
        for ax, name in zip(axes[:, 0], data.scores, strict=True):
            s = frame[name].to_numpy(np.float64)
            z = (s - s.mean()) / s.std(ddof=1)
            for label, colour, shift in ((0, "#4c72b0", -0.18), (1, "#c44e52", 0.18)):
                values = [z[(frame["group"] == g).to_numpy() & (y == label)] for g in groups]
                positions = [k + shift for k, v in enumerate(values) if len(v)]
                kept = [v for v in values if len(v)]
                if kept:
                    ax.boxplot(
                        kept,
                        positions=positions,
                        widths=0.3,
                        orientation="horizontal",
                        patch_artist=True,
                        showfliers=False,
                        boxprops={"facecolor": colour, "alpha": 0.6},
                        medianprops={"color": "k"},
                    )
            ax.set_yticks(range(len(groups)), groups)
            ax.invert_yaxis()
            ax.set(xlabel=f"{name}, standardised over all samples", title=name)
        axes[0, 0].legend(
            handles=[
                matplotlib.patches.Patch(color="#4c72b0", alpha=0.6, label="controls"),
                matplotlib.patches.Patch(color="#c44e52", alpha=0.6, label="cases"),
            ],
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
        )
        fig.tight_layout()
        figures.append(
            (
                "Score by site or group",
                "Boxes span the middle half of each group's "
                "standardised scores (controls blue, cases red; whiskers 1.5 IQR). A "
                "shifted group may need its own calibration or ancestry adjustment.",
                png_base64(fig),
            )
        )
    return figures


@dataclass
class ReportSection:
    """A section a caller adds to the report after the assessment's own figures.

    Attributes
    ----------
    heading, caption : str
    png : str, optional
        A base64 PNG (:func:`png_base64`), shown in the HTML.
    table : DataFrame, optional
        Shown in the HTML and the Markdown.
    """

    heading: str
    caption: str
    png: str | None = None
    table: pd.DataFrame | None = None


def write_assessment(
    data: AssessData,
    table: pd.DataFrame,
    out: str | Path,
    *,
    prevalence: float | None = None,
    title: str = "Polygenic score assessment",
    sections: Sequence[ReportSection] = (),
) -> list[Path]:
    """Write ``assess.tsv``, ``assess.md`` and ``assess.html`` (figures embedded) into ``out``.

    ``sections`` follow the assessment's own figures (their tables in the Markdown too).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    readable = readable_table(table, data.outcome)
    how_to_read = HOW_TO_READ if data.outcome == BINARY else quantitative.HOW_TO_READ
    y, binary = data.frame["phenotype"], data.outcome == BINARY
    covariates = ", ".join(c.removeprefix("cov:") for c in data.covariates) or "none"
    counted = f"{int(y.sum())} cases, {y.mean():.1%}" if binary else (
        f"trait mean {y.mean():.4g}, SD {y.std(ddof=1):.4g}"
    )  # fmt: skip
    facts = [f"{len(y)} samples ({counted}); scores: {', '.join(data.scores)}; covariates: "
             f"{covariates}."]  # fmt: skip
    if binary:
        facts.append(f"Population prevalence K = {prevalence}." if prevalence is not None
                     else "No population prevalence given: no liability-scale R².")  # fmt: skip
    facts += [f"Note: {note}." for note in data.notes]
    if not binary and (table["method"] == "federated").any():
        facts.append(quantitative.FEDERATED)
    if "auc_tie_bound" in table:
        bound = table["auc_tie_bound"].max()
        facts.append(
            "Pooled rows are federated: built from each site's sums and score "
            f"histograms (AUC within {bound:.1e} of the exact pooled AUC)."
        )
    paths = [out / "assess.tsv", out / "assess.md", out / "assess.html"]
    table.to_csv(paths[0], sep="\t", index=False, float_format="%.6g")
    markdown = [f"# {title}", " ".join(facts), _markdown(readable), how_to_read]
    for section in sections:
        markdown.append(f"## {section.heading}")
        if section.table is not None:
            markdown.append(_markdown(section.table))
        markdown.append(section.caption)
    paths[1].write_text("\n\n".join(markdown) + "\n")
    parts = [
        "".join(f"<p>{html.escape(f)}</p>" for f in facts),
        readable.to_html(index=False, border=0, na_rep=""),
        f"<p class='note'>{html.escape(how_to_read)}</p>",
    ]
    own = [ReportSection(heading, caption, png) for heading, caption, png in _figures(data, table)]
    for section in [*own, *sections]:
        parts.append(f"<h2>{html.escape(section.heading)}</h2>")
        if section.png is not None:
            parts.append(png_img(section.png, section.heading))
        if section.table is not None:
            parts.append(section.table.to_html(index=False, border=0, na_rep=""))
        parts.append(f"<p class='note'>{html.escape(section.caption)}</p>")
    paths[2].write_text(html_page(title, parts, text_columns=2))
    return paths


def run_assessment(
    scores: str | Path,
    phenotypes: str | Path,
    out: str | Path,
    *,
    prevalence: float | None = None,
    federated: bool = False,
    title: str = "Polygenic score assessment",
    sections: Sequence[ReportSection] = (),
    **inputs: Any,
) -> tuple[pd.DataFrame, list[Path]]:
    """Read the inputs, assess every score, write the outputs and ``provenance.json``.

    ``inputs`` are :func:`load_assess_data`'s keyword options; ``title`` and ``sections`` go to
    :func:`write_assessment`. Returns the table and the files written.
    """
    from rvfedprs.provenance import write_provenance

    data = load_assess_data(scores, phenotypes, **inputs)
    table = assess_scores(data, prevalence=prevalence, federated=federated)
    paths = write_assessment(
        data, table, out, prevalence=prevalence, title=title, sections=sections
    )
    files = [scores, phenotypes, inputs.get("covariates"), inputs.get("samples")]
    parameters = {
        "scores": scores,
        "phenotypes": phenotypes,
        "prevalence": prevalence,
        "federated": federated,
        **inputs,
        "phenotype_kind": data.outcome.kind,
    }
    paths.append(
        write_provenance(
            out,
            command="rvfedprs assess",
            parameters=parameters,
            seed=None,
            inputs=[f for f in files if f is not None],
            extra={"n_samples": len(data.frame), "notes": data.notes},
        )
    )
    return table, paths
