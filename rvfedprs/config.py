"""YAML configuration: loading, JSON-schema (2020-12) validation and default filling.

A configuration is one mapping of sections (``simulate``, ``pipeline``, ``train``, ...). Each
section has its own schema in ``rvfedprs/schemas/{section}.schema.json``; the top-level schema
is composed from them, so adding a section means adding one schema file. Defaults live in the
schemas only (``"default"`` keywords) and are filled in during validation.

A property whose values are the names of a registry (the strategies) says so with
``"x-choices": "module:function"`` instead of listing them: validation asks that function for
the names (:func:`config_schema`), so that registering a strategy is the only step that makes
its name valid.
"""

from __future__ import annotations

import copy
import importlib
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators

from rvfedprs.exceptions import ConfigError

__all__ = [
    "config_schema",
    "load_config",
    "validate_config",
    "section_names",
    "section_defaults",
    "preset_names",
    "load_preset",
    "deep_merge",
]

_SCHEMA_SUFFIX = ".schema.json"


def _schema_dir() -> Any:
    return resources.files("rvfedprs") / "schemas"


@cache
def section_names() -> tuple[str, ...]:
    """Names of the configuration sections, one per schema file."""
    names = [
        entry.name[: -len(_SCHEMA_SUFFIX)]
        for entry in _schema_dir().iterdir()
        if entry.name.endswith(_SCHEMA_SUFFIX)
    ]
    return tuple(sorted(names))


@cache
def _top_level_schema() -> dict[str, Any]:
    properties = {}
    for name in section_names():
        section = json.loads((_schema_dir() / f"{name}{_SCHEMA_SUFFIX}").read_text())
        # A "$schema" inside a sub-schema makes jsonschema switch to a plain validator for it,
        # which would stop nested defaults from being filled: the top level declares the draft.
        section.pop("$schema", None)
        section.pop("$id", None)
        properties[name] = section
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


def _registry_names(target: str) -> tuple[str, ...]:
    """The names the registry function ``target`` (``"module:function"``) returns."""
    module_name, function = target.split(":")
    return tuple(getattr(importlib.import_module(module_name), function)())


