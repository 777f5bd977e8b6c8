"""Each preparation stage of the consortium workflow on a biobank-sized cohort, beside plink2.

Given cohorts that ``bench_biobank_simulate.py --keep DIR`` wrote (``DIR/cohort_<n>``: the
biobank preset as .pgen, its samples, phenotypes and scoring file), each one is read as a user's
own cohort (``pipeline.cohort.simulate: false``) and prepared by the workflow
(``snakemake --cores 2 results/clients.tsv``: validation, per-site sample QC, per-site allele
counts, their combination, score matching, per-site PRS and rare dosages). Every job's wall
seconds, CPU seconds and peak RSS come from Snakemake's own benchmark files
(``results/logs/benchmarks/``); the whole run is timed from outside.

Beside every per-site genotype pass, plink2 does the same work on the same site's samples
(``--keep``), one thread, back to back after the workflow (not under its load); a stage that
is two plink2 runs is their summed time:

- sample QC (call rates over the site's samples) — ``plink2 --missing``;
- allele counts over the QC-passing samples and genotype counts over those HWE is tested in
  (the controls of a case/control trait) — ``plink2 --freq`` plus ``plink2 --hardy`` on the
  controls;
- the PRS and the rare-variant dosages of the QC-passing samples — ``plink2 --score`` on the
  matched weights plus ``plink2 --extract <rare variants> --make-pgen`` (the carriers written
  as plink2's own sparse fileset).

The table gives, per stage, the median site's seconds and peak RSS for both tools and the median
of the sites' ratios; peak RSS is per job (one site's process).

    python benchmarks/bench_biobank_prepare.py --cohorts /tmp/biobank/cohort_25000 \
        /tmp/biobank/cohort_50000 --out benchmarks/results/biobank_prepare.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_readers import measure  # noqa: E402

from rvfedprs.simulate.cohort import as_pipeline_cohort  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "biobank_prepare.json"
#: the preparation's rules in the order they run
STAGES = ("import_genotypes", "validate_inputs", "sample_qc", "client_counts", "combine_counts",
          "match_scores", "client_features", "summarize_clients")  # fmt: skip
#: our per-site stages that plink2 runs beside
PER_SITE = ("sample_qc", "client_counts", "client_features")


def workflow_config(cohort: Path, phenotype: dict | None = None) -> dict:
    """The cohort read as a user's own (the simulated layout's files)."""
    section = {"cohort": as_pipeline_cohort(cohort)}
    return {"pipeline": {**({"phenotype": phenotype} if phenotype else {}), **section}}


def run_workflow(cohort: Path, work: Path, phenotype: dict | None = None) -> dict:
    """Prepare ``cohort`` in ``work`` with Snakemake; its wall seconds."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "biobank.yaml"
    config.write_text(yaml.safe_dump(workflow_config(cohort, phenotype), sort_keys=False))
    command = [
        "snakemake",
        "results/clients.tsv",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "2",
        "--configfile",
        str(config),
    ]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (work / "snakemake.log").write_text(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"the workflow failed on {cohort}:\n{done.stderr[-3000:]}")
    return {"wall_s": round(wall, 1), "load_1min_before": round(load, 2)}


def job_benchmarks(work: Path) -> pd.DataFrame:
    """One row per job: rule, wildcard (site or index), Snakemake's s, cpu_time, max_rss."""
    rows = []
    for path in sorted((work / "results" / "logs" / "benchmarks").rglob("*.tsv")):
        rule = path.parent.name if path.parent.name != "benchmarks" else path.stem
        table = pd.read_csv(path, sep="\t")
        rows.append({"rule": rule, "job": path.stem, "s": float(table["s"].iloc[0]),
                     "cpu_s": float(table["cpu_time"].iloc[0]),
                     "max_rss_mib": float(table["max_rss"].iloc[0])})  # fmt: skip
    return pd.DataFrame(rows)


