"""The workflow's contract with the analyst: bad inputs stop the run by name; nothing lost silently.

Each case runs the real Snakefile on the CINECA excerpt (2,504 samples in 26 population clients)
up to the validated cohort, with one thing wrong. A data error must end the run with a non-zero
exit, its one-line message repeated as the run's last words (``rvfedprs: the run stopped ...``)
naming the value, and no traceback on the terminal (it is in the rule's log). A choice the
configuration states (a missing-value code, ``on_invalid_client: exclude``) runs and says on the
terminal what it left out.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rvfedprs.exceptions import InputDataError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
GENOTYPES = DATA / "cineca_synthetic" / "cineca_synthetic_subset"
PHENOTYPES = DATA / "cineca_synthetic" / "uk1_phenotypes.tsv"
PSAM = DATA / "1kg_chr21_start_plinkng" / "chr21_phase3_start.psam"
SCORES = DATA / "pgs_catalog_scorefiles" / "PGS001229_22.txt"
COLUMN = "Ever smoked-0.0"
BMI = "Body mass index (BMI)-0.0"

pytestmark = pytest.mark.skipif(
    not (GENOTYPES.with_suffix(".bed").is_file() and PSAM.is_file()),
    reason="the CINECA excerpt and the 1000 Genomes psam are not in ../shared/data",
)


def _config(phenotypes: Path, **pipeline) -> dict:
    phenotype = {"column": COLUMN, "id_column": "Subject id", "cases": ["Yes"], "controls": ["No"]}
    phenotype.update(pipeline.pop("phenotype", {}))
    return {
        "pipeline": {
            "cohort": {
                "simulate": False,
                "genotypes": [str(GENOTYPES)],
                "phenotypes": str(phenotypes),
                "scoring_file": str(SCORES),
            },
            "clients_from": {"psam": str(PSAM), "column": "Population"},
            "phenotype": phenotype,
            "genome_build": "GRCh37",
            "min_samples_per_client": 40,
            "qc": {"hwe_p_min": 0},
            **pipeline,
        },
        "fedce": {"n_clusters": "auto"},
    }


def _validate(tmp_path: Path, config: dict) -> subprocess.CompletedProcess:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
         "--cores", "1", "--configfile", str(tmp_path / "config.yaml"),
         "--directory", str(tmp_path), "results/prepare/cohort.tsv"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _phenotypes() -> pd.DataFrame:
    return pd.read_csv(PHENOTYPES, sep="\t", dtype=str, keep_default_na=False)


def _population(name: str) -> set[str]:
    psam = pd.read_csv(PSAM, sep="\t", dtype=str)
    return set(psam.loc[psam["Population"] == name, "#IID"])


def _write(frame: pd.DataFrame, path: Path, sep: str = "\t") -> Path:
    frame.to_csv(path, sep=sep, index=False)
    return path


def _values(values: dict[int, str], column: str = COLUMN):
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        for row, value in values.items():
            frame.loc[row, column] = value
        return frame

    return edit


def _in_population(name: str, value: str):
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[frame["Subject id"].isin(_population(name)), COLUMN] = value
        return frame

    return edit


def _duplicate_first(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([frame, frame.iloc[[0]]], ignore_index=True)


def _rename(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.rename(columns={COLUMN: "Ever smokd"})


#: (case id, how the phenotype table is broken, how it is written, pipeline settings, words said)
DATA_ERRORS = [
    ("unknown_code", _values({0: "maybe", 1: "maybe"}), "tsv", {},
     ["'maybe'", "HG00096 (line 2)", "pipeline.phenotype.missing"]),
    ("numeric_code_2", _values({5: "2"}), "tsv", {"phenotype": {"cases": ["1"], "controls": ["0"]}},
     ["neither a case ['1'], a control ['0'] nor missing"]),
    ("site_all_controls", _in_population("ACB", "No"), "tsv", {},
     ["client 'ACB' has a single phenotype class", "on_invalid_client: exclude"]),
    ("site_without_samples", _in_population("ASW", "NA"), "tsv", {},
     ["client 'ASW' has no sample left"]),
    ("misspelt_column", _rename, "tsv", {}, ["lacks column(s) ['Ever smoked-0.0']"]),
    ("duplicate_ids", _duplicate_first, "tsv", {}, ["duplicate ID", "HG00096 (x2)"]),
    ("crlf", None, "crlf", {}, ["Windows (CRLF) line endings"]),
    ("empty_file", None, "empty", {}, ["is empty (0 bytes)"]),
    ("gzip_named_tsv", None, "gzip", {}, ["is gzip-compressed but its name does not end in .gz"]),
    ("comma_separated", None, "csv", {}, ["is not tab-separated", "comma-separated"]),
    ("not_utf8", _values({0: "Ja\xe4"}), "latin1", {}, ["is not UTF-8 text"]),
    ("quantitative_text", _values({2: "high"}, BMI), "tsv",
     {"phenotype": {"kind": "quantitative", "column": BMI}},
     ["is quantitative but 1 value(s) are not finite numbers: 'high'", "(line 4)"]),
]  # fmt: skip


def _write_case(tmp_path: Path, edit, how: str) -> Path:
    frame = _phenotypes()
    if edit is not None:
        frame = edit(frame)
    path = tmp_path / "phenotypes.tsv"
    if how == "empty":
        path.write_bytes(b"")
    elif how == "gzip":
        path.write_bytes(gzip.compress(PHENOTYPES.read_bytes()))
    elif how == "crlf":
        path.write_bytes(PHENOTYPES.read_bytes().replace(b"\n", b"\r\n"))
    elif how == "csv":
        _write(frame, path, sep=",")
    elif how == "latin1":
        path.write_bytes(frame.to_csv(sep="\t", index=False).encode("latin-1"))
    else:
        _write(frame, path)
    return path


#: The cases run through a real Snakemake run (the terminal's contract is the same for every
#: data error: the rest are checked on the rule's own code, faster).
THROUGH_SNAKEMAKE = ("unknown_code", "site_all_controls", "gzip_named_tsv", "quantitative_text")


@pytest.mark.parametrize(
    ("case", "edit", "how", "pipeline", "said"),
    [c for c in DATA_ERRORS if c[0] in THROUGH_SNAKEMAKE],
    ids=list(THROUGH_SNAKEMAKE),
)
def test_a_data_error_stops_the_run_by_name_without_a_traceback(
    tmp_path, case, edit, how, pipeline, said
):
    path = _write_case(tmp_path, edit, how)
    done = _validate(tmp_path, _config(path, **pipeline))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr[done.stderr.rindex("rvfedprs: the run stopped") :]
    for words in said:
        assert words in last, (words, last[:2000])
    assert not (tmp_path / "results" / "prepare" / "cohort.tsv").exists()
    assert (tmp_path / "results" / "logs" / "validate_inputs.log").read_text().count("Traceback")


@pytest.mark.parametrize(
    ("case", "edit", "how", "pipeline", "said"),
    [c for c in DATA_ERRORS if c[0] not in THROUGH_SNAKEMAKE],
    ids=[c[0] for c in DATA_ERRORS if c[0] not in THROUGH_SNAKEMAKE],
)
def test_the_rule_refuses_each_data_error_by_name(tmp_path, case, edit, how, pipeline, said):
    """The validate_inputs rule's own code, on the same inputs as the workflow gives it."""
    from rvfedprs.config import validate_config

    sys.path.insert(0, str(ROOT / "pipelines"))
    from make_samples_sheet import main as make_samples_sheet
    from validate_inputs import main as validate_inputs

    path = _write_case(tmp_path, edit, how)
    config = validate_config(_config(path, **pipeline))["pipeline"]
    sheet = tmp_path / "samples_sheet.tsv"
    make_samples_sheet(PSAM, sheet, column="Population")
    with pytest.raises(InputDataError) as raised:
        validate_inputs(genotypes=[str(GENOTYPES)], samples=sheet, phenotypes=path,
                        scoring_file=SCORES, pipeline=config,
                        out_cohort=tmp_path / "cohort.tsv",
                        out_exclusions=tmp_path / "excluded.tsv")  # fmt: skip
    for words in said:
        assert words in str(raised.value), (words, str(raised.value))
    assert not (tmp_path / "cohort.tsv").exists()


