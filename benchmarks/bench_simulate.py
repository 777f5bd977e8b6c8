"""Time and memory of the simulator: presets and the scenarios of the scenario map.

    python benchmarks/bench_simulate.py --preset demo
    python benchmarks/bench_simulate.py --scenario all --repeat 3
    python benchmarks/bench_simulate.py --clients 10 --samples 1000 --model balding_nichols

Prints one JSON line per cohort: wall and CPU seconds (this process; CPU is the figure to compare
on a shared machine), the stages' wall times (from provenance), the peak RSS so far, and what was
simulated (variants, rare variants, causal rare variants and their carriers, PGS size and AUC).
"""

import argparse
import json
import resource
import tempfile
import time

from rvfedprs.config import load_config
from rvfedprs.simulate import run_simulation, scenario_names, simulate_scenario


def _line(label: str, seed: int, result, wall: float, cpu: float) -> str:
    s = result.summary
    return json.dumps({
        "cohort": label, "seed": seed, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "samples": s["n_samples"], "variants": s["n_variants"],
        "rare_maf_below_0_01": s["n_rare_variants_maf_below_0_01"],
        "causal_rare": s["causal"]["n_rare"], "rare_carriers": s["causal"]["rare_carriers"],
        "realised_h2_rare": round(s["causal"]["realised_h2_rare"], 4),
        "pgs_variants": s["gwas"]["n_in_score"], "pgs_auc": round(s["auc"]["prs"], 3),
        "stages": s["timings"],
    })  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", help="a built-in preset (demo, paper)")
    parser.add_argument("--scenario", help="a scenario name, or 'all'")
    parser.add_argument("--repeat", type=int, default=1, help="cohorts per scenario (seeds 1..)")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--model", default="msprime", choices=["msprime", "balding_nichols"])
    parser.add_argument("--no-vcf", action="store_true")
    args = parser.parse_args()
    output = {"progress": False, **({"write_vcf": False} if args.no_vcf else {})}
    if args.scenario:
        names = scenario_names() if args.scenario == "all" else [args.scenario]
        runs = [(name, seed) for name in names for seed in range(1, args.repeat + 1)]
    else:
        runs = [(args.preset or "custom", seed) for seed in range(1, args.repeat + 1)]
    for label, seed in runs:
        with tempfile.TemporaryDirectory() as out:
            wall, cpu = time.perf_counter(), time.process_time()
            if args.scenario:
                result = simulate_scenario(label, out=out, random_seed=seed, output=output)
            else:
                section = {} if args.preset else {
                    "n_clients": args.clients, "samples_per_client": args.samples,
                    "model": args.model,
                }  # fmt: skip
                config = load_config(
                    preset=args.preset, overrides={"simulate": {**section, "output": output}}
                )
                result = run_simulation(config["simulate"], out, random_seed=seed)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(_line(label, seed, result, wall, cpu), flush=True)


if __name__ == "__main__":
    main()