def plink2_weights(work: Path) -> Path:
    """The matched score rows as plink2 reads them (ID, counted allele, weight)."""
    log = pd.read_csv(work / "results" / "logs" / "score_match.tsv", sep="\t",
                      keep_default_na=False, low_memory=False)  # fmt: skip
    used = log[log["used"].astype(str) == "True"]
    out = work / "plink2_weights.tsv"
    pd.DataFrame({"ID": used["variant_id"], "A1": used["counted_allele"],
                  "W": used["weight_used"]}).to_csv(out, sep="\t", index=False)  # fmt: skip
    return out


def _individuals(prefix: Path) -> pd.DataFrame:
    """FID and IID of every sample (.psam, or .fam for a PLINK1 cohort)."""
    psam = prefix.with_suffix(".psam")
    if psam.exists():
        table = pd.read_csv(psam, sep="\t", dtype=str).rename(columns={"#FID": "FID"})
        return table[["FID", "IID"]]
    fam = pd.read_csv(prefix.with_suffix(".fam"), sep=r"\s+", header=None, dtype=str)
    return fam.iloc[:, :2].set_axis(["FID", "IID"], axis=1)


def plink2_passes(cohort: Path, work: Path, phenotype: dict | None = None) -> pd.DataFrame:
    """Each site's plink2 runs beside each of our per-site stages (module docstring)."""
    weights = plink2_weights(work)
    rare = work / "rare_ids.txt"
    ids = pd.read_csv(work / "results" / "rare_variants.tsv", sep="\t", usecols=["id"])["id"]
    rare.write_text("\n".join(ids.astype(str)) + "\n")
    prefix = cohort / "genotypes" / "cohort"
    source = (
        ["--pfile", str(prefix)]
        if prefix.with_suffix(".pgen").exists()
        else ["--bfile", str(prefix)]
    )
    individuals = _individuals(prefix)
    binary = (phenotype or {}).get("kind", "binary") == "binary"
    rows = []
    for qc_file in sorted((work / "results" / "prepare" / "sample_qc").glob("*.tsv")):
        client = qc_file.stem
        qc = pd.read_csv(qc_file, sep="\t", dtype={"sample_id": str, "phenotype": str})
        kept = qc[~qc["excluded"].astype(bool)]
        tested = kept[kept["phenotype"] == "0"] if binary else kept
        keeps = {}
        for name, members in (("all", qc), ("kept", kept), ("hwe", tested)):
            keeps[name] = work / f"keep_{client}_{name}.txt"
            individuals[individuals["IID"].isin(set(members["sample_id"]))].to_csv(
                keeps[name], sep="\t", index=False, header=False)  # fmt: skip
        runs = {
            "sample_qc": [("all", ["--missing"])],
            "client_counts": [("kept", ["--freq"]), ("hwe", ["--hardy"])],
            "client_features": [
                ("kept", ["--score", str(weights), "1", "2", "3", "header", "cols=+scoresums"]),
                ("kept", ["--extract", str(rare), "--make-pgen"]),
            ],
        }
        for stage in PER_SITE:
            walls, peaks = [], []
            for i, (keep, flags) in enumerate(runs[stage]):
                cmd = ["plink2", *source, "--keep", str(keeps[keep]), *flags, "--threads", "1",
                       "--out", str(work / f"p2_{stage}_{i}_{client}")]  # fmt: skip
                figures = measure(cmd)
                walls.append(figures["wall_s"])
                peaks.append(figures["peak_rss_mib"])
            rows.append({"rule": stage, "job": client, "s": round(sum(walls), 3),
                         "runs_s": walls, "max_rss_mib": max(peaks)})  # fmt: skip
    return pd.DataFrame(rows)


