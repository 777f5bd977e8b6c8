"""PRS scoring: equality with plink2 --score on real data, matching rules, match log, errors."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.cli import main
from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.scoring import read_scorefile, score, write_plink2_scorefile

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
CINECA = DATA / "cineca_synthetic" / "cineca_synthetic_subset"
PGS = DATA / "pgs_catalog_scorefiles"
needs_real = pytest.mark.skipif(
    not CINECA.with_suffix(".bed").is_file() or not (PGS / "PGS001229_22.txt").is_file(),
    reason="CINECA synthetic data or PGS Catalog files absent",
)
needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")

HEADER = (
    "##fileformat=VCFv4.2\n##contig=<ID=1>\n"
    '##FORMAT=<ID=GT,Number=1,Type=String,Description="GT">\n'
)


def write_vcf(path: Path, rows: list[str], samples=("s1", "s2", "s3", "s4")) -> Path:
    cols = "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t" + "\t".join(samples)
    path.write_text(HEADER + cols + "\n" + "".join(r.replace(" ", "\t") + "\n" for r in rows))
    return path


def write_scorefile(path: Path, rows: list[str], columns: str, header="#genome_build=GRCh37\n"):
    text = (
        header
        + columns.replace(" ", "\t")
        + "\n"
        + "".join(r.replace(" ", "\t") + "\n" for r in rows)
    )
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def plink2_sums(flag: str, path: Path, log: pd.DataFrame, tmp_path: Path) -> np.ndarray:
    scorefile = write_plink2_scorefile(log, tmp_path / "plink2_score.txt")
    out = tmp_path / f"p2_{flag.strip('-')}"
    subprocess.run(
        [
            "plink2",
            flag,
            str(path),
            "--score",
            str(scorefile),
            "1",
            "2",
            "3",
            "header",
            "cols=+scoresums",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return pd.read_csv(f"{out}.sscore", sep="\t")["SCORE1_SUM"].to_numpy()


def printed(values: np.ndarray) -> np.ndarray:
    return np.array([float(f"{v:.6g}") for v in values])  # plink2 prints 6 significant digits


@needs_real
@needs_plink2
@pytest.mark.parametrize(
    ("genotypes", "flag", "plink_path"),
    [
        (CINECA, "--bfile", CINECA),
        (CINECA.with_suffix(".pgen"), "--pfile", CINECA),
        (CINECA.with_suffix(".vcf.gz"), "--vcf", CINECA.with_suffix(".vcf.gz")),
    ],
    ids=["bed", "pgen", "vcf"],
)
def test_sum_equals_plink2_score_to_print_precision(genotypes, flag, plink_path, tmp_path):
    scores, log = score(open_genotypes(genotypes), PGS / "PGS001229_22.txt", chunk_size=200)
    counts = log["status"].value_counts().to_dict()
    assert counts == {"matched": 782, "ambiguous_dropped": 47, "not_found": 6}
    assert (scores["n_matched"] == 782).all() and len(scores) == 2504
    expected = plink2_sums(flag, plink_path, log, tmp_path)
    assert np.array_equal(printed(scores["SUM"].to_numpy()), expected)
    assert np.allclose(scores["SUM"], expected, rtol=1e-5, atol=1e-6)


@needs_real
def test_naive_numpy_reference_with_missing_dosages():
    source = open_genotypes(CINECA)
    scores, log = score(source, PGS / "PGS001229_22.txt", chunk_size=64)
    chunk = next(source.iter_chunks(chunk_size=10_000))
    index = pd.Series(np.arange(chunk.dosages.shape[1]), index=chunk.keys)
    used = log[log["status"] == "matched"]
    x = chunk.dosages[:, index[used["variant_key"]].to_numpy()].astype(np.float64)
    assert np.isnan(x).any()
    x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)  # mean imputation of the ALT dosage
    alt = used["variant_key"].str.split(":").str[3].to_numpy()
    effect = np.where(used["counted_allele"].to_numpy() == alt, x, 2 - x)
    assert np.allclose(scores["SUM"], effect @ used["effect_weight"].to_numpy(), rtol=1e-12)


def test_matching_rules_and_match_log(tmp_path):
    vcf = write_vcf(
        tmp_path / "g.vcf",
        [
            "1 100 rs1 A G . . . GT 0/1 1/1 0/0 ./.",  # matched, effect = REF
            "1 200 rs2 C T . . . GT 0/1 0/0 0/0 1/1",  # flipped strand (G/A in the file: G→C, REF)
            "1 300 rs3 A T . . . GT 0/1 0/1 0/1 0/1",  # ambiguous
            "1 400 rs4 C A . . . GT 0/1 0/1 0/1 0/1",  # allele mismatch (file says C/T)
            "1 500 rs5 G A . . . GT 0/0 0/1 1/1 0/0",  # matched by rsID only
        ],
    )
    sf = write_scorefile(
        tmp_path / "s.txt",
        [
            "rs1 1 100 A G 0.5",
            "rs2 1 200 G A 2.0",
            "rs3 1 300 A T 1.0",
            "rs4 1 400 C T 1.0",
            "rs9 1 900 A C 1.0",
            "rs1 1 100 A G 0.5",
            "rs5 NA NA A G -1.0",
        ],
        "rsID chr_name chr_position effect_allele other_allele effect_weight",
    )
    scores, log = score(open_genotypes(vcf), sf, min_overlap=0.3)
    assert log["status"].tolist() == [
        "matched",
        "flipped",
        "ambiguous_dropped",
        "allele_mismatch",
        "not_found",
        "duplicate",
        "matched",
    ]
    assert log["counted_allele"].tolist() == ["A", "C", "", "", "", "", "A"]
    ref_dosage = np.array([1, 0, 2, 2 - (2 * 3 / 6)])  # missing → 2·p(A), p over the 3 called
    alt_t = np.array([1, 0, 0, 2])
    alt_c = np.array([0, 1, 2, 0])
    expected = 0.5 * ref_dosage + 2.0 * (2 - alt_t) - 1.0 * alt_c  # G→C is REF
    assert np.allclose(scores["SUM"], expected)
    assert (scores["n_matched"] == 3).all()

    freqs = pd.DataFrame(
        {"variant_key": ["1:100:A:G", "1:200:C:T", "1:500:G:A"], "alt_freq": [0.1, 0.5, 0.5]}
    )
    imputed, _ = score(open_genotypes(vcf), sf, min_overlap=0.3, frequencies=freqs)
    assert imputed["SUM"].iloc[3] == pytest.approx(expected[3] - 0.5 * ref_dosage[3] + 0.5 * 1.8)
    with pytest.raises(InputDataError, match=r"1:200:C:T is absent from the frequency table"):
        score(open_genotypes(vcf), sf, min_overlap=0.3, frequencies=freqs.iloc[[0]])
    with pytest.raises(InputDataError, match=r"only 3 of 7 rows .*below min_overlap=0.75"):
        score(open_genotypes(vcf), sf)


def test_scorefile_formats(tmp_path):
    hm = write_scorefile(
        tmp_path / "hm.txt.gz",
        ["rs1 7 T C 0.1 rs1 1 100"],
        "rsID chr_name effect_allele other_allele effect_weight hm_rsID hm_chr hm_pos",
        header="#genome_build=NR\n#HmPOS_build=GRCh38\n",
    )
    parsed = read_scorefile(hm)
    assert parsed.genome_build == "GRCh38" and parsed.header["genome_build"] == "NR"
    assert parsed.table.loc[0, ["chrom", "pos"]].tolist() == ["1", 100]
    with pytest.raises(InputDataError, match=r"declares genome_build=GRCh38, but .* GRCh37"):
        score(
            open_genotypes(
                write_vcf(tmp_path / "g.vcf", ["1 100 rs1 T C . . . GT 0/1 0/0 0/0 1/1"])
            ),
            hm,
            genome_build="GRCh37",
        )
    bad = write_scorefile(
        tmp_path / "w.txt",
        ["1 5 A G 0.1x"],
        "chr_name chr_position effect_allele other_allele effect_weight",
    )
    with pytest.raises(InputDataError, match=r"effect_weight '0.1x' on row 1 is not a number"):
        read_scorefile(bad)
    nocol = write_scorefile(
        tmp_path / "n.txt", ["1 5 A 0.1"], "chr_name chr_position allele weight"
    )
    with pytest.raises(InputDataError, match=r"no 'effect_allele' column"):
        read_scorefile(nocol)


@needs_real
def test_real_catalog_files():
    assert read_scorefile(PGS / "PGS001229_22.txt").genome_build == "GRCh37"
    rsid_only = read_scorefile(PGS / "PGS000001.txt.gz")
    assert (
        rsid_only.table["pos"].isna().all() and rsid_only.table["rsid"].str.startswith("rs").all()
    )
    assert read_scorefile(PGS / "PGS000001_hmPOS_GRCh38.txt.gz").genome_build == "GRCh38"
    models = read_scorefile(PGS / "scorefile_dominant_and_recessive.txt").table["effect_type"]
    assert models.value_counts().to_dict() == {"additive": 833, "dominant": 1, "recessive": 1}


@needs_real
def test_cli_prepare_score(tmp_path, capsys):
    out = tmp_path / "prs.tsv"
    rc = main(
        [
            "prepare",
            "score",
            "--genotypes",
            str(CINECA.with_suffix(".pgen")),
            "--scorefile",
            str(PGS / "PGS001229_22.txt"),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    table = pd.read_csv(out, sep="\t")
    assert table.columns.tolist() == ["sample_id", "SUM", "n_matched"] and len(table) == 2504
    log = pd.read_csv(tmp_path / "prs.match.tsv", sep="\t")
    assert len(log) == 835 and (log["status"] == "matched").sum() == 782
    rc = main(
        [
            "prepare",
            "score",
            "--genotypes",
            str(CINECA),
            "--scorefile",
            str(PGS / "PGS001229_22.txt"),
            "--out",
            str(out),
            "--min-overlap",
            "0.99",
        ]
    )
    assert rc == 2
    assert "below min_overlap=0.99" in capsys.readouterr().err


@needs_real
def test_no_samples_gives_the_match_log_only():
    scores, log = score(open_genotypes(CINECA), PGS / "PGS001229_22.txt", samples=[])
    assert scores.shape == (0, 3)
    assert (log["status"] == "matched").sum() == 782


def scalar_classify(effect: str, other: str, ref: str, alt: str) -> tuple[str, str | None]:
    """The per-pair rule, written plainly (the reference for the vectorised matcher)."""
    complement = str.maketrans("ACGT", "TGCA")
    ambiguous = {frozenset("AT"), frozenset("CG")}
    if other:
        if frozenset((effect, other)) in ambiguous:
            return "ambiguous_dropped", None
        if frozenset((effect, other)) == frozenset((ref, alt)):
            return "matched", alt if effect == alt else ref
        flipped = (effect.translate(complement), other.translate(complement))
        if frozenset(flipped) == frozenset((ref, alt)):
            return "flipped", alt if flipped[0] == alt else ref
        return "allele_mismatch", None
    if frozenset((ref, alt)) in ambiguous:
        return "ambiguous_dropped", None
    return ("matched", effect) if effect in (ref, alt) else ("allele_mismatch", None)


def test_vectorised_classification_equals_the_scalar_rule_on_every_allele_combination():
    from itertools import product

    from rvfedprs.genotypes.matching import _CODE_NAMES as _STATUS_NAMES
    from rvfedprs.genotypes.matching import classify

    def _complement(alleles):
        return alleles.str.translate(str.maketrans("ACGT", "TGCA")).to_numpy(object)

    alleles = ["A", "C", "G", "T", "AC", "GT"]
    cases = [
        (e, o, r, a) for e, o, r, a in product(alleles, alleles + [""], alleles, alleles) if r != a
    ]
    e, o, r, a = (pd.Series([c[i] for c in cases]) for i in range(4))
    state, counts_alt, _ = classify(
        e.to_numpy(object),
        o.to_numpy(object),
        _complement(e),
        _complement(o),
        r.to_numpy(object),
        a.to_numpy(object),
    )
    expected = [scalar_classify(*c) for c in cases]
    assert _STATUS_NAMES[state].tolist() == [s for s, _ in expected]
    usable = state >= 2
    got = np.where(counts_alt, a, r)[usable]
    assert got.tolist() == [allele for _, allele in np.array(expected, object)[usable]]
    assert set(_STATUS_NAMES[state]) == {
        "matched",
        "flipped",
        "ambiguous_dropped",
        "allele_mismatch",
    }


def test_a_row_matching_two_variants_is_an_error_and_rows_keep_their_best_candidate(tmp_path):
    vcf = write_vcf(
        tmp_path / "g.vcf",
        [
            "1 100 rs1 A G . . . GT 0/1 1/1 0/0 0/0",
            "1 100 rs1b A C . . . GT 0/1 0/0 0/0 0/0",  # same position, other alleles
            "1 200 rs2 A T . . . GT 0/1 0/0 0/0 0/0",  # ambiguous for a row without other
            "1 200 rs2b A C . . . GT 0/0 0/1 0/0 0/0",  # usable for the same row
            "1 300 rs3 A T . . . GT 0/1 0/0 0/0 0/0",
            "1 300 rs3b G C . . . GT 0/1 0/0 0/0 0/0",  # both ambiguous: the last one is kept
        ],
    )
    sf = tmp_path / "s.txt"  # rows 2 and 3 have no other allele
    sf.write_text(
        "chr_name\tchr_position\teffect_allele\tother_allele\teffect_weight\n"
        "1\t100\tG\tA\t1.0\n1\t200\tC\t\t1.0\n1\t300\tA\t\t1.0\n"
    )
    scores, log = score(open_genotypes(vcf), sf, min_overlap=0.1)
    assert log["status"].tolist() == ["matched", "matched", "ambiguous_dropped"]
    assert log["variant_key"].tolist() == ["1:100:A:G", "1:200:A:C", "1:300:G:C"]
    assert np.allclose(scores["SUM"], [1, 3, 0, 0])  # rs1 ALT dosage + rs2b ALT dosage
    sf2 = write_scorefile(
        tmp_path / "s2.txt",
        ["1 100 A 1.0"],
        "chr_name chr_position effect_allele effect_weight",
    )
    with pytest.raises(InputDataError, match=r"1 scoring-file rows \(rows 1\) match more than one"):
        score(open_genotypes(vcf), sf2, min_overlap=0.1)


def test_per_chromosome_vcfs_matching_nothing_give_the_min_overlap_error(tmp_path):
    """Issue 16: no row matches any file of a multi-file VCF source → the min_overlap error."""
    chr1 = write_vcf(tmp_path / "chr1.vcf", ["1 100 rs1 A G . . . GT 0/1 1/1 0/0 0/0"])
    text = (
        (tmp_path / "chr1.vcf")
        .read_text()
        .replace("##contig=<ID=1>", "##contig=<ID=2>")
        .replace("\n1\t100\trs1", "\n2\t100\trs1")
    )
    chr2 = tmp_path / "chr2.vcf"
    chr2.write_text(text)
    sf = write_scorefile(
        tmp_path / "s.txt",
        ["3 500 A G 0.5", "4 600 C T 1.0"],
        "chr_name chr_position effect_allele other_allele effect_weight",
    )
    with pytest.raises(InputDataError, match=r"only 0 of 2 rows .*below min_overlap=0.75"):
        score(open_genotypes([chr1, chr2]), sf)


def plink2_score(
    path: Path, scorefile: Path, tmp_path: Path, *extra: str, cols="3"
) -> pd.DataFrame:
    """``plink2 --score`` on a PLINK1 fileset (weights in columns ``cols``); the .sscore table."""
    out = tmp_path / f"p2_{scorefile.stem}_{'_'.join(extra) or 'additive'}"
    weight = ["3"] if cols == "3" else []
    several = [] if cols == "3" else ["--score-col-nums", cols]
    subprocess.run(
        ["plink2", "--bfile", str(path), "--score", str(scorefile), "1", "2", *weight,
         "header", *extra, "cols=+scoresums", *several, "--out", str(out)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return pd.read_csv(f"{out}.sscore", sep="\t")


@needs_real
@needs_plink2
def test_dominant_and_recessive_rows_equal_plink2_models(tmp_path):
    """pgsc_calc's dominant/recessive example: plink2 run once per model, SUMs added."""
    scores, log = score(open_genotypes(CINECA), PGS / "scorefile_dominant_and_recessive.txt")
    used = log[log["status"].isin(["matched", "flipped"])]
    assert set(used["effect_type"]) == {"additive", "dominant", "recessive"}
    expected = np.zeros(len(scores))
    for model in ("additive", "dominant", "recessive"):
        part = used[used["effect_type"] == model]
        path = write_plink2_scorefile(part, tmp_path / f"{model}.txt")
        extra = () if model == "additive" else (model,)
        expected += plink2_score(CINECA, path, tmp_path, *extra)["SCORE1_SUM"].to_numpy()
    assert np.allclose(scores["SUM"], expected, rtol=1e-5, atol=1e-5)
    additive_only, _ = score(open_genotypes(CINECA), PGS / "scorefile.txt")
    assert not np.allclose(additive_only["SUM"], scores["SUM"])  # the models change the sum


