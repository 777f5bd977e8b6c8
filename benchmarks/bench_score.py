"""Benchmark ``rvfedprs prepare score`` against ``plink2 --score`` on the same PLINK1 cohort.

Writes a PGS Catalog scoring file over a subset of the cohort's variants, scores it with both
tools (each in its own process under ``/usr/bin/time``), checks that the sums agree to plink2's
print precision, and reports wall time, the ratio to plink2, peak RSS and the 1-minute load
average before each run, at two cohort sizes (or on ``--bfile``).

    python benchmarks/bench_score.py
    python benchmarks/bench_score.py --bfile sim/genotypes/cohort
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_readers import make_cohort, measure  # noqa: E402


def write_pgs_file(prefix: Path, path: Path, fraction: float, seed: int = 1) -> int:
    """Write a PGS Catalog file (chr_name, chr_position, effect/other allele, effect_weight)."""
    bim = pd.read_csv(f"{prefix}.bim", sep=r"\s+", header=None)
    rng = np.random.default_rng(seed)
    # Strand-ambiguous pairs (A/T, C/G) are dropped by the scorer, as by PGS Catalog practice;
    # draw the score rows from the unambiguous variants so that every row is used.
    pair = bim[4].astype(str) + bim[5].astype(str)
    candidates = np.flatnonzero(~pair.isin(["AT", "TA", "CG", "GC"]).to_numpy())
    size = max(1, int(fraction * len(bim)))
    keep = np.sort(rng.choice(candidates, size=min(size, len(candidates)), replace=False))
    rows = bim.iloc[keep]
    swap = rng.random(len(rows)) < 0.5  # effect allele sometimes REF, sometimes ALT
    table = pd.DataFrame(
        {
            "rsID": rows[1].to_numpy(),
            "chr_name": rows[0].to_numpy(),
            "chr_position": rows[3].to_numpy(),
            "effect_allele": np.where(swap, rows[5], rows[4]),
            "other_allele": np.where(swap, rows[4], rows[5]),
            "effect_weight": rng.normal(0, 0.01, len(rows)).round(8),
        }
    )
    with open(path, "w") as handle:
        handle.write("###PGS CATALOG SCORING FILE\n#format_version=2.0\n#genome_build=GRCh37\n")
        table.to_csv(handle, sep="\t", index=False)
    return len(table)


def run(prefix: Path, fraction: float, chunk_size: int, tmp: Path) -> list[dict]:
    scorefile = tmp / "score.txt"
    n_score = write_pgs_file(prefix, scorefile, fraction)
    ours = tmp / "ours.tsv"
    rows = []
    ours_cmd = [
        "rvfedprs",
        "prepare",
        "score",
        "--genotypes",
        str(prefix),
        "--scorefile",
        str(scorefile),
        "--out",
        str(ours),
        "--chunk-size",
        str(chunk_size),
    ]
    ours_result = measure(ours_cmd)
    rows.append({"tool": "rvfedprs prepare score", **ours_result, "command": " ".join(ours_cmd)})
    log = pd.read_csv(tmp / "ours.match.tsv", sep="\t")
    used = log[log["status"].isin(["matched", "flipped"])]
    pd.DataFrame(
        {"ID": used["variant_id"], "A1": used["counted_allele"], "W": used["effect_weight"]}
    ).to_csv(tmp / "p2.txt", sep="\t", index=False)
    p2_cmd = [
        "plink2",
        "--bfile",
        str(prefix),
        "--score",
        str(tmp / "p2.txt"),
        "1",
        "2",
        "3",
        "header",
        "cols=+scoresums",
        "--threads",
        "1",
        "--out",
        str(tmp / "p2"),
    ]
    p2 = measure(p2_cmd)
    rows.append({"tool": "plink2 --score", **p2, "command": " ".join(p2_cmd)})
    a = pd.read_csv(ours, sep="\t")["SUM"].to_numpy()
    b = pd.read_csv(tmp / "p2.sscore", sep="\t")["SCORE1_SUM"].to_numpy()
    # plink2 prints 6 significant digits: agreement means within half a unit of the 6th digit
    # (an exact-equality test of the printed values fails on ties like 0.4027085)
    scale = 10.0 ** (np.floor(np.log10(np.maximum(np.abs(b), 1e-300))) - 5)
    equal = bool((np.abs(a - b) <= 0.5 * scale * (1 + 1e-9) + 1e-300).all())
    for row in rows:
        row.update({"n_score_rows": n_score, "n_used": len(used), "sums_equal_6g": equal})
        row["ratio"] = round(row["wall_s"] / p2["wall_s"], 2)
        row.pop("stdout", None)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bfile", help="existing PLINK1 prefix")
    parser.add_argument("--sizes", default="1000x20000,1000x80000")
    parser.add_argument("--fraction", type=float, default=0.5, help="variants in the score")
    parser.add_argument("--chunk-size", type=int, default=2048)
    parser.add_argument("--out", default="benchmarks/results/score.json")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.bfile:
            cohorts = [(Path(args.bfile).name, Path(args.bfile))]
        else:
            cohorts = []
            for size in args.sizes.split(","):
                n, m = (int(v) for v in size.split("x"))
                cohorts.append((f"{n} × {m}", make_cohort(tmp, n, m, vcf=False)))
        for label, prefix in cohorts:
            for row in run(prefix, args.fraction, args.chunk_size, tmp):
                results.append({"cohort": label, **row})
    lines = [
        "| cohort (samples × variants) | tool | score rows (used) | wall (s) | × plink2 "
        "| peak RSS (MiB) | SUM = plink2 to 6 s.f. | load (1 min) |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['cohort']} | {r['tool']} | {r['n_score_rows']} ({r['n_used']}) | "
            f"{r['wall_s']:.2f} | {r['ratio']:.2f} | {r['peak_rss_mib']:.0f} | "
            f"{r['sums_equal_6g']} | {r['load_1min']:.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(table + "\n")
    return 0 if all(r["sums_equal_6g"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
