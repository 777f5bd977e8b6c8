"""Rule ``compare_strategies``: one table and one figure comparing the trained strategies.

With each strategy's test predictions (``rvfedprs evaluate``'s ``predictions.parquet``) the
table also gives DeLong 95% intervals of every AUC, the PRS-only floor (the score every site
already has) and, on a simulated cohort, the oracle ceiling (the AUC of the true genetic values
on the same test samples), the share of the learnable signal each strategy captures, and the
carrier AUC per true cluster, so that a reader can tell signal from sampling noise.
"""

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from rvfedprs.evaluation.checks import Z95, auc_warnings  # noqa: E402
from rvfedprs.evaluation.report.plots import save_figure  # noqa: E402
from rvfedprs.exceptions import InputDataError  # noqa: E402
from rvfedprs.rulelog import logged_rule  # noqa: E402

logger = logging.getLogger("compare_strategies")

COLUMNS = (
    "strategy",
    "auc",
    "auprc",
    "carrier_auc",
    "n_carriers",
    "client_auc_mean",
    "client_auc_std",
    "ari",
    "n_clusters",
    "selected_round",
    "wall_s",
)
#: Added with predictions: DeLong 95% intervals and the share of the learnable signal.
INTERVAL_COLUMNS = (
    "auc_ci_low",
    "auc_ci_high",
    "carrier_auc_ci_low",
    "carrier_auc_ci_high",
    "signal_share",
    "carrier_signal_share",
)
FLOOR, ORACLE = "prs_only (floor)", "oracle (ceiling)"
REQUIRED = ("strategy", "auc", "auprc", "carrier_auc", "client_auc", "clusters", "ari")
QUANTITATIVE_REQUIRED = ("strategy", "r2", "incremental_r2", "client_r2", "clusters")


