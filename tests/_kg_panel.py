"""The shared 1000 Genomes excerpt split in half: a reference panel (.pgen) and a target (.bed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "1kg_chr21_start_plinkng"
PANEL = DATA / "chr21_phase3_start"


def split_panel(tmp: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """Write ``tmp/ref.{pgen,pvar,psam}`` and ``tmp/tgt.{bed,bim,fam}`` (biallelic sites).

    Returns the panel's ``.psam`` table and which of its rows went to the target (a seeded
    half).
    """
    psam = pd.read_csv(PANEL.with_suffix(".psam"), sep="\t")
    held_out = np.random.default_rng(0).random(len(psam)) < 0.5
    psam.loc[~held_out, ["#IID"]].to_csv(tmp / "ref.txt", index=False, header=False)
    psam.loc[held_out, ["#IID"]].to_csv(tmp / "tgt.txt", index=False, header=False)
    base = ["plink2", "--pfile", str(PANEL), "vzs", "--max-alleles", "2", "--threads", "1"]
    for name, kind in (("ref", "--make-pgen"), ("tgt", "--make-bed")):
        subprocess.run(
            [*base, "--keep", str(tmp / f"{name}.txt"), kind, "--out", str(tmp / name)],
            check=True,
            capture_output=True,
        )
    return psam, held_out
