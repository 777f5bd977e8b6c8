"""Sensitivity of the paper protocol to the rare-signal strength ``simulate.phenotype.h2_rare``.

``run.py``'s sensitivity grid varies FedCE's own settings on one cohort; the rare heritability
needs a new cohort. For every value of ``--h2-rare`` this script

1. re-simulates and prepares the demo cohort (``--config``, default ``config/config.yaml``:
   the same simulation seed, only ``simulate.phenotype.h2_rare`` changed) in its own work
   directory with Snakemake (``results/clients.tsv results/rare_variants.tsv
   results/logs/exclusions.tsv``);
2. runs the protocol driver (``run.py``'s :func:`main`) on it with ``--strategies`` (default
   FedCE and FedAvg), ``--seeds`` training seeds, no MIA, DP or sensitivity grid;

then writes ``OUT/table.md`` and ``OUT/table.csv`` (per h2_rare: carrier and pooled AUC, mean ±
95% t-interval over seeds, per strategy; the seed-paired Δ AUC FedCE − FedAvg with its bootstrap
interval over test individuals; FedCE's ARI), ``OUT/h2_rare.png`` and ``OUT/provenance.json``
(commands, seeds, versions, wall times).

Resumable: a prepared work directory (``WORK/h2_rare=<v>/prepared.json``) is not re-simulated,
and the driver skips runs whose ``metrics.json`` exists. Progress in ``OUT/progress.log``.

Usage::

    OMP_NUM_THREADS=1 nice -n 10 python3 simulations/rvfedprs_paper/h2_rare.py \\
        --out simulations/rvfedprs_paper/results/h2_rare --work /tmp/rvfedprs_h2_rare
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import yaml

from rvfedprs.config import load_config
from rvfedprs.evaluation.paired import load_predictions, paired_table
from rvfedprs.evaluation.report import format_ci, load_runs, mean_ci
from rvfedprs.exceptions import ConfigError
from rvfedprs.provenance import write_provenance

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().with_name("run.py")
PREPARE_TARGETS = (
    "results/clients.tsv",
    "results/rare_variants.tsv",
    "results/logs/exclusions.tsv",
)
METHOD, REFERENCE = "fedce", "fedavg"

log = logging.getLogger("rvfedprs_paper.h2_rare")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="tables, figure, driver outputs")
    p.add_argument("--work", type=Path, default=Path("/tmp/rvfedprs_h2_rare"),
                   help="parent of the Snakemake work directories (one per h2_rare)")  # fmt: skip
    p.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml",
                   help="workflow configuration whose cohort is re-simulated")  # fmt: skip
    p.add_argument("--h2-rare", default="0.02,0.05,0.08,0.15", help="comma-separated values")
    p.add_argument("--strategies", default=f"{METHOD},{REFERENCE}")
    p.add_argument("--seeds", type=int, default=3, help="training seeds 0..N-1")
    p.add_argument("--rounds", type=int, help="rounds (default: the configuration's train.rounds)")
    p.add_argument("--cores", type=int, default=1, help="Snakemake --cores")
    p.add_argument("--n-boot", type=int, default=2000, help="paired bootstrap resamples")
    return p.parse_args(argv)


def _values(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--h2-rare must be comma-separated numbers, got {text!r}") from None
    bad = [v for v in values if not 0 <= v < 1]
    if not values or bad:
        raise ConfigError(f"--h2-rare values must lie in [0, 1); got {text!r}")
    return values


def _label(h2: float) -> str:
    return f"h2_rare={h2:g}"


def prepare_cohort(h2: float, config: Path, work: Path, *, cores: int) -> dict[str, Any]:
    """Simulate and prepare the cohort of ``config`` with ``h2_rare = h2`` in ``work``.

    Returns the record kept in ``work/prepared.json``: the command, the simulation seed and
    the wall time (of the first, real preparation when resumed).
    """
    done = work / "prepared.json"
    if done.is_file():
        log.info("%s: cohort already prepared in %s", _label(h2), work)
        return json.loads(done.read_text())
    base = yaml.safe_load(config.read_text()) or {}
    seed = (base.get("simulate") or {}).get("seed")
    if seed is None:
        raise ConfigError(f"{config}: simulate.seed must be fixed to vary h2_rare alone")
    work.mkdir(parents=True, exist_ok=True)
    extra = work / "h2_rare.yaml"
    extra.write_text(yaml.safe_dump({"simulate": {"phenotype": {"h2_rare": float(h2)}}}))
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
        "--cores", str(cores), "--configfile", str(config.resolve()), str(extra),
        "--directory", str(work), *PREPARE_TARGETS,
    ]  # fmt: skip
    log.info("%s: simulate + prepare: %s", _label(h2), shlex.join(command))
    t0 = time.time()
    with open(work / "snakemake.log", "w") as handle:
        result = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
    if result.returncode != 0:
        tail = (work / "snakemake.log").read_text()[-3000:]
        raise RuntimeError(f"snakemake failed for {_label(h2)} (see {work}/snakemake.log):\n{tail}")
    record = {"h2_rare": h2, "simulate_seed": int(seed), "command": shlex.join(command),
              "wall_s": time.time() - t0}  # fmt: skip
    done.write_text(json.dumps(record, indent=2) + "\n")
    log.info("%s: prepared in %.0f s", _label(h2), record["wall_s"])
    return record


def load_driver() -> ModuleType:
    """``run.py`` as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location("rvfedprs_paper_run", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_driver(driver: ModuleType, argv: list[str]) -> float:
    """Call the driver's ``main(argv)``; returns its wall time."""
    t0 = time.time()
    driver.main(argv)
    return time.time() - t0


def summarise_value(out: Path, h2: float, strategies: list[str], *, n_boot: int) -> dict:
    """One table row: per-strategy AUCs over seeds, paired Δ (method − reference), ARI."""
    runs = load_runs(out / "runs")
    runs = runs[(runs["experiment"] == "main") & runs["strategy"].isin(strategies)]
    row: dict[str, Any] = {"h2_rare": h2}
    for strategy in strategies:
        group = runs[runs["strategy"] == strategy].sort_values("seed")
        for column in ("carrier_auc", "auc"):
            mean, half, n = mean_ci(group[column].tolist())
            row[f"{column}_{strategy}_mean"], row[f"{column}_{strategy}_ci"] = mean, half
        row[f"n_seeds_{strategy}"] = n
    fedce = runs[runs["strategy"] == METHOD]
    if "ari" in fedce:
        row["ari_fedce_mean"], row["ari_fedce_ci"], _ = mean_ci(fedce["ari"].tolist())
        row["ari_fedce_min"] = float(fedce["ari"].min())
    if "n_carriers" in runs:
        row["n_test_carriers"] = int(runs["n_carriers"].iloc[0])
    predictions = load_predictions(out)
    for subset, prefix in (("carrier", "delta_carrier_auc"), ("all", "delta_auc")):
        table = paired_table(predictions, reference=REFERENCE, subset=subset, n_boot=n_boot)
        hit = table[table["strategy"] == METHOD].iloc[0]
        row[prefix] = float(hit["difference"])
        row[f"{prefix}_ci_low"], row[f"{prefix}_ci_high"] = hit["ci_low"], hit["ci_high"]
        row[f"{prefix}_p_not_greater"] = float(hit["p_not_greater"])
        row[f"{prefix}_seeds_ahead"] = int(hit["seeds_better"])
        if subset == "carrier":
            row["n_test_carriers_cases"] = int(hit["n_cases"])
    return row


def markdown_table(table: pd.DataFrame, strategies: list[str], digits: int = 3) -> str:
    """The table as Markdown: mean ± 95% half-width, Δ with its bootstrap interval."""
    f = f"{{:+.{digits}f}}".format
    head = ["h2_rare", "test carriers (cases)"]
    head += [f"carrier AUC {s}" for s in strategies] + [f"pooled AUC {s}" for s in strategies]
    head += [f"Δ carrier AUC {METHOD} − {REFERENCE} [95% CI]", "seeds ahead",
             "Δ pooled AUC [95% CI]", f"ARI {METHOD}"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.to_dict("records"):
        n = int(r["n_seeds_" + METHOD])
        cells = [f"{r['h2_rare']:g}", f"{r['n_test_carriers']} ({r['n_test_carriers_cases']})"]
        for column in ("carrier_auc", "auc"):
            cells += [format_ci(r[f"{column}_{s}_mean"], r[f"{column}_{s}_ci"], digits)
                      for s in strategies]  # fmt: skip
        for prefix in ("delta_carrier_auc", "delta_auc"):
            cells.append(f"{f(r[prefix])} [{f(r[prefix + '_ci_low'])}, "
                         f"{f(r[prefix + '_ci_high'])}]")  # fmt: skip
            if prefix == "delta_carrier_auc":
                cells.append(f"{r[prefix + '_seeds_ahead']}/{n}")
        cells.append(format_ci(r["ari_fedce_mean"], r["ari_fedce_ci"], 2))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(table: pd.DataFrame, strategies: list[str], path: Path) -> Path:
    """Carrier AUC against h2_rare per strategy (mean ± 95% t-interval over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = table["h2_rare"].to_numpy(float)
    step = 0.004 * (len(strategies) - 1)
    for i, s in enumerate(strategies):
        shift = -step / 2 + (step / max(len(strategies) - 1, 1)) * i
        left.errorbar(x + shift, table[f"carrier_auc_{s}_mean"],
                      yerr=np.nan_to_num(table[f"carrier_auc_{s}_ci"]), marker="o",
                      capsize=3, label=s)  # fmt: skip
    left.set_xlabel("simulated h2_rare")
    left.set_ylabel("AUC on causal rare-variant carriers")
    left.set_title("Carrier AUC (mean ± 95% CI over seeds)")
    left.legend()
    delta = table["delta_carrier_auc"].to_numpy(float)
    err = np.vstack([delta - table["delta_carrier_auc_ci_low"],
                     table["delta_carrier_auc_ci_high"] - delta])  # fmt: skip
    right.errorbar(x, delta, yerr=err, marker="s", capsize=3, color="black")
    right.axhline(0, color="grey", lw=0.8, ls="--")
    right.set_xlabel("simulated h2_rare")
    right.set_ylabel(f"Δ carrier AUC, {METHOD} − {REFERENCE}")
    right.set_title("Seed-paired difference (bootstrap 95% CI)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the h2_rare sweep; returns 0."""
    args = parse_args(argv)
    values = _values(args.h2_rare)
    strategies = [s for s in args.strategies.split(",") if s]
    if METHOD not in strategies or REFERENCE not in strategies:
        raise ConfigError(f"--strategies must include {METHOD} and {REFERENCE}, got {strategies}")
    config_path = args.config.resolve()
    load_config(config_path)  # fail early on a bad configuration
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "progress.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    log.addHandler(logging.StreamHandler(sys.stderr))
    log.setLevel(logging.INFO)
    log.propagate = False
    log.info("h2_rare sweep %s, strategies %s, %d seeds, work %s", values, strategies,
             args.seeds, args.work)  # fmt: skip
    driver = load_driver()
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    commands, rows = {}, []
    for h2 in values:
        label = _label(h2)
        work = args.work / label
        prepared = prepare_cohort(h2, config_path, work, cores=args.cores)
        results = work / "results"
        run_out = out / label
        argv_driver = [
            "--config", str(config_path), "--data", str(results),
            "--samples", str(results / "cohort" / "samples.tsv"),
            "--truth", str(results / "cohort" / "truth" / "causal_variants.tsv"),
            "--out", str(run_out), "--seeds", str(args.seeds),
            "--strategies", ",".join(strategies), "--no-mia", "--no-privacy", "--no-sensitivity",
        ]  # fmt: skip
        if args.rounds is not None:
            argv_driver += ["--rounds", str(args.rounds)]
        if "--no-selected" in DRIVER.read_text():
            argv_driver.append("--no-selected")  # no validation-selected runs in this sweep
        fresh = not all(
            (run_out / "runs" / "main" / s / f"seed{k}" / "metrics.json").is_file()
            for s in strategies
            for k in range(args.seeds)
        )
        log.info("%s: driver %s", label, shlex.join(["run.py", *argv_driver]))
        wall = run_driver(driver, argv_driver)
        entry = timings.setdefault(label, {})
        entry["prepare_s"] = prepared["wall_s"]
        if fresh:
            entry["driver_s"] = entry.get("driver_s", 0.0) + wall
        timings_path.write_text(json.dumps(timings, indent=2) + "\n")
        log.info("%s: driver done in %.0f s", label, wall)
        driver_command = shlex.join([sys.executable, str(DRIVER), *argv_driver])
        commands[label] = {"prepare": prepared["command"], "driver": driver_command}
        rows.append(summarise_value(run_out, h2, strategies, n_boot=args.n_boot))
    table = pd.DataFrame(rows)
    table.to_csv(out / "table.csv", index=False)
    title = (f"## Sensitivity to h2_rare ({', '.join(strategies)}; {args.seeds} training seeds, "
             "mean ± 95% t-interval)\n\n")  # fmt: skip
    note = (
        f"\nΔ = mean over seeds of AUC({METHOD}) − AUC({REFERENCE}) on the same test "
        "individuals; interval from resampling test cases and controls (paired bootstrap, "
        f"{args.n_boot} resamples); seeds ahead = seeds where DeLong's difference is > 0. Carrier "
        "rows: test individuals carrying a causal rare variant of their own cluster.\n"
    )
    (out / "table.md").write_text(title + markdown_table(table, strategies) + note)
    plot(table, strategies, out / "h2_rare.png")
    write_provenance(
        out,
        command="python3 " + shlex.join([str(Path(__file__).relative_to(ROOT)), *(argv or [])]),
        parameters={
            "h2_rare": values,
            "strategies": strategies,
            "seeds": list(range(args.seeds)),
            "rounds": args.rounds,
            "config": str(config_path),
            "n_boot": args.n_boot,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        },  # fmt: skip
        seed=int(prepared["simulate_seed"]),
        extra={"commands": commands, "wall_s": timings},
    )
    log.info("wrote %s", ", ".join(str(out / n) for n in ("table.md", "table.csv", "h2_rare.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
