"""Time and memory of simulating the biobank preset (issue 43) at growing site sizes.

Each size runs ``rvfedprs simulate --preset biobank`` in its own process under
``/usr/bin/time -v`` (a YAML file overrides ``samples_per_client``), and records wall and CPU
seconds (user + system), the peak RSS, the stages' wall times (from provenance), the written
.pgen/.pvar/.psam sizes against what a PLINK1 .bed of the same variants would take
(3 + n_variants x ceil(n_samples / 4) bytes), and the 1-minute load average before and after
(the machine may be shared: CPU seconds are the figure to compare).

Then one genotype pass over the written .pgen, ours beside plink2's (``--passes``, default on):
allele counts of every variant (``open_genotypes`` + ``allele_counts``, one process) against
``plink2 --pfile --freq --threads 1``, each under GNU time (wall, peak RSS), back to back
(:func:`bench_formats.counts_rows`), and their wall ratio.

    python benchmarks/bench_biobank_simulate.py --sizes 1000 5000 10000
    python benchmarks/bench_biobank_simulate.py --sizes 50000 --append   # the full 500,000

Writes ``--out`` (JSON, one record per size; ``--append`` adds to the records already there)
and prints a Markdown table of every record.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_formats import counts_rows  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "biobank_simulate.json"


def _time_v(stderr: str, label: str) -> str:
    found = re.search(rf"^\s*{re.escape(label)}: (.+)$", stderr, re.M)
    if found is None:
        raise RuntimeError(f"/usr/bin/time -v printed no {label!r}")
    return found.group(1).strip()


def _seconds(clock: str) -> float:
    parts = [float(p) for p in clock.split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


def genotype_pass(prefix: Path, folder: Path, chunk_size: int = 4096) -> dict:
    """Allele counts over the cohort's .pgen, ours and plink2's (wall s, peak RSS MiB)."""
    rows = counts_rows("pgen", str(prefix), chunk_size, folder)
    ours, plink2 = rows[0], rows[-1]
    return {
        "ours_wall_s": ours["wall_s"], "ours_pass_s": ours["pass_s"],
        "ours_peak_rss_mib": ours["peak_rss_mib"],
        "plink2_wall_s": plink2["wall_s"], "plink2_peak_rss_mib": plink2["peak_rss_mib"],
        "ratio": round(ours["wall_s"] / plink2["wall_s"], 3), "load_1min": ours["load_1min"],
        "chunk_size": chunk_size,
    }  # fmt: skip


def run_size(samples_per_client: int, seed: int, folder: Path, passes: bool = True) -> dict:
    """Simulate the preset at ``samples_per_client`` and measure it."""
    config = folder / f"biobank_{samples_per_client}.yaml"
    config.write_text(f"simulate:\n  samples_per_client: {samples_per_client}\n")
    out = folder / f"cohort_{samples_per_client}"
    load_before = os.getloadavg()[0]
    done = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "rvfedprs.cli", "simulate",
         "--preset", "biobank", "--config", str(config), "--out", str(out),
         "--seed", str(seed), "--no-progress"],
        capture_output=True, text=True,
    )  # fmt: skip
    load_after = os.getloadavg()[0]
    if done.returncode != 0:
        raise RuntimeError(f"simulate at {samples_per_client} per site failed:\n{done.stderr}")
    prov = json.loads((out / "provenance.json").read_text())
    extra = prov["extra"]
    n_samples, n_variants = extra["n_samples"], extra["n_variants"]
    sizes = {
        e: (out / "genotypes" / f"cohort.{e}").stat().st_size for e in ("pgen", "pvar", "psam")
    }
    record = {
        "samples_per_client": samples_per_client,
        "n_samples": n_samples,
        "n_discovery": extra["n_discovery_samples"],
        "n_variants": n_variants,
        "n_rare_maf_below_0_01": extra["n_rare_variants_maf_below_0_01"],
        "seed": seed,
        "wall_s": round(
            _seconds(_time_v(done.stderr, "Elapsed (wall clock) time (h:mm:ss or m:ss)")), 1
        ),
        "cpu_s": round(
            float(_time_v(done.stderr, "User time (seconds)"))
            + float(_time_v(done.stderr, "System time (seconds)")),
            1,
        ),
        "peak_rss_mib": round(
            int(_time_v(done.stderr, "Maximum resident set size (kbytes)")) / 1024
        ),
        "stages_s": extra["timings"],
        "pgen_bytes": sizes["pgen"],
        "pvar_bytes": sizes["pvar"],
        "psam_bytes": sizes["psam"],
        "bed_bytes_equivalent": 3 + n_variants * -(-n_samples // 4),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(load_after, 2),
        "n_cpus": os.cpu_count(),
        "pgs_auc": extra["auc"]["prs"],
        "carrier_fraction": extra["causal"]["carrier_fraction"],
    }
    if passes:
        record["counts_pass"] = genotype_pass(out / "genotypes" / "cohort", folder)
    return record


def table(records: list[dict]) -> str:
    """The records as a Markdown table."""
    lines = [
        "| per site | samples | variants | wall | CPU | peak RSS | .pgen | .bed would be | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    passes = []
    for r in records:
        if "counts_pass" in r:
            c = r["counts_pass"]
            passes.append(
                f"| {r['n_samples']:,} | {c['ours_wall_s']:.1f} s | {c['plink2_wall_s']:.1f} s | "
                f"**{c['ratio']:.2f}×** | {c['ours_peak_rss_mib']:.0f} / "
                f"{c['plink2_peak_rss_mib']:.0f} MiB | {c['load_1min']:.1f} |"
            )
        lines.append(
            f"| {r['samples_per_client']:,} | {r['n_samples']:,} | {r['n_variants']:,} | "
            f"{r['wall_s'] / 60:.1f} min | {r['cpu_s'] / 60:.1f} min | "
            f"{r['peak_rss_mib'] / 1024:.2f} GiB | {r['pgen_bytes'] / 1e6:.1f} MB | "
            f"{r['bed_bytes_equivalent'] / 1e6:.0f} MB | "
            f"{r['load_1min_before']:.1f} → {r['load_1min_after']:.1f} |"
        )
    if passes:
        header = "| samples | our counts | plink2 --freq | ratio | peak RSS ours / plink2 | load |"
        lines += ["", header, "|---:|---:|---:|---:|---|---|", *passes]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--append", action="store_true", help="keep the records in --out")
    parser.add_argument("--keep", type=Path, help="write the cohorts here instead of a temp dir")
    parser.add_argument("--no-passes", dest="passes", action="store_false",
                        help="skip the counts pass beside plink2 --freq")  # fmt: skip
    args = parser.parse_args()
    records = json.loads(args.out.read_text()) if args.append and args.out.exists() else []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            record = run_size(size, args.seed, folder, args.passes)
            print(json.dumps(record), flush=True)
            records = [r for r in records if r["samples_per_client"] != size] + [record]
            records.sort(key=lambda r: r["samples_per_client"])
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(records, indent=1) + "\n")
    print(table(records))


if __name__ == "__main__":
    main()
