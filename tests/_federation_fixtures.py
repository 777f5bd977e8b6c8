"""Tiny synthetic federations in the pipeline's per-client layout, for federation tests.

``write_federation`` plants cluster-specific rare effects: clients come in clusters; each cluster
carries a private block of rare variants, and every client also carries a shared block. Each
cluster has causal variants in its private block and in the shared block, whose effect exists in
that cluster only (allelic heterogeneity: the same shared variant is neutral elsewhere).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp


def write_federation(
    root: Path,
    *,
    n_clients: int = 6,
    n_clusters: int = 3,
    samples_per_client: int = 300,
    private_per_cluster: int = 30,
    n_shared: int = 30,
    causal_private: int = 6,
    causal_shared: int = 4,
    carrier_freq: float = 0.03,
    rare_effect: float = 2.5,
    prs_effect: float = 0.8,
    prevalence: float = 0.2,
    test_fraction: float = 0.3,
    seed: int = 0,
    covariates: tuple[str, ...] = (),
    kind: str = "binary",
    flipped_shared: int = 0,
) -> dict:
    """Write ``root/results`` (pipeline outputs) and ``root/cohort`` (samples.tsv, truth).

    ``kind="quantitative"`` writes the liability itself as the phenotype, on an LDL-like scale
    (mean 130, sd ~35: mg/dL), and ``outcome.json`` saying so. ``flipped_shared`` shared
    variants (carried everywhere) have effect +``rare_effect`` in even clusters and
    −``rare_effect`` in odd ones: a sign conflict whose pooled score cancels.

    Returns
    -------
    dict
        ``data``: the results folder, ``samples``: samples.tsv, ``truth``: causal_variants.tsv,
        ``clusters``: {client: cluster}.
    """
    rng = np.random.default_rng(seed)
    results, cohort = root / "results", root / "cohort"
    (cohort / "truth").mkdir(parents=True, exist_ok=True)
    (results / "clients").mkdir(parents=True, exist_ok=True)
    n_rare = n_clusters * private_per_cluster + n_shared
    keys = [f"1:{1000 + 10 * j}:A:G" for j in range(n_rare)]
    variants = pd.DataFrame(
        {
            "variant_key": keys,
            "chrom": "1",
            "pos": [1000 + 10 * j for j in range(n_rare)],
            "id": [f"rv{j}" for j in range(n_rare)],
            "ref": "A",
            "alt": "G",
            "minor_allele": "G",
            "maf": carrier_freq / 2,
        }
    )
    variants.to_csv(results / "rare_variants.tsv", sep="\t", index=False)
    shared = np.arange(n_clusters * private_per_cluster, n_rare)
    effects = np.zeros((n_clusters, n_rare))
    causal_rows = []
    shared_causal = rng.permutation(shared)[: n_clusters * causal_shared].reshape(n_clusters, -1)
    for m in range(n_clusters):
        private = np.arange(m * private_per_cluster, (m + 1) * private_per_cluster)
        for j in list(rng.choice(private, causal_private, replace=False)) + list(shared_causal[m]):
            effects[m, j] = rare_effect
            causal_rows.append(
                (keys[j], f"rv{j}", "1", 1000 + 10 * j, "A", "G", "G", rare_effect, "rare", m)
            )
    if flipped_shared:
        free = np.setdiff1d(shared, shared_causal.ravel())
        for j in rng.choice(free, flipped_shared, replace=False):
            for m in range(n_clusters):
                effects[m, j] = rare_effect if m % 2 == 0 else -rare_effect
                causal_rows.append((keys[j], f"rv{j}", "1", 1000 + 10 * j, "A", "G", "G",
                                    effects[m, j], "rare", m))  # fmt: skip
    truth = pd.DataFrame(
        causal_rows,
        columns=[
            "variant_key",
            "id",
            "chrom",
            "pos",
            "ref",
            "alt",
            "effect_allele",
            "effect",
            "kind",
            "cluster",
        ],
    )
    truth.to_csv(cohort / "truth" / "causal_variants.tsv", sep="\t", index=False)

    sample_rows, client_rows, clusters = [], [], {}
    for k in range(n_clients):
        client = f"client{k:02d}"
        m = k % n_clusters
        clusters[client] = m
        carried = np.concatenate(
            [np.arange(m * private_per_cluster, (m + 1) * private_per_cluster), shared]
        )
        n = samples_per_client
        dense = np.zeros((n, n_rare), dtype=np.float32)
        hits = rng.random((n, carried.size)) < carrier_freq
        dense[:, carried] = hits.astype(np.float32)
        prs = rng.normal(size=n)
        # covariates on their own scales (an age in years, a PC): the liability uses them
        cov = {
            name: 40.0 + 10.0 * rng.normal(size=n) + 3.0 * k if i == 0 else rng.normal(size=n)
            for i, name in enumerate(covariates)
        }
        liability = prs_effect * prs + dense @ effects[m] + rng.normal(size=n)
        for i, values in enumerate(cov.values()):
            liability = liability + (0.4 if i == 0 else -0.3) * (values - values.mean()) / (
                values.std() + 1e-12
            )
        if kind == "quantitative":
            y = 130.0 + 20.0 * liability
        else:
            y = (liability > np.quantile(liability, 1 - prevalence)).astype(np.int8)
        split = np.where(rng.random(n) < test_fraction, "test", "train")
        ids = [f"{client}_s{i:04d}" for i in range(n)]
        folder = results / "clients" / client
        folder.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(
            {"sample_id": ids, "prs": 3.0 + 2.0 * prs, "phenotype": y, "split": split, **cov}
        ).to_parquet(folder / "samples.parquet", index=False)
        sp.save_npz(folder / "rare_dosages.npz", sp.csr_matrix(dense))
        client_rows.append(
            (
                client,
                n,
                int(y.sum()) if kind == "binary" else 0,
                int((split == "train").sum()),
                int((split == "test").sum()),
            )  # fmt: skip
        )
        sample_rows += [(s, f"pop{m}", m, client) for s in ids]
    pd.DataFrame(
        client_rows, columns=["client", "n_samples", "n_cases", "n_train", "n_test"]
    ).to_csv(results / "clients.tsv", sep="\t", index=False)
    if kind != "binary":
        from rvfedprs.genomic.data import write_outcome

        write_outcome(results, kind, "phenotype")
    pd.DataFrame(sample_rows, columns=["sample_id", "population", "cluster", "client"]).to_csv(
        cohort / "samples.tsv", sep="\t", index=False
    )
    return {
        "data": results,
        "samples": cohort / "samples.tsv",
        "truth": cohort / "truth" / "causal_variants.tsv",
        "clusters": clusters,
    }
