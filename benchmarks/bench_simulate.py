"""Time and memory of the simulator and its writers.

    python benchmarks/bench_simulate.py [--clients 10] [--samples 1000] [--model msprime]

Prints wall time per stage (from provenance) and the peak RSS of this process; run under
``/usr/bin/time -v`` for the whole-process figure.
"""

import argparse
import json
import resource
import tempfile
import time

from rvfedprs.simulate import simulate_cohort


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--discovery", type=int, default=5000)
    parser.add_argument("--region", type=int, default=5_000_000)
    parser.add_argument("--model", default="msprime", choices=["msprime", "balding_nichols"])
    parser.add_argument("--no-vcf", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        result = simulate_cohort(
            args.clients, samples_per_client=args.samples, out=out, random_seed=1,
            model=args.model, discovery_samples=args.discovery, region_length=args.region,
            output={"progress": False, "write_vcf": not args.no_vcf},
        )  # fmt: skip
        wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "model": args.model, "clients": args.clients, "samples_per_client": args.samples,
        "n_variants": result.summary["n_variants"], "wall_s": round(wall, 1),
        "peak_rss_mib": round(peak_mib), "stages": result.summary["timings"],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
