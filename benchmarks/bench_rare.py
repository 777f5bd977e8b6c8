"""Rare-variant dosages (the rare pathway's sparse input): carrier reads against dense chunks.

For a ``.bed`` prefix or a ``.pgen``, the rare-variant table is computed untimed (allele counts,
frequencies, ``split_common_rare`` at ``--rare-maf-max``). Then ``rare_dosages`` runs in its
own process under ``/usr/bin/time`` (wall time, peak RSS), two ways, back to back:

* carriers — what the library does: ``GenotypeSource.iter_carriers`` as the reader implements
  it (a hard-call ``.pgen``'s carrier lists through pgenlib's ``read_sparse8``, int8 codes for
  the other variants and for a ``.bed``);
* dense — the base class's ``iter_carriers`` on the same reader: float32 chunks of every rare
  variant from ``iter_selected``, then their non-zero cells (what ``rare_dosages`` did before).

Both matrices must be bit-identical (checked by a digest of the CSR arrays). ``--samples N``
reads a random subset of N samples, as a client of a pooled file does. Timed after imports.

    python benchmarks/bench_rare.py --genotypes /tmp/site/pooled.pgen --repeats 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_readers import measure  # noqa: E402


def worker(kind: str, path: str, rare_tsv: str, samples_file: str) -> None:
    """One ``rare_dosages`` call (``kind``: carriers or dense); prints nnz, digest and pass."""
    import pandas as pd

    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.chunk import GenotypeSource
    from rvfedprs.genotypes.rare import rare_dosages

    rare = pd.read_csv(rare_tsv, sep="\t", keep_default_na=False)
    samples = Path(samples_file).read_text().split() if samples_file != "-" else None
    source = open_genotypes(path)
    if kind == "dense":
        source.iter_carriers = types.MethodType(GenotypeSource.iter_carriers, source)
    start = time.perf_counter()
    matrix = rare_dosages(source, rare, samples=samples)
    seconds = time.perf_counter() - start
    digest = hashlib.sha256()
    for part in (matrix.indptr, matrix.indices, matrix.data):
        digest.update(np.ascontiguousarray(part).tobytes())
    print(f"nnz {matrix.nnz}; digest {digest.hexdigest()[:16]}; pass {seconds:.3f} s")


def rare_table(path: str, rare_maf_max: float, out: Path) -> int:
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.frequencies import (
        allele_counts,
        allele_frequencies,
        split_common_rare,
    )

    freqs = allele_frequencies(allele_counts(open_genotypes(path)))
    table = split_common_rare(freqs, rare_maf_max=rare_maf_max)
    rare = table[table["class"] == "rare"]
    rare[["variant_key", "ref", "alt", "minor_allele", "maf"]].to_csv(out, sep="\t", index=False)
    return len(rare)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--genotypes", help="a .bed prefix or a .pgen")
    parser.add_argument("--rare-maf-max", type=float, default=0.01)
    parser.add_argument("--samples", type=int, default=0, help="a random subset (0: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/rare.json")
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    from rvfedprs.genotypes import open_genotypes

    source = open_genotypes(args.genotypes)
    rows = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        n_rare = rare_table(args.genotypes, args.rare_maf_max, tmp / "rare.tsv")
        samples_file = "-"
        n_samples = len(source.samples)
        if args.samples:
            chosen = np.random.default_rng(1).permutation(source.samples)[: args.samples]
            (tmp / "samples.txt").write_text("\n".join(chosen) + "\n")
            samples_file, n_samples = str(tmp / "samples.txt"), len(chosen)
        runs: dict[str, list[dict]] = {"carriers": [], "dense": []}
        for _ in range(args.repeats):
            for kind in runs:
                cmd = [sys.executable, __file__, "--worker", kind, args.genotypes,
                       str(tmp / "rare.tsv"), samples_file]  # fmt: skip
                result = measure(cmd)
                out = result.pop("stdout")
                result["pass_s"] = float(out.split("pass ")[1].split(" s")[0])
                result["digest"] = out.split("digest ")[1].split(";")[0]
                result["nnz"] = int(out.split("nnz ")[1].split(";")[0])
                runs[kind].append(result)
    digests = {r["digest"] for kind in runs for r in runs[kind]}
    for kind, results in runs.items():
        rows.append({
            "genotypes": args.genotypes, "n_samples": n_samples, "n_rare": n_rare,
            "reader": kind, "repeats": len(results), "nnz": results[0]["nnz"],
            "wall_s": float(np.median([r["wall_s"] for r in results])),
            "pass_s": float(np.median([r["pass_s"] for r in results])),
            "peak_rss_mib": float(np.median([r["peak_rss_mib"] for r in results])),
            "load_1min": results[0]["load_1min"], "identical": len(digests) == 1,
        })  # fmt: skip
    ratio = rows[1]["pass_s"] / rows[0]["pass_s"]
    print(f"{args.genotypes}: {n_samples} samples × {n_rare} rare variants, nnz {rows[0]['nnz']}")
    for r in rows:
        print(f"  {r['reader']:8s} pass {r['pass_s']:8.2f} s  wall {r['wall_s']:8.2f} s  "
              f"peak {r['peak_rss_mib']:7.0f} MiB")  # fmt: skip
    print(f"  dense / carriers: {ratio:.1f}x; matrices identical: {rows[0]['identical']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.is_file() else []
    out.write_text(json.dumps(previous + rows, indent=1))
    return 0 if rows[0]["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
