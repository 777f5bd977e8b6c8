"""Benchmark the genotype readers against bcftools and plink2 (wall time and peak RSS).

Runs each tool in its own process under ``/usr/bin/time`` at two cohort sizes that differ only in
the number of variants, to show that our readers' memory does not grow with it (chunked reading).
Tasks: a full VCF pass (our ``VcfSource`` vs ``bcftools query``), and ``.bed`` allele counts
(our ``allele_counts`` with the numpy engine, optionally the pandas-plink engine, vs
``plink2 --freq``), for all samples and, with ``--keep-fraction``, for one client's subset
(``plink2 --freq --keep``). The 1-minute load average is recorded before every run (the
machine may be shared).

    python benchmarks/bench_readers.py                      # dummy cohorts from plink2 --dummy
    python benchmarks/bench_readers.py --bfile sim/genotypes/cohort   # an existing cohort

Prints a table and writes ``--out`` (JSON) and the same table as Markdown beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_cohort(
    folder: Path, n_samples: int, n_variants: int, seed: int = 1, vcf: bool = True
) -> Path:
    """A PLINK1 (+ VCF) cohort from ``plink2 --dummy`` with unambiguous alleles and positions."""
    prefix = folder / f"dummy_{n_samples}x{n_variants}"
    subprocess.run(
        [
            "plink2",
            "--dummy",
            str(n_samples),
            str(n_variants),
            "0.01",
            "--seed",
            str(seed),
            "--make-bed",
            "--out",
            str(prefix),
        ],
        check=True,
        capture_output=True,
    )
    rng = np.random.default_rng(seed)
    alleles = np.array([("A", "G"), ("C", "T"), ("G", "A"), ("T", "C")])[
        rng.integers(0, 4, n_variants)
    ]
    with open(f"{prefix}.bim", "w") as bim:
        for i, (alt, ref) in enumerate(alleles):
            bim.write(f"1\tv{i}\t0\t{(i + 1) * 10}\t{alt}\t{ref}\n")
    if not vcf:
        return prefix
    subprocess.run(
        [
            "plink2",
            "--bfile",
            str(prefix),
            "--export",
            "vcf",
            "bgz",
            "id-paste=iid",
            "--out",
            str(prefix),
        ],
        check=True,
        capture_output=True,
    )
    return prefix


def measure(cmd: list[str]) -> dict:
    """Wall seconds and peak RSS (MiB) of one command, via GNU time."""
    load = round(os.getloadavg()[0], 2)
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rss_kb = int(proc.stderr.strip().splitlines()[-1])
    return {
        "load_1min": load,
        "wall_s": round(wall, 3),
        "peak_rss_mib": round(rss_kb / 1024, 1),
        "stdout": proc.stdout.strip(),
    }


def save_results(out: str | Path, cohort: str, rows: list[dict], markdown: str) -> None:
    """Write ``{"cohort", "rows"}`` as JSON to ``out`` and ``markdown`` beside it (``.md``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cohort": cohort, "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(markdown + "\n")


def worker(kind: str, path: str, chunk_size: int, keep: str = "", engine: str = "pgenlib") -> None:
    """One full pass of our reader (``kind`` = read: dosages; counts: allele counts)."""
    start = time.perf_counter()
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.frequencies import allele_counts
    from rvfedprs.genotypes.plink import BedSource

    source = BedSource(path, engine=engine) if kind == "counts" else open_genotypes(path)
    samples = Path(keep).read_text().split()[1::2] if keep else None
    if kind == "counts":
        n = len(allele_counts(source, samples=samples, chunk_size=chunk_size))
    else:
        n = 0
        for chunk in source.iter_chunks(chunk_size=chunk_size, samples=samples):
            n += chunk.dosages.shape[1]
    print(f"{n} variants in {time.perf_counter() - start:.3f} s")


def write_keep(prefix: Path, fraction: float, path: Path, seed: int = 2) -> Path:
    """A plink ``--keep`` file (FID IID) with a random ``fraction`` of the samples."""
    fam = Path(f"{prefix}.fam").read_text().split("\n")
    fam = [line.split() for line in fam if line.strip()]
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(fam), size=max(1, int(fraction * len(fam))), replace=False))
    path.write_text("".join(f"{fam[i][0]} {fam[i][1]}\n" for i in chosen))
    return path


