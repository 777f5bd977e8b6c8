import json

import pytest
import yaml

from rvfedprs import config as cfg
from rvfedprs.exceptions import ConfigError


def test_every_section_schema_is_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    for name in cfg.section_names():
        text = (cfg._schema_dir() / f"{name}.schema.json").read_text()
        Draft202012Validator.check_schema(json.loads(text))


def test_defaults_are_filled_for_absent_sections():
    full = cfg.validate_config({})
    assert set(full) == set(cfg.section_names())


def test_unknown_top_level_key_is_named_with_allowed_keys():
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['simulat'\].*allowed keys"):
        cfg.validate_config({"simulat": {}})


def test_yaml_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found: .*nope.yaml"):
        cfg.load_config(missing)
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml is not valid YAML"):
        cfg.load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="must hold a mapping"):
        cfg.load_config(listy)


def test_unknown_preset_lists_choices():
    with pytest.raises(ConfigError, match=r"preset 'nope' unknown; choose from \["):
        cfg.load_preset("nope")


def test_deep_merge_does_not_modify_inputs():
    base = {"a": {"b": 1, "c": 2}}
    merged = cfg.deep_merge(base, {"a": {"b": 5}})
    assert merged == {"a": {"b": 5, "c": 2}}
    assert base == {"a": {"b": 1, "c": 2}}


def _assert_defaults_filled(schema, value, where):
    for key, sub in schema.get("properties", {}).items():
        if "default" in sub:
            assert key in value, f"{where}.{key} default not filled"
        if sub.get("type") == "object" and key in value and isinstance(value[key], dict):
            _assert_defaults_filled(sub, value[key], f"{where}.{key}")


def test_nested_defaults_filled_even_when_section_declares_its_draft():
    full = cfg.validate_config({})
    for name in cfg.section_names():
        schema = json.loads((cfg._schema_dir() / f"{name}.schema.json").read_text())
        _assert_defaults_filled(schema, full[name], name)


def test_a_file_means_one_thing_to_the_workflow_and_the_commands(tmp_path):
    """What a --configfile takes from config/config.yaml that the schema would not give it."""
    from pathlib import Path

    embedded = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"train": {"rounds": 3}, "simulate": {"seed": 5}}))
    inherited = cfg.inherited_settings(embedded, [mine])
    found = {key: (value, default) for key, value, default in inherited}
    # the demo's choices the commands would not make; nothing the file sets itself
    assert found["fedce.n_clusters"] == (4, "auto")
    assert found["train.seed"] == (20240611, None)
    assert "simulate.seed" not in found and "train.rounds" not in found
    # the validation split is the schema default: the same through both
    assert "train.validation_fraction" not in found
    assert cfg.validate_config({})["train"]["validation_fraction"] == 0.2
    # a file that sets them all takes nothing
    every = tmp_path / "every.yaml"
    every.write_text(embedded.read_text())
    assert cfg.inherited_settings(embedded, [every]) == []


def test_the_workflow_names_what_a_configfile_takes_from_the_embedded_default(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"train": {"rounds": 3}}))
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(root / "Snakefile"), "--dry-run",
         "--cores", "1", "--configfile", str(mine), "--directory", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stderr
    assert "fedce.n_clusters = 4 comes from config/config.yaml" in said
    assert "(the schema default, which `rvfedprs` commands use, is 'auto')" in said
    assert "train.rounds" not in said
