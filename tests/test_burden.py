"""Gene/region burden features (rvfedprs/burden.py): coordinates, weights, exclusions."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.burden import (
    BurdenMap,
    burden_from_config,
    burden_map,
    read_regions,
    window_regions,
    write_exclusions,
)
from rvfedprs.config import validate_config
from rvfedprs.exceptions import InputDataError


def _variants():
    return pd.DataFrame(
        {
            "variant_key": [f"1:{p}:A:G" for p in (1000, 1010, 1011, 5000, 7000)] + ["2:1005:C:T"],
            "chrom": ["1", "1", "1", "1", "1", "2"],
            "pos": [1000, 1010, 1011, 5000, 7000, 1005],
            "maf": [1e-4, 5e-4, 2e-3, 0.02, 3e-4, 1e-3],
            "lof": [1, 1, 1, 1, 0, 1],
        }
    )


def test_bed_and_table_give_the_same_one_based_regions(tmp_path):
    (tmp_path / "g.bed").write_text("chr1\t999\t1010\tG1\n1\t4999\t7000\tG2\n")
    (tmp_path / "g.tsv").write_text(
        "chrom\tstart\tend\tgene\n1\t1000\t1010\tG1\n1\t5000\t7000\tG2\n"
    )
    bed, table = read_regions(tmp_path / "g.bed"), read_regions(tmp_path / "g.tsv")
    pd.testing.assert_frame_equal(bed, table)
    assert bed[["start", "end"]].values.tolist() == [[1000, 1010], [5000, 7000]]


def test_map_against_a_naive_loop_with_every_exclusion_named(tmp_path):
    rows = "1\t1000\t1010\tG1\n1\t5000\t7000\tG2\n3\t1\t100\tEMPTY\n"
    (tmp_path / "g.tsv").write_text("chrom\tstart\tend\tgene\n" + rows)
    variants = _variants()
    found = burden_map(variants, read_regions(tmp_path / "g.tsv"), max_maf=0.01, mask_column="lof")
    # G2's two variants are both left out (MAF, mask), EMPTY holds none: both are dropped
    assert found.regions == ["G1"]
    expected = np.zeros((6, 2))
    for j, (pos, maf, lof) in enumerate(variants[["pos", "maf", "lof"]].itertuples(False)):
        if maf > 0.01 or not lof or variants["chrom"][j] != "1":
            continue
        for g, (start, end) in enumerate([(1000, 1010), (5000, 7000)]):
            if start <= pos <= end:
                expected[j, g] = beta.pdf(maf, 1, 25)
    np.testing.assert_allclose(found.matrix.toarray(), expected[:, :1], rtol=1e-12)
    reasons = dict(zip(found.excluded["variant_key"], found.excluded["reason"], strict=True))
    assert reasons == {
        "1:1011:A:G": "outside every region",
        "1:5000:A:G": "maf above 0.01",
        "1:7000:A:G": "lof false",
        "2:1005:C:T": "outside every region",
    }
    # round trip through what a GLM round sends
    np.testing.assert_array_equal(
        BurdenMap.matrix_from_config(found.to_config()).toarray(), found.matrix.toarray()
    )


def test_fixed_windows_cover_every_variant():
    windows = window_regions(_variants(), 1000)
    assert windows["region"].tolist() == ["1:1-1000", "1:1001-2000", "1:4001-5000",
                                          "1:6001-7000", "2:1001-2000"]  # fmt: skip
    found = burden_map(_variants(), windows, max_maf=0.5, weights="flat")
    assert found.excluded.empty and found.matrix.sum(axis=1).A1.tolist() == [1.0] * 6


def test_bad_regions_are_named(tmp_path):
    (tmp_path / "bad.tsv").write_text("chrom\tstart\tend\n1\t500\t100\n")
    with pytest.raises(InputDataError, match="region 1 ends before it starts"):
        read_regions(tmp_path / "bad.tsv")
    (tmp_path / "nan.bed").write_text("1\tx\t100\n")
    with pytest.raises(InputDataError, match="start 'x' on region 1 is not an integer"):
        read_regions(tmp_path / "nan.bed")
    with pytest.raises(InputDataError, match="no rare variant .* falls in any of the 1 regions"):
        burden_map(_variants(), pd.DataFrame({"chrom": ["9"], "start": [1], "end": [9],
                                              "region": ["X"]}))  # fmt: skip


def test_exclusions_table_lists_every_left_out_variant_with_its_reason(tmp_path):
    (tmp_path / "g.tsv").write_text("chrom\tstart\tend\tgene\n1\t1000\t1010\tG1\n")
    found = burden_map(_variants(), read_regions(tmp_path / "g.tsv"), max_maf=0.01,
                       mask_column="lof")  # fmt: skip
    written = pd.read_csv(write_exclusions(found, tmp_path / "run"), sep="\t", dtype=str)
    assert written.columns.tolist() == ["variant_key", "reason"]
    assert dict(zip(written["variant_key"], written["reason"], strict=True)) == {
        "1:1011:A:G": "outside every region",
        "1:5000:A:G": "maf above 0.01",
        "1:7000:A:G": "lof false",
        "2:1005:C:T": "outside every region",
    }


def test_rvfedprs_train_writes_the_burden_exclusions_next_to_its_metrics(tmp_path):
    from rvfedprs.run import train

    data = write_federation(tmp_path / "fed", n_clients=3, n_clusters=1)["data"]
    variants = pd.read_csv(data / "rare_variants.tsv", sep="\t", dtype={"chrom": str})
    first = variants.iloc[: len(variants) // 2]  # a region over half the variants
    (tmp_path / "g.tsv").write_text(
        f"chrom\tstart\tend\tgene\n{first.chrom.iloc[0]}\t{first.pos.min()}\t{first.pos.max()}\tG\n"
    )
    section = {"regions": str(tmp_path / "g.tsv"), "max_maf": 0.05}
    config = validate_config({
        "train": {"data": str(data), "strategy": "fedglm", "rounds": 2, "seed": 1,
                  "progress": False},
        "fedglm": {"features": "burden", "l2": 1.0},
        "burden": section,
    })  # fmt: skip
    train(config, tmp_path / "run")
    assert (tmp_path / "run" / "metrics.json").is_file()
    written = pd.read_csv(tmp_path / "run" / "burden_exclusions.tsv", sep="\t", dtype=str)
    expected = burden_from_config(data, validate_config({"burden": section})["burden"]).excluded
    assert len(written) >= len(variants) // 2
    assert set(written["reason"]) == {"outside every region"}
    assert written.values.tolist() == expected[["variant_key", "reason"]].values.tolist()