def read_metrics(path: str | Path) -> dict:
    """A ``metrics.json`` written by ``rvfedprs train``/``evaluate``, checked for its keys."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputDataError(f"{path}: cannot read metrics ({exc})") from None
    required = QUANTITATIVE_REQUIRED if record.get("metric") == "r2" else REQUIRED
    missing = [k for k in required if k not in record]
    if missing:
        raise InputDataError(f"{path} lacks metrics {missing}")
    return record


def read_wall_time(path: str | Path) -> float:
    """Seconds of a Snakemake ``benchmark:`` file (its ``s`` column, first row)."""
    table = pd.read_csv(path, sep="\t")
    if "s" not in table.columns or table.empty:
        raise InputDataError(f"{path} is not a Snakemake benchmark file (no 's' column)")
    return float(table["s"].iloc[0])


def _number(value: object) -> float:
    return float("nan") if value is None or value is pd.NA else float(value)


def _finite(value: object) -> bool:
    return math.isfinite(_number(value))


def comparison_table(
    metrics: Sequence[dict], wall_s: Sequence[float] | None = None
) -> pd.DataFrame:
    """One row per strategy with the headline metrics (design §11).

    Parameters
    ----------
    metrics : sequence of dict
        Each strategy's ``metrics.json`` content.
    wall_s : sequence of float, optional
        Training wall time of each strategy (same order); NaN when not given.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLUMNS`; ``client_auc_mean``/``client_auc_std`` over the clients with a
        finite AUC (population standard deviation); ``n_clusters`` = distinct cluster labels.
    """
    if wall_s is not None and len(wall_s) != len(metrics):
        raise ValueError(f"{len(metrics)} metrics but {len(wall_s)} wall times")
    rows = []
    for i, record in enumerate(metrics):
        aucs = np.array([_number(v) for v in record["client_auc"].values()], dtype=np.float64)
        aucs = aucs[np.isfinite(aucs)]
        rows.append(
            {
                "strategy": record["strategy"],
                "auc": _number(record["auc"]),
                "auprc": _number(record["auprc"]),
                "carrier_auc": _number(record["carrier_auc"]),
                "n_carriers": record.get("n_carriers"),
                "client_auc_mean": float(aucs.mean()) if aucs.size else float("nan"),
                "client_auc_std": float(aucs.std()) if aucs.size else float("nan"),
                "ari": _number(record["ari"]),
                "n_clusters": len(set(map(str, record["clusters"].values()))),
                # the round chosen on validation (0: the floor itself), when one was chosen
                "selected_round": (record.get("selection") or {}).get("selected_round"),
                "wall_s": float("nan") if wall_s is None else float(wall_s[i]),
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


#: Columns of a quantitative phenotype's comparison (metrics.json's R² keys).
QUANTITATIVE_COLUMNS = (
    "strategy", "r2", "r2_lo", "r2_hi", "incremental_r2", "incremental_r2_lo",
    "incremental_r2_hi", "carrier_r2", "n_carriers", "client_r2_mean", "client_r2_std",
    "prs_only_r2", "oracle_r2", "selected_round", "wall_s",
)  # fmt: skip


def quantitative_table(
    metrics: Sequence[dict], wall_s: Sequence[float] | None = None
) -> pd.DataFrame:
    """One row per strategy of a quantitative phenotype's run (:data:`QUANTITATIVE_COLUMNS`)."""
    if wall_s is not None and len(wall_s) != len(metrics):
        raise ValueError(f"{len(metrics)} metrics but {len(wall_s)} wall times")
    rows = []
    for i, record in enumerate(metrics):
        row = {c: _number(record.get(c)) for c in QUANTITATIVE_COLUMNS[1:-2]}
        row["strategy"] = record["strategy"]
        row["n_carriers"] = record.get("n_carriers")
        row["selected_round"] = (record.get("selection") or {}).get("selected_round")
        row["wall_s"] = float("nan") if wall_s is None else float(wall_s[i])
        rows.append(row)
    return pd.DataFrame(rows, columns=list(QUANTITATIVE_COLUMNS))


def quantitative_report(table: pd.DataFrame) -> str:
    """The quantitative comparison in Markdown: R² and incremental R² with their intervals."""

    def interval(row, key: str) -> str:
        return f"{_fmt(row[key])} [{_fmt(row[key + '_lo'])}, {_fmt(row[key + '_hi'])}]"

    lines = [
        "| strategy | R² [95% CI] | incremental R² over covariates [95% CI] | carrier R² (n) "
        "| client R² mean ± std | round chosen | wall time (s) |",
        "|" + "---|" * 7,
    ]
    for row in table.to_dict("records"):
        chosen = row["selected_round"]
        lines.append(
            f"| {row['strategy']} | {interval(row, 'r2')} | {interval(row, 'incremental_r2')} "
            f"| {_fmt(row['carrier_r2'])} ({_fmt(row['n_carriers'])}) "
            f"| {_fmt(row['client_r2_mean'])} ± {_fmt(row['client_r2_std'])} "
            f"| {'–' if not _finite(chosen) else ('floor' if int(chosen) == 0 else int(chosen))} "
            f"| {_fmt(row['wall_s'], 0)} |"
        )
    if len(table):
        first = table.iloc[0]
        lines += ["", f"PRS alone on the same test samples: R² {_fmt(first['prs_only_r2'])}; "
                  "the true genetic value (simulated cohorts only): "
                  f"R² {_fmt(first['oracle_r2'])}."]  # fmt: skip
    rows = table.to_dict("records")
    below = [r for r in rows if _finite(r["r2_hi"]) and _finite(r["prs_only_r2"])
             and r["r2_hi"] < r["prs_only_r2"]]  # fmt: skip
    if below:
        lines += ["", "**Warnings** (a model that contains the PRS should not explain less):", ""]
        lines += [f"- {r['strategy']}: R² {_fmt(r['r2'])} (CI up to {_fmt(r['r2_hi'])}) is below "
                  f"the PRS alone's {_fmt(r['prs_only_r2'])}" for r in below]  # fmt: skip
    lines += [
        "",
        "How to read this: R² is the squared correlation of each model's prediction with the "
        "(standardised) trait on the pooled test samples, with the interval of Fisher's z; the "
        "incremental R² is R²(trait ~ covariates + prediction) − R²(trait ~ covariates) "
        "(PRSice-2's PRS.R2), its interval from the partial correlation. Round 'floor': no "
        "round beat the federated linear regression on PRS + covariates on validation.",
    ]
    return "\n".join(lines) + "\n"


def _fmt(value: object, digits: int = 3) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(table: pd.DataFrame) -> str:
    """The comparison as a Markdown table (client AUC as mean ± std, wall time in seconds)."""
    header = (
        "| strategy | AUC | AUPRC | carrier AUC (n carriers) | client AUC mean ± std "
        "| ARI | clusters | wall time (s) |"
    )
    lines = [header, "|" + "---|" * 8]
    for row in table.itertuples(index=False):
        lines.append(
            f"| {row.strategy} | {_fmt(row.auc)} | {_fmt(row.auprc)} "
            f"| {_fmt(row.carrier_auc)} ({_fmt(row.n_carriers)}) "
            f"| {_fmt(row.client_auc_mean)} ± {_fmt(row.client_auc_std)} "
            f"| {_fmt(row.ari, 2)} | {row.n_clusters} | {_fmt(row.wall_s, 0)} |"
        )
    return "\n".join(lines) + "\n"


def _client_errors(record: dict, key: str, clients: list[str], values: list[float]) -> np.ndarray:
    """(2, clients) distances from each bar to its 95% interval's ends, NaN where none.

    DeLong's symmetric interval for an AUC (``client_auc_se``); Fisher's z interval of an R²
    (``client_r2_ci``), asymmetric. A metrics file written before either gives NaNs.
    """
    if key == "client_auc":
        se = record.get("client_auc_se") or {}
        half = np.array([Z95 * _number(se.get(c)) for c in clients])
        return np.vstack([half, half])
    ci = record.get("client_r2_ci") or {}
    ends = np.array([ci.get(c, (np.nan, np.nan)) for c in clients], np.float64).reshape(-1, 2)
    return np.abs(ends.T - np.asarray(values, np.float64))


def client_auc_figure(metrics: Sequence[dict], out: str | Path) -> Path:
    """Grouped bars: each client's test AUC (R² for a quantitative trait) by strategy (PNG)."""
    key = "client_r2" if metrics and metrics[0].get("metric") == "r2" else "client_auc"
    label = "test R²" if key == "client_r2" else "test AUC"
    clients = sorted({c for record in metrics for c in record[key]})
    width = 0.8 / max(len(metrics), 1)
    x = np.arange(len(clients))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(clients)), 4.2))
    top = 0.0  # the highest bar or interval end
    for i, record in enumerate(metrics):
        values = [_number(record[key].get(c)) for c in clients]
        errors = _client_errors(record, key, clients, values)
        top = float(np.nanmax([top, *(np.asarray(values) + np.nan_to_num(errors[1]))]))
        ax.bar(x + (i - (len(metrics) - 1) / 2) * width, values, width, label=record["strategy"],
               yerr=errors if np.isfinite(errors).any() else None, capsize=1.5,
               error_kw={"elinewidth": 0.6, "ecolor": "#333333"})  # fmt: skip
    if key == "client_auc":
        ax.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xticks(x, clients, rotation=45, ha="right")
    ax.set_ylabel(label)
    ax.set_ylim(0.0, 1.0 if key == "client_auc" or not top > 0 else min(1.0, 1.1 * top))
    ax.set_title(f"Per-client {label} by strategy (bars: 95% intervals)", pad=28)
    ax.legend(ncol=min(len(metrics), 6), fontsize="small", loc="lower center",
              bbox_to_anchor=(0.5, 1.0), frameon=False)  # above the axes, off the bars  # fmt: skip
    fig.tight_layout()
    return save_figure(fig, out, dpi=120)


def strategy_outcomes(
    strategies: Sequence[str],
    predictions: Sequence[str | Path],
    data: str | Path,
    *,
    truth: str | Path | None = None,
    samples: str | Path | None = None,
    genotypes: Sequence[str | Path] | None = None,
) -> dict[str, pd.DataFrame]:
    """Each strategy's test outcomes, and the PRS-only floor's and the oracle's.

    Parameters
    ----------
    strategies : sequence of str
    predictions : sequence of paths
        Each strategy's ``predictions.parquet`` (``client, sample_id, y, p``), same order.
    data : path
        The per-client inputs the strategies were evaluated on.
    truth, samples : paths, optional
        ``truth/causal_variants.tsv`` and ``samples.tsv`` of a simulated cohort: carrier AUCs,
        true clusters and the oracle (``genetic_values.tsv`` beside the truth, or the
        ``genotypes``).
    genotypes : sequence of paths, optional

    Returns
    -------
    dict of str to DataFrame
        Name → :func:`rvfedprs.protocol.outcomes.outcome_table` (the floor and the oracle under
        :data:`FLOOR` and :data:`ORACLE`).
    """
    from rvfedprs.evaluation import carrier_masks, load_truth
    from rvfedprs.genomic.data import load_federation
    from rvfedprs.protocol.outcomes import outcome_table, predictions_frame
    from rvfedprs.protocol.references import genetic_values, oracle_scores, prs_only_scores

    federation = load_federation(data)
    test = federation.test
    loaded = load_truth(truth, samples) if samples is not None else None
    carriers, groups = None, None
    if loaded is not None:
        groups = dict(zip(loaded.samples["sample_id"].astype(str),
                          loaded.samples["cluster"].astype(str), strict=True))  # fmt: skip
        if loaded.causal is not None:
            carriers = carrier_masks(test, federation.variant_keys, loaded)

    def outcomes(scores: dict[str, np.ndarray]) -> pd.DataFrame:
        frame = predictions_frame(scores, test, sample_clusters=groups, carriers=carriers)
        return outcome_table(frame)

    out = {}
    for name, path in zip(strategies, predictions, strict=True):
        table = pd.read_parquet(path)
        score = dict(zip(table["sample_id"].astype(str), table["p"], strict=True))
        missing = [s for d in test.values() for s in d.sample_ids if s not in score]
        if missing:
            raise InputDataError(
                f"{path}: no prediction for {len(missing)} test samples of {data}: "
                f"{', '.join(missing[:5])}"
            )
        scores = {c: np.array([score[s] for s in d.sample_ids]) for c, d in test.items()}
        out[name] = outcomes(scores)
    out[FLOOR] = outcomes(prs_only_scores(federation.train, test))
    if truth is not None:
        ids = [s for c in sorted(test) for s in test[c].sample_ids]
        values = genetic_values(Path(truth).parent, ids, genotypes=genotypes or None)
        out[ORACLE] = outcomes(oracle_scores(test, dict(zip(ids, values, strict=True))))
    return out


def _value(outcomes: pd.DataFrame, subset: str, metric: str) -> pd.Series:
    rows = outcomes[(outcomes["subset"] == subset) & (outcomes["metric"] == metric)]
    if rows.empty:
        return pd.Series({"value": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": 0})
    return rows.iloc[0]


def with_intervals(table: pd.DataFrame, outcomes: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The comparison table with intervals, floor and oracle rows, per-cluster carrier AUCs.

    Adds DeLong 95% intervals, the share of the learnable signal and ``carrier_auc_<cluster>``
    columns, and rows for the PRS-only floor and the oracle ceiling. The share is
    (AUC − AUC_floor)/(AUC_oracle − AUC_floor) (SPEC §10), NaN without an oracle.
    """
    rows = []
    extra = [n for n in (FLOOR, ORACLE) if n in outcomes]
    clusters = sorted(
        {s.split("=", 1)[1] for t in outcomes.values() for s in t["subset"] if s != "pooled"}
    )
    base = table.set_index("strategy")
    for name in [*table["strategy"], *extra]:
        row = base.loc[name].to_dict() if name in base.index else {}
        row["strategy"] = name
        o = outcomes.get(name)
        if o is not None:
            for metric in ("auc", "carrier_auc"):
                value = _value(o, "pooled", metric)
                row[metric] = float(value["value"])
                row[f"{metric}_ci_low"] = value["ci_low"]
                row[f"{metric}_ci_high"] = value["ci_high"]
            row["n_carriers"] = int(_value(o, "pooled", "carrier_auc")["n"])
            for cluster in clusters:
                row[f"carrier_auc_{cluster}"] = float(
                    _value(o, f"cluster={cluster}", "carrier_auc")["value"]
                )
        rows.append(row)
    out = pd.DataFrame(rows)
    for metric, share in (("auc", "signal_share"), ("carrier_auc", "carrier_signal_share")):
        floor = out.loc[out["strategy"] == FLOOR, metric]
        ceiling = out.loc[out["strategy"] == ORACLE, metric]
        if len(floor) and len(ceiling) and float(ceiling.iloc[0]) != float(floor.iloc[0]):
            gap = float(ceiling.iloc[0]) - float(floor.iloc[0])
            out[share] = (out[metric] - float(floor.iloc[0])) / gap
        else:
            out[share] = np.nan
    columns = list(COLUMNS) + list(INTERVAL_COLUMNS)
    columns += [f"carrier_auc_{c}" for c in clusters]
    out = out.reindex(columns=columns)
    for column in ("n_carriers", "n_clusters", "selected_round"):
        out[column] = out[column].astype("Int64")
    return out


def _ci(row, metric: str) -> str:
    value = getattr(row, metric)
    low, high = getattr(row, f"{metric}_ci_low"), getattr(row, f"{metric}_ci_high")
    if not math.isfinite(_number(value)):
        return "–"
    if not math.isfinite(_number(low)):
        return _fmt(value)
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def floor_warnings(table: pd.DataFrame, records: Sequence[dict] = ()) -> list[str]:
    """Strategies whose test AUC is below 0.5 or below the floor, and sites below 0.5.

    A pooled AUC below 0.5 or below the floor beyond its 95% interval; each site's below 0.5
    from the ``records``' ``client_auc`` and ``client_auc_se``, as ``metrics.json`` warns.
    """
    floor = table.loc[table["strategy"] == FLOOR, "auc"]
    floor_auc = float(floor.iloc[0]) if len(floor) else None
    by_name = {record["strategy"]: record for record in records}
    out = []
    for row in table.itertuples(index=False):
        if row.strategy in (FLOOR, ORACLE):
            continue
        se = None
        if hasattr(row, "auc_ci_high"):
            se = (_number(row.auc_ci_high) - _number(row.auc_ci_low)) / (2 * Z95)
        record = by_name.get(row.strategy, {})
        out += auc_warnings(
            row.strategy,
            _number(row.auc),
            se=se,
            floor_auc=floor_auc,
            client_auc=record.get("client_auc"),
            client_se=record.get("client_auc_se"),
        )
    return out


def tuning_notes(records: Sequence[dict]) -> str:
    """What a tuned study chose for each strategy (its ``metrics.json``'s ``tuning``), or ''."""
    tuned = [r for r in records if r.get("tuning")]
    if not tuned:
        return ""
    lines = ["", "Configuration chosen on validation (a tuned study, `study.budget`; every "
             "trial in `tuning/<strategy>/tuning.tsv`):", ""]  # fmt: skip
    for record in tuned:
        tuning = record["tuning"]
        chosen = ", ".join(f"{k}={v}" for k, v in tuning["configuration"].items())
        scores = ", ".join(_fmt(score) for score in tuning["validation_scores"])
        lines.append(
            f"- {record['strategy']}: trial {tuning['chosen_trial']} of {tuning['budget']} "
            f"({chosen or 'as configured'}); validation {record['selection']['metric']} "
            f"per trial {scores}"
        )
    return "\n".join(lines) + "\n"


def markdown_report(table: pd.DataFrame, records: Sequence[dict] = ()) -> str:
    """The comparison with intervals, floor and ceiling, and carrier AUC per true cluster."""
    header = (
        "| strategy | AUC [95% CI] | carrier AUC [95% CI] (n carriers) | share of the learnable "
        "signal: AUC / carrier AUC | client AUC mean ± std | ARI | clusters | wall time (s) |"
    )
    lines = [header, "|" + "---|" * 8]
    for row in table.itertuples(index=False):
        reference = row.strategy in (FLOOR, ORACLE)
        lines.append(
            f"| {row.strategy} | {_ci(row, 'auc')} "
            f"| {_ci(row, 'carrier_auc')} ({_fmt(row.n_carriers)}) "
            f"| {_fmt(row.signal_share, 2)} / {_fmt(row.carrier_signal_share, 2)} "
            + ("| – | – | – | – |" if reference else
               f"| {_fmt(row.client_auc_mean)} ± {_fmt(row.client_auc_std)} "
               f"| {_fmt(row.ari, 2)} | {_fmt(row.n_clusters)} | {_fmt(row.wall_s, 0)} |")
        )  # fmt: skip
    clusters = [c[len("carrier_auc_"):] for c in table.columns
                if c.startswith("carrier_auc_") and not c.startswith("carrier_auc_ci")]  # fmt: skip
    if clusters:
        lines += ["", "Carrier AUC per true cluster:", "", "| strategy | " + " | ".join(clusters)
                  + " |", "|---|" + "---|" * len(clusters)]  # fmt: skip
        for row in table.to_dict("records"):
            cells = [_fmt(_number(row[f"carrier_auc_{c}"])) for c in clusters]
            lines.append(f"| {row['strategy']} | " + " | ".join(cells) + " |")
    chosen = [(r.strategy, r.selected_round) for r in table.itertuples(index=False)
              if r.strategy not in (FLOOR, ORACLE) and _finite(r.selected_round)]  # fmt: skip
    if chosen:
        lines += ["", "Round chosen on validation (held out of training; round 0 is the floor "
                  "every model starts from, reported when no round beat it):", ""]  # fmt: skip
        lines += [
            f"- {name}: " + ("**the floor itself** (no round beat it on validation)"
                             if int(r) == 0 else f"round {int(r)}")
            for name, r in chosen
        ]  # fmt: skip
    found = floor_warnings(table, records)
    if found:
        lines += ["", "**Warnings** (a model that contains the PRS should rank neither below "
                  "chance nor below the floor):", ""] + [f"- {w}" for w in found]  # fmt: skip
    lines += [
        "",
        "How to read this: intervals are DeLong 95% intervals of each AUC on this one test "
        "split (sampling noise of the test samples only; training randomness and the cohort "
        "itself vary too: `simulations/scenario_map/` repeats the comparison over "
        "independently simulated cohorts). Two strategies whose intervals overlap may still "
        "differ (paired tests: `rvfedprs.evaluation.paired`). A single site's AUC on ~200 "
        "test samples with ~20 cases has a standard error of about 0.06. The PRS-only floor "
        "is the score every site already has; the oracle ceiling is the AUC of the true "
        "genetic values (simulated cohorts only); the share of the learnable signal is "
        "(AUC − floor)/(oracle − floor). Carriers: test samples carrying a causal rare "
        "variant of their own cluster.",
    ]
    return "\n".join(lines) + "\n"


def main(
    metrics: Sequence[str | Path],
    benchmarks: Sequence[str | Path] | None,
    out_csv: str | Path,
    out_md: str | Path,
    out_png: str | Path,
    *,
    predictions: Sequence[str | Path] | None = None,
    data: str | Path | None = None,
    truth: str | Path | None = None,
    samples: str | Path | None = None,
    genotypes: Sequence[str | Path] | None = None,
) -> pd.DataFrame:
    """Write the comparison table (CSV, Markdown) and the per-client AUC figure.

    Parameters
    ----------
    metrics : sequence of paths
        Each strategy's ``metrics.json``.
    benchmarks : sequence of paths, optional
        Each strategy's training benchmark TSV (same order), for the wall time.
    out_csv, out_md, out_png : paths
        Outputs.
    predictions : sequence of paths, optional
        Each strategy's ``predictions.parquet`` (same order), with ``data``: intervals, the
        PRS-only floor, and (with ``truth``/``samples``) the oracle ceiling and per-cluster
        carrier AUCs (:func:`with_intervals`).
    data, truth, samples, genotypes : paths, optional
        See :func:`strategy_outcomes`.

    Returns
    -------
    pandas.DataFrame
        The table written.
    """
    records = [read_metrics(p) for p in metrics]
    wall = None
    if benchmarks:
        wall = [read_wall_time(p) for p in benchmarks]
    if records and records[0].get("metric") == "r2":  # a quantitative phenotype: R² throughout
        table = quantitative_table(records, wall)
        table.to_csv(out_csv, index=False)
        Path(out_md).write_text(quantitative_report(table) + tuning_notes(records))
        client_auc_figure(records, out_png)
        for row in table.itertuples(index=False):
            logger.info("%s: r2=%.4f incremental_r2=%.4f", row.strategy, row.r2,
                        row.incremental_r2)  # fmt: skip
        return table
    table = comparison_table(records, wall)
    if predictions:
        if data is None:
            raise InputDataError("predictions need the per-client inputs (data) they score")
        outcomes = strategy_outcomes([r["strategy"] for r in records], predictions, data,
                                 truth=truth, samples=samples, genotypes=genotypes)  # fmt: skip
        table = with_intervals(table, outcomes)
        text = markdown_report(table, records)
    else:
        text = markdown_table(table)
        found = floor_warnings(table, records)
        if found:
            text += "\n**Warnings**:\n\n" + "".join(f"- {w}\n" for w in found)
    table.to_csv(out_csv, index=False)
    Path(out_md).write_text(text + tuning_notes(records))
    client_auc_figure(records, out_png)
    for row in table.itertuples(index=False):
        logger.info("%s: auc=%.4f carrier_auc=%.4f", row.strategy, row.auc, row.carrier_auc)
    for message in floor_warnings(table, records):
        logger.warning(message)
    return table


def genotype_sources(files: Sequence[str] | str) -> list[str]:
    """Genotype files as readers open them: a PLINK ``.bed/.bim/.fam`` trio by its prefix."""
    out: list[str] = []
    for name in [files] if isinstance(files, str) else files:
        path = str(name)
        if path.endswith((".bed", ".bim", ".fam")):
            path = path[:-4]
        elif path.endswith((".pvar", ".psam")):
            path = path[:-5] + ".pgen"
        if path not in out:
            out.append(path)
    return out


def _one(files) -> str | None:
    """A named input holding one file (a string) or none (an empty list)."""
    if isinstance(files, str | Path):
        return str(files)
    return str(files[0]) if len(files) else None


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            snakemake.input.metrics,
            snakemake.input.benchmarks,
            snakemake.output.csv,
            snakemake.output.md,
            snakemake.output.png,
            predictions=snakemake.input.predictions,
            data=Path(snakemake.input.clients).parent,
            truth=_one(snakemake.input.causal),
            samples=_one(snakemake.input.samples),
            genotypes=genotype_sources(snakemake.input.genotypes),
        )