@needs_real
@needs_plink2
def test_several_scores_in_one_pass_equal_plink2_columns(tmp_path):
    """Two files, one of them with effect_weight_<name> columns: one SUM column per score."""
    base = read_scorefile(PGS / "PGS001229_22.txt").table
    rng = np.random.default_rng(1)
    wide = tmp_path / "wide.txt"
    frame = pd.DataFrame(
        {
            "chr_name": base["chrom"],
            "chr_position": base["pos"],
            "effect_allele": base["effect_allele"],
            "other_allele": base["other_allele"],
            "effect_weight_first": base["effect_weight"],
            "effect_weight_second": rng.normal(size=len(base)).round(5),
        }
    )
    frame.loc[3, "effect_weight_second"] = np.nan  # row 4 is not part of the second score
    frame.to_csv(wide, sep="\t", index=False, na_rep="")
    for source in (open_genotypes(CINECA), open_genotypes(CINECA.with_suffix(".vcf.gz"))):
        scores, log = score(source, [PGS / "PGS001229_22.txt", wide], chunk_size=300)
        assert [c for c in scores.columns if c.endswith("_SUM")] == [
            "PGS001229_SUM", "first_SUM", "second_SUM"
        ]  # fmt: skip
        assert log.groupby("accession", sort=False).size().to_dict() == {
            "PGS001229": 835, "first": 835, "second": 834
        }  # fmt: skip
        assert np.array_equal(scores["PGS001229_SUM"], scores["first_SUM"])
        path = write_plink2_scorefile(log, tmp_path / "multi.txt")
        theirs = plink2_score(CINECA, path, tmp_path, cols="3-5")
        for k, name in enumerate(("PGS001229", "first", "second"), start=1):
            assert np.allclose(scores[f"{name}_SUM"], theirs[f"SCORE{k}_SUM"], rtol=1e-5, atol=1e-5)
    with pytest.raises(InputDataError, match=r"score names \['first', 'second'\] occur twice"):
        score(open_genotypes(CINECA), [wide, wide])