def test_stated_choices_run_and_say_what_they_left_out(tmp_path):
    frame = _in_population("ASW", "No")(_values({0: "Prefer not to answer"})(_phenotypes()))
    path = _write(frame, tmp_path / "phenotypes.tsv")
    config = _config(
        path, phenotype={"missing": ["Prefer not to answer"]}, on_invalid_client="exclude"
    )
    done = _validate(tmp_path, config)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stderr[done.stderr.rindex("rvfedprs: exclusions in this run") :]
    n_asw = len(_population("ASW") & set(frame["Subject id"]))
    assert "validate_inputs: 1 client(s): a single phenotype class" in said
    assert "client ASW left out (validate_inputs): a single phenotype class" in said
    assert f"validate_inputs: {1 + n_asw} sample(s)" in said
    assert "phenotype 'Ever smoked-0.0' missing (1)" in said
    cohort = pd.read_csv(tmp_path / "results" / "prepare" / "cohort.tsv", sep="\t")
    excluded = pd.read_csv(
        tmp_path / "results" / "logs" / "exclusions" / "validate_inputs.tsv", sep="\t"
    )
    # nothing lost silently: every genotyped sample is kept or in the exclusions table
    assert len(cohort) + (excluded["kind"] == "sample").sum() == 2504
    assert "ASW" not in set(cohort["client"]) and "HG00096" not in set(cohort["sample_id"])
