"""One ancestry analysis, as pgsc_calc runs it, on one site's genotypes: :func:`run_ancestry`.

Reference PCA → projection of the site's samples (OADP) → assignment with probabilities → PRS
normalised on the PCs. The reference panel is public; the target genotypes never leave the site
(nothing here sends anything anywhere).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.ancestry.assign import assign_ancestry
from rvfedprs.ancestry.normalise import normalise_prs
from rvfedprs.ancestry.panel import (
    frequency_filter,
    match_variants,
    read_labels,
    read_matrix,
    thin_variants,
    variant_table,
)
from rvfedprs.ancestry.pca import fit_pca, project
from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.provenance import draw_seed, write_provenance
from rvfedprs.tsv import write_tsv

__all__ = ["read_prs", "run_ancestry"]

log = logging.getLogger(__name__)

_SAMPLE_COLUMNS = ("sample_id", "IID", "#IID", "sample")


def read_prs(path: str | Path) -> pd.DataFrame:
    """Scores per sample from ``rvfedprs prepare score`` (``sample_id, SUM`` or ``<name>_SUM``).

    Returns
    -------
    DataFrame indexed by sample ID, one column per score (``SUM`` or ``<name>``).
    """
    table = pd.read_csv(path, sep="\t", dtype={c: str for c in _SAMPLE_COLUMNS})
    id_col = next((c for c in _SAMPLE_COLUMNS if c in table.columns), None)
    sums = [c for c in table.columns if c == "SUM" or c.endswith("_SUM")]
    if id_col is None or not sums:
        raise InputDataError(
            f"{path}: expected a sample_id column and SUM or <name>_SUM columns "
            f"(rvfedprs prepare score output); columns: {list(table.columns)}"
        )
    scores = table.set_index(id_col)[sums]
    scores.columns = [c if c == "SUM" else c.removesuffix("_SUM") for c in sums]
    return scores.astype(float)


def _prs_for(scores: pd.DataFrame, samples: np.ndarray, path: str | Path) -> pd.DataFrame:
    missing = pd.Index(samples).difference(scores.index)
    if len(missing):
        shown = ", ".join(map(str, missing[:5]))
        raise InputDataError(f"{len(missing)} samples have no score in {path}: {shown}")
    return scores.loc[samples]


def _labels_path(reference: str, labels: str | Path | None) -> Path:
    if labels is not None:
        return Path(labels)
    prefix = reference.removesuffix(".pgen").removesuffix(".bed")
    psam = Path(prefix + ".psam")
    if not psam.is_file():
        raise InputDataError(
            f"no population labels: give --reference-labels (no {psam} beside {reference})"
        )
    return psam


def _plot(pcs: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 5))
    ref = pcs[pcs["source"] == "reference"]
    for name, part in ref.groupby("population"):
        ax.scatter(part["PC1"], part["PC2"], s=6, alpha=0.5, label=str(name))
    tgt = pcs[pcs["source"] == "target"]
    ax.scatter(tgt["PC1"], tgt["PC2"], s=14, marker="x", c="black", linewidths=0.7, label="target")
    ax.set_xlabel("PC1")
    ax.set_ylabel("PC2")
    ax.set_title("Target samples projected onto the reference PCs")
    ax.legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_ancestry(
    reference: str,
    target: Sequence[str],
    out: str | Path,
    *,
    reference_labels: str | Path | None = None,
    label_column: str | None = None,
    reference_prs: str | Path | None = None,
    target_prs: str | Path | None = None,
    n_components: int = 10,
    n_assignment: int | None = None,
    n_normalisation: int = 4,
    maf: float = 0.05,
    max_missing: float = 0.1,
    ld_thin: str = "auto",
    ld_r2: float = 0.05,
    ld_window: int = 1000,
    ld_step: int = 50,
    thin_kb: float = 100.0,
    projection: str = "oadp",
    threshold: float = 0.5,
    batch_size: int = 2000,
    random_seed: int | None = None,
) -> dict:
    """Run the ancestry analysis and write its outputs to ``out``.

    Writes ``pcs.tsv`` (``sample_id, source, population, PC1..PCK``), ``ancestry.tsv``
    (``sample_id, population, probability, P_<pop>...`` for the targets), ``prs_normalised.tsv``
    (``sample_id, source, score, raw, Z_norm1, Z_norm2``; when scores are given),
    ``variants.tsv`` (each reference variant's status), ``pca.png`` and ``provenance.json``.

    Returns
    -------
    dict
        Counts and settings (also in the provenance record).
    """
    parameters = {k: v for k, v in locals().items() if k != "out"}
    seed = draw_seed(random_seed)
    out = Path(out)
    if (reference_prs is None) != (target_prs is None):
        raise InputDataError("give both --reference-prs and --target-prs, or neither")
    if not 0 <= maf < 0.5:
        raise InputDataError(f"--maf {maf} must be in [0, 0.5)")
    n_assignment = n_components if n_assignment is None else n_assignment
    if not 1 <= n_assignment <= n_components or not 0 <= n_normalisation <= n_components:
        raise InputDataError(
            f"PCs for assignment ({n_assignment}) and normalisation ({n_normalisation}) must be "
            f"at most --n-pcs ({n_components})"
        )
    ref_source = open_genotypes(reference)
    tgt_source = open_genotypes(list(target))
    labels_file = _labels_path(str(reference), reference_labels)
    labels = read_labels(labels_file, ref_source.samples, column=label_column)

    ref_variants = variant_table(ref_source)
    pairs, status = match_variants(ref_variants, variant_table(tgt_source))
    if pairs.empty:
        raise InputDataError(
            f"no variant of the reference {reference} is in the target genotypes (matched on "
            f"chromosome, position and alleles); statuses: {status.value_counts().to_dict()}"
        )
    ref_rows = pairs["ref_row"].to_numpy()
    alt_freq, _, passes = frequency_filter(ref_source, ref_rows, maf=maf, max_missing=max_missing)
    _, tgt_missing, _ = frequency_filter(
        tgt_source, np.sort(pairs["target_row"].to_numpy()), maf=0.0, max_missing=1.0
    )
    order = np.argsort(pairs["target_row"].to_numpy(), kind="stable")
    tgt_missing_by_pair = np.empty(len(pairs))
    tgt_missing_by_pair[order] = tgt_missing
    status[ref_rows[~passes]] = "maf_or_missing_reference"
    target_ok = tgt_missing_by_pair <= max_missing
    status[ref_rows[passes & ~target_ok]] = "missing_target"
    passes &= target_ok
    pairs, alt_freq = pairs[passes].reset_index(drop=True), alt_freq[passes]
    keep, thinning = thin_variants(
        ref_source,
        ref_variants.iloc[pairs["ref_row"]].reset_index(drop=True),
        method=ld_thin,
        r2=ld_r2,
        window=ld_window,
        step=ld_step,
        distance_kb=thin_kb,
    )
    status[pairs["ref_row"].to_numpy()[~keep]] = "ld_thinned"
    pairs, alt_freq = pairs[keep].reset_index(drop=True), alt_freq[keep]
    if len(pairs) <= n_components:
        raise InputDataError(
            f"{len(pairs)} variants left for the PCA (need more than --n-pcs {n_components}); "
            f"statuses: {status.value_counts().to_dict()}"
        )
    log.info("PCA on %d variants of %d reference samples (%s)", len(pairs), len(labels), thinning)

    pca = fit_pca(
        read_matrix(ref_source, pairs["ref_row"].to_numpy()),
        alt_freq,
        n_components=n_components,
        random_seed=seed,
    )
    swap = pairs["swap"].to_numpy()
    tgt_samples = tgt_source.samples
    tgt_pcs = np.empty((len(tgt_samples), n_components))
    for start in range(0, len(tgt_samples), batch_size):
        batch = tgt_samples[start : start + batch_size]
        x = read_matrix(tgt_source, pairs["target_row"].to_numpy(), samples=batch)
        x[:, swap] = 2.0 - x[:, swap]
        tgt_pcs[start : start + len(batch)] = project(pca, x, method=projection)

    names = [f"PC{i + 1}" for i in range(n_components)]
    ref_table = pd.DataFrame(pca.reference_scores, columns=names)
    ref_table.insert(0, "population", labels.to_numpy())
    ref_table.insert(0, "source", "reference")
    ref_table.insert(0, "sample_id", ref_source.samples)
    assigned = assign_ancestry(
        pca.reference_scores[:, :n_assignment],
        labels.to_numpy(),
        tgt_pcs[:, :n_assignment],
        threshold=threshold,
        random_seed=seed,
    )
    tgt_table = pd.DataFrame(tgt_pcs, columns=names)
    tgt_table.insert(0, "population", assigned["population"].to_numpy())
    tgt_table.insert(0, "source", "target")
    tgt_table.insert(0, "sample_id", tgt_samples)
    pcs = pd.concat([ref_table, tgt_table], ignore_index=True)
    assigned.insert(0, "sample_id", tgt_samples)

    out.mkdir(parents=True, exist_ok=True)
    written = {"pcs.tsv": pcs, "ancestry.tsv": assigned}
    if reference_prs is not None:
        ref_scores = _prs_for(read_prs(reference_prs), ref_source.samples, reference_prs)
        tgt_scores = _prs_for(read_prs(target_prs), tgt_samples, target_prs)
        if list(ref_scores.columns) != list(tgt_scores.columns):
            raise InputDataError(
                f"the scores differ: {list(ref_scores.columns)} in {reference_prs}, "
                f"{list(tgt_scores.columns)} in {target_prs}"
            )
        ref_norm = pca.reference_scores[:, :n_normalisation]
        rows = []
        for name in ref_scores.columns:
            for source, ids, pc, raw in (
                ("reference", ref_source.samples, ref_norm, ref_scores[name].to_numpy()),
                ("target", tgt_samples, tgt_pcs[:, :n_normalisation], tgt_scores[name].to_numpy()),
            ):
                z1, z2 = normalise_prs(ref_norm, ref_scores[name].to_numpy(), pc, raw)
                rows.append(
                    pd.DataFrame(
                        {
                            "sample_id": ids,
                            "source": source,
                            "score": name,
                            "raw": raw,
                            "Z_norm1": z1,
                            "Z_norm2": z2,
                        }
                    )  # fmt: skip
                )
        written["prs_normalised.tsv"] = pd.concat(rows, ignore_index=True)
    variants = ref_variants.assign(status=status.to_numpy())
    written["variants.tsv"] = variants
    for name, table in written.items():
        write_tsv(table, out / name, float_format="%.8g")
    _plot(pcs, out / "pca.png")
    summary = {
        "n_reference": int(len(labels)),
        "n_target": int(len(tgt_samples)),
        "n_variants_pca": int(len(pairs)),
        "variant_status": status.value_counts().to_dict(),
        "thinning": thinning,
        "projection": projection,
        "assigned": assigned["population"].value_counts().to_dict(),
    }
    inputs = [labels_file, *(p for p in (reference_prs, target_prs) if p is not None)]
    write_provenance(
        out, command="rvfedprs ancestry", parameters=parameters, seed=seed, inputs=inputs,
        extra=summary,
    )  # fmt: skip
    return summary
