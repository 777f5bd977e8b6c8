"""Allele counts and PRS on bed, pgen, VCF and BGEN inputs, side by side with plink2.

Given a PLINK1 cohort with a ``.vcf.gz`` beside it (``rvfedprs simulate`` writes both), the
setup (untimed) writes a ``.pgen`` and a BGEN v1.2 (8-bit, ref-first) copy with plink2 and a PGS
Catalog scoring file over a share of the unambiguous variants. Then, for each input format, each
tool runs in its own process under ``/usr/bin/time`` (wall time, peak RSS), back to back:

* counts — ours: ``open_genotypes`` + ``allele_counts`` (timed from interpreter start; "pass" is
  the part after imports); plink2: ``--freq``.
* PRS — ours: ``rvfedprs prepare score`` (the command line's ``main``, timed after numpy and
  pandas are imported); plink2: ``--score`` on the matched rows, sums checked equal to
  plink2's printed precision.
* floor — a process that imports numpy and pandas and stops: what any Python tool pays.
* VCF through the workflow's path: ``to_pgen`` (plink2 conversion, once) then the pgen pass.

plink2 runs with ``--threads 1`` (ours is one thread). The 1-minute load average is recorded.
Every tool runs ``--repeats`` times (default 3), ours and plink2's back to back in each repeat;
the tables give median walls and the median of the paired ratios.

    python benchmarks/bench_formats.py --bfile /tmp/demo/genotypes/cohort --vcf \
        /tmp/demo/genotypes/chr22.vcf.gz --fraction 0.5
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_readers import measure, save_results  # noqa: E402
from bench_score import write_pgs_file  # noqa: E402

PLINK2_INPUT = {
    "bed": lambda p: ["--bfile", p],
    "pgen": lambda p: ["--pfile", p],
    "vcf": lambda p: ["--vcf", p],
    "bgen": lambda p: ["--bgen", f"{p}.bgen", "ref-first", "--sample", f"{p}.sample"],
}


def worker(kind: str, path: str, chunk_size: int, *score_args: str) -> None:
    """Our side of one measurement (runs in its own process).

    ``score`` runs ``rvfedprs prepare score`` (``score_args`` are its options) through the
    command line's ``main``; "imports" is numpy + pandas, the floor of any Python tool here.
    """
    start = time.perf_counter()
    if kind == "floor":
        import numpy  # noqa: F401
        import pandas  # noqa: F401

        print(f"0 variants; imports {time.perf_counter() - start:.3f} s; pass 0.000 s")
        return
    if kind == "score":
        import numpy  # noqa: F401
        import pandas  # noqa: F401

        ready = time.perf_counter()
        from rvfedprs.cli import main as cli_main

        status = cli_main(["prepare", "score", "--genotypes", path, "--chunk-size",
                           str(chunk_size), *score_args])  # fmt: skip
        end = time.perf_counter()
        print(f"status {status}; imports {ready - start:.3f} s; pass {end - ready:.3f} s")
        return
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.convert import to_pgen
    from rvfedprs.genotypes.frequencies import allele_counts

    ready = time.perf_counter()
    if kind == "convert_counts":
        with tempfile.TemporaryDirectory() as tmp:
            path = str(to_pgen(path, Path(tmp) / "c"))
            n = len(allele_counts(open_genotypes(path), chunk_size=chunk_size))
    else:
        n = len(allele_counts(open_genotypes(path), chunk_size=chunk_size))
    end = time.perf_counter()
    print(f"{n} variants; imports {ready - start:.3f} s; pass {end - ready:.3f} s")


def setup(bfile: Path, tmp: Path, formats: list[str]) -> dict[str, str]:
    """The ``.pgen`` and BGEN copies of the cohort that ``formats`` asks for (plink2), untimed."""
    paths = {"bed": str(bfile)}
    exports = {"pgen": ["--make-pgen"], "bgen": ["--export", "bgen-1.2", "bits=8", "ref-first"]}
    for fmt, export in exports.items():
        if fmt in formats:
            subprocess.run(["plink2", "--bfile", str(bfile), *export, "--out", str(tmp / "c")],
                           check=True, capture_output=True)  # fmt: skip
            paths[fmt] = str(tmp / "c")
    return paths


def our_path(fmt: str, path: str) -> str:
    return f"{path}.pgen" if fmt == "pgen" else f"{path}.bgen" if fmt == "bgen" else path


def _pass_seconds(stdout: str) -> float:
    return float(stdout.split("pass ")[1].split(" s")[0])


def floor_row(repeats: int) -> dict:
    """Start Python and import numpy + pandas, nothing else: no Python tool is faster."""
    cmd = [sys.executable, __file__, "--worker", "floor", "-", "0"]
    runs = [measure(cmd) for _ in range(repeats)]
    walls = [r["wall_s"] for r in runs]
    rss = float(np.median([r["peak_rss_mib"] for r in runs]))
    return {"input": "—", "task": "floor", "tool": "python + numpy + pandas imports",
            "load_1min": runs[0]["load_1min"], "wall_s": float(np.median(walls)),
            "wall_s_runs": walls, "peak_rss_mib": rss,
            "pass_s": 0.0, "ratio": None, "repeats": repeats, "command": " ".join(cmd)}  # fmt: skip


def counts_rows(fmt: str, path: str, chunk_size: int, tmp: Path) -> list[dict]:
    rows = []
    kinds = [("counts", "rvfedprs allele_counts")]
    if fmt == "vcf":
        kinds.append(("convert_counts", "rvfedprs to_pgen + allele_counts"))
    for kind, label in kinds:
        cmd = [sys.executable, __file__, "--worker", kind, our_path(fmt, path), str(chunk_size)]
        result = measure(cmd)
        result["pass_s"] = _pass_seconds(result["stdout"])
        rows.append({"task": "allele counts", "tool": label, **result, "command": " ".join(cmd)})
    cmd = ["plink2", *PLINK2_INPUT[fmt](path), "--freq", "--threads", "1", "--out",
           str(tmp / f"freq_{fmt}")]  # fmt: skip
    rows.append({"task": "allele counts", "tool": "plink2 --freq", **measure(cmd),
                 "command": " ".join(cmd)})  # fmt: skip
    return rows


def score_rows(fmt: str, path: str, scorefile: Path, chunk_size: int, tmp: Path) -> list[dict]:
    ours = tmp / f"ours_{fmt}.tsv"
    rows = []
    # the direct reader, and the copy converted once (the default for a VCF since issue 31)
    variants = [["--direct"], ["--via-pgen"]] if fmt in ("vcf", "bgen") else [[]]
    for extra in variants:
        cmd = [sys.executable, __file__, "--worker", "score", our_path(fmt, path),
               str(chunk_size), "--scorefile", str(scorefile), "--out", str(ours),
               *extra]  # fmt: skip
        result = measure(cmd)
        result["pass_s"] = _pass_seconds(result["stdout"])
        rows.append({"task": "PRS", "tool": " ".join(["rvfedprs prepare score", *extra]),
                     **result, "command": " ".join(cmd)})  # fmt: skip
    log = pd.read_csv(tmp / f"ours_{fmt}.match.tsv", sep="\t", keep_default_na=False)
    used = log[log["status"].isin(["matched", "flipped"])]
    weights = tmp / f"p2_{fmt}.txt"
    pd.DataFrame(
        {"ID": used["variant_id"], "A1": used["counted_allele"], "W": used["effect_weight"]}
    ).to_csv(weights, sep="\t", index=False)
    cmd = ["plink2", *PLINK2_INPUT[fmt](path), "--score", str(weights), "1", "2", "3", "header",
           "cols=+scoresums", "--threads", "1", "--out", str(tmp / f"p2_{fmt}")]  # fmt: skip
    rows.append({"task": "PRS", "tool": "plink2 --score", **measure(cmd), "command": " ".join(cmd)})
    a = pd.read_csv(ours, sep="\t")["SUM"].to_numpy()
    b = pd.read_csv(tmp / f"p2_{fmt}.sscore", sep="\t")["SCORE1_SUM"].to_numpy()
    scale = 10.0 ** (np.floor(np.log10(np.maximum(np.abs(b), 1e-300))) - 5)
    equal = bool((np.abs(a - b) <= 0.5 * scale * (1 + 1e-9) + 1e-300).all())
    for row in rows:
        row.update({"n_used": len(used), "sums_equal_6g": equal})
    return rows


def summarise(runs: list[list[dict]]) -> list[dict]:
    """Median wall, pass and RSS over the repeats; ratios are medians of the paired ratios.

    Each repeat runs every tool once, ours then plink2's, so a ratio is taken within a repeat
    (pairing keeps it meaningful when the machine's speed drifts) and the median over repeats
    is reported; the single walls are kept in ``wall_s_runs``.
    """
    rows = []
    for i, first in enumerate(runs[0]):
        same = [run[i] for run in runs]
        plink2 = [
            next(r for r in run if r["task"] == first["task"] and r["tool"].startswith("plink2"))
            for run in runs
        ]
        row = {**first, "repeats": len(runs), "wall_s_runs": [r["wall_s"] for r in same]}
        row["wall_s"] = float(np.median(row["wall_s_runs"]))
        row["peak_rss_mib"] = float(np.median([r["peak_rss_mib"] for r in same]))
        pairs = list(zip(same, plink2, strict=True))
        row["ratio"] = round(float(np.median([r["wall_s"] / p["wall_s"] for r, p in pairs])), 2)
        if "pass_s" in first:  # the work after the imports, against plink2's whole run
            row["pass_s"] = float(np.median([r["pass_s"] for r in same]))
            ratios = [r["pass_s"] / p["wall_s"] for r, p in pairs]
            row["pass_ratio"] = round(float(np.median(ratios)), 2)
        if "sums_equal_6g" in first:
            row["sums_equal_6g"] = all(r["sums_equal_6g"] for r in same)
        rows.append(row)
    return rows


def to_markdown(rows: list[dict], cohort: str) -> str:
    lines = [
        "| cohort | input | task | tool | wall (s) | of which the pass (s) | × plink2 | "
        "pass × plink2 | peak RSS (MiB) | load (1 min) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        passed = f"{r['pass_s']:.2f}" if "pass_s" in r else "—"
        pass_ratio = f"{r['pass_ratio']:.2f}" if "pass_ratio" in r else "—"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(
            f"| {cohort} | {r['input']} | {r['task']} | {r['tool']} | {r['wall_s']:.2f} | "
            f"{passed} | {ratio} | {pass_ratio} | {r['peak_rss_mib']:.0f} | "
            f"{r['load_1min']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.add_argument("--bfile", help="PLINK1 prefix")
    parser.add_argument("--vcf", help="the same cohort as a VCF (optional)")
    parser.add_argument("--formats", default="bed,pgen,bgen,vcf")
    parser.add_argument("--tasks", default="counts,score")
    parser.add_argument("--fraction", type=float, default=0.5, help="variants in the score")
    parser.add_argument("--chunk-size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3, help="paired runs per tool (median)")
    parser.add_argument("--out", default="benchmarks/results/formats.json")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]), *args.worker[3:])
        return 0
    bfile = Path(args.bfile)
    n_samples = sum(1 for _ in open(f"{bfile}.fam"))
    n_variants = sum(1 for _ in open(f"{bfile}.bim"))
    cohort = f"{n_samples} × {n_variants}"
    results = [floor_row(args.repeats)]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        paths = setup(bfile, tmp, args.formats.split(","))
        if args.vcf:
            paths["vcf"] = args.vcf
        scorefile = tmp / "score.txt"
        write_pgs_file(bfile, scorefile, args.fraction)
        for fmt in args.formats.split(","):
            if fmt not in paths:
                continue
            runs = []
            for _ in range(args.repeats):  # ours and plink2 back to back, each repeat
                rows = []
                if "counts" in args.tasks:
                    rows += counts_rows(fmt, paths[fmt], args.chunk_size, tmp)
                if "score" in args.tasks:
                    rows += score_rows(fmt, paths[fmt], scorefile, args.chunk_size, tmp)
                for r in rows:
                    r["input"] = fmt
                    r.pop("stdout", None)
                runs.append(rows)
            rows = summarise(runs)
            results += rows
            print(to_markdown(rows, cohort), flush=True)
    save_results(args.out, cohort, results, to_markdown(results, cohort))
    print(to_markdown(results, cohort))
    return 0


if __name__ == "__main__":
    sys.exit(main())
