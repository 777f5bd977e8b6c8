"""The network's architecture without torch (:mod:`rvfedprs.architecture`)."""

from __future__ import annotations

import numpy as np
import pytest

from rvfedprs.architecture import linear_floor, linear_parameters, parameter_shapes
from rvfedprs.genomic.task import GenomicTask
from rvfedprs.model import get_parameters, model_from_config

CONFIGS = [
    {},
    {"n_covariates": 3, "common_hidden": [4, 3], "rare_hidden": [8, 6, 5], "dropout": 0.1},
    {"rare_input": "top_k", "rare_projection": {"top_k": [0, 7, 3]}, "rare_hidden": [6]},
]


@pytest.mark.parametrize("config", CONFIGS)
def test_parameter_shapes_are_the_networks_names_shapes_and_order(config):
    network = get_parameters(model_from_config(20, config))
    assert list(parameter_shapes(20, config).items()) == [(k, v.shape) for k, v in network.items()]


def test_a_burden_input_reads_the_maps_features():
    """F = the burden map's regions (a 20 × 4 map as a run's rare_projection carries it)."""
    config = {"rare_input": "burden", "rare_projection": {"burden": {
        "shape": [20, 4], "rows": list(range(20)), "cols": [j % 4 for j in range(20)],
        "weights": [1.0] * 20}}}  # fmt: skip
    network = get_parameters(model_from_config(20, config))
    assert parameter_shapes(20, config)["rare.input.weight"] == network["rare.input.weight"].shape
    assert network["rare.input.weight"].shape[1] == 4


def test_the_template_holds_the_floor_as_the_drawn_network_does():
    """FedAssoc serves the floor from the task's zero template: the same linear model."""
    settings = {"n_rare": 12, "model": {"n_covariates": 2}}
    template = GenomicTask().parameter_template(settings)
    drawn = GenomicTask().initial_parameters(settings, 5)
    assert {k: v.shape for k, v in template.items()} == {k: v.shape for k, v in drawn.items()}
    assert all(v.dtype == np.float32 for v in template.values())
    coef = np.array([0.3, -1.2, 0.5, 2.0], np.float32)
    for start in (template, drawn):
        floor = linear_parameters(start, intercept=float(coef[0]), common_coef=coef[1:])
        np.testing.assert_array_equal(linear_floor(floor), coef)
