"""``rvfedprs prepare run``: the Snakemake command it builds runs (a real dry run)."""

from __future__ import annotations

import yaml

from rvfedprs.cli import main


def test_prepare_run_dry_run_with_a_config(tmp_path, capsys):
    # the targets once came after --configfile, which took them for config files
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"pipeline": {"random_seed": 7}}))
    code = main(["prepare", "run", "--config", str(config), "--directory", str(tmp_path),
                 "--dry-run"])  # fmt: skip
    assert code == 0


def test_prepare_run_command_lists_targets_before_options():
    from rvfedprs.commands.prepare_run import PREPARE_TARGETS, snakemake_command

    args = type("Args", (), {"config": "c.yaml", "cores": 2, "directory": None, "dry_run": True})
    command = snakemake_command(args)
    configfile = command.index("--configfile")
    assert all(command.index(t) < configfile for t in PREPARE_TARGETS)
