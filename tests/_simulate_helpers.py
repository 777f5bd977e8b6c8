"""Helpers shared by the simulator tests: read written genotypes back, HWE within sites."""

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from rvfedprs.genotypes.chunk import variant_keys
from rvfedprs.genotypes.readers import open_genotypes


def genotypes_of(out, keys, samples=None):
    """ALT counts of variants ``keys`` read back from the written PLINK files, (samples, keys)."""
    source = open_genotypes(out / "genotypes" / "cohort")
    position = {k: i for i, k in enumerate(source.variants.pipe(variant_keys))}
    index = np.array([position[k] for k in keys])
    order = np.argsort(index)
    chunks = source.iter_selected(index[order], 4096, samples, np.float64)
    x = np.concatenate([c.dosages for c in chunks], axis=1)
    return x[:, np.argsort(order)]


def hwe_within_sites(cohort, tmp_path):
    """plink2 --hardy within each site: p-values of common variants are uniform (HWE holds)."""
    if shutil.which("plink2") is None:
        pytest.skip("plink2 is needed for the HWE check")
    samples = cohort.samples
    for client, rows in samples.groupby("client"):
        keep = tmp_path / f"{client}.keep"
        keep.write_text("\n".join(f"{s}\t{s}" for s in rows["sample_id"]) + "\n")
        done = subprocess.run(
            ["plink2", "--bfile", str(cohort.out / "genotypes" / "cohort"), "--keep", str(keep),
             "--maf", "0.05", "--hardy", "--out", str(tmp_path / client)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        hardy = pd.read_csv(tmp_path / f"{client}.hardy", sep="\t")
        p = hardy["P"].to_numpy()
        n = len(p)
        # exact-test p-values are conservative (P(p < a) <= a): never more small ones than a
        # uniform would give
        for a in (0.01, 0.001):
            assert (p < a).mean() < a + 4 * np.sqrt(a * (1 - a) / n), (client, a)
        # and the inbreeding coefficient is -1/(2N - 1) on average (plink2's expected
        # heterozygosity uses the site's own frequency), over variants with site MAF >= 0.05;
        # standard error from 20 contiguous blocks of variants, so that LD within a block does
        # not shrink it
        counts = hardy[["HOM_A1_CT", "HET_A1_CT", "TWO_AX_CT"]].to_numpy(dtype=float)
        af = (2 * counts[:, 0] + counts[:, 1]) / (2 * counts.sum(axis=1))
        common = np.minimum(af, 1 - af) >= 0.05
        f = (1 - hardy["O(HET_A1)"] / hardy["E(HET_A1)"]).to_numpy()[common]
        blocks = np.array([b.mean() for b in np.array_split(f, 20)])
        expected = -1 / (2 * len(rows) - 1)
        assert abs(blocks.mean() - expected) < 4 * blocks.std(ddof=1) / np.sqrt(20), client
