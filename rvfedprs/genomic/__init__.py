"""The genomic PRS task: per-site folders, the two-pathway model, FedCE and its baselines.

- :mod:`~rvfedprs.genomic.data` — loading the pipeline's per-client folders
  (:class:`Federation`), federated PRS moments;
- :mod:`~rvfedprs.genomic.client` — one client's round of local training
  (:func:`fit_client`: FedProx, influence and Bloom filter, SCAFFOLD, Ditto);
- :mod:`~rvfedprs.genomic.task` — :class:`GenomicTask`, the task seam's implementation;
- :mod:`~rvfedprs.genomic.engine` — the run plan of a configuration (:func:`plan`);
- :mod:`~rvfedprs.genomic.distance` — client×client distances of a genomic federation.
"""
