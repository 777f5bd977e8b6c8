"""Oracle for the sparse local-training code: plain dense SGD on the whole model via autograd."""

import torch

from rvfedprs.model import get_parameters
from rvfedprs.training import batch_indices


def dense_sgd(model, data, config, seed, *, reference, correction=None):
    """Dense SGD: BCE + μ/2‖w − reference‖² through autograd, then grad += correction (SCAFFOLD).

    Returns the final parameters (numpy, by name).
    """
    params = dict(model.named_parameters())
    ref = {k: torch.from_numpy(v) for k, v in reference.items()}
    corr = {k: torch.from_numpy(v) for k, v in (correction or {}).items()}
    opt = torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
    )
    for epoch in batch_indices(data.n_samples, config.batch_size, config.epochs, seed):
        for rows in epoch:
            prs, rare, y = data.batch(rows, sparse=False)
            opt.zero_grad()
            logits = model(prs, rare, covariates=data.covariates_tensor(rows))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
            if config.proximal_mu:
                prox = sum(((p - ref[n]) ** 2).sum() for n, p in params.items())
                loss = loss + config.proximal_mu / 2 * prox
            loss.backward()
            if corr:
                with torch.no_grad():
                    for n, p in params.items():
                        p.grad.add_(corr[n])
            opt.step()
    return get_parameters(model)
