"""How well each distance matrix recovers the true ancestry clusters of the demo federation.

Reads ``results/<run>/distance_<method>.tsv`` written by ``rvfedprs distance``, clusters the
clients by average-linkage agglomerative clustering (M = 3, as FedCE does) on each matrix and
scores the labels against the simulator's clusters (``samples.tsv``: client → cluster) with the
adjusted Rand index. Writes ``results/table.csv`` and ``results/table.md``.

Usage (from the repository root)::

    python3 simulations/distance_genomics/make_table.py --samples results/cohort/samples.tsv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import adjusted_rand_score

from rvfedprs.clustering import ClientClusterer
from rvfedprs.strategies.fedavg_w import read_distance_tsv

HERE = Path(__file__).resolve().parent

#: run folder → (method, what the server sees)
RUNS = {
    "jaccard": (
        "Jaccard (FedCE)",
        "Bloom filters of each client's top-200 influential rare variants (1 local round from w⁰)",
    ),
    "emd": (
        "EMD (PRS + AF)",
        "mean of the two EMD matrices below (000_* App. C, one metadata per group)",
    ),
    "emd_prs": ("EMD (PRS)", "each client's distribution of standardised PRS values"),
    "emd_af": (
        "EMD (AF spectrum)",
        "distribution of the client's per-variant rare allele frequencies (variant identity lost)",
    ),
    "euclidean": (
        "Euclidean (probe)",
        "mean 2-component PCA of penultimate activations of the one-round FedAvg model",
    ),
    "ot": (
        "OT (probe)",
        "per-class OT of penultimate activations of the one-round FedAvg model (cases/controls)",
    ),
}


def true_clusters(samples: Path) -> dict[str, str]:
    """Client → simulated cluster (every client must have exactly one)."""
    frame = pd.read_csv(samples, sep="\t", dtype=str)
    pairs = frame[["client", "cluster"]].drop_duplicates()
    if pairs["client"].duplicated().any():
        raise ValueError(f"{samples}: a client spans several clusters")
    return dict(zip(pairs["client"], pairs["cluster"], strict=True))


def separation(d: np.ndarray, labels: np.ndarray) -> float:
    """Mean between- / mean within-cluster distance under the true labels (> 1: separates)."""
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(len(d), dtype=bool)
    within = d[same & off].mean()
    between = d[~same].mean()
    return float(between / within) if within > 0 else float("inf")


def main(samples: Path, results: Path, n_clusters: int = 3) -> pd.DataFrame:
    """Score every run found under ``results``; write ``table.csv`` and ``table.md``."""
    truth = true_clusters(samples)
    rows = []
    for run, (label, sees) in RUNS.items():
        found = sorted((results / run).glob("distance_*.tsv"))
        if not found:
            continue
        d, ids = read_distance_tsv(found[0])
        y = np.array([truth[c] for c in ids])
        pred = ClientClusterer(n_clusters=n_clusters).fit(d).labels_
        groups = {}
        for c, m in zip(ids, pred, strict=True):
            groups.setdefault(int(m), []).append(c)
        rows.append(
            {
                "method": label,
                "run": run,
                "ari": round(float(adjusted_rand_score(y, pred)), 3),
                "between_within": round(separation(d, y), 3),
                "clusters_found": " / ".join(",".join(g) for g in sorted(groups.values())),
                "what_the_server_sees": sees,
            }
        )
    table = pd.DataFrame(rows)
    table.to_csv(results / "table.csv", index=False)
    lines = [
        "| method | ARI (M=3) | between/within | clusters found | what the server sees |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['ari']:.3f} | {r['between_within']:.2f} | "
            f"{r['clusters_found']} | {r['what_the_server_sees']} |"
        )
    (results / "table.md").write_text("\n".join(lines) + "\n")
    return table


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=Path, default=Path("results/cohort/samples.tsv"))
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--n-clusters", type=int, default=3)
    args = parser.parse_args()
    print(main(args.samples, args.results, args.n_clusters).to_string(index=False))
