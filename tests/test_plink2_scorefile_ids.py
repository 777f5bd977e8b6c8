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

from test_scoring_default_path import N_SAMPLES, N_VARIANTS, prepare_score, write_weights  # noqa: E402

from rvfedprs.genotypes.scoring import write_plink2_scorefile  # noqa: E402


@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")
def test_unnamed_variants_are_written_by_position_and_plink2_agrees(tmp_path, caplog):
    rng = np.random.default_rng(3)
    samples = "\t".join(f"s{i}" for i in range(N_SAMPLES))
    lines = [
        "##fileformat=VCFv4.2",
        "##contig=<ID=1>",
        '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
        f"#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t{samples}",
    ]
    for j in range(N_VARIANTS):
        calls = [f"{a}/{b}" for a, b in rng.integers(0, 2, size=(N_SAMPLES, 2))]
        lines.append(f"1\t{1000 + 10 * j}\t.\tA\tG\t.\tPASS\t.\tGT\t" + "\t".join(calls))
    vcf = tmp_path / "unnamed.vcf"
    vcf.write_text("\n".join(lines) + "\n")
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
