"""Benchmark matching a 51,000-row harmonised PGS Catalog file against ``plink2 --score``.

Writes a PLINK1 cohort (``plink2 --dummy``, :func:`bench_readers.make_cohort`) and a scoring file
in the PGS Catalog's harmonised format (``*_hmPOS_GRCh38.txt.gz``: the Catalog's header, ``rsID,
chr_name, chr_position, effect_allele, other_allele, effect_weight, hm_source, hm_rsID, hm_chr,
hm_pos, hm_inferOtherAllele``) whose rows are drawn from the cohort's variants as real files
are: about 2% on alt contigs, 1% without a harmonised position, 2% at positions the genotypes do
not have, effect alleles on either genotype allele, 10% on the other strand and 5% with the other
allele only inferred (``hm_inferOtherAllele``). Then times (wall and CPU seconds), each in its own
process under ``/usr/bin/time``, A and B in turn:

- **match**: our matching step alone — read the scoring file and the ``.bim``, pair, resolve and
  write the match log (:class:`~rvfedprs.genotypes.matching.ScoreMatcher`); the worker also
  prints each phase's CPU seconds;
- **plink2 --score**: plink2 scoring the same cohort with a pre-matched file of the same used
  variants (ID, allele, weight), its own time: the reference.

The matcher must use exactly the rows the generator made usable (checked). Medians over
``--repeats``, the ratio pair by pair, and the 1-minute load average are written to ``--out``
(JSON) and a Markdown table beside it.

    python benchmarks/bench_match.py
    python benchmarks/bench_match.py --rows 51000 --samples 2504 --variants 200000 --repeats 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_readers import make_cohort  # noqa: E402

HEADER = """###PGS CATALOG SCORING FILE - see https://www.pgscatalog.org/downloads/#dl_ftp_scoring for additional information
#format_version=2.0
##POLYGENIC SCORE (PGS) INFORMATION
#pgs_id=PGS999001
#pgs_name=BENCH_51K
#trait_reported=Benchmark
#genome_build=GRCh37
#variants_number={n}
#weight_type=beta
##HARMONIZATION DETAILS
#HmPOS_build=GRCh38
#HmPOS_date=2026-11-26
"""  # noqa: E501
COLUMNS = [
    "rsID", "chr_name", "chr_position", "effect_allele", "other_allele", "effect_weight",
    "hm_source", "hm_rsID", "hm_chr", "hm_pos", "hm_inferOtherAllele",
]  # fmt: skip
COMPLEMENT = str.maketrans("ACGT", "TGCA")
ALT_CONTIGS = ["1_KI270706v1_random", "1_KI270762v1_alt", "HSCHR1_1_CTG31"]


def write_harmonised(prefix: Path, path: Path, n_rows: int, seed: int = 1) -> pd.DataFrame:
    """Write a harmonised scoring file of ``n_rows`` rows; return the usable rows' plink2 file.

    Returns
    -------
    DataFrame
        ``ID, A1, WEIGHT`` of every row the matcher should use, the effect allele on the
        genotypes' strand (``plink2 --score`` input).
    """
    names = ["chr", "id", "cm", "pos", "a1", "a2"]
    bim = pd.read_csv(f"{prefix}.bim", sep="\t", header=None, names=names)
    rng = np.random.default_rng(seed)
    n_alt, n_unplaced, n_absent = (int(round(n_rows * f)) for f in (0.02, 0.01, 0.02))
    n_placed = n_rows - n_alt - n_unplaced - n_absent
    if n_placed + n_alt + n_unplaced > len(bim):
        raise ValueError(f"{prefix}.bim has {len(bim)} variants, fewer than {n_rows} rows need")
    drawn = bim.iloc[np.sort(rng.choice(len(bim), n_placed + n_alt + n_unplaced, replace=False))]
    kind = np.array(["placed"] * n_placed + ["alt"] * n_alt + ["unplaced"] * n_unplaced)
    kind = kind[rng.permutation(len(kind))]
    swap = rng.random(len(drawn)) < 0.5  # effect allele = REF (a2) or ALT (a1)
    effect = np.where(swap, drawn["a2"], drawn["a1"]).astype(object)
    other = np.where(swap, drawn["a1"], drawn["a2"]).astype(object)
    flip = rng.random(len(drawn)) < 0.10
    effect[flip] = [a.translate(COMPLEMENT) for a in effect[flip]]
    other[flip] = [a.translate(COMPLEMENT) for a in other[flip]]
    weight = rng.normal(0, 0.01, len(drawn)).round(8)
    hm_chr = drawn["chr"].astype(str).to_numpy(dtype=object)
    hm_pos = drawn["pos"].astype(str).to_numpy(dtype=object)
    hm_chr[kind == "alt"] = rng.choice(ALT_CONTIGS, int((kind == "alt").sum()))
    hm_chr[kind == "unplaced"] = ""
    hm_pos[kind == "unplaced"] = ""
    inferred = np.full(len(drawn), "", dtype=object)
    infer = (rng.random(len(drawn)) < 0.05) & (kind == "placed")
    inferred[infer], other[infer] = other[infer], ""
    rows = pd.DataFrame(
        {
            "rsID": drawn["id"].to_numpy(),
            "chr_name": drawn["chr"].to_numpy(),
            "chr_position": drawn["pos"].to_numpy() - 1000,  # "GRCh37", as reported
            "effect_allele": effect,
            "other_allele": other,
            "effect_weight": weight,
            "hm_source": np.where(kind == "unplaced", "Unknown", "ENSEMBL"),
            "hm_rsID": drawn["id"].to_numpy(),
            "hm_chr": hm_chr,
            "hm_pos": hm_pos,
            "hm_inferOtherAllele": inferred,
        }
    )
    last = int(bim["pos"].max())
    absent = pd.DataFrame(
        {
            "rsID": [f"rsX{i}" for i in range(n_absent)],
            "chr_name": 1,
            "chr_position": last + 5 + 10 * np.arange(n_absent) - 1000,
            "effect_allele": "A",
            "other_allele": "G",
            "effect_weight": rng.normal(0, 0.01, n_absent).round(8),
            "hm_source": "ENSEMBL",
            "hm_rsID": [f"rsX{i}" for i in range(n_absent)],
            "hm_chr": "1",
            "hm_pos": (last + 5 + 10 * np.arange(n_absent)).astype(str),
            "hm_inferOtherAllele": "",
        }
    )
    table = pd.concat([rows, absent], ignore_index=True)
    table = table.iloc[rng.permutation(len(table))][COLUMNS]
    with gzip.open(path, "wt") as handle:
        handle.write(HEADER.format(n=len(table)))
        table.to_csv(handle, sep="\t", index=False)
    used = kind == "placed"
    genotype_allele = np.where(swap, drawn["a2"], drawn["a1"])[used]
    return pd.DataFrame(
        {"ID": drawn["id"].to_numpy()[used], "A1": genotype_allele, "WEIGHT": weight[used]}
    )


def measure(cmd: list[str]) -> dict:
    """Wall and CPU (user + sys) seconds and peak RSS (MiB) of one command, via GNU time."""
    load = round(os.getloadavg()[0], 2)
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rss_kb, user, system = proc.stderr.strip().splitlines()[-1].split()
    return {
        "load_1min": load,
        "wall_s": round(wall, 3),
        "cpu_s": round(float(user) + float(system), 3),
        "peak_rss_mib": round(int(rss_kb) / 1024, 1),
        "stdout": proc.stdout.strip(),
    }


def worker(bfile: str, scorefile: str, out: str) -> None:
    """Our matching step alone, in its own process; prints each phase's CPU seconds as JSON."""
    clock = time.process_time
    start = clock()
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.matching import ScoreMatcher, check_overlap
    from rvfedprs.genotypes.scorefile import read_scorefile

    phases = {"import": clock() - start}
    mark = clock()
    sf = read_scorefile(scorefile)
    phases["read_scorefile"] = clock() - mark
    mark = clock()
    variants = open_genotypes(bfile).variants
    phases["read_variants"] = clock() - mark
    mark = clock()
    matcher = ScoreMatcher(sf)
    found = matcher.candidates(variants)
    log = matcher.match_log(matcher.resolve(found))
    usable = check_overlap(log, 0.5, bfile, scorefiles=[sf])
    phases["match"] = clock() - mark
    mark = clock()
    log.to_csv(out, sep="\t", index=False)
    phases["write_log"] = clock() - mark
    phases["total_in_process"] = clock() - start
    seconds = {k: round(v, 4) for k, v in phases.items()}
    print(json.dumps({"usable": sum(usable.values()), **seconds}))


