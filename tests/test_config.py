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
