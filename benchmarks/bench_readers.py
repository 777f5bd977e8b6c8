"""Benchmark the genotype readers against bcftools and plink2 (wall time and peak RSS).

Runs each tool in its own process under ``/usr/bin/time`` at two cohort sizes that differ only in
the number of variants, to show that our readers' memory does not grow with it (chunked reading).

    python benchmarks/bench_readers.py                      # dummy cohorts from plink2 --dummy
    python benchmarks/bench_readers.py --bfile sim/genotypes/cohort   # an existing cohort

Prints a table and writes ``--out`` (JSON) and the same table as Markdown beside it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_cohort(folder: Path, n_samples: int, n_variants: int, seed: int = 1) -> Path:
    """A PLINK1 + VCF cohort from ``plink2 --dummy`` with unambiguous alleles and real positions."""
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
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rss_kb = int(proc.stderr.strip().splitlines()[-1])
    return {
        "wall_s": round(wall, 3),
        "peak_rss_mib": round(rss_kb / 1024, 1),
        "stdout": proc.stdout.strip(),
    }


def worker(kind: str, path: str, chunk_size: int) -> None:
    """One full pass of our reader (``kind`` = vcf: dosages; bed: allele counts)."""
    start = time.perf_counter()
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.frequencies import allele_counts

    source = open_genotypes(path)
    if kind == "counts":
        n = len(allele_counts(source, chunk_size=chunk_size))
    else:
        n = 0
        for chunk in source.iter_chunks(chunk_size=chunk_size):
            n += chunk.dosages.shape[1]
    print(f"{n} variants in {time.perf_counter() - start:.3f} s")


def run(prefix: Path, chunk_size: int, out_dir: Path) -> list[dict]:
    me = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    vcf = f"{prefix}.vcf.gz"
    cases = [
        ("VCF full pass", "rvfedprs VcfSource", me + ["read", vcf, str(chunk_size)]),
        (
            "VCF full pass",
            "bcftools query '[%GT]'",
            ["bcftools", "query", "-f", "[%GT]\\n", "-o", "/dev/null", vcf],
        ),
        (
            "bed allele counts",
            "rvfedprs allele_counts",
            me + ["counts", str(prefix), str(chunk_size)],
        ),
        (
            "bed allele counts",
            "plink2 --freq",
            [
                "plink2",
                "--bfile",
                str(prefix),
                "--freq",
                "--threads",
                "1",
                "--out",
                str(out_dir / "freq"),
            ],
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
            }
        )
    return rows


def to_markdown(results: list[dict]) -> str:
    lines = [
        "| cohort (samples × variants) | task | tool | wall (s) | of which the pass (s) "
        "| peak RSS (MiB) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in results:
        inner = f"{r['pass_s']:.2f}" if r.get("pass_s") is not None else "—"
        lines.append(
            f"| {r['cohort']} | {r['task']} | {r['tool']} | {r['wall_s']:.2f} | "
            f"{inner} | {r['peak_rss_mib']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--worker", nargs=3, metavar=("KIND", "PATH", "CHUNK"), help=argparse.SUPPRESS
    )
    parser.add_argument("--bfile", help="existing PLINK1 prefix (with a .vcf.gz beside it)")
    parser.add_argument(
        "--sizes",
        default="1000x20000,1000x80000",
        help="dummy cohorts as SAMPLESxVARIANTS, comma-separated",
    )
    parser.add_argument("--chunk-size", type=int, default=2048)
    parser.add_argument("--out", default="benchmarks/results/readers.json")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]))
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
                cohorts.append((f"{n} × {m}", make_cohort(tmp, n, m)))
        for label, prefix in cohorts:
            for row in run(prefix, args.chunk_size, tmp):
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
