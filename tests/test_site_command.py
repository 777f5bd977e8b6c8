"""``rvfedprs site``: the SuperNode command a biobank runs, and what its dry run checks.

The printed command must survive a paste into a shell (paths with spaces and quotes), carry the
node's own ClientApp port, and name every missing file the node would read. Two nodes started
from their printed commands on one host must both connect to a real SuperLink.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from flwr.common.config import parse_config_args

from rvfedprs.cli import main
from rvfedprs.exceptions import ConfigError
from rvfedprs.study.node import site_node


def _site(folder: Path, site: str = "ukb", *, create: bool = True) -> Path:
    """A site configuration (PLINK genotypes, phenotypes, samples, Bloom key) under ``folder``."""
    data = folder / "data"
    files = {
        "genotypes": data / "chr 22",
        "phenotypes": data / "pheno's table.tsv",
        "samples": data / "samples.tsv",
        "bloom_key_file": folder / "secrets" / "bloom.key",
    }
    if create:
        for path in [
            *(f"{files['genotypes']}{s}" for s in (".bed", ".bim", ".fam")),
            *(files[k] for k in ("phenotypes", "samples", "bloom_key_file")),
        ]:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("x\n")
    section = {
        "id": site,
        "genotypes": [str(files["genotypes"])],
        "format": "bfile",
        "phenotypes": str(files["phenotypes"]),
        "samples": str(files["samples"]),
        "folder": str(folder / "work"),
        "bloom_key_file": str(files["bloom_key_file"]),
    }
    path = folder / "site.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"site": section}))
    return path


def _tls(folder: Path) -> tuple[Path, Path]:
    ca, key = folder / "ca.crt", folder / "keys" / "ukb"
    key.parent.mkdir(parents=True, exist_ok=True)
    ca.write_text("ca\n")
    key.write_text("key\n")
    return ca, key


def test_dry_run_prints_a_command_that_parses_back_to_the_argv(tmp_path, capsys):
    folder = tmp_path / 'bio bank\'s "node"'  # spaces and both quotes in every path
    config = _site(folder)
    ca, key = _tls(folder)
    argv = ["site", "--config", str(config), "--superlink", "link.example.org:9092"]
    argv += ["--root-certificates", str(ca), "--auth-key", str(key), "--port", "9201"]
    # the node config is a TOML string Flower parses: a '"' in the site config's path is refused
    assert main([*argv, "--dry-run"]) == 2
    assert "cannot hold" in capsys.readouterr().err

    folder = tmp_path / "bio bank's node $HOME"
    config = _site(folder)
    ca, key = _tls(folder)
    argv = ["site", "--config", str(config), "--superlink", "link.example.org:9092"]
    argv += ["--root-certificates", str(ca), "--auth-key", str(key), "--port", "9201"]
    assert main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out.strip()
    node = site_node(
        config,
        superlink="link.example.org:9092",
        root_certificates=ca,
        auth_key=key,
        port=9201,
    )
    assert shlex.split(printed) == ["env", f"FLWR_HOME={folder / 'work' / 'flower'}", *node.argv]
    # what the shell hands flower-supernode, through Flower's own parser of --node-config
    words = shlex.split(printed)
    node_config = words[words.index("--node-config") + 1]
    assert parse_config_args([node_config]) == {"site-config": str(config.resolve())}
    assert words[words.index("--port") + 1] == "9201"
    assert words[words.index("--auth-supernode-private-key") + 1] == str(key.resolve())


def test_the_node_options_reach_flower_supernode(tmp_path):
    config = _site(tmp_path / "a")
    node = site_node(
        config,
        superlink="127.0.0.1:9092",
        host="0.0.0.0",
        port=9300,
        max_retries=5,
        max_wait_time=120,
        flwr_home=tmp_path / "state",
    )
    text = " ".join(node.argv)
    assert "--insecure" in node.argv and "--root-certificates" not in node.argv
    assert "--host 0.0.0.0 --port 9300" in text
    assert "--max-retries 5 --max-wait-time 120.0" in text
    assert node.flwr_home == (tmp_path / "state").resolve()
    assert node.site == "ukb"
    with pytest.raises(ConfigError, match=r"--port must be in \[1, 65535\], got 70000"):
        site_node(config, superlink="127.0.0.1:9092", port=70000)
    with pytest.raises(ConfigError, match="--auth-key .* needs --root-certificates"):
        site_node(config, superlink="127.0.0.1:9092", auth_key=tmp_path / "k")


def test_dry_run_names_every_missing_file_without_a_traceback(tmp_path, capsys):
    config = _site(tmp_path / "b", create=False)
    code = main(
        [
            "site",
            "--config",
            str(config),
            "--superlink",
            "h:9092",
            "--root-certificates",
            str(tmp_path / "nowhere" / "ca.crt"),
            "--auth-key",
            str(tmp_path / "nowhere" / "ukb"),
            "--dry-run",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.startswith("rvfedprs site: error: site ukb: files not found:")
    data = tmp_path / "b" / "data"
    phenotypes = data / "pheno's table.tsv"
    for named in [
        f"site.genotypes: {data / 'chr 22.bed'}",
        f"site.genotypes: {data / 'chr 22.bim'}",
        f"site.genotypes: {data / 'chr 22.fam'}",
        f"site.phenotypes: {phenotypes}",
        f"site.samples: {data / 'samples.tsv'}",
        f"site.bloom_key_file: {tmp_path / 'b' / 'secrets' / 'bloom.key'}",
        f"--root-certificates: {tmp_path / 'nowhere' / 'ca.crt'}",
        f"--auth-key: {tmp_path / 'nowhere' / 'ukb'}",
    ]:
        assert named in err, named
    # one file missing: only that one is named
    _site(tmp_path / "c")
    (tmp_path / "c" / "data" / "chr 22.fam").unlink()
    assert main(["site", "--config", str(tmp_path / "c" / "site.yaml"), "--superlink", "h:1",
                 "--insecure", "--dry-run"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count(": /") == 1 and "chr 22.fam" in err


def test_tls_or_insecure_must_be_chosen(tmp_path, capsys):
    config = _site(tmp_path / "d")
    with pytest.raises(SystemExit) as exit_:
        main(["site", "--config", str(config), "--superlink", "h:9092", "--dry-run"])
    assert exit_.value.code == 2
    assert "--root-certificates --insecure" in capsys.readouterr().err.replace("/", " ")


@pytest.mark.slow
def test_two_nodes_from_their_printed_commands_share_a_host(tmp_path, capsys):
    """Each pasted command starts a SuperNode that connects; the second is not refused its port."""
    from rvfedprs.federation.flower.processes import free_port
    from rvfedprs.federation.flower.superlink import start_local

    with start_local(tmp_path / "link", simulation=False) as link:
        nodes = []
        for site in ("ukb", "hunt"):
            config = _site(tmp_path / site, site)
            argv = ["site", "--config", str(config), "--superlink", link.address, "--insecure"]
            assert main([*argv, "--port", str(free_port()), "--dry-run"]) == 0
            command = capsys.readouterr().out.strip()
            log = open(tmp_path / f"{site}.log", "wb")  # noqa: SIM115 (closed below)
            nodes.append(
                (
                    site,
                    log,
                    subprocess.Popen(
                        ["bash", "-c", command], stdout=log, stderr=log, start_new_session=True
                    ),
                )
            )
        try:
            superlink_log = link.processes.logs / "superlink.log"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if superlink_log.read_text().count("Activated node_id=") >= 2:
                    break
                time.sleep(0.5)
            assert superlink_log.read_text().count("Activated node_id=") == 2
            for site, _, proc in nodes:
                assert proc.poll() is None, (tmp_path / f"{site}.log").read_text()
                assert "address already in use" not in (tmp_path / f"{site}.log").read_text()
                assert (tmp_path / site / "work" / "flower").is_dir()  # its FLWR_HOME
        finally:
            for _, log, proc in nodes:
                os.killpg(proc.pid, signal.SIGTERM)  # the node and any ClientApp it started
                proc.wait(timeout=30)
                log.close()


def test_the_node_polls_through_the_launcher_unless_flowers_own_is_asked(tmp_path, capsys):
    config = _site(tmp_path / "p")
    fast = site_node(config, superlink="127.0.0.1:9092", port=9400, clientapp="cold")
    assert fast.argv[1:8] == ["-m", "rvfedprs.federation.flower.supernode", "--poll-seconds",
                              "0.25", "--heartbeat-seconds", "10.0", "--"]  # fmt: skip
    assert fast.argv[8:10] == ["--insecure", "--superlink"]
    # warm: the executor starts the launcher, which starts Flower's SuperNode
    warm = site_node(config, superlink="127.0.0.1:9092", port=9400, node_poll_seconds=0.1,
                     node_heartbeat_seconds=15)  # fmt: skip
    inner = warm.argv[warm.argv.index("--") + 1 :]
    assert inner[1:7] == ["-m", "rvfedprs.federation.flower.supernode", "--poll-seconds", "0.1",
                          "--heartbeat-seconds", "15.0"]  # fmt: skip
    assert inner[-2:] == ["--isolation", "process"]
    argv = ["site", "--config", str(config), "--superlink", "h:9092", "--insecure"]
    assert main([*argv, "--node-poll-seconds", "3", "--dry-run"]) == 0
    words = shlex.split(capsys.readouterr().out)
    inner = words[words.index("--") + 1 :]
    assert inner[1:5] == ["-m", "rvfedprs.federation.flower.supernode",  # the heartbeat only
                          "--heartbeat-seconds", "10.0"]  # fmt: skip
    assert "--poll-seconds" not in words
    flowers_own = ["--node-poll-seconds", "3", "--node-heartbeat-seconds", "30"]
    assert main([*argv, *flowers_own, "--dry-run"]) == 0
    words = shlex.split(capsys.readouterr().out)
    inner = words[words.index("--") + 1 :]
    assert Path(inner[0]).name == "flower-supernode"  # Flower's own 3 s and 30 s
    assert "rvfedprs.federation.flower.supernode" not in words
    assert main([*argv, "--node-heartbeat-seconds", "5", "--dry-run"]) == 2
    assert (
        "--node-heartbeat-seconds: the SuperNode's heartbeat interval must be a number of "
        "seconds in [10, 1800] (what the SuperLink accepts), got 5.0"
    ) in capsys.readouterr().err
    assert main([*argv, "--node-poll-seconds", "0", "--dry-run"]) == 2
    assert "--node-poll-seconds must be > 0 seconds, got 0.0" in capsys.readouterr().err


@pytest.mark.parametrize("clientapp", ["warm", "cold"])
def test_a_killed_site_command_leaves_no_node_behind(tmp_path, clientapp):
    """``kill <pid>`` of ``rvfedprs site`` stops its SuperNode (and warm executor) too."""
    from rvfedprs.federation.flower.processes import free_ports, pid_running, pids_with_env

    config = _site(tmp_path / "k")
    home = (tmp_path / "k" / "flower").resolve()
    nowhere, port = free_ports(2)  # no SuperLink listens: the node keeps trying to connect
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "rvfedprs", "site", "--config", str(config), "--superlink",
         f"127.0.0.1:{nowhere}", "--insecure", "--port", str(port), "--clientapp", clientapp,
         "--flwr-home", str(home)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not pids_with_env(f"FLWR_HOME={home}"):
            time.sleep(0.25)
        node = pids_with_env(f"FLWR_HOME={home}")
        assert node, "the SuperNode started"
        time.sleep(2)  # let it settle into its connection attempts
        wrapper.send_signal(signal.SIGTERM)
        wrapper.wait(timeout=60)  # it exits (with the node's status: 0 when it stopped cleanly)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(pid_running(p) for p in node):
            time.sleep(0.25)
        assert not [p for p in pids_with_env(f"FLWR_HOME={home}") if pid_running(p)]
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)


def test_a_node_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    """The forwarded SIGTERM is given ``grace`` seconds; then the node's group is killed."""
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text("import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: None)\n"
                        "print('ready', flush=True)\ntime.sleep(120)\n")  # fmt: skip
    code = (
        "import sys; from rvfedprs.federation.flower.processes import run_forwarding_signals; "
        f"sys.exit(run_forwarding_signals([sys.executable, {str(stubborn)!r}], grace=2))"
    )
    wrapper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert wrapper.stdout.readline().strip() == "ready"
    started = time.monotonic()
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=60) == 128 + signal.SIGKILL
    assert 2 <= time.monotonic() - started < 30
