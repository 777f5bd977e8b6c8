"""A consortium study's cost against the pooled workflow on the same cohort (issue #14).

Usage: python benchmarks/bench_study.py --cohort results/cohort --config config/consortium.yaml
       [--out /tmp/bench-study] [--strategies fedavg,fedce]

1. the pooled preparation and training (`snakemake` with `study.enabled: false` on the cohort's
   files), wall time and peak RSS of the whole workflow;
2. the same cohort split into one folder per site, then the study on the in-process engine
   through a MeteredTransport: wall time of every step at every site (the site's handler), the
   coordinator's own time (total minus the sites'), the process's peak RSS, and the bytes each
   message type would occupy on Flower's wire (Flower's protobuf serialisation of our records).
Writes a JSON next to the tables it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rvfedprs.config import deep_merge, load_config  # noqa: E402
from rvfedprs.federation.metering import MeteredTransport, Traffic  # noqa: E402
from rvfedprs.simulate.cohort import as_pipeline_cohort  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402
from rvfedprs.study.split import split_cohort  # noqa: E402
from rvfedprs.study.task import StudyTask  # noqa: E402


def _cohort_overrides(cohort: Path) -> dict:
    return {
        "pipeline": {"cohort": as_pipeline_cohort(cohort)},
        "evaluate": {
            "truth": str(cohort / "truth" / "causal_variants.tsv"),
            "samples": str(cohort / "samples.tsv"),
        },
    }


def _workflow_config(config_path: Path) -> dict:
    """``config_path`` over config/config.yaml, as the Snakefile reads a ``--configfile``."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return deep_merge(base, yaml.safe_load(config_path.read_text()))


def pooled(config_path: Path, cohort: Path, out: Path, strategies: list[str]) -> dict:
    raw = _workflow_config(config_path)
    pipeline = raw["pipeline"]
    raw.update(_cohort_overrides(cohort))
    raw["pipeline"] = {**pipeline, **raw["pipeline"]}
    raw["study"] = {"enabled": False}
    raw["train"] = {**raw.get("train", {}), "compare": strategies, "progress": False}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(raw))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "1",
         "--configfile", str(out / "config.yaml"), "--directory", str(out), "-q"],
        capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"wall_s": round(wall, 1), "peak_rss_mib_any_job": round(peak, 1)}


def study(config_path: Path, cohort: Path, out: Path, strategies: list[str]) -> dict:
    raw = _workflow_config(config_path)
    overrides = _cohort_overrides(cohort)
    overrides["pipeline"] = {**raw["pipeline"], **overrides["pipeline"]}
    overrides["train"] = {**raw.get("train", {}), "compare": strategies, "progress": False}
    overrides["study"] = {
        **raw.get("study", {}), "enabled": True, "engine": "inprocess",
        "sites_dir": str(out / "sites"), "out": str(out / "coordinator"),
    }  # fmt: skip
    config = load_config(None, overrides={k: v for k, v in raw.items() if k in ("model", "fedce")}
                         | overrides)  # fmt: skip
    start = time.perf_counter()
    split_cohort(
        genotypes=overrides["pipeline"]["cohort"]["genotypes"],
        samples=cohort / "samples.tsv",
        phenotypes=cohort / "phenotypes.tsv",
        id_column=config["pipeline"]["phenotype"]["id_column"],
        out=out / "sites",
        truth=cohort / "truth" / "causal_variants.tsv",
    )
    split_s = time.perf_counter() - start
    per_site: dict = defaultdict(lambda: defaultdict(float))
    original_handle, original_fit = StudyTask.handle, StudyTask.fit

    def handle(self, request, site, state):
        t0 = time.perf_counter()
        try:
            return original_handle(self, request, site, state)
        finally:
            per_site[site.site][request.step] += time.perf_counter() - t0

    def fit(self, instruction, site, settings, state, *, random_seed):
        t0 = time.perf_counter()
        try:
            return original_fit(self, instruction, site, settings, state, random_seed=random_seed)
        finally:
            per_site[site.site]["fit"] += time.perf_counter() - t0

    StudyTask.handle, StudyTask.fit = handle, fit
    traffic = Traffic()
    start = time.perf_counter()
    try:
        run_study_config(
            config,
            scoring_file=overrides["pipeline"]["cohort"]["scoring_file"],
            samplesheet=out / "sites" / "samplesheet.tsv",
            wrap=lambda t: MeteredTransport(t, StudyTask(), traffic),
        )
    finally:
        StudyTask.handle, StudyTask.fit = original_handle, original_fit
    wall = time.perf_counter() - start
    site_total = {s: round(sum(v.values()), 1) for s, v in per_site.items()}
    table = traffic.by_step()
    return {
        "split_s": round(split_s, 1),
        "study_wall_s": round(wall, 1),
        "coordinator_s": round(wall - sum(site_total.values()), 1),
        "site_s": site_total,
        "site_steps_s": {s: {k: round(v, 2) for k, v in d.items()} for s, d in per_site.items()},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "traffic": table.to_dict(orient="records"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohort", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "consortium.yaml")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-study"))
    parser.add_argument("--strategies", default="fedavg,fedce")
    parser.add_argument("--skip-pooled", action="store_true")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    import torch

    # torch's intra-op threads (one per core by default) collapse when another process holds a
    # core; run with OMP_NUM_THREADS=1 on a shared machine and read this field
    result = {
        "cohort": str(args.cohort),
        "strategies": strategies,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    # the machine is shared: each part carries the 1-minute load average around it
    load = [round(os.getloadavg()[0], 2)]
    result["study"] = study(args.config, args.cohort, args.out / "study", strategies)
    load.append(round(os.getloadavg()[0], 2))
    result["study"]["load_before_after"] = load[-2:]
    if not args.skip_pooled:
        result["pooled"] = pooled(args.config, args.cohort, args.out / "pooled", strategies)
        load.append(round(os.getloadavg()[0], 2))
        result["pooled"]["load_before_after"] = load[-2:]
    out = ROOT / "benchmarks" / "results" / f"study_{args.cohort.resolve().name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
