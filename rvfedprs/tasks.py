"""Federated tasks, chosen by name: what the engines run (``job["task"]``, ``--engine``).

A task implements :class:`~rvfedprs.federation.task.Task`; the engines receive its name in a
job and build it here, so that they never import a task themselves. ``register_task`` adds your
own (``"my.module:MyTask"``), which then runs in-process and on Flower unchanged.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rvfedprs.exceptions import ConfigError

if TYPE_CHECKING:
    from rvfedprs.federation.task import Task

__all__ = ["TASK_NAMES", "get_task", "register_task"]

_REGISTRY: dict[str, str] = {
    "genomic": "rvfedprs.genomic.task:GenomicTask",
    "imaging": "rvfedprs.imaging.task:ImagingTask",
    "study": "rvfedprs.study.task:StudyTask",
}

#: Names accepted by :func:`get_task` (the built-in tasks; :func:`register_task` adds more).
TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def register_task(name: str, target: str) -> None:
    """Register the task class ``target`` (``"module:Class"``) under ``name``."""
    global TASK_NAMES
    if ":" not in target:
        raise ConfigError(f"task target {target!r} must look like 'module:Class'")
    _REGISTRY[name] = target
    TASK_NAMES = tuple(_REGISTRY)


def get_task(name: str) -> Task:
    """A fresh instance of the task registered under ``name``.

    Raises
    ------
    ConfigError
        ``"task 'imagin' unknown; choose from [...]"``.
    """
    if name not in _REGISTRY:
        raise ConfigError(f"task {name!r} unknown; choose from {sorted(_REGISTRY)}")
    module_name, class_name = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)()
