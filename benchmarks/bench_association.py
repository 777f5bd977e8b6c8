"""Benchmark single-variant rare-variant association: ``rvfedprs associate`` vs ``plink2 --glm``.

On a simulated and prepared cohort (``DIR/results``: the workflow's per-site inputs;
``DIR/cohort/genotypes/cohort``: the PLINK1 genotypes they came from), both tools test every
rare variant of the federation on the same training samples with the PRS as covariate:

- ours: ``rvfedprs associate`` (in-process engine, ``associate.units: none``): the floor
  (logistic regression on the PRS) fitted by federated Newton, then every site's score sums
  under it, summed, and a score test per variant — also the per-site I/O of the dosages;
- plink2: ``--glm hide-covar firth-fallback`` (a logistic regression per variant, Firth where
  it does not converge, as plink2's users run it) on the same samples, one thread.

Each runs in its own process under ``/usr/bin/time`` (wall seconds, peak RSS), ``--repeats``
times, alternating; the median and the pair-by-pair ratio are reported. The two p-values are
not the same test (a score test against a Wald/Firth test), so agreement is reported as the
Spearman correlation of −log10 p over the variants both tested, not as equality.

    python benchmarks/bench_association.py --cohort DIR --out benchmarks/results/association.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
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


def commands(cohort: Path, tmp: Path) -> tuple[list[str], list[str], Path, Path]:
    """(ours, plink2, our table, plink2's table)."""
    results = cohort / "results"
    config = {"train": {"data": str(results), "progress": False, "validation_fraction": 0},
              "associate": {"units": "none"}}  # fmt: skip
    (tmp / "associate.yaml").write_text(yaml.safe_dump(config))
    ours = [sys.executable, "-m", "rvfedprs", "associate", "--config",
            str(tmp / "associate.yaml"), "--out", str(tmp / "ours")]  # fmt: skip
    files = plink_inputs(results, tmp)
    plink = ["plink2", "--bfile", str(cohort / "cohort" / "genotypes" / "cohort"),
             "--keep", str(files["keep"]), "--pheno", str(files["pheno"]),
             "--covar", str(files["covar"]), "--extract", str(files["extract"]),
             "--glm", "hide-covar", "firth-fallback", "--threads", "1", "--memory", "2000",
             "--out", str(tmp / "plink")]  # fmt: skip
    return ours, plink, tmp / "ours" / "associations.tsv", tmp / "plink.PHENO.glm.logistic.hybrid"


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
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/association.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        ours, plink, ours_table, plink_table = commands(args.cohort, tmp)
        rows = []
        for repeat in range(args.repeats):
            for tool, cmd in (("rvfedprs associate", ours), ("plink2 --glm", plink)):
                figures = measure(cmd)
                figures.pop("stdout")
                rows.append({"tool": tool, "repeat": repeat, **figures})
        check = agreement(ours_table, plink_table)
        n = len(training_samples(args.cohort / "results"))
    ratios = [a["wall_s"] / b["wall_s"] for a, b in zip(rows[::2], rows[1::2], strict=True)]

    def median(tool: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["tool"] == tool)

    lines = [f"Cohort {args.cohort} ({n} training samples, {check['variants_ours']} rare "
             f"variants tested by us, {check['variants_plink2']} by plink2); "
             f"{args.repeats} alternating runs each.", "",
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
    markdown = "\n".join(lines)
    print(markdown)
    save_results(args.out, str(args.cohort), [*rows, {"agreement": check, "ratios": ratios}],
                 markdown)  # fmt: skip


if __name__ == "__main__":
    main()
