"""Type-I error of the federated association tests under the null (issue 40's calibration).

Each replicate simulates a null federation: 6 sites × 2,000 samples in 2 groups, a PRS and one
covariate driving a case:control ratio of about 1:10, and 2,000 rare variants (MAF log-uniform on
[2e-4, 1e-2], so pooled MAC from ~1 to ~250) that carry no effect (h2_rare = 0). Every site
computes its sums with :func:`rvfedprs.association.sums.association_sums` — the function the
sites run — at the pooled floor (fitted with scikit-learn; the federated Newton fit equals it,
``tests/test_association.py``); the summed statistics go through
:func:`rvfedprs.association.table.association_table`, units of 10 consecutive variants.

Writes ``results/type1.tsv`` (empirical type-I error at α = 1e-2, 1e-3, 1e-4 with a Clopper–
Pearson 95% interval, per test and pooled-MAC bin) and ``results/qq.png``.

    python simulations/association_calibration/run.py --replicates 100
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy import stats
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from tqdm import tqdm

from rvfedprs.association.plots import qq_plot
from rvfedprs.association.scores import EfficientScores
from rvfedprs.association.sums import UnitLayout, association_sums, summed
from rvfedprs.association.table import association_table

SITES, PER_SITE, GROUPS, VARIANTS, UNIT = 6, 2000, 2, 2000, 10
ALPHAS = (1e-2, 1e-3, 1e-4)
TESTS = ("score", "score_het", "burden", "burden_het", "skat", "skat_het", "acat_v", "acat_o")
MAC_BINS = ((0, 10), (10, 50), (50, np.inf))


def replicate(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = SITES * PER_SITE
    prs, age = rng.standard_normal(n), rng.standard_normal(n)
    y = (rng.random(n) < expit(-2.6 + 0.5 * prs + 0.3 * age)).astype(float)
    maf = np.exp(rng.uniform(np.log(2e-4), np.log(1e-2), VARIANTS))
    dosages = sp.csr_matrix(rng.binomial(2, maf, size=(n, VARIANTS)).astype(np.float64))
    z = np.column_stack([np.ones(n), prs, age])
    fit = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    fit.fit(z[:, 1:], y)
    coef = np.concatenate([fit.intercept_, fit.coef_.ravel()])
    layout = UnitLayout.from_members([f"u{g}" for g in range(VARIANTS // UNIT)],
                                     [range(g * UNIT, (g + 1) * UNIT)
                                      for g in range(VARIANTS // UNIT)])  # fmt: skip
    replies, hessian = [], np.zeros((3, 3))
    for site in range(SITES):
        rows = slice(site * PER_SITE, (site + 1) * PER_SITE)
        replies.append(association_sums(z[rows], dosages[rows], y[rows], coef, layout,
                                        group=site % GROUPS, n_groups=GROUPS))  # fmt: skip
        w = expit(z[rows] @ coef) * (1 - expit(z[rows] @ coef))
        hessian += z[rows].T @ (z[rows] * w[:, None])
    scores = EfficientScores(summed(replies), hessian, layout)
    observed = dosages.sum(axis=0).A1 / (2 * n)
    variants = pd.DataFrame({"variant_key": [f"1:{j}:A:G" for j in range(VARIANTS)],
                             "maf": observed})  # fmt: skip
    table = association_table(scores, variants, group_names=["g0", "g1"], maf_cutoffs=[0.01])
    table["replicate"] = seed
    table["cases"] = y.sum()
    return table[table["group"].isin(["all", "by_group"])]


def interval(k: int, n: int) -> tuple[float, float]:
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tables = [replicate(1000 + r) for r in tqdm(range(args.replicates), desc="null replicates")]
    table = pd.concat(tables, ignore_index=True)
    rows = []
    for test in TESTS:
        for lo, hi in ((0, np.inf), *MAC_BINS):
            if test not in ("score", "score_het") and (lo, hi) != (0, np.inf):
                continue
            p = table.loc[(table["test"] == test) & (table["mac"] > lo) & (table["mac"] <= hi),
                          "p"].dropna().to_numpy(float)  # fmt: skip
            row = {"test": test, "mac": "all" if hi == np.inf and lo == 0 else f"({lo:g}, {hi:g}]",
                   "n_tests": p.size}  # fmt: skip
            for alpha in ALPHAS:
                k = int(np.sum(p <= alpha))
                low, high = interval(k, p.size)
                row[f"rate_{alpha:g}"] = k / max(p.size, 1)
                row[f"ci_{alpha:g}"] = f"[{low:.2g}, {high:.2g}]"
            rows.append(row)
    result = pd.DataFrame(rows)
    result.to_csv(args.out / "type1.tsv", sep="\t", index=False, float_format="%.3g")
    qq_plot(table, args.out / "qq.png")
    cases = table.groupby("replicate")["cases"].first()
    ratio = (SITES * PER_SITE - cases.mean()) / cases.mean()
    print(f"{args.replicates} replicates, {SITES * PER_SITE} samples each, "
          f"{cases.mean():.0f} cases on average (1:{ratio:.1f})")  # fmt: skip
    print(result.to_string(index=False))


if __name__ == "__main__":
    main()
