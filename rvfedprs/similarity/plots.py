"""A client×client matrix as a table and a heat map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["write_matrix"]


def write_matrix(
    out: Path, name: str, matrix: np.ndarray, ids: list[str], title: str
) -> tuple[Path, Path]:
    """``out/distance_<name>.tsv`` (ids as header and first column) and a heat map PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tsv = out / f"distance_{name}.tsv"
    pd.DataFrame(matrix, index=ids, columns=ids).rename_axis("client").to_csv(
        tsv, sep="\t", float_format="%.6g"
    )
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(ids), 1.0 + 0.6 * len(ids)))
    im = ax.imshow(matrix, cmap="viridis")
    ax.set_xticks(range(len(ids)), ids, rotation=90)
    ax.set_yticks(range(len(ids)), ids)
    if len(ids) <= 12:
        for i in range(len(ids)):
            for j in range(len(ids)):
                ax.text(
                    j, i, f"{matrix[i, j]:.2g}", ha="center", va="center", color="w", fontsize=7
                )
    fig.colorbar(im, ax=ax, shrink=0.8)
    ax.set_title(title)
    fig.tight_layout()
    png = out / f"distance_{name}.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return tsv, png
