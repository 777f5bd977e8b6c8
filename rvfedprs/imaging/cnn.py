"""The small CNN of Riyadi et al. Tables 6–7.

conv1 (C→16, 3×3, pad 1) → ReLU → conv2 (16→32, 3×3, pad 1) → ReLU → MaxPool 2×2 → Dropout
0.25 → flatten → fc1 (→64) → ReLU → fc2 (→1 for binary, →n_classes otherwise).

**Flatten size: 6272, not the tables' 1568 (decision).**  Tables 6–7 of Riyadi et al. are
internally inconsistent for the 28×28 MedMNIST images the paper uses (§4: "small-scale MedMNIST
images (28×28)"):

- the layer list has *one* ``MaxPool2d(2, 2)`` and gives its output as ``32 × (H/2) × (W/2)``,
  and the text of §2.7 says "two convolutional layers …, *one* max pooling layer";
- but the flatten row says 1568 = 32·7·7 and fc1 has 100,416 = 1568·64 + 64 parameters, which is
  ``32 × (H/4) × (W/4)``: a second 2×2 pooling (e.g. one ``pool`` module applied after each
  conv) or 14×14 inputs, neither of which the paper states.

Every other parameter count in the tables (conv1 160 / 448, conv2 4,640, fc2 65 / 455) follows
from the layer list, and the only thing 1568 is consistent with is fc1's own count.  The paper
therefore does not *clearly* imply a second pooling, so the stated architecture (one pool, two
statements) is followed and fc1's input is computed from the image size: 32·(H/2)·(W/2) = 6272
on 28×28 images, fc1 = 6272·64 + 64 = 401,472 parameters (406,337 in all for the binary net).
Results reproduced with this net are labelled accordingly
(``simulations/imaging_medmnist/results/README.md``).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SmallCNN", "output_units"]


def output_units(n_classes: int) -> int:
    """1 logit for a binary task (BCE-with-logits), ``n_classes`` logits otherwise."""
    return 1 if n_classes == 2 else n_classes


class SmallCNN(nn.Module):
    """Riyadi et al. CNN; parameter names ``conv1.*``, ``conv2.*``, ``fc1.*``, ``fc2.*``.

    Parameters
    ----------
    in_channels : int
        1 (grey) or 3 (RGB).
    n_classes : int
        ≥ 2.
    image_size : int
        H = W, even.
    random_seed : int, optional
        Seeds the weight initialisation.
    """

    def __init__(
        self,
        in_channels: int,
        n_classes: int,
        *,
        image_size: int = 28,
        random_seed: int | None = None,
    ) -> None:
        super().__init__()
        if n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {n_classes}")
        generator_state = None
        if random_seed is not None:
            generator_state = torch.random.get_rng_state()
            torch.manual_seed(int(random_seed))
        self.conv1 = nn.Conv2d(in_channels, 16, kernel_size=3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, stride=1, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * (image_size // 2) ** 2, 64)
        self.fc2 = nn.Linear(64, output_units(n_classes))
        if generator_state is not None:
            torch.random.set_rng_state(generator_state)
        self.n_classes = n_classes

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate activations (fc1 after ReLU), shape (n, 64)."""
        h = torch.relu(self.conv1(x))
        h = torch.relu(self.conv2(h))
        h = self.dropout(self.pool(h))
        return torch.relu(self.fc1(torch.flatten(h, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, shape (n,) for binary tasks, (n, n_classes) otherwise."""
        out = self.fc2(self.embed(x))
        return out[:, 0] if out.shape[1] == 1 else out
