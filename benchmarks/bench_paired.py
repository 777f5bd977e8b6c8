"""Paired bootstrap of AUC differences: cumulative counts vs sorting every resample.

``rvfedprs.evaluation.paired.paired_bootstrap`` turns a resample into case/control counts and
reads each case's resampled controls below/tied off a cumulative sum over controls sorted once.
The baseline below is the implementation it replaced (sort the resampled controls of every
model, binary-search every case). Both draw the same resamples from the same seed, so the
results are identical; the script checks that and prints median times and their ratio.

Usage::

    python benchmarks/bench_paired.py [--n 10000] [--seeds 5] [--boot 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from rvfedprs.evaluation.paired import paired_bootstrap


def sort_per_resample(y, scores_a, scores_b, *, n_boot, random_seed=0):
    """The replaced implementation: sort every resample's controls, per model."""
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    all_scores = np.stack(list(scores_a) + list(scores_b))
    s = len(scores_a)

    def mean_diff(pi, ni):
        p = all_scores[:, pi]
        q = np.sort(all_scores[:, ni], axis=1)
        below = np.stack([np.searchsorted(q[r], p[r], side="left") for r in range(2 * s)])
        upto = np.stack([np.searchsorted(q[r], p[r], side="right") for r in range(2 * s)])
        auc = (below + 0.5 * (upto - below)).sum(axis=1) / (len(pi) * len(ni))
        return float(auc[:s].mean() - auc[s:].mean())

    rng = np.random.default_rng(random_seed)
    return np.array(
        [mean_diff(rng.choice(pos, len(pos)), rng.choice(neg, len(neg))) for _ in range(n_boot)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10000, help="test samples")
    parser.add_argument("--seeds", type=int, default=5, help="score vectors per model")
    parser.add_argument("--boot", type=int, default=200, help="resamples")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    y = (rng.random(args.n) < 0.1).astype(int)
    a = [np.round(rng.normal(size=args.n) + 0.5 * y, 3) for _ in range(args.seeds)]
    b = [np.round(rng.normal(size=args.n) + 0.4 * y, 3) for _ in range(args.seeds)]
    times = {"cumulative counts": [], "sort per resample": []}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        new = paired_bootstrap(y, a, b, n_boot=args.boot)
        times["cumulative counts"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        old = sort_per_resample(y, a, b, n_boot=args.boot)
        times["sort per resample"].append(time.perf_counter() - t0)
    alpha = 0.025
    same = np.isclose(new["ci_low"], np.quantile(old, alpha), rtol=0, atol=1e-12) and np.isclose(
        new["ci_high"], np.quantile(old, 1 - alpha), rtol=0, atol=1e-12
    )
    medians = {k: float(np.median(v)) for k, v in times.items()}
    record = {
        "n": args.n, "seeds": args.seeds, "boot": args.boot, "repeats": args.repeats,
        "median_s": medians, "ratio": medians["sort per resample"] / medians["cumulative counts"],
        "identical_interval": bool(same), "load_average": os.getloadavg()[0],
    }  # fmt: skip
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
