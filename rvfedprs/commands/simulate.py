"""``rvfedprs simulate``: write a simulated federated cohort in the CINECA layout (design §2)."""

from __future__ import annotations

import argparse

from rvfedprs.option_types import SEED

HELP = "simulate a federated cohort, binary or quantitative trait (genotypes, PGS, truth)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs simulate``."""
    from rvfedprs.config import preset_names
    from rvfedprs.simulate.scenarios import scenario_names

    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML file with a 'simulate:' section (merged over --preset or --scenario)",
    )
    parser.add_argument(
        "--preset",
        choices=preset_names(),
        help=(
            "built-in preset (demo: 10 x 1,000 samples; ldl: a quantitative LDL-like trait; "
            "biobank: 10 x 50,000 with 110,000 rare loci, as .pgen)"
        ),
    )
    parser.add_argument(
        "--scenario",
        choices=scenario_names(),
        help="a scenario of the scenario map (rvfedprs/simulate/scenarios.yaml)",
    )
    parser.add_argument("--out", metavar="DIR", required=True, help="output folder")
    parser.add_argument("--seed", type=SEED, help="random seed (overrides simulate.seed)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args: argparse.Namespace) -> int:
    """Validate the configuration and run the simulation."""
    import logging

    from rvfedprs.config import load_config
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.simulate import run_simulation
    from rvfedprs.simulate.scenarios import scenario_section

    if args.config is None and args.preset is None and args.scenario is None:
        raise ConfigError("give --config FILE and/or --preset NAME or --scenario NAME")
    if args.preset is not None and args.scenario is not None:
        raise ConfigError("give --preset or --scenario, not both")
    if args.seed is not None and args.seed < 0:
        raise ConfigError(f"--seed must be a non-negative integer, got {args.seed}")
    overrides: dict = {"simulate": {}}
    if args.no_progress:
        overrides["simulate"]["output"] = {"progress": False}
    logging.getLogger("msprime").setLevel(logging.WARNING)  # its per-population lines are noise
    base = {"simulate": scenario_section(args.scenario)} if args.scenario else None
    config = load_config(args.config, preset=args.preset, base=base, overrides=overrides)
    origin = {"preset": args.preset, "scenario": args.scenario, "config": args.config}
    result = run_simulation(config["simulate"], args.out, random_seed=args.seed, origin=origin)
    summary = result.summary
    clients = summary["clients"]
    if summary.get("phenotype_kind") == "quantitative":
        fit = f"R² {summary['r2']['prs']:.3f} (realised h² {summary['causal']['realised_h2']:.3f})"
    else:
        fit = f"AUC {summary['auc']['prs']:.3f}"
    print(
        f"wrote {args.out}: {summary['n_samples']} samples in {len(clients)} clients, "
        f"{summary['n_variants']} variants, {summary['causal']['n_rare']} rare causal variants "
        f"({summary['causal']['rare_carriers']} carriers), PGS of {summary['gwas']['n_in_score']} "
        f"variants with {fit}"
    )
    return 0