def stage_table(ours: pd.DataFrame, plink2: pd.DataFrame) -> list[dict]:
    """Per stage: jobs, median and summed seconds, peak RSS; plink2's beside the per-site ones."""
    out = []
    order = {rule: i for i, rule in enumerate(STAGES)}
    for rule, jobs in sorted(ours.groupby("rule"), key=lambda item: order.get(item[0], 99)):
        row = {"stage": rule, "jobs": len(jobs), "median_s": round(jobs["s"].median(), 2),
               "total_s": round(jobs["s"].sum(), 1), "total_cpu_s": round(jobs["cpu_s"].sum(), 1),
               "max_rss_mib": round(jobs["max_rss_mib"].max())}  # fmt: skip
        theirs = plink2[plink2["rule"] == rule]
        if len(theirs):
            paired = jobs.merge(theirs, on="job", suffixes=("", "_p2"))
            row.update(
                plink2_median_s=round(theirs["s"].median(), 2),
                plink2_max_rss_mib=round(theirs["max_rss_mib"].max()),
                ratio_median=round(statistics.median(paired["s"] / paired["s_p2"]), 3),
            )
        out.append(row)
    return out


def measure_cohort(
    cohort: Path, work: Path, phenotype: dict | None = None, before: dict | None = None
) -> dict:
    """The workflow's preparation of one cohort and plink2's passes beside it.

    ``before``: this cohort's record from an earlier run whose work folder is still there; its
    workflow figures are kept and only plink2's passes are run again.
    """
    provenance = json.loads((cohort / "provenance.json").read_text())["extra"]
    reuse = before is not None and (work / "results" / "clients.tsv").is_file()
    whole = before["workflow"] if reuse else run_workflow(cohort, work, phenotype)
    ours = job_benchmarks(work)
    theirs = plink2_passes(cohort, work, phenotype)
    return {
        "cohort": str(cohort),
        "n_samples": provenance["n_samples"],
        "n_variants": provenance["n_variants"],
        "workflow": whole,
        "stages": stage_table(ours, theirs),
        "jobs": ours.to_dict("records"),
        "plink2_jobs": theirs.to_dict("records"),
        "n_cpus": os.cpu_count(),
    }


def markdown(records: list[dict]) -> str:
    """Every cohort's stages as one Markdown table."""
    lines = ["| samples | stage | jobs | median job | peak RSS | plink2 (same site) | ratio |",
             "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for record in records:
        for s in record["stages"]:
            beside = (f"{s['plink2_median_s']:.1f} s, {s['plink2_max_rss_mib']} MiB"
                      if "plink2_median_s" in s else "—")  # fmt: skip
            ratio = f"**{s['ratio_median']:.2f}×**" if "ratio_median" in s else "—"
            lines.append(
                f"| {record['n_samples']:,} | {s['stage']} | {s['jobs']} | "
                f"{s['median_s']:.1f} s | {s['max_rss_mib']} MiB | {beside} | {ratio} |"
            )
        lines.append(f"| {record['n_samples']:,} | **whole preparation** (2 cores) | | "
                     f"{record['workflow']['wall_s'] / 60:.1f} min | | | |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cohorts", type=Path, nargs="+", required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/biobank_prepare"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--phenotype", type=yaml.safe_load,
                        help="pipeline.phenotype as YAML (default: the workflow's)")  # fmt: skip
    parser.add_argument("--plink2-only", action="store_true",
                        help="keep the workflow's figures of a cohort already in --out (its "
                        "work folder still there) and run plink2's passes again")  # fmt: skip
    args = parser.parse_args()
    records = json.loads(args.out.read_text()) if args.out.exists() else []
    for cohort in args.cohorts:
        before = next((r for r in records if Path(r["cohort"]) == cohort), None)
        record = measure_cohort(cohort, args.work / cohort.name, args.phenotype,
                                before if args.plink2_only else None)  # fmt: skip
        records = [r for r in records if r["n_samples"] != record["n_samples"]] + [record]
        records.sort(key=lambda r: r["n_samples"])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, indent=1) + "\n")
        print(markdown([record]), flush=True)
    args.out.with_suffix(".md").write_text(markdown(records) + "\n")
    print(markdown(records))


if __name__ == "__main__":
    main()
