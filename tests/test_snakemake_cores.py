"""``snakemake --cores 2`` never runs more than two 1-thread jobs at once.

Snakemake 9.16.3 charges no cores for a job selected alone and frees them when it finishes, so
after a checkpoint (always ready alone) ``--cores 2`` ran three or more jobs together.
:func:`rvfedprs.snakemake_cores.honour_cores`, which the project's Snakefile calls, charges it.
The check is a real Snakemake run of a checkpoint and six 1-thread jobs, each writing when it
started and ended; the most jobs running at once is read from those times.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("snakemake", reason="the workflow needs snakemake")

SNAKEFILE = """
{patch}
rule all:
    input: lambda wc: trained(wc)

checkpoint validate:
    output: directory("valid")
    shell: "mkdir -p valid && cd valid && touch s1.site s2.site s3.site s4.site s5.site s6.site"

def trained(wc):
    folder = checkpoints.validate.get().output[0]
    return expand("trained/{{s}}.txt", s=glob_wildcards(folder + "/{{s}}.site").s)

rule train:
    input: "valid"
    output: "trained/{{s}}.txt"
    threads: 1
    shell: "echo start $(date +%s.%N) > {{output}}; sleep 2; echo end $(date +%s.%N) >> {{output}}"
"""


def _most_at_once(folder: Path) -> int:
    events = []
    for path in (folder / "trained").glob("*.txt"):
        (_, start), (_, end) = (line.split() for line in path.read_text().splitlines())
        events += [(float(start), 1), (float(end), -1)]
    assert len(events) == 12, "six jobs ran"
    running = most = 0
    for _, step in sorted(events):  # an end before a start at the same instant
        running += step
        most = max(most, running)
    return most


def _run(folder: Path, patch: str) -> int:
    folder.mkdir()
    (folder / "Snakefile").write_text(SNAKEFILE.format(patch=patch))
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--directory", str(folder),
         "--snakefile", str(folder / "Snakefile")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return _most_at_once(folder)


def test_cores_are_honoured_after_a_checkpoint(tmp_path):
    from rvfedprs.snakemake_cores import honour_cores

    patch = "from rvfedprs.snakemake_cores import honour_cores\nhonour_cores()"
    assert _run(tmp_path / "patched", patch) <= 2
    if honour_cores():  # an affected Snakemake: unpatched, the same workflow goes over
        assert _run(tmp_path / "as_released", "") > 2
