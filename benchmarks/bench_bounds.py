"""How close any Python process built on pgenlib can come to plink2: lower bounds, not our tool.

The rows of issue 16 that miss 1.5 × plink2 are runs plink2 finishes in well under a second.
This asks what a Python process must pay there at the very least, with every part that is not
the compiled kernel taken away, and sets that against plink2 side by side (each in its own
process under ``/usr/bin/time``, paired repeats, medians, as ``bench_formats.py``):

* start — ``python`` + ``import numpy, pgenlib`` and nothing else (no pandas, no rvfedprs).
* counts — start, then pgenlib's ``count`` (plink2's genotype counter) on every variant of the
  ``.bed`` / ``.pgen``; no variant table is read or written (only the samples' lines are
  counted; the ``.psam`` has one header line, as plink2 writes it).
  Against ``plink2 --freq``, which also reads the variants and writes a table.
* PRS (``.pgen``) — start, then our product kernels (``rvfedprs/genotypes/kernels.py`` loaded
  by path, without the package and so without pandas) over the variants our matcher used,
  handed over as a numpy file written in the untimed setup: no scoring file, no ``.pvar``, no
  matching, no output table. The sums are checked equal to plink2's at its printed precision.
  Against ``plink2 --score`` on the same weights.

A bound at or above 1.5 × plink2 means no Python tool on these kernels can meet that row.

    python benchmarks/bench_bounds.py --bfile /tmp/demo/genotypes/cohort \
        --out benchmarks/results/bounds_demo.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np  # the worker's only imports besides pgenlib: argparse and the rest in main

KERNELS = Path(__file__).resolve().parents[1] / "rvfedprs" / "genotypes" / "kernels.py"
#: Decoded block on the dense path, cache-sized as ``plink._DOT_BLOCK_BYTES`` (not imported: pandas)
BLOCK_BYTES = 4 << 20


def _lines(path: str) -> int:
    with open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def _open(fmt: str, prefix: str):
    """(pgenlib reader of ``prefix.bed`` or ``.pgen``, its number of samples)."""
    import pgenlib

    n_samples = _lines(f"{prefix}.fam") if fmt == "bed" else _lines(f"{prefix}.psam") - 1
    return pgenlib.PgenReader(f"{prefix}.{fmt}".encode(), raw_sample_ct=n_samples), n_samples


def worker(kind: str, prefix: str, weights: str = "") -> None:
    """One bound process: ``start``, ``counts_bed``, ``counts_pgen`` or ``prs`` (see module)."""
    start = time.perf_counter()
    import pgenlib  # noqa: F401  (numpy is already imported)

    if kind == "start":
        print(f"done {time.perf_counter() - start:.3f} s")
        return
    reader, n_samples = _open("bed" if kind == "counts_bed" else "pgen", prefix)
    n_variants = reader.get_variant_ct()
    if kind.startswith("counts"):
        counts = np.empty((n_variants, 4), dtype=np.uint32)
        count = reader.count
        for i in range(n_variants):
            count(i, counts[i])
        print(f"{counts[:, :3].sum()} calls; done {time.perf_counter() - start:.3f} s")
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernels", KERNELS)
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    data = np.load(weights)
    raw, coef, constant = data["raw"], data["coef"], float(data["constant"])
    sums = np.full(n_samples, constant)
    sparse = kernels.stored_as_lists(reader, raw.tolist())
    kernels.add_sparse_products(reader, raw[sparse], coef[sparse], None, sums)
    dense = np.flatnonzero(~sparse)
    block = max(4, BLOCK_BYTES // (8 * n_samples))
    buffer = np.empty((block, n_samples), dtype=np.float64)
    for first in range(0, len(dense), block):
        rows = dense[first : first + block]
        x = buffer[: len(rows)]
        reader.read_dosages_list(raw[rows].astype(np.uint32), x)
        for row in np.flatnonzero(x.min(axis=1) < 0):  # plink2's mean imputation
            gap = x[row] == kernels.PGENLIB_MISSING
            x[row, gap] = x[row, ~gap].mean()
        sums += x.T @ coef[rows]
    np.save(f"{weights}.sums.npy", sums)
    print(f"{len(raw)} variants; done {time.perf_counter() - start:.3f} s")


def prs_setup(prefix: str, tmp: Path) -> tuple[Path, Path]:
    """Untimed: match a PGS file with our scorer; the weights on ALT dosages + plink2's input."""
    import subprocess

    import pandas as pd
    from bench_score import write_pgs_file

    from rvfedprs.cli import main as cli_main

    bim = Path(tmp / "for_pgs")
    subprocess.run(["plink2", "--pfile", prefix, "--make-just-bim", "--out", str(bim)],
                   check=True, capture_output=True)  # fmt: skip
    scorefile = tmp / "score.txt"
    write_pgs_file(bim, scorefile, 0.5)
    out = tmp / "ours.tsv"
    status = cli_main(["prepare", "score", "--genotypes", f"{prefix}.pgen", "--scorefile",
                       str(scorefile), "--out", str(out)])  # fmt: skip
    if status != 0:
        raise RuntimeError(f"rvfedprs prepare score exited {status}")
    log = pd.read_csv(tmp / "ours.match.tsv", sep="\t", keep_default_na=False)
    used = log[log["status"].isin(["matched", "flipped"])]
    weight = used["weight_used"].to_numpy(dtype=np.float64)
    on_alt = used["counts_alt"].astype(str).eq("True").to_numpy()
    weights = tmp / "weights.npz"
    np.savez(
        weights,
        raw=used["variant_index"].to_numpy(dtype=np.int64),  # one file: row = raw index
        coef=np.where(on_alt, weight, -weight),  # w × (2 − ALT) for a counted REF
        constant=2 * weight[~on_alt].sum(),
    )
    plink2_weights = tmp / "p2.txt"
    pd.DataFrame({"ID": used["variant_id"], "A1": used["counted_allele"], "W": weight}).to_csv(
        plink2_weights, sep="\t", index=False
    )
    return weights, plink2_weights