@needs_real
@needs_plink2
def test_keep_ambiguous_scores_a_t_and_c_g_rows_as_written(tmp_path):
    dropped, _ = score(open_genotypes(CINECA), PGS / "PGS001229_22.txt")
    kept, log = score(open_genotypes(CINECA), PGS / "PGS001229_22.txt", keep_ambiguous=True)
    counts = log["status"].value_counts().to_dict()
    assert counts == {"matched": 829, "not_found": 6}
    assert log["ambiguous"].sum() == 47 and (log.loc[log["ambiguous"], "status"] == "matched").all()
    assert (kept["n_matched"] == 829).all()
    theirs = plink2_score(CINECA, write_plink2_scorefile(log, tmp_path / "amb.txt"), tmp_path)
    assert np.allclose(kept["SUM"], theirs["SCORE1_SUM"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(kept["SUM"], dropped["SUM"])


@needs_real
@needs_plink2
def test_cli_via_pgen_equals_direct_vcf_reading(tmp_path):
    """The default (a cached .pgen copy), --via-pgen and --direct give the same sums."""
    sums = []
    for extra in (["--direct"], [], ["--via-pgen"]):
        out = tmp_path / f"prs{len(sums)}.tsv"
        rc = main(
            ["prepare", "score", "--genotypes", str(CINECA.with_suffix(".vcf.gz")),
             "--scorefile", str(PGS / "PGS001229_22.txt"), "--out", str(out),
             "--pgen-cache", str(tmp_path / "cache"), *extra]
        )  # fmt: skip
        assert rc == 0
        sums.append(pd.read_csv(out, sep="\t")["SUM"].to_numpy())
    assert len(list((tmp_path / "cache").glob("*.pgen"))) == 1  # made once, then reused
    # GT calls: the .pgen copy holds the same genotypes, so the sums agree to the 10 digits
    # written (not bit for bit: the .pgen reader sums its variants in other blocks).
    np.testing.assert_allclose(sums[0], sums[1], rtol=1e-9, atol=0)
    np.testing.assert_array_equal(sums[1], sums[2])


@needs_real
@needs_plink2
@pytest.mark.parametrize("model", ["dominant", "recessive"])
def test_dominant_and_recessive_missing_genotypes_follow_plink2(model, tmp_path):
    """Two CINECA variants with missing calls, scored under each model, effect allele REF/ALT."""
    flag = "is_dominant" if model == "dominant" else "is_recessive"
    sf = write_scorefile(
        tmp_path / "m.txt",
        ["22 44759519 G A 0.7 TRUE", "22 50184484 G T -1.3 TRUE"],
        f"chr_name chr_position effect_allele other_allele effect_weight {flag}",
    )
    scores, log = score(open_genotypes(CINECA), sf)
    assert (log["status"] == "matched").all() and set(log["effect_type"]) == {model}
    path = write_plink2_scorefile(log, tmp_path / "p2.txt")
    theirs = plink2_score(CINECA, path, tmp_path, model)["SCORE1_SUM"].to_numpy()
    assert np.allclose(scores["SUM"], theirs, rtol=1e-5, atol=1e-5)


@needs_plink2
def test_a_variant_scored_twice_is_refused_when_its_weights_differ_and_dropped_when_not(
    tmp_path, caplog
):
    """plink2 refuses any repeated variant; we refuse the ambiguous case and drop identical
    repeats (counted), scoring then as plink2 scores the file with the repeat removed."""
    vcf = write_vcf(tmp_path / "g.vcf", ["1 100 rs1 A G . . . GT 0/1 1/1 0/0 0/1",
                                         "1 200 rs2 C T . . . GT 0/1 0/0 0/0 1/1"])  # fmt: skip
    columns = "rsID chr_name chr_position effect_allele other_allele effect_weight"
    rows = ["rs1 1 100 A G 0.5", "rs2 1 200 C T 2.0"]
    conflicting = write_scorefile(tmp_path / "c.txt", [*rows, "rs1 1 100 A G 0.7"], columns)
    with pytest.raises(
        InputDataError,
        match=r"1 variant\(s\) listed more than once with "
        r"different weights: 1:100::A:G \(data rows 1, 3: weights 0.5, 0.7\)",
    ):
        score(open_genotypes(vcf), conflicting, min_overlap=0)
    plain = tmp_path / "conflicting_plink2.txt"
    plain.write_text("ID\tA1\tW\nrs1\tA\t0.5\nrs2\tC\t2.0\nrs1\tA\t0.7\n")
    command = ["plink2", "--vcf", str(vcf), "--score", str(plain), "1", "2", "3", "header",
               "no-mean-imputation", "--out", str(tmp_path / "p2c")]  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True)
    assert refused.returncode != 0 and "appears multiple times" in refused.stderr  # plink2 too
    identical = write_scorefile(tmp_path / "i.txt", [*rows, "rs1 1 100 A G 0.5"], columns)
    with caplog.at_level("WARNING"):
        scores, log = score(open_genotypes(vcf), identical, min_overlap=0)
    assert log["status"].tolist() == ["matched", "matched", "duplicate"]
    assert "1 identical repeated row(s) dropped" in caplog.text
    deduplicated = write_plink2_scorefile(log, tmp_path / "deduplicated.txt")
    subprocess.run(["plink2", "--vcf", str(vcf), "--score", str(deduplicated), "1", "2", "3",
                    "header", "no-mean-imputation", "cols=+scoresums", "--out",
                    str(tmp_path / "p2i")], check=True, capture_output=True)  # fmt: skip
    expected = pd.read_csv(tmp_path / "p2i.sscore", sep="\t")["SCORE1_SUM"].to_numpy()
    np.testing.assert_allclose(printed(scores["SUM"].to_numpy()), expected)