def run(
    prefix: Path,
    chunk_size: int,
    out_dir: Path,
    keep_fraction: float = 0.0,
    pandas_plink: bool = False,
) -> list[dict]:
    me = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    vcf = f"{prefix}.vcf.gz"
    freq = ["plink2", "--bfile", str(prefix), "--freq", "--threads", "1"]
    cases = []
    if Path(vcf).is_file():
        cases += [
            ("VCF full pass", "rvfedprs VcfSource", me + ["read", vcf, str(chunk_size)]),
            (
                "VCF full pass",
                "bcftools query '[%GT]'",
                ["bcftools", "query", "-f", "[%GT]\\n", "-o", "/dev/null", vcf],
            ),
        ]
    cases += [
        (
            "bed allele counts",
            "rvfedprs allele_counts (numpy)",
            me + ["counts", str(prefix), str(chunk_size)],
        ),
    ]
    if pandas_plink:
        cases.append(
            (
                "bed allele counts",
                "rvfedprs allele_counts (pandas-plink)",
                me + ["counts", str(prefix), str(chunk_size), "", "pandas-plink"],
            )
        )
    cases.append(("bed allele counts", "plink2 --freq", freq + ["--out", str(out_dir / "freq")]))
    if keep_fraction:
        keep = write_keep(prefix, keep_fraction, out_dir / "keep.txt")
        task = f"bed allele counts, {keep_fraction:.0%} of samples"
        cases += [
            (
                task,
                "rvfedprs allele_counts (numpy)",
                me + ["counts", str(prefix), str(chunk_size), str(keep)],
            ),
            (
                task,
                "plink2 --freq --keep",
                freq + ["--keep", str(keep), "--out", str(out_dir / "k")],
            ),
        ]
    rows = []
    for task, tool, cmd in cases:
        result = measure(cmd)
        found = re.search(r"^\d+ variants in ([\d.]+) s$", result["stdout"], re.MULTILINE)
        inner = found.group(1) if found else ""
        rows.append(
            {
                "task": task,
                "tool": tool,
                "wall_s": result["wall_s"],
                "pass_s": float(inner) if inner else None,
                "peak_rss_mib": result["peak_rss_mib"],
                "load_1min": result["load_1min"],
                "command": " ".join(cmd),
            }
        )
    for row in rows:  # ratio to the external tool of the same task
        ref = [r for r in rows if r["task"] == row["task"] and not r["tool"].startswith("rvf")]
        row["ratio"] = round(row["wall_s"] / ref[0]["wall_s"], 2) if ref else None
    return rows


def to_markdown(results: list[dict]) -> str:
    lines = [
        "| cohort (samples × variants) | task | tool | wall (s) | of which the pass (s) "
        "| × tool | peak RSS (MiB) | load (1 min) |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        inner = f"{r['pass_s']:.2f}" if r.get("pass_s") is not None else "—"
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else "—"
        lines.append(
            f"| {r['cohort']} | {r['task']} | {r['tool']} | {r['wall_s']:.2f} | "
            f"{inner} | {ratio} | {r['peak_rss_mib']:.0f} | {r['load_1min']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--bfile", help="existing PLINK1 prefix (with a .vcf.gz beside it)")
    parser.add_argument(
        "--sizes",
        default="1000x20000,1000x80000",
        help="dummy cohorts as SAMPLESxVARIANTS, comma-separated",
    )
    parser.add_argument("--chunk-size", type=int, default=2048)
    parser.add_argument("--no-vcf", action="store_true", help="skip the VCF (large cohorts)")
    parser.add_argument(
        "--keep-fraction", type=float, default=0.0, help="also count a client subset of samples"
    )
    parser.add_argument(
        "--pandas-plink", action="store_true", help="also time the pandas-plink .bed engine"
    )
    parser.add_argument("--out", default="benchmarks/results/readers.json")
    args = parser.parse_args(argv)
    if args.worker:
        kind, path, chunk, *rest = args.worker
        worker(kind, path, int(chunk), *rest)
        return 0
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.bfile:
            cohorts = [(Path(args.bfile).name, Path(args.bfile))]
        else:
            cohorts = []
            for size in args.sizes.split(","):
                n, m = (int(v) for v in size.split("x"))
                cohorts.append((f"{n} × {m}", make_cohort(tmp, n, m, vcf=not args.no_vcf)))
        for label, prefix in cohorts:
            for row in run(prefix, args.chunk_size, tmp, args.keep_fraction, args.pandas_plink):
                results.append({"cohort": label, "chunk_size": args.chunk_size, **row})
    table = to_markdown(results)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
