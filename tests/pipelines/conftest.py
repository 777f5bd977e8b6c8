"""A tiny cohort in the CINECA layout, written with the library's genotype writers."""

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.genotypes.writers import BedWriter, VcfWriter

BASES = np.array(list("ACGT"))


def write_cohort(
    root: Path,
    *,
    n_clients: int = 3,
    per_client: int = 30,
    n_variants: int = 120,
    seed: int = 0,
    missing_rate: float = 0.0,
    build: str = "GRCh37",
) -> dict:
    """Write genotypes (VCF + bed), samples.tsv, phenotypes.tsv and a PGS scoring file."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    n = n_clients * per_client
    samples = [f"S{i:04d}" for i in range(n)]
    clients = np.repeat([f"site{c}" for c in range(n_clients)], per_client)
    # half common, half rare (a handful of carriers)
    freqs = np.concatenate(
        [rng.uniform(0.05, 0.5, n_variants // 2), rng.uniform(0.002, 0.008, n_variants // 2)]
    )
    rng.shuffle(freqs)
    genotypes = rng.binomial(2, freqs, size=(n, n_variants)).astype(np.int8)
    for j in np.flatnonzero(freqs < 0.01):  # at least one carrier of each rare variant
        if genotypes[:, j].sum() == 0:
            genotypes[rng.integers(n), j] = 1
    if missing_rate:
        genotypes[rng.random(genotypes.shape) < missing_rate] = -1
    ref = BASES[rng.integers(0, 4, n_variants)]
    complement = {"A": "T", "T": "A", "C": "G", "G": "C"}
    alt = np.array([rng.choice([b for b in "ACGT" if b not in (r, complement[r])]) for r in ref])
    variants = pd.DataFrame(
        {
            "chrom": "22",
            "pos": np.arange(n_variants) * 1000 + 16_000_000,
            "id": [f"rs{i}" for i in range(n_variants)],
            "ref": ref,
            "alt": alt,
        }
    )
    (root / "genotypes").mkdir(exist_ok=True)
    with VcfWriter(root / "genotypes" / "chr22.vcf.gz", samples) as vcf:
        vcf.write(variants, genotypes)
    with BedWriter(root / "genotypes" / "cohort", samples) as bed:
        bed.write(variants, genotypes)
    phenotype = np.zeros(n, dtype=int)
    for c in range(n_clients):  # 20 % cases per client
        idx = np.flatnonzero(clients == f"site{c}")
        phenotype[rng.choice(idx, size=max(2, per_client // 5), replace=False)] = 1
    pd.DataFrame(
        {"sample_id": samples, "population": clients, "cluster": 0, "client": clients}
    ).to_csv(root / "samples.tsv", sep="\t", index=False)
    pd.DataFrame(
        {
            "eid": [f"fake{i}" for i in range(n)],
            "Subject id": samples,
            "disease": phenotype,
            "disease_liability": rng.normal(size=n),
        }
    ).to_csv(root / "phenotypes.tsv", sep="\t", index=False)
    scored = variants.sample(frac=0.6, random_state=seed).sort_index()
    flip = rng.random(len(scored)) < 0.5
    score = pd.DataFrame(
        {
            "rsID": scored["id"],
            "chr_name": scored["chrom"],
            "chr_position": scored["pos"],
            "effect_allele": np.where(flip, scored["ref"], scored["alt"]),
            "other_allele": np.where(flip, scored["alt"], scored["ref"]),
            "effect_weight": rng.normal(0, 0.1, len(scored)).round(6),
        }
    )
    (root / "scores").mkdir(exist_ok=True)
    header = f"#pgs_id=PGS_sim\n#genome_build={build}\n"
    with gzip.open(root / "scores" / "PGS_sim.txt.gz", "wt") as handle:
        handle.write(header + score.to_csv(sep="\t", index=False))
    return {
        "root": root,
        "vcf": root / "genotypes" / "chr22.vcf.gz",
        "bed": root / "genotypes" / "cohort",
        "samples": root / "samples.tsv",
        "phenotypes": root / "phenotypes.tsv",
        "scoring_file": root / "scores" / "PGS_sim.txt.gz",
        "genotypes": genotypes,
        "variants": variants,
        "sample_ids": samples,
    }


@pytest.fixture(scope="session")
def tiny_cohort(tmp_path_factory):
    return write_cohort(tmp_path_factory.mktemp("cohort"), missing_rate=0.01)
