"""MedMNIST ``.npz`` reader (``{train,val,test}_{images,labels}``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rvfedprs.exceptions import InputDataError

__all__ = ["ImageDataset", "MedMNIST", "load_medmnist", "SPLITS"]

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class ImageDataset:
    """Images and labels of one split.

    Attributes
    ----------
    images : ndarray of float32, shape (n, C, H, W)
        Pixel intensities scaled to [0, 1].
    labels : ndarray of int64, shape (n,)
    """

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: np.ndarray) -> ImageDataset:
        """The samples at ``index``."""
        return ImageDataset(self.images[index], self.labels[index])


@dataclass(frozen=True)
class MedMNIST:
    """A MedMNIST dataset: the three splits and the number of classes."""

    path: Path
    splits: dict[str, ImageDataset]
    n_classes: int

    def pooled(self) -> ImageDataset:
        """All splits concatenated (the whole dataset D of Riyadi et al. Algorithm 1)."""
        return ImageDataset(
            np.concatenate([self.splits[s].images for s in SPLITS]),
            np.concatenate([self.splits[s].labels for s in SPLITS]),
        )


def _images(path: Path, key: str, raw: np.ndarray) -> np.ndarray:
    if raw.ndim == 3:
        raw = raw[:, None, :, :]
    elif raw.ndim == 4 and raw.shape[-1] in (1, 3):
        raw = np.transpose(raw, (0, 3, 1, 2))
    else:
        raise InputDataError(
            f"{path}: key {key!r} has shape {raw.shape}; expected (n, H, W) or (n, H, W, C) "
            "with C in {1, 3}"
        )
    images = raw.astype(np.float32)
    if raw.dtype == np.uint8 or images.max(initial=0.0) > 1.0:
        images /= 255.0
    return images


def _labels(path: Path, key: str, raw: np.ndarray, n: int) -> np.ndarray:
    if raw.ndim == 2 and raw.shape[1] == 1:
        raw = raw[:, 0]
    if raw.ndim != 1 or raw.shape[0] != n:
        raise InputDataError(
            f"{path}: key {key!r} has shape {raw.shape}; expected ({n},) or ({n}, 1) "
            "(one integer class per image; multi-label MedMNIST sets are not supported)"
        )
    if not np.issubdtype(raw.dtype, np.integer) and not np.all(raw == np.round(raw)):
        raise InputDataError(f"{path}: key {key!r} holds non-integer labels")
    labels = raw.astype(np.int64)
    if labels.min(initial=0) < 0:
        raise InputDataError(f"{path}: key {key!r} holds negative labels")
    return labels


def load_medmnist(path: str | Path) -> MedMNIST:
    """Read a MedMNIST ``.npz`` file.

    Parameters
    ----------
    path : str or Path
        A file with keys ``train_images``, ``train_labels``, ``val_images``, ``val_labels``,
        ``test_images``, ``test_labels``; images (n, H, W) or (n, H, W, C), labels (n,) or (n, 1).

    Returns
    -------
    MedMNIST
        Images as float32 (n, C, H, W) in [0, 1]; ``n_classes`` = max label + 1.

    Raises
    ------
    InputDataError
        A missing file or key, or a key of the wrong shape (the message names both).
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"MedMNIST file not found: {path}")
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises several types for a bad archive
        raise InputDataError(f"{path} is not a readable .npz file: {exc}") from None
    with archive:
        required = [f"{s}_{kind}" for s in SPLITS for kind in ("images", "labels")]
        missing = [k for k in required if k not in archive.files]
        if missing:
            raise InputDataError(f"{path}: missing key(s) {missing}; found {sorted(archive.files)}")
        splits = {}
        shapes = set()
        for s in SPLITS:
            images = _images(path, f"{s}_images", archive[f"{s}_images"])
            labels = _labels(path, f"{s}_labels", archive[f"{s}_labels"], len(images))
            shapes.add(images.shape[1:])
            splits[s] = ImageDataset(images, labels)
    if len(shapes) != 1:
        raise InputDataError(f"{path}: splits have different image shapes {sorted(shapes)}")
    n_classes = int(max(d.labels.max(initial=0) for d in splits.values())) + 1
    return MedMNIST(path=path, splits=splits, n_classes=max(n_classes, 2))
