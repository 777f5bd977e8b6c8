"""docs/ANALYST.md runs as written: its ```bash blocks, in order, from the repository root."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ANALYST.md"
DATA = ROOT / ".." / "shared" / "data"
NEEDED = [
    DATA / "cineca_synthetic" / "cineca_synthetic_subset.pgen",
    DATA / "cineca_synthetic" / "uk1_phenotypes.tsv",
    DATA / "pgs_catalog_scorefiles" / "PGS001229_22.txt",
    DATA / "1kg_chr21_start_plinkng" / "chr21_phase3_start.pgen",
]
#: the output folder the page writes to; the test writes to its own instead
FOLDER = "/tmp/analyst"


def bash_blocks(text: str) -> list[str]:
    """The bodies of the page's ```bash blocks, in order."""
    return re.findall(r"^```bash\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_the_page_has_the_three_commands_and_its_images_exist():
    text = DOC.read_text()
    script = "\n".join(bash_blocks(text))
    for command in ("rvfedprs prepare score", "rvfedprs ancestry", "rvfedprs assess"):
        assert command in script
    for image in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
        path = DOC.parent / image
        assert path.is_file() and path.stat().st_size < 200_000, image


@pytest.mark.slow
@pytest.mark.skipif(
    not all(p.is_file() for p in NEEDED) or shutil.which("plink2") is None,
    reason="needs ../shared/data (CINECA, PGS001229, the 1000 Genomes chr21 excerpt) and plink2",
)
def test_the_bash_blocks_run_in_order_and_print_the_numbers_shown(tmp_path):
    text = DOC.read_text()
    out = tmp_path / "analyst"
    script = "\n".join(b.replace(FOLDER, str(out)) for b in bash_blocks(text))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    printed = run.stdout.replace(str(out), FOLDER)
    # the lines the page shows as output are the ones the commands print
    for line in (
        "scored 2504 samples (n_matched=782; {'matched': 782, 'ambiguous_dropped': 47, "
        "'not_found': 6})",
        "2504 samples; max |ours - plink2| = 5.0e-06",
        "ancestry: 490 targets on 81 variants",
        "assigned 303 of 490; right: 66% of them",
        "| SUM | pooled | 2504 (1252) | 0.474 (0.451–0.497) | 0.91 (0.84–0.99) |",
    ):
        assert line in printed and line in text, line
    candidates = pd.read_csv(out / "prs.match_candidates.tsv", sep="\t")
    assert len(candidates) == 835 and not (candidates["match_status"] == "not_best").any()
    assessed = pd.read_csv(out / "assess" / "assess.tsv", sep="\t")
    assert assessed["site"].tolist() == ["AFR", "AMR", "EAS", "EUR", "SAS", "pooled"]
    for name in ("pcs.tsv", "ancestry.tsv", "prs_normalised.tsv", "variants.tsv", "pca.png"):
        assert (out / "ancestry" / name).is_file()
