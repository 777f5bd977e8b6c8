"""The simulator's ground truth as tables, and the realised architecture as numbers.

Written under the output folder (design §2, docs/ARCHITECTURE.md):

- ``samples.tsv``: ``sample_id, population, cluster, client, architecture``;
- ``phenotypes.tsv``: ``eid, Subject id, <name>, <name>_liability`` for a binary trait;
  ``eid, Subject id, <name>`` for a quantitative one (``<name>`` holds the trait);
- ``truth/causal_variants.tsv``: one row per causal variant and group in which it acts (the
  ancestry cluster for common variants, the architecture group for rare ones) with its effect
  (per ALT copy, in SD units of the liability or of the quantitative trait), frequencies,
  carriers, the odds ratio its effect implies (binary; a quantitative trait has the mean trait
  of the carriers, ``group_carrier_mean``, in place of ``group_carrier_cases`` and no odds
  ratio: its effect already is the carrier shift in SD units) and its gene (empty outside
  genes); a shared variant with no effect in a group (``rare_shared_causal_groups``) has no row
  there;
- ``truth/causal_sites.tsv``: one row per causal variant and site where it has an effect
  (``carrier_cases``, or ``carrier_mean`` for a quantitative trait);
- ``truth/sites.tsv``: per site: cluster, architecture group, size, cases, prevalence,
  threshold (binary) or the trait's mean and variance (quantitative), carriers, realised h²;
- ``truth/genetic_values.tsv``: ``sample_id, genetic_common, genetic_rare``: the true genetic
  value (uncentred; the trait or liability holds it centred on the target cohort).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.genotypes.chunk import variant_keys
from rvfedprs.simulate.effects import liability_odds_ratio

__all__ = [
    "write_tables",
    "summarise",
    "carrier_odds_ratio",
    "carrier_mean_difference",
    "penetrance_by_quintile",
]

_FLOAT = "%.10g"


def carrier_odds_ratio(carrier: np.ndarray, case: np.ndarray) -> float | None:
    """Odds ratio of being a case for carriers vs non-carriers (Haldane's +0.5 in each cell).

    None when either group is empty.
    """
    carrier = np.asarray(carrier, dtype=bool)
    case = np.asarray(case, dtype=bool)
    if carrier.all() or not carrier.any():
        return None
    a = (carrier & case).sum() + 0.5
    b = (carrier & ~case).sum() + 0.5
    c = (~carrier & case).sum() + 0.5
    d = (~carrier & ~case).sum() + 0.5
    return float(a * d / (b * c))


def carrier_mean_difference(carrier: np.ndarray, trait: np.ndarray) -> float | None:
    """Mean quantitative trait of carriers minus that of non-carriers (trait SD units).

    None when either group is empty.
    """
    carrier = np.asarray(carrier, dtype=bool)
    trait = np.asarray(trait, dtype=np.float64)
    if carrier.all() or not carrier.any():
        return None
    return float(trait[carrier].mean() - trait[~carrier].mean())


def penetrance_by_quintile(
    score: np.ndarray, carrier: np.ndarray, case: np.ndarray
) -> dict[str, Any] | None:
    """Carriers' risk in each quintile of a polygenic score, relative to average non-carriers.

    The reference is the non-carriers of the middle three quintiles (20th–80th percentile), as
    in Fahed et al. 2020 (Nat Commun 11:3635: carriers of FH, HBOC or Lynch variants had 1.3×
    the CAD risk of such non-carriers in the lowest PRS quintile and 12.6× in the highest).

    Parameters
    ----------
    score : ndarray, shape (n_samples,)
        The polygenic score (quintiles over every sample).
    carrier, case : ndarray of bool, shape (n_samples,)

    Returns
    -------
    dict or None
        ``quintiles``: per quintile ``n_carriers``, ``carrier_cases``, ``carrier_risk``,
        ``noncarrier_risk``, ``relative_risk``; ``reference_risk``; ``top_over_bottom``, the
        ratio of the highest quintile's relative risk to the lowest's. None without carriers.
    """
    score = np.asarray(score, dtype=np.float64)
    carrier = np.asarray(carrier, dtype=bool)
    case = np.asarray(case, dtype=bool)
    if not carrier.any() or carrier.all():
        return None
    edges = np.quantile(score, [0.2, 0.4, 0.6, 0.8])
    quintile = np.searchsorted(edges, score, side="right")  # 0..4
    middle = ~carrier & (quintile >= 1) & (quintile <= 3)
    reference = float(case[middle].mean()) if middle.any() else float("nan")
    rows = []
    for q in range(5):
        these = quintile == q
        hit = these & carrier
        risk = float(case[hit].mean()) if hit.any() else float("nan")
        rows.append(
            {
                "quintile": q + 1,
                "n_carriers": int(hit.sum()),
                "carrier_cases": int((hit & case).sum()),
                "carrier_risk": risk,
                "noncarrier_risk": float(case[these & ~carrier].mean()),
                "relative_risk": risk / reference if reference > 0 else float("nan"),
            }
        )
    low, high = rows[0]["relative_risk"], rows[-1]["relative_risk"]
    return {
        "quintiles": rows,
        "reference_risk": reference,
        "top_over_bottom": high / low if low > 0 else float("nan"),
    }


def _variant_rows(variants: pd.DataFrame, columns: np.ndarray) -> pd.DataFrame:
    table = variants.iloc[columns][["id", "chrom", "pos", "ref", "alt"]].reset_index(drop=True)
    table.insert(0, "variant_key", variant_keys(table).to_numpy())
    table["effect_allele"] = table["alt"]
    return table


def write_tables(
    out: Path,
    *,
    layout: pd.DataFrame,
    inds: pd.DataFrame,
    sample_ids: np.ndarray,
    y: np.ndarray,
    liability: np.ndarray,
    g_common: np.ndarray,
    g_rare: np.ndarray,
    x_common: np.ndarray,
    x_rare: np.ndarray,
    arch: Any,
    variants: pd.DataFrame,
    pheno: Mapping[str, Any],
    thresholds: Mapping[str, float],
    clusters: Sequence[str],
    groups: Sequence[str],
) -> dict[str, pd.DataFrame]:
    """Write the sample, phenotype and truth tables (module docstring); return them.

    Arrays indexed by individual cover target and discovery individuals (rows of ``inds``);
    only the target individuals are written.
    """
    target = (inds["role"] == "target").to_numpy()
    pop = inds["pop_index"].to_numpy()[target]
    site_cluster = np.array([clusters.index(c) for c in layout["cluster"]])
    site_group = np.array([groups.index(g) for g in layout["architecture"]])
    y_t = y[target].astype(bool)
    xc, xr = x_common[target], x_rare[target]
    samples = pd.DataFrame(
        {
            "sample_id": sample_ids,
            "population": layout["population"].to_numpy()[pop],
            "cluster": layout["cluster"].to_numpy()[pop],
            "client": layout["client"].to_numpy()[pop],
            "architecture": layout["architecture"].to_numpy()[pop],
        }
    )
    samples.to_csv(out / "samples.tsv", sep="\t", index=False)
    name = pheno["name"]
    quantitative = pheno.get("kind", "binary") == "quantitative"
    if quantitative:
        phenotypes = pd.DataFrame(
            {
                "eid": 1_000_001 + np.arange(len(sample_ids)),
                "Subject id": sample_ids,
                name: liability[target],
            }
        )
        phenotypes.to_csv(out / "phenotypes.tsv", sep="\t", index=False, float_format=_FLOAT)
    else:
        phenotypes = pd.DataFrame(
            {
                "eid": 1_000_001 + np.arange(len(sample_ids)),
                "Subject id": sample_ids,
                name: y[target].astype(np.int8),
                f"{name}_liability": np.round(liability[target], 6),
            }
        )
        phenotypes.to_csv(out / "phenotypes.tsv", sep="\t", index=False)

    # per site: carriers and carrier cases of every causal variant
    n_sites = len(layout)
    carriers_c = np.stack([(xc[pop == k] > 0).sum(0) for k in range(n_sites)])  # (sites, n_c)
    carriers_r = np.stack([(xr[pop == k] > 0).sum(0) for k in range(n_sites)])
    if quantitative:  # the trait summed over carriers (a mean once divided by the carriers)
        lt_t = liability[target]
        cases_c = np.stack([(xc[pop == k] > 0).T @ lt_t[pop == k] for k in range(n_sites)])
        cases_r = np.stack([(xr[pop == k] > 0).T @ lt_t[pop == k] for k in range(n_sites)])
    else:
        cases_c = np.stack(
            [((xc[pop == k] > 0) & y_t[pop == k, None]).sum(0) for k in range(n_sites)]
        )
        cases_r = np.stack(
            [((xr[pop == k] > 0) & y_t[pop == k, None]).sum(0) for k in range(n_sites)]
        )
    alt_c = np.stack([xc[pop == k].sum(0) for k in range(n_sites)])
    alt_r = np.stack([xr[pop == k].sum(0) for k in range(n_sites)])
    n_site = layout["n_target"].to_numpy()
    prevalence = layout["prevalence"].to_numpy(dtype=float)

    frames = []
    founder_cluster = np.array(
        [clusters[arch.founders[int(c)]["cluster"]] if int(c) in arch.founders else ""
         for c in arch.rare.indices], dtype=object,
    )  # fmt: skip
    founder_fold = np.array(
        [arch.founders[int(c)]["fold"] if int(c) in arch.founders else np.nan
         for c in arch.rare.indices]
    )  # fmt: skip
    rare_gene = arch.rare_gene if len(arch.rare_gene) else np.full(len(arch.rare.indices), "")
    for kind, columns, effects, label_of_site, labels, freq, carriers, cases, alt in (
        ("common", arch.common.indices, arch.common.effects, site_cluster, clusters,
         arch.common_frequency, carriers_c, cases_c, alt_c),
        ("rare", arch.rare.indices, arch.rare.effects, site_group, groups,
         arch.rare_frequency, carriers_r, cases_r, alt_r),
    ):  # fmt: skip
        base = _variant_rows(variants, columns)
        for m, label in enumerate(labels):
            acts = effects[:, m] != 0 if kind == "rare" else np.ones(len(columns), dtype=bool)
            if kind == "rare":
                acts &= arch.rare_causal[:, m]
            members = label_of_site == m
            rows = base.loc[acts].copy()
            rows["effect"] = effects[acts, m]
            rows["kind"] = kind
            rows["cluster"] = label
            rows["sharing"] = (
                np.where(arch.rare_shared[acts], "shared", "private") if kind == "rare" else "all"
            )
            rows["frequency"] = freq[acts]
            rows["group_frequency"] = alt[members][:, acts].sum(0) / (2.0 * n_site[members].sum())
            rows["group_carriers"] = carriers[members][:, acts].sum(0)
            if quantitative:
                with np.errstate(invalid="ignore", divide="ignore"):
                    rows["group_carrier_mean"] = (
                        cases[members][:, acts].sum(0) / rows["group_carriers"].to_numpy()
                    )
            else:
                rows["group_carrier_cases"] = cases[members][:, acts].sum(0)
                rows["odds_ratio"] = liability_odds_ratio(
                    effects[acts, m], prevalence[members].mean()
                )
            rows["founder_cluster"] = founder_cluster[acts] if kind == "rare" else ""
            rows["founder_fold"] = founder_fold[acts] if kind == "rare" else np.nan
            rows["gene"] = rare_gene[acts] if kind == "rare" else ""
            frames.append(rows)
    causal = pd.concat(frames, ignore_index=True)
    causal.to_csv(out / "truth" / "causal_variants.tsv", sep="\t", index=False,
                  float_format=_FLOAT)  # fmt: skip

    site_rows = []
    for kind, columns, effects, label_of_site, carriers, cases in (
        ("common", arch.common.indices, arch.common.effects, site_cluster, carriers_c, cases_c),
        ("rare", arch.rare.indices, arch.rare.effects, site_group, carriers_r, cases_r),
    ):
        keys = _variant_rows(variants, columns)["variant_key"].to_numpy()
        for k in range(n_sites):
            effect = effects[:, label_of_site[k]]
            acts = effect != 0
            frame = pd.DataFrame(
                {
                    "variant_key": keys[acts],
                    "kind": kind,
                    "client": layout["client"].iat[k],
                    "cluster": layout["cluster"].iat[k],
                    "architecture": layout["architecture"].iat[k],
                    "effect": effect[acts],
                    "carriers": carriers[k, acts],
                }
            )
            if quantitative:
                with np.errstate(invalid="ignore", divide="ignore"):
                    frame["carrier_mean"] = cases[k, acts] / carriers[k, acts]
            else:
                frame["carrier_cases"] = cases[k, acts]
            site_rows.append(frame)
    causal_sites = pd.concat(site_rows, ignore_index=True)
    causal_sites.to_csv(out / "truth" / "causal_sites.tsv", sep="\t", index=False,
                        float_format=_FLOAT)  # fmt: skip

    own = arch.rare.effects[:, site_group[pop]].T != 0  # (n_target, n_rare): acts at own site
    carrier = ((xr > 0) & own).any(axis=1)
    gc, gr, lt = g_common[target], g_rare[target], liability[target]
    if quantitative:
        outcome = {
            "trait_mean": [float(lt[pop == k].mean()) for k in range(n_sites)],
            "trait_var": [float(lt[pop == k].var()) for k in range(n_sites)],
        }
    else:
        outcome = {
            "cases": [int(y_t[pop == k].sum()) for k in range(n_sites)],
            "prevalence": prevalence,
            "threshold": [thresholds[c] for c in layout["client"]],
        }
    sites = pd.DataFrame(
        {
            "client": layout["client"],
            "population": layout["population"],
            "cluster": layout["cluster"],
            "architecture": layout["architecture"],
            "n": n_site,
            **outcome,
            "rare_causal_carriers": [int(carrier[pop == k].sum()) for k in range(n_sites)],
            "realised_h2_common": [_share(gc[pop == k], lt[pop == k]) for k in range(n_sites)],
            "realised_h2_rare": [_share(gr[pop == k], lt[pop == k]) for k in range(n_sites)],
        }
    )
    if quantitative:
        sites["realised_h2"] = [_share(gc[pop == k] + gr[pop == k], lt[pop == k])
                                for k in range(n_sites)]  # fmt: skip
    sites.to_csv(out / "truth" / "sites.tsv", sep="\t", index=False, float_format=_FLOAT)
    pd.DataFrame({"sample_id": sample_ids, "genetic_common": gc, "genetic_rare": gr}).to_csv(
        out / "truth" / "genetic_values.tsv", sep="\t", index=False, float_format=_FLOAT
    )
    return {
        "samples": samples,
        "phenotypes": phenotypes,
        "causal": causal,
        "causal_sites": causal_sites,
        "sites": sites,
        "carrier": carrier,
        "own": own,
    }


def _group_counts(layout, group, expected_h2, members, rows, g_rare, liability, carrier) -> dict:
    """What provenance says of one architecture group whatever the trait: sizes, h², counts."""
    return {
        "sites": layout.loc[layout["architecture"] == group, "client"].tolist(),
        "n": int(members.sum()),
        "expected_h2_rare": float(expected_h2),
        "realised_h2_rare": _share(g_rare[members], liability[members]),
        "n_causal_rare": int(len(rows)),
        "n_shared": int((rows["sharing"] == "shared").sum()),
        "n_private": int((rows["sharing"] == "private").sum()),
        "n_founder": int((rows["founder_cluster"] != "").sum()),
        "rare_causal_carriers": int(carrier[members].sum()),
    }


def _share(part: np.ndarray, liability: np.ndarray) -> float:
    """Variance of ``part`` over the variance of the liability."""
    total = np.var(liability)
    return float(np.var(part) / total) if total > 0 else float("nan")


def _auc(y: np.ndarray, score: np.ndarray) -> float | None:
    from sklearn.metrics import roc_auc_score

    if len(np.unique(y)) < 2:
        return None
    return float(roc_auc_score(y, score))


def _carrier_check(prs, dosages, y, seed) -> dict[str, Any]:
    """Among carriers: cross-validated AUC of PRS alone vs PRS + rare causal dosages."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    result: dict[str, Any] = {"n_carriers": int(len(y)), "n_carrier_cases": int(y.sum())}
    if len(y) < 20 or y.sum() < 5 or (len(y) - y.sum()) < 5:
        return result
    folds = StratifiedKFold(5, shuffle=True, random_state=seed % (2**31))
    features = np.column_stack([prs, dosages])
    model = LogisticRegression(C=1.0, max_iter=2000)
    p_prs = cross_val_predict(model, prs[:, None], y, cv=folds, method="predict_proba")[:, 1]
    p_all = cross_val_predict(model, features, y, cv=folds, method="predict_proba")[:, 1]
    result["auc_prs_only"] = _auc(y, p_prs)
    result["auc_prs_plus_rare"] = _auc(y, p_all)
    return result


def _r2(trait: np.ndarray, score: np.ndarray) -> float | None:
    """Squared correlation of a score with a quantitative trait (None for a constant one)."""
    trait = np.asarray(trait, dtype=np.float64)
    score = np.asarray(score, dtype=np.float64)
    if len(trait) < 3 or np.std(trait) == 0 or np.std(score) == 0:
        return None
    return float(np.corrcoef(trait, score)[0, 1] ** 2)


def _carrier_check_quantitative(prs, dosages, trait, seed) -> dict[str, Any]:
    """Among carriers: cross-validated R² of PRS alone vs PRS + rare causal dosages (OLS)."""
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import KFold, cross_val_predict

    result: dict[str, Any] = {"n_carriers": int(len(trait))}
    if len(trait) < 20:
        return result
    folds = KFold(5, shuffle=True, random_state=seed % (2**31))
    features = np.column_stack([prs, dosages])
    model = LinearRegression()
    p_prs = cross_val_predict(model, prs[:, None], trait, cv=folds)
    p_all = cross_val_predict(model, features, trait, cv=folds)
    result["r2_prs_only"] = _r2(trait, p_prs)
    result["r2_prs_plus_rare"] = _r2(trait, p_all)
    return result


def _or_summary(values: np.ndarray) -> dict[str, float] | None:
    values = np.asarray(values, dtype=float)
    if not values.size:
        return None
    return {
        "median": float(np.median(values)),
        "p05": float(np.quantile(values, 0.05)),
        "p25": float(np.quantile(values, 0.25)),
        "p75": float(np.quantile(values, 0.75)),
        "p95": float(np.quantile(values, 0.95)),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def _odds_ratio_bands(values: np.ndarray) -> dict[str, float] | None:
    """Shares of odds ratios below 1.5, in [1.5, 10], in (10, 20] and above 20 (SPEC §2)."""
    values = np.asarray(values, dtype=float)
    if not values.size:
        return None
    return {
        "below_1_5": float((values < 1.5).mean()),
        "1_5_to_10": float(((values >= 1.5) & (values <= 10)).mean()),
        "10_to_20": float(((values > 10) & (values <= 20)).mean()),
        "above_20": float((values > 20).mean()),
    }


def summarise(
    *,
    layout: pd.DataFrame,
    inds: pd.DataFrame,
    y: np.ndarray,
    liability: np.ndarray,
    g_common: np.ndarray,
    g_rare: np.ndarray,
    x_rare: np.ndarray,
    prs: np.ndarray,
    arch: Any,
    tables: Mapping[str, Any],
    pheno: Mapping[str, Any],
    clusters: Sequence[str],
    groups: Sequence[str],
    seed: int,
) -> dict[str, Any]:
    """The realised architecture and checks, for ``provenance.json`` (``extra``)."""
    if pheno.get("kind", "binary") == "quantitative":
        return _summarise_quantitative(
            layout=layout, inds=inds, liability=liability, g_common=g_common, g_rare=g_rare,
            x_rare=x_rare, prs=prs, arch=arch, tables=tables, pheno=pheno, clusters=clusters,
            groups=groups, seed=seed,
        )  # fmt: skip
    target = (inds["role"] == "target").to_numpy()
    pop = inds["pop_index"].to_numpy()[target]
    y_t = y[target]
    gc, gr, lt = g_common[target], g_rare[target], liability[target]
    sample_cluster = layout["cluster"].to_numpy()[pop]
    sample_group = layout["architecture"].to_numpy()[pop]
    carrier = tables["carrier"]
    causal = tables["causal"]
    sites = tables["sites"]
    rare_rows = causal[causal["kind"] == "rare"]
    per_group = {}
    for m, group in enumerate(groups):
        members = sample_group == group
        rows = rare_rows[rare_rows["cluster"] == group]
        per_group[group] = {
            **_group_counts(
                layout, group, arch.expected_h2["rare"][m], members, rows, gr, lt, carrier
            ),  # fmt: skip
            "rare_causal_carrier_cases": int((carrier & (y_t == 1))[members].sum()),
            "carrier_odds_ratio": carrier_odds_ratio(carrier[members], y_t[members] == 1),
            "odds_ratio": _or_summary(rows["odds_ratio"].to_numpy()),
            "carriers_per_variant": _or_summary(rows["group_carriers"].to_numpy()),
        }
    per_cluster = {}
    for k, cluster in enumerate(clusters):
        members = sample_cluster == cluster
        per_cluster[cluster] = {
            "expected_h2_common": float(arch.expected_h2["common"][k]),
            "realised_h2_common": _share(gc[members], lt[members]),
            "prs_auc": _auc(y_t[members], prs[members]),
            "true_common_value_auc": _auc(y_t[members], gc[members]),
        }
    founders = [
        {
            "variant_key": key,
            "cluster": cluster,
            "fold": float(fold),
        }
        for key, cluster, fold in rare_rows.loc[
            rare_rows["founder_cluster"] != "", ["variant_key", "founder_cluster", "founder_fold"]
        ]
        .drop_duplicates("variant_key")
        .itertuples(index=False)
    ]
    own = tables["own"]
    return {
        "phenotype_kind": "binary",
        "n_samples": int(target.sum()),
        "clients": {
            row.client: {
                "n": int(row.n),
                "cases": int(row.cases),
                "controls": int(row.n - row.cases),
                "prevalence": float(row.prevalence),
                "cluster": row.cluster,
                "architecture": row.architecture,
                "rare_causal_carriers": int(row.rare_causal_carriers),
            }
            for row in sites.itertuples(index=False)
        },
        "thresholds": {row.client: float(row.threshold) for row in sites.itertuples(index=False)},
        "causal": {
            "alpha": float(pheno["alpha"]),
            "sigma2": dict(arch.sigma2),
            "n_common": int(len(arch.common.indices)),
            "n_rare": int(len(arch.rare.indices)),
            "n_rare_shared": int(arch.rare_shared.sum()),
            "n_rare_private": int((~arch.rare_shared).sum()),
            "n_founder": len(founders),
            "rare_candidates": arch.candidates,
            "rare_carriers": int(carrier.sum()),
            "carrier_fraction": float(carrier.mean()),
            "realised_h2_common": _share(gc, lt),
            "realised_h2_rare": _share(gr, lt),
            "carrier_odds_ratio": carrier_odds_ratio(carrier, y_t == 1),
            "odds_ratio": _or_summary(rare_rows["odds_ratio"].to_numpy()),
            "odds_ratio_bands": _odds_ratio_bands(rare_rows["odds_ratio"].to_numpy()),
            "penetrance_by_prs_quintile": {
                "pgs": penetrance_by_quintile(np.asarray(prs), carrier, y_t == 1),
                "true_common_value": penetrance_by_quintile(gc, carrier, y_t == 1),
            },
            "groups": per_group,
            "clusters": per_cluster,
            "founders": founders,
        },
        "auc": {
            "prs": _auc(y_t, np.asarray(prs)),
            "true_genetic_value": _auc(y_t, gc + gr),
            "true_common_value": _auc(y_t, gc),
        },
        "carrier_check": _carrier_check(
            np.asarray(prs)[carrier],
            x_rare[target][carrier] * own[carrier],
            y_t[carrier],
            seed,
        ),
    }


def _founders(rare_rows: pd.DataFrame) -> list[dict[str, Any]]:
    chosen = rare_rows.loc[
        rare_rows["founder_cluster"] != "", ["variant_key", "founder_cluster", "founder_fold"]
    ].drop_duplicates("variant_key")
    return [
        {"variant_key": key, "cluster": cluster, "fold": float(fold)}
        for key, cluster, fold in chosen.itertuples(index=False)
    ]


def _summarise_quantitative(
    *, layout, inds, liability, g_common, g_rare, x_rare, prs, arch, tables, pheno, clusters,
    groups, seed,
) -> dict[str, Any]:  # fmt: skip
    """:func:`summarise` for a quantitative trait: R² for AUC, SD effects for odds ratios.

    ``realised_h2`` is the variance of the genetic value (common + rare) over the variance of
    the trait, in the target cohort; it differs from ``realised_h2_common + realised_h2_rare``
    by twice their covariance over the trait's variance.
    """
    target = (inds["role"] == "target").to_numpy()
    pop = inds["pop_index"].to_numpy()[target]
    gc, gr, lt = g_common[target], g_rare[target], liability[target]
    prs = np.asarray(prs)
    sample_cluster = layout["cluster"].to_numpy()[pop]
    sample_group = layout["architecture"].to_numpy()[pop]
    carrier = tables["carrier"]
    rare_rows = tables["causal"][tables["causal"]["kind"] == "rare"]
    sites = tables["sites"]
    per_group = {}
    for m, group in enumerate(groups):
        members = sample_group == group
        rows = rare_rows[rare_rows["cluster"] == group]
        per_group[group] = {
            **_group_counts(
                layout, group, arch.expected_h2["rare"][m], members, rows, gr, lt, carrier
            ),  # fmt: skip
            "carrier_mean_difference": carrier_mean_difference(carrier[members], lt[members]),
            "effect_sd": _or_summary(rows["effect"].to_numpy()),
            "abs_effect_sd": _or_summary(np.abs(rows["effect"].to_numpy())),
            "carriers_per_variant": _or_summary(rows["group_carriers"].to_numpy()),
        }
    per_cluster = {}
    for k, cluster in enumerate(clusters):
        members = sample_cluster == cluster
        per_cluster[cluster] = {
            "expected_h2_common": float(arch.expected_h2["common"][k]),
            "realised_h2_common": _share(gc[members], lt[members]),
            "prs_r2": _r2(lt[members], prs[members]),
            "true_common_value_r2": _r2(lt[members], gc[members]),
        }
    founders = _founders(rare_rows)
    own = tables["own"]
    return {
        "phenotype_kind": "quantitative",
        "n_samples": int(target.sum()),
        "clients": {
            row.client: {
                "n": int(row.n),
                "trait_mean": float(row.trait_mean),
                "trait_var": float(row.trait_var),
                "cluster": row.cluster,
                "architecture": row.architecture,
                "rare_causal_carriers": int(row.rare_causal_carriers),
            }
            for row in sites.itertuples(index=False)
        },
        "trait": {"mean": float(lt.mean()), "var": float(lt.var())},
        "causal": {
            "alpha": float(pheno["alpha"]),
            "sigma2": dict(arch.sigma2),
            "n_common": int(len(arch.common.indices)),
            "n_rare": int(len(arch.rare.indices)),
            "n_rare_shared": int(arch.rare_shared.sum()),
            "n_rare_private": int((~arch.rare_shared).sum()),
            "n_founder": len(founders),
            "rare_candidates": arch.candidates,
            "rare_carriers": int(carrier.sum()),
            "expected_h2": float(pheno["h2_common"] + pheno["h2_rare"]),
            "realised_h2": _share(gc + gr, lt),
            "realised_h2_common": _share(gc, lt),
            "realised_h2_rare": _share(gr, lt),
            "carrier_mean_difference": carrier_mean_difference(carrier, lt),
            "effect_sd": _or_summary(rare_rows["effect"].to_numpy()),
            "abs_effect_sd": _or_summary(np.abs(rare_rows["effect"].to_numpy())),
            "groups": per_group,
            "clusters": per_cluster,
            "founders": founders,
        },
        "r2": {
            "prs": _r2(lt, prs),
            "true_genetic_value": _r2(lt, gc + gr),
            "true_common_value": _r2(lt, gc),
        },
        "carrier_check": _carrier_check_quantitative(
            prs[carrier], x_rare[target][carrier] * own[carrier], lt[carrier], seed
        ),
    }
