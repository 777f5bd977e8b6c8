"""Benchmark single-variant rare-variant association: ``rvfedprs associate`` vs ``plink2 --glm``.

On a simulated and prepared cohort (``DIR/results``: the workflow's per-site inputs;
``DIR/cohort/genotypes/cohort``: the PLINK1 genotypes they came from), both tools test every
rare variant of the federation on the same training samples with the PRS as covariate:

- ours: ``rvfedprs associate`` (in-process engine, ``associate.units: none``): the floor
  (logistic regression on the PRS) fitted by federated Newton, then every site's score sums
  under it, summed, and a score test per variant — also the per-site I/O of the dosages;
- plink2: ``--glm hide-covar firth-fallback`` (a logistic regression per variant, Firth where
  it does not converge, as plink2's users run it) on the same samples.

Both get ``--threads`` threads (default 1): plink2 its ``--threads``, ours
``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` (numpy's BLAS). Each runs in
its own process under ``/usr/bin/time`` (wall seconds, peak RSS), ``--repeats`` times,
alternating; the median and the pair-by-pair ratio are reported. The two p-values are
not the same test (a score test against a Wald/Firth test), so agreement is reported as the
Spearman correlation of −log10 p over the variants both tested, not as equality.

``--gene-tests`` adds the per-site cost of the gene tests (burden, SKAT, ACAT over the
``burden`` section's windows, ``associate.units: burden``): each site's seconds and bytes for its
association sums with and without the units' information blocks (:func:`~rvfedprs.association.
sums.association_sums`, medians of 5), the server's seconds for the table, and the
whole command with units (``--gene-repeats`` runs) beside the single-variant one.

    python benchmarks/bench_association.py --cohort DIR --gene-tests \
        --out benchmarks/results/association.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_readers import measure, save_results  # noqa: E402


def training_samples(results: Path) -> pd.DataFrame:
    """Every site's training rows: sample id, PRS, 0/1 phenotype."""
    clients = pd.read_csv(results / "clients.tsv", sep="\t")["client"]
    frames = [pd.read_parquet(results / "clients" / c / "samples.parquet") for c in clients]
    samples = pd.concat(frames, ignore_index=True)
    return samples[samples["split"] == "train"][["sample_id", "prs", "phenotype"]]


def plink_inputs(results: Path, tmp: Path) -> dict[str, Path]:
    """--keep, --pheno (1/2), --covar (PRS) and --extract (the rare variants) files."""
    samples = training_samples(results)
    files = {name: tmp / f"{name}.txt" for name in ("keep", "pheno", "covar", "extract")}
    pd.DataFrame({"FID": samples["sample_id"], "IID": samples["sample_id"]}).to_csv(
        files["keep"], sep="\t", index=False, header=False
    )
    pd.DataFrame({"#FID": samples["sample_id"], "IID": samples["sample_id"],
                  "PHENO": samples["phenotype"].astype(int) + 1}).to_csv(
        files["pheno"], sep="\t", index=False)  # fmt: skip
    pd.DataFrame({"#FID": samples["sample_id"], "IID": samples["sample_id"],
                  "PRS": samples["prs"]}).to_csv(files["covar"], sep="\t", index=False)  # fmt: skip
    rare = pd.read_csv(results / "rare_variants.tsv", sep="\t")
    rare["id"].to_csv(files["extract"], index=False, header=False)
    return files


def ours_command(cohort: Path, tmp: Path, threads: int, units: str = "none") -> list[str]:
    """``rvfedprs associate`` on the cohort's prepared inputs, BLAS limited to ``threads``."""
    config = {"train": {"data": str(cohort / "results"), "progress": False,
                        "validation_fraction": 0}, "associate": {"units": units}}  # fmt: skip
    (tmp / f"associate_{units}.yaml").write_text(yaml.safe_dump(config))
    limits = [f"{name}={threads}" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                               "MKL_NUM_THREADS")]  # fmt: skip
    return ["env", *limits, sys.executable, "-m", "rvfedprs", "associate", "--config",
            str(tmp / f"associate_{units}.yaml"), "--out", str(tmp / f"ours_{units}")]  # fmt: skip