def run(prefix: Path, n_rows: int, repeats: int, tmp: Path) -> tuple[list[dict], dict]:
    """Time matching and plink2 --score in turn; return the runs and the summary."""
    scorefile = tmp / "PGS999001_hmPOS_GRCh38.txt.gz"
    expected = write_harmonised(prefix, scorefile, n_rows)
    p2_file = tmp / "prematched.txt"
    expected.to_csv(p2_file, sep="\t", index=False, float_format="%.17g")
    match_cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(prefix)]
    match_cmd += [str(scorefile), str(tmp / "match.tsv")]
    plink_cmd = ["plink2", "--bfile", str(prefix), "--score", str(p2_file), "1", "2", "3"]
    plink_cmd += ["header", "cols=+scoresums", "--out", str(tmp / "p2")]
    runs = []
    for i in range(repeats + 1):  # the first pair warms the page cache and is not counted
        for tool, cmd in (("match", match_cmd), ("plink2 --score", plink_cmd)):
            result = measure(cmd)
            row = {"repeat": i, "tool": tool, **result}
            if tool == "match":
                phases = json.loads(result["stdout"].splitlines()[-1])
                if phases["usable"] != len(expected):
                    raise RuntimeError(f"matched {phases['usable']} rows, {len(expected)} usable")
                row["phases"] = phases
            row.pop("stdout")
            runs.append(row)
    counted = [r for r in runs if r["repeat"] > 0]
    ours = [r for r in counted if r["tool"] == "match"]
    theirs = [r for r in counted if r["tool"] != "match"]
    summary = {"rows": n_rows, "usable_rows": len(expected)}
    for figure in ("wall_s", "cpu_s"):
        summary[f"match_{figure}"] = _median(r[figure] for r in ours)
        summary[f"plink2_{figure}"] = _median(r[figure] for r in theirs)
        ratios = (a[figure] / b[figure] for a, b in zip(ours, theirs, strict=True))
        summary[f"ratio_{figure}"] = _median(ratios, 2)
    steps = [r["phases"]["match"] for r in ours]
    summary["match_step_cpu_s"] = _median(steps)
    summary["ratio_step_cpu_s"] = _median(
        (s / b["cpu_s"] for s, b in zip(steps, theirs, strict=True)), 2
    )
    summary |= {
        "load_1min": [r["load_1min"] for r in counted],
        "phases_median_s": {
            k: round(statistics.median(r["phases"][k] for r in counted if r["tool"] == "match"), 3)
            for k in counted[0]["phases"]
            if k != "usable"
        },
    }
    return runs, summary


