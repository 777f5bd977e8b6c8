"""pgsc_calc's candidate-level match log: ``candidates`` per row, ``not_best`` pairs (issue 31)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.cli import main
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.matching import ScoreMatcher
from rvfedprs.genotypes.scorefile import read_scorefile
from rvfedprs.genotypes.scoring import score

HEADER = (
    "##fileformat=VCFv4.2\n##contig=<ID=1>\n"
    '##FORMAT=<ID=GT,Number=1,Type=String,Description="GT">\n'
    "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts1\ts2\ts3\n"
)
# a multi-allelic site split into two records at 100, a plain site at 200, an ambiguous pair
# of records at 300 (both A/T-like for a row without other allele), nothing at 400
RECORDS = [
    "1 100 rs1a A G . . . GT 0/1 1/1 0/0",
    "1 100 rs1b A C . . . GT 0/0 0/1 0/0",
    "1 200 rs2 C T . . . GT 0/1 0/0 1/1",
    "1 300 rs3a A T . . . GT 0/1 0/0 0/0",
    "1 300 rs3b G C . . . GT 0/0 0/1 0/0",
]
SCOREFILE = (
    "#genome_build=GRCh37\n"
    "chr_name\tchr_position\teffect_allele\tother_allele\teffect_weight_a\teffect_weight_b\n"
    "1\t100\tG\tA\t1.0\t0.5\n"  # matches rs1a only: rs1b is its not_best candidate
    "1\t200\tA\tG\t2.0\t\n"  # a strand flip of C/T; no weight for score b
    "1\t300\tA\t\t1.0\t1.0\n"  # two ambiguous candidates: the last kept, the first not_best
    "1\t400\tC\tT\t1.0\t1.0\n"  # no candidate: once, unmatched
)


def write_inputs(folder: Path) -> tuple[Path, Path]:
    vcf = folder / "g.vcf"
    vcf.write_text(HEADER + "".join(r.replace(" ", "\t") + "\n" for r in RECORDS))
    scorefile = folder / "scores.txt"
    scorefile.write_text(SCOREFILE)
    return vcf, scorefile


def test_multiallelic_site_gives_the_kept_variant_matched_and_the_other_not_best(tmp_path):
    vcf, scorefile = write_inputs(tmp_path)
    scores, log, candidates = score(
        open_genotypes(vcf), scorefile, min_overlap=0.1, return_candidates=True
    )
    a = log[log["accession"] == "a"]
    assert a["candidates"].tolist() == [2, 1, 2, 0]
    assert a["status"].tolist() == ["matched", "flipped", "ambiguous_dropped", "not_found"]
    pairs = candidates[candidates["accession"] == "a"]
    assert pairs["row"].tolist() == [0, 0, 1, 2, 2, 3]
    assert pairs["variant_id"].tolist() == ["rs1a", "rs1b", "rs2", "rs3a", "rs3b", ""]
    assert pairs["match_status"].tolist() == [
        "matched", "not_best", "matched", "not_best", "excluded", "unmatched"
    ]  # fmt: skip
    assert pairs["status"].tolist() == [
        "matched", "allele_mismatch", "flipped", "ambiguous_dropped", "ambiguous_dropped",
        "not_found",
    ]  # fmt: skip
    assert pairs["match_type"].tolist()[:3] == ["altref", "", "altref_flip"]
    assert pairs["weight_used"].tolist() == [1.0, 0.0, 2.0, 0.0, 0.0, 0.0]
    # score b has no weight on row 1: its section leaves that row's pair out
    b = candidates[candidates["accession"] == "b"]
    assert b["row"].tolist() == [0, 0, 2, 2, 3]
    # each row's kept pair (or its one unpaired line) is its match-log row, field by field
    kept = candidates[candidates["match_status"] != "not_best"].reset_index(drop=True)
    assert kept.drop(columns="candidates").equals(log.drop(columns="candidates"))
    assert np.allclose(scores["a_SUM"], [1 + 2 * 1, 2 + 0, 0 + 2 * 2])


def test_streamed_and_known_variant_tables_give_the_same_candidate_log(tmp_path):
    vcf, scorefile = write_inputs(tmp_path)
    *_, streamed = score(open_genotypes(vcf), scorefile, min_overlap=0.1, return_candidates=True)
    source = open_genotypes(vcf)
    variants = pd.DataFrame(
        [r.split(" ")[:5] for r in RECORDS], columns=["chrom", "pos", "id", "ref", "alt"]
    ).astype({"pos": np.int64})
    matcher = ScoreMatcher(read_scorefile(scorefile))
    found = matcher.candidates(variants)
    known = matcher.candidate_log(found, matcher.resolve(found))
    assert source.variants is None  # a VCF streams: the two paths differ
    pd.testing.assert_frame_equal(streamed, known, check_dtype=False)


def test_cli_writes_the_candidate_log_beside_the_match_log(tmp_path, capsys):
    vcf, scorefile = write_inputs(tmp_path)
    out = tmp_path / "out" / "prs.tsv"
    rc = main(
        [
            "prepare", "score", "--genotypes", str(vcf), "--scorefile", str(scorefile),
            "--out", str(out), "--min-overlap", "0.1", "--direct", "--match-candidates",
        ]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    log = pd.read_csv(out.with_name("prs.match.tsv"), sep="\t")
    pairs = pd.read_csv(out.with_name("prs.match_candidates.tsv"), sep="\t")
    assert len(log) == 7 and len(pairs) == 11
    assert (pairs["match_status"] == "not_best").sum() == 4
    assert "prs.match_candidates.tsv" in capsys.readouterr().out
    # without the flag, only the match log
    other = tmp_path / "plain" / "prs.tsv"
    argv = ["prepare", "score", "--genotypes", str(vcf), "--scorefile", str(scorefile)]
    assert main([*argv, "--out", str(other), "--min-overlap", "0.1", "--direct"]) == 0
    assert sorted(p.name for p in other.parent.iterdir()) == ["prs.match.tsv", "prs.tsv"]


def test_workflow_match_writes_the_candidate_log_with_each_row_outcome(tmp_path):
    """The workflow's rule (pipelines/match_scores.py): QC outcomes on the kept pair only."""
    from pipelines.match_scores import main as match_rule

    _, scorefile = write_inputs(tmp_path)
    variants = pd.DataFrame(
        [r.split(" ")[:5] for r in RECORDS], columns=["chrom", "pos", "id", "ref", "alt"]
    )
    variants["variant_key"] = variants[["chrom", "pos", "ref", "alt"]].agg(":".join, axis=1)
    variants["alt_freq"] = 0.2
    variants["qc_pass"] = variants["id"] != "rs1a"  # the multi-allelic site's kept record
    variants["reason"] = np.where(variants["qc_pass"], "", "hwe_p=1e-09")
    variants.to_csv(tmp_path / "variants.tsv", sep="\t", index=False)
    pipeline = {"genome_build": "GRCh37", "min_overlap": 0.1, "qc": {"apply_to_score": True}}
    out = tmp_path / "logs"
    match = match_rule(
        variants=tmp_path / "variants.tsv",
        scoring_file=scorefile,
        pipeline=pipeline,
        out_weights=tmp_path / "weights.txt.gz",
        out_match=out / "score_match.tsv",
        out_candidates=out / "score_match_candidates.tsv",
    )
    pairs = pd.read_csv(out / "score_match_candidates.tsv", sep="\t", keep_default_na=False)
    a = pairs[pairs["accession"] == "a"]
    assert a["variant_id"].tolist() == ["rs1a", "rs1b", "rs2", "rs3a", "rs3b", ""]
    assert a["match_status"].tolist() == [
        "excluded", "not_best", "matched", "not_best", "excluded", "unmatched"
    ]  # fmt: skip
    assert a["used"].astype(str).tolist() == ["False", "False", "True", "False", "False", "False"]
    assert a["drop_reason"].iloc[0].startswith("hwe_p=1e-09") and a["drop_reason"].iloc[1] == ""
    kept = pairs[pairs["match_status"] != "not_best"].reset_index(drop=True)
    assert kept["used"].tolist() == match["used"].tolist()
