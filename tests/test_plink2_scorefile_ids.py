"""The plink2 cross-check works on a VCF whose IDs are ``.`` (as docs/ANALYST.md runs it).

``write_plink2_scorefile`` wrote one row per variant ID, so every ``.`` variant's weight was
summed into one row that plink2 rejects. Without unique IDs it writes ``chrom:pos:ref:alt`` IDs,
and plink2 with ``--set-all-var-ids @:#:$r:$a`` gives ``prepare score``'s sums.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_scoring_default_path import (  # noqa: E402
    N_VARIANTS,
    prepare_score,
    write_vcf,
    write_weights,
)

from rvfedprs.genotypes.scoring import write_plink2_scorefile  # noqa: E402


@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")
def test_unnamed_variants_are_written_by_position_and_plink2_agrees(tmp_path, caplog):
    vcf = write_vcf(tmp_path / "unnamed.vcf", named=False)
    ours = prepare_score(vcf, write_weights(tmp_path / "w.txt"), tmp_path / "p.tsv", "--direct")
    log = pd.read_csv(tmp_path / "p.match.tsv", sep="\t")
    scorefile = write_plink2_scorefile(log, tmp_path / "p2.txt")
    assert "have no unique ID" in caplog.text and "--set-all-var-ids @:#:$r:$a" in caplog.text
    written = pd.read_csv(scorefile, sep="\t")
    assert len(written) == N_VARIANTS and written["ID"].is_unique  # not one summed '.' row
    subprocess.run(
        ["plink2", "--vcf", str(vcf), "--set-all-var-ids", "@:#:$r:$a", "--score", str(scorefile),
         "1", "2", "3", "header", "cols=+scoresums", "--out", str(tmp_path / "p2")],
        check=True, capture_output=True,
    )  # fmt: skip
    theirs = pd.read_csv(tmp_path / "p2.sscore", sep="\t")["SCORE1_SUM"].to_numpy()
    np.testing.assert_allclose(ours["SUM"], theirs, rtol=1e-5, atol=1e-5)
