"""Allele counts and PRS on bed, pgen, VCF and BGEN inputs, side by side with plink2.

Given a PLINK1 cohort with a ``.vcf.gz`` beside it (``rvfedprs simulate`` writes both), the
setup (untimed) writes a ``.pgen`` and a BGEN v1.2 (8-bit, ref-first) copy with plink2 and a PGS
Catalog scoring file over a share of the unambiguous variants. Then, for each input format, each
tool runs in its own process under ``/usr/bin/time`` (wall time, peak RSS), back to back:

* counts — ours: ``open_genotypes`` + ``allele_counts`` (timed from interpreter start; "pass" is
  the part after imports); plink2: ``--freq``.
* PRS — ours: ``rvfedprs prepare score``; plink2: ``--score`` on the matched rows, sums checked
  equal to plink2's printed precision.
* VCF through the workflow's path: ``to_pgen`` (plink2 conversion, once) then the pgen pass.

plink2 runs with ``--threads 1`` (ours is one thread). The 1-minute load average is recorded.

    python benchmarks/bench_formats.py --bfile /tmp/demo/genotypes/cohort --vcf \
        /tmp/demo/genotypes/chr22.vcf.gz --fraction 0.5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_readers import measure  # noqa: E402
from bench_score import write_pgs_file  # noqa: E402

PLINK2_INPUT = {
    "bed": lambda p: ["--bfile", p],
    "pgen": lambda p: ["--pfile", p],
    "vcf": lambda p: ["--vcf", p],
    "bgen": lambda p: ["--bgen", f"{p}.bgen", "ref-first", "--sample", f"{p}.sample"],
}


def worker(kind: str, path: str, chunk_size: int) -> None:
    """Our side of one measurement (runs in its own process)."""
    start = time.perf_counter()
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


def counts_rows(fmt: str, path: str, chunk_size: int, tmp: Path) -> list[dict]:
    rows = []
    kinds = [("counts", "rvfedprs allele_counts")]
    if fmt == "vcf":
        kinds.append(("convert_counts", "rvfedprs to_pgen + allele_counts"))
    for kind, label in kinds:
        cmd = [sys.executable, __file__, "--worker", kind, our_path(fmt, path), str(chunk_size)]
        result = measure(cmd)
        result["pass_s"] = float(result["stdout"].split("pass ")[1].split(" s")[0])
        rows.append({"task": "allele counts", "tool": label, **result, "command": " ".join(cmd)})
    cmd = ["plink2", *PLINK2_INPUT[fmt](path), "--freq", "--threads", "1", "--out",
           str(tmp / f"freq_{fmt}")]  # fmt: skip
    rows.append({"task": "allele counts", "tool": "plink2 --freq", **measure(cmd),
                 "command": " ".join(cmd)})  # fmt: skip
    return rows


def score_rows(fmt: str, path: str, scorefile: Path, chunk_size: int, tmp: Path) -> list[dict]:
    ours = tmp / f"ours_{fmt}.tsv"
    rows = []
    variants = [[], ["--via-pgen"]] if fmt in ("vcf", "bgen") else [[]]
    for extra in variants:
        cmd = ["rvfedprs", "prepare", "score", "--genotypes", our_path(fmt, path),
               "--scorefile", str(scorefile), "--out", str(ours), "--chunk-size",
               str(chunk_size), *extra]  # fmt: skip
        rows.append({"task": "PRS", "tool": " ".join(["rvfedprs prepare score", *extra]),
                     **measure(cmd), "command": " ".join(cmd)})  # fmt: skip
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


def to_markdown(rows: list[dict], cohort: str) -> str:
    lines = [
        "| cohort | input | task | tool | wall (s) | of which the pass (s) | × plink2 | "
        "peak RSS (MiB) | load (1 min) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {cohort} | {r['input']} | {r['task']} | {r['tool']} | {r['wall_s']:.2f} | "
            f"{r.get('pass_s', '—')} | {r['ratio']:.2f} | {r['peak_rss_mib']:.0f} | "
            f"{r['load_1min']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--bfile", help="PLINK1 prefix")
    parser.add_argument("--vcf", help="the same cohort as a VCF (optional)")
    parser.add_argument("--formats", default="bed,pgen,bgen,vcf")
    parser.add_argument("--tasks", default="counts,score")
    parser.add_argument("--fraction", type=float, default=0.5, help="variants in the score")
    parser.add_argument("--chunk-size", type=int, default=4096)
    parser.add_argument("--out", default="benchmarks/results/formats.json")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]))
        return 0
    bfile = Path(args.bfile)
    n_samples = sum(1 for _ in open(f"{bfile}.fam"))
    n_variants = sum(1 for _ in open(f"{bfile}.bim"))
    cohort = f"{n_samples} × {n_variants}"
    results = []
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
            rows = []
            if "counts" in args.tasks:
                rows += counts_rows(fmt, paths[fmt], args.chunk_size, tmp)
            if "score" in args.tasks:
                rows += score_rows(fmt, paths[fmt], scorefile, args.chunk_size, tmp)
            for task in ("allele counts", "PRS"):
                group = [r for r in rows if r["task"] == task]
                ref = [r for r in group if r["tool"].startswith("plink2")]
                for r in group:
                    r["input"] = fmt
                    r["ratio"] = round(r["wall_s"] / ref[0]["wall_s"], 2)
                    r.pop("stdout", None)
            results += rows
            print(to_markdown(rows, cohort), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cohort": cohort, "rows": results}, indent=1))
    out.with_suffix(".md").write_text(to_markdown(results, cohort) + "\n")
    print(to_markdown(results, cohort))
    return 0


if __name__ == "__main__":
    sys.exit(main())
