"""``rvfedprs assess``: how good a score is, per site and pooled.

``rvfedprs assess --scores prs.tsv --phenotypes pheno.tsv [--phenotype T2D] [--phenotype-kind
binary|quantitative] [--covariates cov.tsv] [--samples samples.tsv --group-column client]
[--prevalence 0.1] [--federated] --out DIR`` writes ``assess.tsv``, ``assess.md``,
``assess.html`` (ROC, risk by decile, score by group; for a quantitative trait the mean trait by
score decile and score against trait, embedded) and ``provenance.json``. Bad input stops it with
a one-line error (exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rvfedprs.outcomes import OUTCOMES

HELP = (
    "assess scores against a phenotype: AUC (95% CI), OR per SD, top-decile OR, incremental "
    "R² (Nagelkerke, liability); for a quantitative trait PRSice-2's null, full and incremental "
    "R², β per SD; per site and pooled"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs assess``."""
    parser.add_argument(
        "--scores",
        type=Path,
        required=True,
        help="score table: sample id + score columns (prepare score output)",
    )
    parser.add_argument(
        "--score-columns",
        nargs="+",
        metavar="COL",
        help="score columns (default: SUM / <name>_SUM, else every numeric one)",
    )
    parser.add_argument(
        "--phenotypes",
        type=Path,
        required=True,
        help="table with a sample id and a 0/1 or quantitative phenotype (blank = missing)",
    )
    parser.add_argument(
        "--phenotype", metavar="COL", help="phenotype column (needed when the table has several)"
    )
    parser.add_argument(
        "--phenotype-kind",
        choices=sorted(OUTCOMES),
        default="binary",
        help="the phenotype's kind (default: binary)",
    )
    parser.add_argument(
        "--covariates",
        type=Path,
        help="table with a sample id and covariates (may be --phenotypes)",
    )
    parser.add_argument(
        "--covariate-columns",
        nargs="+",
        metavar="COL",
        help="covariates to adjust for (default: every column; text -> 0/1)",
    )
    parser.add_argument(
        "--samples", type=Path, help="samples sheet giving each sample's site or group"
    )
    parser.add_argument(
        "--group-column",
        default="client",
        metavar="COL",
        help="site/group column of --samples (default: client)",
    )
    parser.add_argument(
        "--id-column",
        metavar="COL",
        help="sample id column of every table (default: first of sample_id, "
        "IID, #IID, iid, Subject id, eid)",
    )
    parser.add_argument(
        "--prevalence",
        type=float,
        metavar="K",
        help="population prevalence for the liability-scale R² (Lee et al. 2012)",
    )
    parser.add_argument(
        "--federated",
        action="store_true",
        help="pooled rows from the sites' sums and score histograms only",
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    """Assess every score and write the tables, the HTML report and provenance.json."""
    from rvfedprs.evaluation.assess import run_assessment

    table, paths = run_assessment(
        args.scores,
        args.phenotypes,
        args.out,
        prevalence=args.prevalence,
        federated=args.federated,
        phenotype=args.phenotype,
        phenotype_kind=args.phenotype_kind,
        score_columns=args.score_columns,
        covariates=args.covariates,
        covariate_columns=args.covariate_columns,
        samples=args.samples,
        group_column=args.group_column,
        id_column=args.id_column,
    )
    for row in table[table["site"] == "pooled"].itertuples():
        if args.phenotype_kind == "quantitative":
            print(
                f"{row.score}: n={row.n} incremental_r2={row.incremental_r2:.4f} "
                f"r2={row.r2:.4f} beta_per_sd={row.beta_per_sd:.4g}"
            )
            continue
        print(
            f"{row.score}: n={row.n} cases={row.n_cases} auc={row.auc:.4f} "
            f"or_per_sd={row.or_per_sd:.3f} r2_nagelkerke={row.r2_nagelkerke:.4f}"
        )
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