def _choice_targets(node: Any) -> set[str]:
    """Every ``x-choices`` target in a schema."""
    if isinstance(node, dict):
        found = {node["x-choices"]} if "x-choices" in node else set()
        return found.union(*(_choice_targets(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_choice_targets(value) for value in node))
    return set()


@cache
def _schema_targets() -> tuple[str, ...]:
    return tuple(sorted(_choice_targets(_top_level_schema())))


@cache
def _schema_with(choices: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, Any]:
    names = dict(choices)

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            filled = {key: fill(value) for key, value in node.items()}
            if "x-choices" in node:
                filled["enum"] = list(names[node["x-choices"]])
            return filled
        if isinstance(node, list):
            return [fill(value) for value in node]
        return node

    return fill(_top_level_schema())


def config_schema() -> dict[str, Any]:
    """The whole configuration's JSON schema, each ``x-choices`` given its registry's names.

    Do not modify the result: it is shared (and rebuilt when a registry gains a name).
    """
    return _schema_with(tuple((t, _registry_names(t)) for t in _schema_targets()))


@cache
def _section_defaults(name: str) -> str:
    return json.dumps(validate_config({name: {}})[name])


def section_defaults(name: str) -> dict[str, Any]:
    """The schema defaults of section ``name`` (a fresh copy): the one source of every default.

    Classes whose options mirror a section (e.g. :class:`~rvfedprs.strategies.fedce.FedCE`)
    take their keyword defaults from here, so that the schema and the Python API never drift.
    """
    return json.loads(_section_defaults(name))


def _with_defaults(validator_class: type) -> type:
    """Extend a validator so that ``properties`` also fills in each property's default.

    Sub-objects without a default but with defaults inside them are created empty, so that
    nested defaults appear even when a whole section is absent.
    """
    validate_properties = validator_class.VALIDATORS["properties"]

    def fill_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if name in instance:
                    continue
                if "default" in subschema:
                    instance[name] = copy.deepcopy(subschema["default"])
                elif subschema.get("type") == "object" and "properties" in subschema:
                    instance[name] = {}
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": fill_defaults})


_DefaultFillingValidator = _with_defaults(Draft202012Validator)


def _describe(error: Any) -> str:
    """Turn a jsonschema error into a message naming the key, the value and the choices."""
    where = ".".join(str(part) for part in error.absolute_path) or "<top level>"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"unknown key(s) {extra} in '{where}'; allowed keys: {allowed}"
    if error.validator == "enum":
        return f"'{where}': {error.instance!r} is not allowed; choose from {error.validator_value}"
    if error.validator == "type":
        return f"'{where}': {error.instance!r} has the wrong type; expected {error.validator_value}"
    return f"'{where}': {error.message}"


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a configuration and return a copy with every default filled in.

    Parameters
    ----------
    config : mapping or None
        The parsed configuration (sections as keys). ``None`` means all defaults.

    Returns
    -------
    dict
        A new, complete configuration.

    Raises
    ------
    ConfigError
        Naming every offending key with its value and the allowed keys or values.
    """
    filled = copy.deepcopy(dict(config or {}))
    validator = _DefaultFillingValidator(config_schema())
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(map(_describe, errors)))
    return filled


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated recursively by ``override`` (neither is modified)."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections, got {type(data).__name__}")
    return data


def preset_names() -> tuple[str, ...]:
    """Names of the built-in presets (``demo``, ``paper``, ...)."""
    folder = resources.files("rvfedprs") / "presets"
    return tuple(sorted(e.name[:-5] for e in folder.iterdir() if e.name.endswith(".yaml")))


def load_preset(name: str) -> dict[str, Any]:
    """Return a built-in preset's raw (unvalidated) configuration."""
    if name not in preset_names():
        raise ConfigError(f"preset {name!r} unknown; choose from {list(preset_names())}")
    text = (resources.files("rvfedprs") / "presets" / f"{name}.yaml").read_text()
    return yaml.safe_load(text) or {}


def load_config(
    path: str | Path | None = None,
    *,
    preset: str | None = None,
    base: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Load, merge and validate a configuration.

    Later sources win: schema defaults < ``preset`` < ``base`` < the YAML file at ``path`` <
    ``overrides``.

    Parameters
    ----------
    path : str or Path, optional
        A YAML file holding configuration sections.
    preset : str, optional
        A built-in preset name, see :func:`preset_names`.
    base : mapping, optional
        Sections under the file (e.g. a simulator scenario's ``simulate`` section).
    overrides : mapping, optional
        Values set programmatically (e.g. from command-line flags).

    Returns
    -------
    dict
        The validated configuration with defaults filled in.
    """
    raw: dict[str, Any] = {}
    if preset is not None:
        raw = deep_merge(raw, load_preset(preset))
    if base:
        raw = deep_merge(raw, base)
    if path is not None:
        raw = deep_merge(raw, _read_yaml(Path(path)))
    if overrides:
        raw = deep_merge(raw, overrides)
    return validate_config(raw)


def inherited_settings(base: str | Path, files: list[str | Path]) -> list[tuple[str, Any, Any]]:
    """The settings ``files`` take from ``base`` that the schema defaults would not give them.

    A Snakemake run reads every ``--configfile`` over the workflow's own ``configfile:`` (the
    embedded ``config/config.yaml``); ``rvfedprs`` commands read a file over the schema
    defaults. A setting of ``base`` that none of ``files`` sets, and whose value is not the
    schema default, therefore means one thing in the workflow and another on the command line;
    the workflow warns with this list.

    Returns
    -------
    list of (str, object, object)
        ``(dotted key, the value taken from base, the schema default)``, sorted by key.
    """
    own = [_read_yaml(Path(f)) for f in files]
    defaults = validate_config({})

    def leaves(mapping: Mapping[str, Any], prefix: str = ""):
        for key, value in mapping.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping) and value:
                yield from leaves(value, name + ".")
            else:
                yield name, value

    def lookup(mapping: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
        node: Any = mapping
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return False, None
            node = node[part]
        return True, node

    found = []
    for key, value in leaves(_read_yaml(Path(base))):
        if any(lookup(f, key)[0] for f in own):
            continue
        has_default, default = lookup(defaults, key)
        if not has_default or default != value:
            found.append((key, value, default))
    return sorted(found, key=lambda row: row[0])
