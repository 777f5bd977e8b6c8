"""Bad input to the commands: a non-zero exit, one line naming the value, no traceback.

Each case runs the real ``rvfedprs`` command in a subprocess, as a user would, and checks that
nothing was written where an output was asked for. The workflow's own cases are in
``tests/test_workflow_bad_inputs.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_chrx_half_calls import write_vcf, write_weights  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    out = {"vcf": write_vcf(root / "x.vcf"), "weights": write_weights(root / "w.txt")}
    (root / "empty.txt").write_text("")
    (root / "noallele.txt").write_text("chr_name\tchr_position\teffect_weight\n1\t1000\t0.1\n")
    scores = "sample_id\tprs\n" + "".join(f"s{i}\t{i / 10}\n" for i in range(40))
    phenotypes = "sample_id\tdisease\n" + "".join(f"s{i}\t{i % 2}\n" for i in range(40))
    (root / "scores.tsv").write_text(scores)
    (root / "phenotypes.tsv").write_text(phenotypes)
    (root / "zero_clusters.yaml").write_text("fedce:\n  n_clusters: 0\n")
    out |= {name: root / name for name in ("empty.txt", "noallele.txt", "scores.tsv",
                                           "phenotypes.tsv", "zero_clusters.yaml")}  # fmt: skip
    out["root"] = root
    return out


def _score(files, *extra):
    return ["prepare", "score", "--genotypes", str(files["vcf"]), "--scorefile",
            str(files["weights"]), *extra]  # fmt: skip


def _assess(files, *extra):
    return ["assess", "--scores", str(files["scores.tsv"]), "--phenotypes",
            str(files["phenotypes.tsv"]), "--phenotype", "disease", *extra]  # fmt: skip


#: (case, argv builder, words the error must contain)
CASES = [
    ("min_overlap_above_one", lambda f: _score(f, "--min-overlap", "2"),
     "argument --min-overlap: 2 is not in [0, 1]"),
    ("chunk_size_zero", lambda f: _score(f, "--chunk-size", "0"),
     "argument --chunk-size: 0 is not in [1, inf]"),
    ("genotypes_absent", lambda f: ["prepare", "score", "--genotypes", "nope.vcf", "--scorefile",
                                   str(f["weights"])], "nope.vcf does not exist"),
    ("scoring_file_empty", lambda f: ["prepare", "score", "--genotypes", str(f["vcf"]),
                                     "--scorefile", str(f["empty.txt"])], "has no column header"),
    ("scoring_file_without_effect_allele", lambda f: ["prepare", "score", "--genotypes",
                                                     str(f["vcf"]), "--scorefile",
                                                     str(f["noallele.txt"])],
     "no 'effect_allele' column"),
    ("half_call_refused", lambda f: _score(f, "--vcf-half-call", "error", "--direct"),
     "GT half-call"),
    ("half_call_unknown", lambda f: _score(f, "--vcf-half-call", "diploid"),
     "argument --vcf-half-call: invalid choice: 'diploid'"),
    ("ancestry_maf", lambda f: ["ancestry", "--reference", "r", "--target", "t", "--maf", "0.7"],
     "argument --maf: 0.7 is not in [0, 0.5]"),
    ("ancestry_negative_seed", lambda f: ["ancestry", "--reference", "r", "--target", "t",
                                         "--seed", "-1"], "argument --seed: -1 is not in [0, inf]"),
    ("assess_prevalence", lambda f: _assess(f, "--prevalence", "1.5"),
     "prevalence must lie in (0, 1); got 1.5"),
    ("assess_missing_phenotype_column", lambda f: ["assess", "--scores", str(f["scores.tsv"]),
                                                  "--phenotypes", str(f["phenotypes.tsv"]),
                                                  "--phenotype", "diseas"], "diseas"),
    ("train_negative_rounds", lambda f: ["train", "--rounds", "-1"],
     "argument --rounds: -1 is not in [0, inf]"),
    ("train_zero_clusters", lambda f: ["train", "--config", str(f["zero_clusters.yaml"])],
     "n_clusters"),
    ("simulate_text_seed", lambda f: ["simulate", "--seed", "abc"],
     "argument --seed: 'abc' is not an integer"),
    ("site_port", lambda f: ["site", "--port", "70000"],
     "argument --port: 70000 is not in [1, 65535]"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "argv", "said"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_named_line_and_a_non_zero_exit(files, tmp_path, case, argv, said):
    out = tmp_path / "out"
    command = argv(files)
    if command[0] in ("prepare", "assess", "ancestry", "train", "simulate"):
        command += ["--out", str(out / "result.tsv" if command[0] == "prepare" else out)]
    done = subprocess.run(
        [sys.executable, "-m", "rvfedprs", *command],
        capture_output=True, text=True, timeout=300, cwd=files["root"],
    )  # fmt: skip
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert said in done.stderr, done.stderr[-2000:]
    assert not (out / "result.tsv").exists()
