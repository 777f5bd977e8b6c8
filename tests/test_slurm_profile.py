"""The SLURM profile (profiles/slurm) and the job sizes every rule declares (section resources).

No SLURM cluster here: the workflow is parsed with Snakemake's API to read each rule's declared
resources, and a dry run through the profile (the maintained executor plugin must be installed
for Snakemake to accept ``executor: slurm``) prints each planned job's resources as sbatch
would get them. ``snakemake --lint`` staying clean is tests/test_snakemake.py's.
"""

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "slurm"

# Parse the workflow (every optional rule switched on) and print each rule's declared resources.
PARSE = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (
    ConfigSettings, OutputSettings, ResourceSettings, StorageSettings, WorkflowSettings,
)
config = {"pipeline": {"clients_from": {"psam": "x.psam"}}, "ancestry": {"reference": "ref"}}
with SnakemakeApi(OutputSettings()) as api:
    workflow = api.workflow(
        resource_settings=ResourceSettings(),
        config_settings=ConfigSettings(config=config),
        storage_settings=StorageSettings(),
        workflow_settings=WorkflowSettings(),
        snakefile=Path(sys.argv[1]),
        workdir=Path(sys.argv[2]),
    )._workflow
    print(json.dumps({
        rule.name: {
            "resources": sorted(rule.resources),
            "local": rule.name in workflow._localrules,
            "norun": rule.norun,
        }
        for rule in workflow.rules
    }))
"""


def _schema_rule_names() -> set[str]:
    schema = json.loads(
        (resources.files("rvfedprs") / "schemas" / "resources.schema.json").read_text()
    )
    return set(schema["properties"]["rules"]["propertyNames"]["enum"])


def _dry_run(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile")]
    return subprocess.run(
        [*command, "--profile", str(PROFILE), "--dry-run", "--directory", str(workdir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def _job_resources(text: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, resources) of every job a dry run lists."""
    jobs, rule = [], None
    for line in text.splitlines():
        header = re.match(r"(?:rule|checkpoint|localrule) (\w+):$", line.strip())
        if header:
            rule = header.group(1)
        elif line.strip().startswith("resources:") and rule is not None:
            pairs = line.strip()[len("resources:") :].split(", ")
            jobs.append((rule, dict(pair.strip().split("=", 1) for pair in pairs)))
            rule = None
    return jobs


def test_every_rule_that_runs_a_job_declares_memory_and_wall_time(tmp_path):
    parsed = subprocess.run(
        [sys.executable, "-c", PARSE, str(ROOT / "Snakefile"), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert parsed.returncode == 0, parsed.stderr
    rules = json.loads(parsed.stdout.strip().splitlines()[-1])
    # the per-site rules, and the optional ones, are among those parsed
    for name in ("sample_qc", "client_counts", "client_features", "site_inputs", "ancestry"):
        assert name in rules
    sized = {
        name for name, rule in rules.items() if {"mem_mb", "runtime"} <= set(rule["resources"])
    }
    unsized = {name: rule for name, rule in rules.items() if name not in sized}
    # a rule without sizes runs on the submitting host: a config writer (localrules) or `all`
    assert {name for name, rule in unsized.items() if not (rule["local"] or rule["norun"])} == set()
    assert {name for name, rule in rules.items() if rule["local"]} == {
        "simulate_config",
        "train_config",
        "paper_evaluation_config",
        "study_config",
    }
    # the resources section can size exactly the rules that run a job
    assert sized == _schema_rule_names()


def test_slurm_profile_dry_run_sizes_every_job_from_the_config(tmp_path):
    sizes = {"mem_mb": 3000, "runtime": 90, "rules": {"train_strategy": {"runtime": 480}}}
    (tmp_path / "sizes.yaml").write_text(yaml.safe_dump({"resources": sizes}))
    result = _dry_run(
        tmp_path,
        "--configfile",
        str(tmp_path / "sizes.yaml"),
        env={"SBATCH_ACCOUNT": "rvf_account", "SBATCH_PARTITION": "rvf_partition"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = result.stdout + result.stderr
    assert f"Using profile {PROFILE}" in text
    jobs = _job_resources(text)
    submitted = [
        (rule, res) for rule, res in jobs if rule not in ("all", "simulate_config", "train_config")
    ]
    assert {rule for rule, _ in submitted} >= {
        "simulate_cohort",
        "validate_inputs",
        "train_strategy",
    }
    for rule, res in submitted:
        assert res["slurm_account"] == "rvf_account" and res["slurm_partition"] == "rvf_partition"
        assert res["cpus_per_task"] == "1"
        assert res["mem_mb"] == "3000", rule
        assert res["runtime"] == ("480" if rule == "train_strategy" else "90"), rule


def test_slurm_profile_dry_run_without_account_or_partition_leaves_them_to_slurm(tmp_path):
    # the consortium form: one job per site for its inputs (site_inputs, after the checkpoint)
    env = {"SBATCH_ACCOUNT": "", "SBATCH_PARTITION": ""}
    result = _dry_run(tmp_path, "--configfile", str(ROOT / "config" / "consortium.yaml"), env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = dict(_job_resources(result.stdout + result.stderr))
    assert {"site_list", "simulate_cohort"} <= set(jobs)
    # empty: the plugin guesses the account and SLURM takes its default partition
    assert jobs["site_list"]["slurm_account"] == "" and jobs["site_list"]["slurm_partition"] == ""
    assert jobs["site_list"]["mem_mb"] == "4000" and jobs["site_list"]["runtime"] == "120"


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"rules": {"client_feature": {"mem_mb": 8000}}}, r"'client_feature' is not allowed"),
        (
            {"rules": {"sample_qc": {"mem": 8000}}},
            r"unknown key\(s\) \['mem'\] in 'resources.rules",
        ),
        ({"runtime": 0}, r"'resources.runtime': 0 is less than the minimum of 1"),
    ],
)
def test_bad_resources_setting_is_named(sizes, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({"resources": sizes})