def paired(cmd: list[str], plink2: list[str], repeats: int) -> dict:
    """Bound and plink2 back to back ``repeats`` times: median walls, median paired ratio."""
    from bench_readers import measure

    ours = []
    theirs = []
    for _ in range(repeats):
        ours.append(measure(cmd))
        theirs.append(measure(plink2) if plink2 else None)
    row = {
        "load_1min": ours[0]["load_1min"],
        "wall_s": float(np.median([r["wall_s"] for r in ours])),
        "wall_s_runs": [r["wall_s"] for r in ours],
        "peak_rss_mib": float(np.median([r["peak_rss_mib"] for r in ours])),
        "repeats": repeats,
        "command": " ".join(cmd),
    }
    if plink2:
        row["plink2_wall_s"] = float(np.median([r["wall_s"] for r in theirs]))
        row["plink2_wall_s_runs"] = [r["wall_s"] for r in theirs]
        ratios = [o["wall_s"] / t["wall_s"] for o, t in zip(ours, theirs, strict=True)]
        row["ratio"] = round(float(np.median(ratios)), 2)
        row["plink2_command"] = " ".join(plink2)
    return row


def to_markdown(rows: list[dict], cohort: str) -> str:
    lines = [
        "| cohort | bound | wall (s) | plink2 | plink2 wall (s) | bound × plink2 | load (1 min) |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "—"
        p2 = f"{r['plink2_wall_s']:.2f}" if "plink2_wall_s" in r else "—"
        lines.append(
            f"| {cohort} | {r['bound']} | {r['wall_s']:.2f} | {r.get('plink2', '—')} | {p2} | "
            f"{ratio} | {r['load_1min']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--worker"]:  # one measured process
        worker(*sys.argv[2:])
        return 0
    import argparse
    import subprocess
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bfile", help="PLINK1 prefix (its .pgen copy is made unless --pfile)")
    parser.add_argument("--pfile", help="a .pgen prefix of the same cohort, used as it is")
    parser.add_argument("--tasks", default="counts,score")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/bounds.json")
    args = parser.parse_args(argv)
    if not (args.bfile or args.pfile):
        parser.error("give --bfile, --pfile or both")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_readers import save_results

    me = [sys.executable, __file__, "--worker"]
    p2 = ["plink2", "--threads", "1"]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        pfile = args.pfile
        if pfile is None:
            subprocess.run([*p2, "--bfile", args.bfile, "--make-pgen", "--out", str(tmp / "c")],
                           check=True, capture_output=True)  # fmt: skip
            pfile = str(tmp / "c")
        reader, n_samples = _open("pgen", pfile)
        cohort = f"{n_samples} × {reader.get_variant_ct()}"
        reader.close()
        rows = [{"bound": "python + numpy + pgenlib imports",
                 **paired([*me, "start", pfile], [], args.repeats)}]  # fmt: skip
        if "counts" in args.tasks:
            inputs = [("pgen", pfile, ["--pfile", pfile])]
            if args.bfile:
                inputs.insert(0, ("bed", args.bfile, ["--bfile", args.bfile]))
            for fmt, prefix, plink2_input in inputs:
                freq = [*p2, *plink2_input, "--freq", "--out", str(tmp / f"freq_{fmt}")]
                row = paired([*me, f"counts_{fmt}", prefix], freq, args.repeats)
                rows.append({"bound": f"{fmt} counts: imports + pgenlib count", "plink2": "--freq",
                             **row})  # fmt: skip
        if "score" in args.tasks:
            weights, plink2_weights = prs_setup(pfile, tmp)
            score = [*p2, "--pfile", pfile, "--score", str(plink2_weights), "1", "2", "3",
                     "header", "cols=+scoresums", "--out", str(tmp / "p2")]  # fmt: skip
            row = {"bound": "pgen PRS: imports + our kernels", "plink2": "--score",
                   **paired([*me, "prs", pfile, str(weights)], score, args.repeats)}  # fmt: skip
            ours = np.load(f"{weights}.sums.npy")
            import pandas as pd

            theirs = pd.read_csv(tmp / "p2.sscore", sep="\t")["SCORE1_SUM"].to_numpy()
            scale = 10.0 ** (np.floor(np.log10(np.maximum(np.abs(theirs), 1e-300))) - 5)
            # a sum on a tie of plink2's 6th digit rounds either way with the order of additions
            row["sums_equal_6g"] = bool((np.abs(ours - theirs) <= 0.5001 * scale).all())
            row["n_used"] = int(len(np.load(weights)["raw"]))
            rows.append(row)
    save_results(args.out, cohort, rows, to_markdown(rows, cohort))
    print(to_markdown(rows, cohort))
    return 0


if __name__ == "__main__":
    sys.exit(main())