def commands(cohort: Path, tmp: Path, threads: int = 1) -> tuple[list[str], list[str], Path, Path]:
    """(ours, plink2, our table, plink2's table)."""
    results = cohort / "results"
    ours = ours_command(cohort, tmp, threads)
    files = plink_inputs(results, tmp)
    plink = ["plink2", "--bfile", str(cohort / "cohort" / "genotypes" / "cohort"),
             "--keep", str(files["keep"]), "--pheno", str(files["pheno"]),
             "--covar", str(files["covar"]), "--extract", str(files["extract"]),
             "--glm", "hide-covar", "firth-fallback", "--threads", str(threads), "--memory",
             "2000", "--out", str(tmp / "plink")]  # fmt: skip
    return (ours, plink, tmp / "ours_none" / "associations.tsv",
            tmp / "plink.PHENO.glm.logistic.hybrid")  # fmt: skip


def site_costs(cohort: Path, out: Path, repeats: int) -> dict:
    """Per site: seconds and bytes of the association sums, single-variant and with units.

    At the floor the command fitted (``out/summary.json``), over the ``burden`` section's
    default windows (what ``associate.units: burden`` sums); then the server's seconds for the
    table of every test from the summed statistics.
    """
    from rvfedprs.association.scores import EfficientScores
    from rvfedprs.association.sums import UnitLayout, association_sums, summed
    from rvfedprs.association.table import association_table
    from rvfedprs.config import validate_config
    from rvfedprs.genomic.data import load_federation
    from rvfedprs.strategies import burden_of
    from rvfedprs.training.glm import glm_design

    results = cohort / "results"
    config = validate_config({"train": {"data": str(results)}})
    burden = dict(config["burden"])
    burden.update(mask_column=None, annotations=None, weights="flat", max_maf=0.5)
    units = burden_of({**config, "burden": burden})
    layouts = {"single": UnitLayout.from_members([], []),
               "units": UnitLayout.from_matrix(units.matrix, units.regions)}  # fmt: skip
    coef = np.asarray(json.loads((out / "summary.json").read_text())["floor"], np.float64)
    federation = load_federation(results)
    rows, replies = [], []
    for client, data in sorted(federation.train.items()):
        design = glm_design(data, "floor")
        row = {"site": client, "samples": data.n_samples}
        for name, layout in layouts.items():
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                sums = association_sums(design, data.rare, data.y, coef, layout, group=0,
                                        n_groups=1, kind=data.outcome)  # fmt: skip
                times.append(time.perf_counter() - start)
            row[f"{name}_s"] = round(statistics.median(times), 4)
            row[f"{name}_bytes"] = int(sum(np.asarray(v).nbytes for v in sums.values()))
        replies.append(sums)
        rows.append(row)
    hessian = sum(data.outcome.glm_sums(glm_design(data, "floor"), data.y, coef)[2]
                  for data in federation.train.values())  # fmt: skip
    variants = pd.read_csv(results / "rare_variants.tsv", sep="\t", dtype={"chrom": str})
    section = config["associate"]  # the command's defaults
    seconds = {}
    for batched in (True, False):  # False: unit by unit, as before the batches
        start = time.perf_counter()
        table = association_table(EfficientScores(summed(replies), hessian, layouts["units"]),
                                  variants, group_names=["all"],
                                  maf_cutoffs=section["maf_cutoffs"],
                                  masks={"all": np.ones(len(variants), bool)},
                                  collapse_mac=float(section["collapse_mac"]),
                                  beta=tuple(section["beta"]), batched=batched)  # fmt: skip
        seconds[batched] = time.perf_counter() - start
    sizes = [m.size for m in layouts["units"].members]
    return {"sites": rows, "units": len(sizes), "table_rows": len(table),
            "variants_per_unit_median": statistics.median(sizes),
            "variants_per_unit_max": max(sizes), "server_table_s": round(seconds[True], 3),
            "server_table_unit_by_unit_s": round(seconds[False], 3)}  # fmt: skip


