"""Imaging federations (SPEC §9).

MedMNIST loading, Dirichlet partition, the ``002_*`` CNN,
classification metrics, the imaging client and a run loop reusing the in-process pattern.
"""
