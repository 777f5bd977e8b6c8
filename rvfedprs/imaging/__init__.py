"""Imaging federations (design §9).

MedMNIST loading, Dirichlet partition, the Riyadi et al. CNN,
classification metrics, the imaging client and a run loop reusing the in-process pattern.
"""