def agreement(ours_table: Path, plink_table: Path) -> dict[str, float]:
    """Spearman correlation of −log10 p (pooled score test vs plink2) over common variants."""
    ours = pd.read_csv(ours_table, sep="\t")
    ours = ours[(ours["test"] == "score") & (ours["group"] == "all")]
    plink = pd.read_csv(plink_table, sep="\t")
    merged = ours.merge(plink, left_on="unit", right_on="ID", suffixes=("", "_plink"))
    merged = merged[np.isfinite(merged["p"]) & np.isfinite(merged["P"])]
    rho = merged["p"].rank().corr(merged["P"].rank())
    return {"variants_ours": int(len(ours)), "variants_plink2": int(len(plink)),
            "variants_both": int(len(merged)), "spearman_p": round(float(rho), 4)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cohort", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="threads of each tool")
    parser.add_argument(
        "--gene-tests",
        action="store_true",
        help="also the per-site cost of the gene tests (module docstring)",
    )
    parser.add_argument("--gene-repeats", type=int, default=3,
                        help="runs of the command with units (each site's sums: 5)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/association.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        ours, plink, ours_table, plink_table = commands(args.cohort, tmp, args.threads)
        rows = []
        for repeat in range(args.repeats):
            for tool, cmd in (("rvfedprs associate", ours), ("plink2 --glm", plink)):
                figures = measure(cmd)
                figures.pop("stdout")
                rows.append({"tool": tool, "repeat": repeat, **figures})
        check = agreement(ours_table, plink_table)
        n = len(training_samples(args.cohort / "results"))
        genes = None
        if args.gene_tests:
            with_units = ours_command(args.cohort, tmp, args.threads, units="burden")
            runs = [measure(with_units) for _ in range(args.gene_repeats)]
            genes = site_costs(args.cohort, tmp / "ours_none", repeats=5)
            genes["command_wall_s"] = [r["wall_s"] for r in runs]
            genes["command_peak_rss_mib"] = [r["peak_rss_mib"] for r in runs]
            genes["load_1min"] = [r["load_1min"] for r in runs]
    ratios = [a["wall_s"] / b["wall_s"] for a, b in zip(rows[::2], rows[1::2], strict=True)]

    def median(tool: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["tool"] == tool)

    lines = [f"Cohort {args.cohort} ({n} training samples, {check['variants_ours']} rare "
             f"variants tested by us, {check['variants_plink2']} by plink2); "
             f"{args.repeats} alternating runs each, {args.threads} thread(s) each; 1-min load "
             f"{min(r['load_1min'] for r in rows):.1f}-{max(r['load_1min'] for r in rows):.1f}.",
             "",
             "| tool | wall s (median) | peak RSS MiB (median) |", "|---|---|---|"]  # fmt: skip
    for tool in ("rvfedprs associate", "plink2 --glm"):
        wall, rss = median(tool, "wall_s"), median(tool, "peak_rss_mib")
        lines.append(f"| {tool} | {wall:.2f} | {rss:.0f} |")
    ratio = statistics.median(ratios)
    lines += [
        "",
        f"Ratio ours / plink2 (wall, pair by pair): median {ratio:.2f} (min "
        f"{min(ratios):.2f}, max {max(ratios):.2f}). Spearman correlation of the two "
        f"p-values over {check['variants_both']} variants: {check['spearman_p']}.",
    ]
    if genes is not None:
        lines += gene_lines(genes)
    markdown = "\n".join(lines)
    print(markdown)
    extra = {"agreement": check, "ratios": ratios, "threads": args.threads}
    if genes is not None:
        extra["gene_tests"] = genes
    save_results(args.out, str(args.cohort), [*rows, extra], markdown)


def gene_lines(genes: dict) -> list[str]:
    """The gene tests' per-site cost as Markdown."""
    sites = genes["sites"]

    def med(key: str) -> float:
        return statistics.median(s[key] for s in sites)

    return [
        "", f"Gene tests: {genes['units']} units (median {genes['variants_per_unit_median']:g}, "
        f"max {genes['variants_per_unit_max']} variants), {genes['table_rows']} table rows.", "",
        "| per site (median of sites) | single-variant sums | with the units' blocks |",
        "|---|---|---|",
        f"| seconds | {med('single_s'):.4f} | {med('units_s'):.4f} |",
        f"| bytes sent | {med('single_bytes'):,.0f} | {med('units_bytes'):,.0f} |", "",
        f"Server, every test from the summed statistics: {genes['server_table_s']:.2f} s in "
        f"batches of one size ({genes['server_table_unit_by_unit_s']:.2f} s unit by unit). The "
        f"command with units: wall {statistics.median(genes['command_wall_s']):.2f} s, peak RSS "
        f"{statistics.median(genes['command_peak_rss_mib']):.0f} MiB (medians).",
    ]  # fmt: skip


if __name__ == "__main__":
    main()
