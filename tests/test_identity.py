"""Which node may be which site: claims at setup checked against the registered keys.

A node says which site it serves; with SuperNode authentication the SuperLink knows which node
id signs with which registered key, and the consortium maps each site to its node's key
(``flower.node_keys``). A node claiming a site whose key is another node's, or two nodes one
site, must be refused and named. Checked three ways: the binding function itself; the real
ServerApp over an in-process grid running the real ClientApp (test_flower_server's LocalGrid);
and a real SuperLink with TLS and three authenticated SuperNodes on loopback, where the
coordinator runs a study knowing only the site ids.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _flower_processes import make_certificates  # noqa: E402
from test_flower_server import LocalGrid, _job, _nodes, fed  # noqa: E402, F401

from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.federation.flower import server_app  # noqa: E402
from rvfedprs.federation.flower.identity import (  # noqa: E402
    bind_sites,
    public_key_pem,
)
from rvfedprs.federation.rounds import FederationError  # noqa: E402


def test_claims_matching_the_keys_are_bound():
    assert bind_sites({7: "ukb", 9: "hunt"}, {"ukb": 7, "hunt": 9}) == {"ukb": 7, "hunt": 9}
    # a site whose node is absent is simply not bound (the study goes on without it)
    assert bind_sites({7: "ukb"}, {"ukb": 7, "hunt": 9}) == {"ukb": 7}
    assert bind_sites({7: "ukb", 9: "hunt"}, None) == {"ukb": 7, "hunt": 9}


def test_an_impostor_is_refused_and_named():
    keys = {"ukb": 7, "hunt": 9}
    with pytest.raises(
        FederationError,
        match=r"node 9 \(the registered key of site 'hunt'\) claims site 'ukb', whose "
        r"registered key is node 7",
    ):
        bind_sites({9: "ukb"}, keys)  # ukb's own node is not even connected
    with pytest.raises(FederationError, match=r"node 5 \(a key of no site in flower.node_keys\)"):
        bind_sites({7: "ukb", 5: "hunt"}, keys)
    with pytest.raises(FederationError, match=r"claims site 'estonia', which flower.node_keys"):
        bind_sites({7: "estonia"}, keys)


def test_two_nodes_claiming_one_site_are_refused_and_both_named():
    with pytest.raises(FederationError, match=r"nodes 7 and 9 both claim site 'ukb'"):
        bind_sites({9: "ukb", 7: "ukb"}, None)
    keys = {"ukb": 7, "hunt": 9}
    with pytest.raises(FederationError) as refused:
        bind_sites({7: "ukb", 9: "ukb"}, keys)
    assert "node 9 (the registered key of site 'hunt') claims site 'ukb'" in str(refused.value)
    assert "node 7" in str(refused.value)


def test_public_keys_are_read_as_the_superlink_stores_them(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key = ec.generate_private_key(ec.SECP384R1())
    ssh = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    (tmp_path / "site.pub").write_bytes(ssh)
    pem = public_key_pem(tmp_path / "site.pub")
    assert serialization.load_pem_public_key(pem).public_numbers() == (
        key.public_key().public_numbers()
    )
    with pytest.raises(ConfigError, match="public key file not found: .*nowhere.pub"):
        public_key_pem(tmp_path / "nowhere.pub")
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    (tmp_path / "rsa.pub").write_bytes(
        rsa_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    with pytest.raises(ConfigError, match="rsa.pub is not an EC key"):
        public_key_pem(tmp_path / "rsa.pub")
    (tmp_path / "junk.pub").write_text("not a key\n")
    with pytest.raises(ConfigError, match="junk.pub is not an OpenSSH public key"):
        public_key_pem(tmp_path / "junk.pub")


def test_the_server_app_refuses_an_impostor_at_setup(fed, tmp_path):  # noqa: F811
    nodes = _nodes(fed)  # node 100 + i serves client i
    first, second = fed.client_ids[:2]
    job = _job(fed, tmp_path / "honest", rounds=1)
    job["site_nodes"] = {c: 100 + i for i, c in enumerate(fed.client_ids)}
    summary = server_app.run_server(LocalGrid(nodes), job)
    assert summary["client_ids"] == fed.client_ids

    # node 101 (the key of the second site) says it is the first site
    nodes[101] = {**nodes[101], "client-id": first}
    job = _job(fed, tmp_path / "impostor", rounds=1)
    job["site_nodes"] = {c: 100 + i for i, c in enumerate(fed.client_ids)}
    with pytest.raises(FederationError) as refused:
        server_app.run_server(LocalGrid(nodes), job)
    assert (
        f"node 101 (the registered key of site {second!r}) claims site {first!r}, whose "
        "registered key is node 100"
    ) in str(refused.value)
    assert not (tmp_path / "impostor" / "checkpoints").exists()  # nothing was trained


@pytest.mark.slow
def test_a_real_superlink_refuses_a_registered_node_claiming_another_site(tmp_path):
    """TLS, node authentication, three SuperNodes; the coordinator holds only site ids."""
    from rvfedprs.config import load_config
    from rvfedprs.federation.flower.identity import registered_nodes
    from rvfedprs.federation.flower.processes import FlowerRunError, flower_env
    from rvfedprs.federation.flower.superlink import start_local
    from rvfedprs.study.run import run_study_config

    sites = ["s0", "s1", "s2"]
    claims = {"s0": "s0", "s1": "s1", "s2": "s0"}  # the node of s2's key claims s0
    nodes = {}
    for label, claim in claims.items():
        config = tmp_path / "nodes" / label / "site.yaml"
        config.parent.mkdir(parents=True)
        section = {"id": claim, "genotypes": ["g.vcf.gz"], "format": "vcf",
                   "phenotypes": "p.tsv", "folder": str(config.parent / "work")}  # fmt: skip
        config.write_text(yaml.safe_dump({"site": section}))
        nodes[label] = {"site-config": str(config)}
    certs = tmp_path / "certs"
    make_certificates(certs, sites)
    keys = {label: certs / "keys" / label for label in sites}
    sheet = tmp_path / "sites.tsv"
    sheet.write_text("site\n" + "\n".join(sites) + "\n")  # ids only: no site's paths
    config = load_config(
        None,
        overrides={
            "study": {"engine": "flower-deploy", "sites_dir": str(tmp_path / "sites"),
                      "out": str(tmp_path / "coordinator"), "count_aggregation": "plain"},
            "flower": {"node_keys": {s: f"{keys[s]}.pub" for s in sites},
                       "node_wait": 120, "round_timeout": 300, "timeout": 600},
            "train": {"compare": ["fedavg"], "rounds": 1},
        },
    )  # fmt: skip
    scores = tmp_path / "scores.txt"  # never read: the job stops at setup
    scores.write_text("rsID\teffect_allele\teffect_weight\n")
    with start_local(
        tmp_path / "link", simulation=False, nodes=nodes, certificates=certs, node_keys=keys
    ) as link:
        env = flower_env(tmp_path / "link" / "home")
        bound = registered_nodes(config["flower"]["node_keys"], env)
        with pytest.raises(FlowerRunError) as refused:
            run_study_config(config, scoring_file=scores, samplesheet=sheet,
                             superlink=link)  # fmt: skip
    registered = (tmp_path / "link" / "logs" / "register.log").read_text()
    # the ids the SuperLink printed when each key was registered, in the order of ``sites``
    assert [int(n) for n in re.findall(r"SuperNode (\d+) registered", registered)] == [
        bound[s] for s in sites
    ]
    message = str(refused.value)
    assert (
        f"node {bound['s2']} (the registered key of site 's2') claims site 's0', whose "
        f"registered key is node {bound['s0']}"
    ) in message
    job = json.loads((tmp_path / "coordinator" / "flower" / "job.json").read_text())
    assert job["site_nodes"] == bound
    # the coordinator wrote nothing for the sites (they run their own nodes)
    assert not (tmp_path / "sites").exists()


def test_a_coordinator_whose_sites_run_their_nodes_needs_only_site_ids(tmp_path):
    from rvfedprs.config import load_config
    from rvfedprs.exceptions import InputDataError
    from rvfedprs.study.run import run_study_config
    from rvfedprs.study.samplesheet import read_site_ids

    sheet = tmp_path / "sites.tsv"
    sheet.write_text("site\tgenotypes\nhunt\t/elsewhere\nukb\tplaceholder\nukb\tchr2\n")
    assert read_site_ids(sheet) == ["hunt", "ukb"]  # other columns ignored, not required
    (tmp_path / "bad.tsv").write_text("site\tx\nukb\t1\n \t2\n")
    with pytest.raises(InputDataError, match=r"empty site on line\(s\) \[3\]"):
        read_site_ids(tmp_path / "bad.tsv")
    (tmp_path / "none.tsv").write_text("id\nukb\n")
    with pytest.raises(InputDataError, match=r"has no 'site' column \(has \['id'\]\)"):
        read_site_ids(tmp_path / "none.tsv")

    config = load_config(
        None,
        overrides={
            "study": {"engine": "flower-deploy", "sites_dir": str(tmp_path / "sites")},
            "flower": {"superlink": "127.0.0.1:9", "node_keys": {"ukb": "ukb.pub"}},
        },
    )
    # refused before anything is written or contacted: hunt has no key
    with pytest.raises(ConfigError, match=r"node_keys lists sites \['ukb'\], the site sheet"):
        run_study_config(config, scoring_file=tmp_path / "s.txt", samplesheet=sheet)
    assert not (tmp_path / "sites").exists()


@pytest.mark.parametrize("simulation", [True, False])
def test_node_keys_need_a_superlink_that_authenticates_nodes(tmp_path, simulation):
    from rvfedprs.federation.flower.submit import launch

    # flower-sim, or a SuperLink started here without node keys: nothing to bind to
    with pytest.raises(ConfigError, match="flower.node_keys binds sites .* needs flower-deploy"):
        launch(
            simulation,
            tmp_path,
            {"job-file": str(tmp_path / "job.json")},
            n_clients=1,
            nodes={},
            superlink=None,
            remote=None,
            settings={"node_keys": {"ukb": "ukb.pub"}},
            timeout=1,
        )
    assert not (tmp_path / "logs").exists()  # no process was started
