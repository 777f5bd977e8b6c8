"""The test hook that stops a site before it answers a named step (rvfedprs.federation.freeze).

It must do nothing unless the node's environment names a folder holding ``<site>@<step>``; when
it does, the site must say it has reached the step and not answer while the file exists; and
the Flower ClientApp must check it, with the node's site id and the step's name, before any
step it answers (the fault suite kills nodes frozen there).
"""

from __future__ import annotations

import inspect
import threading
import time

from rvfedprs.federation.flower import client_app
from rvfedprs.federation.freeze import FREEZE_DIR_ENV, freeze_if_asked


def test_nothing_happens_unless_the_folder_asks_this_site_at_this_step(tmp_path, monkeypatch):
    monkeypatch.delenv(FREEZE_DIR_ENV, raising=False)
    (tmp_path / "site0@features").touch()
    assert freeze_if_asked("site0", "features") is False  # no folder named
    monkeypatch.setenv(FREEZE_DIR_ENV, str(tmp_path))
    assert freeze_if_asked("site1", "features") is False  # another site
    assert freeze_if_asked("site0", "moments") is False  # another step
    assert not list(tmp_path.glob("*.reached"))


def test_a_site_asked_is_frozen_until_released(tmp_path, monkeypatch):
    monkeypatch.setenv(FREEZE_DIR_ENV, str(tmp_path))
    asked = tmp_path / "site0@secagg.share"
    asked.touch()
    done: list[bool] = []
    frozen = threading.Thread(target=lambda: done.append(freeze_if_asked("site0", "secagg.share")))
    frozen.start()
    reached = tmp_path / "site0@secagg.share.reached"
    for _ in range(100):
        if reached.exists():
            break
        time.sleep(0.05)
    assert reached.exists()
    time.sleep(0.3)
    assert frozen.is_alive() and done == []  # it has not answered
    asked.unlink()
    frozen.join(timeout=5)
    assert done == [True]


def test_the_clientapp_checks_it_before_answering_any_step():
    source = inspect.getsource(client_app.query)
    assert source.index("freeze_if_asked(client, request.step)") < source.index("task.handle(")


def test_the_clientapp_checks_it_before_training_a_round():
    source = inspect.getsource(client_app.train)
    assert source.index('freeze_if_asked(client, f"{fit}.{server_round}")') < source.index(
        "task.fit("
    )
    assert '"warm_start" if settings.get("run_index") == WARM_START_RUN else "train"' in source
