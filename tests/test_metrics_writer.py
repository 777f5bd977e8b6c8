"""One function writes every run's ``metrics.json`` (issue 38): a run trained from arrays."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _metrics_writers import WRITER, metrics_writers  # noqa: E402
from test_arrays_api import _arrays  # noqa: E402

from rvfedprs import federation_from_arrays, load_config, train  # noqa: E402


def test_a_training_run_writes_its_metrics_through_the_one_writer(tmp_path):
    dosages, trait, sites, age = _arrays()
    data = federation_from_arrays(dosages, (trait > 4).astype(int), sites, covariates=age)
    config = load_config(None, overrides={"train": {"strategy": "fedavg", "rounds": 1,
                                                    "progress": False}})  # fmt: skip
    with metrics_writers() as writers:
        train(config, tmp_path / "run", data=data)
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert writers == [WRITER]


def test_a_write_elsewhere_is_seen(tmp_path):
    with metrics_writers() as writers:
        (tmp_path / "metrics.json").write_text("{}")  # from a test: outside the project
        (tmp_path / "metrics.json").read_text()  # reading is not writing
    assert writers == ["outside the project"]