def _median(values, digits: int = 3) -> float:
    return round(statistics.median(list(values)), digits)


def to_markdown(cohort: str, s: dict) -> str:
    phases = ", ".join(f"{k} {v:.2f}" for k, v in s["phases_median_s"].items())
    load = f"{min(s['load_1min']):.1f}–{max(s['load_1min']):.1f}"
    return "\n".join(
        [
            f"{cohort}, {s['rows']} rows ({s['usable_rows']} usable); medians, load {load}.",
            "",
            "| | wall (s) | CPU (s) | × plink2 wall | × plink2 CPU |",
            "|---|---:|---:|---:|---:|",
            f"| plink2 --score, pre-matched file | {s['plink2_wall_s']:.2f} | "
            f"{s['plink2_cpu_s']:.2f} | 1 | 1 |",
            f"| match, whole process | {s['match_wall_s']:.2f} | {s['match_cpu_s']:.2f} | "
            f"{s['ratio_wall_s']:.2f} | {s['ratio_cpu_s']:.2f} |",
            f"| of which the matching step | | {s['match_step_cpu_s']:.2f} | | "
            f"{s['ratio_step_cpu_s']:.2f} |",
            "",
            f"CPU seconds of the match process's phases: {phases}.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=51_000, help="scoring-file rows")
    parser.add_argument("--samples", type=int, default=2504)
    parser.add_argument("--variants", type=int, default=200_000, help="genotype variants")
    parser.add_argument("--repeats", type=int, default=5, help="counted runs of each")
    parser.add_argument("--out", default="benchmarks/results/match_51k.json")
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        prefix = make_cohort(tmp, args.samples, args.variants, vcf=False)
        runs, summary = run(prefix, args.rows, args.repeats, tmp)
    cohort = f"{args.samples} × {args.variants}"
    table = to_markdown(cohort, summary)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cohort": cohort, "summary": summary, "rows": runs}, indent=1))
    out.with_suffix(".md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
