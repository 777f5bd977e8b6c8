"""Imaging federations (design §9).

MedMNIST loading, Dirichlet partition, the Riyadi et al. CNN,
classification metrics, the imaging client and its task, and the run plan of one strategy
(:mod:`~rvfedprs.imaging.plan`), run in-process or on Flower by :func:`rvfedprs.plan.run`.
"""
