"""What a spec becomes as a local cluster (no root needed): nodes, addresses, overrides, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusterforge import cli
from clusterforge.local import LocalCluster, LocalError, local_vars, plan_layout

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_local_example_keeps_its_addresses_and_says_what_it_overrides() -> None:
    lay = plan_layout(EXAMPLES / "local.yaml")
    assert [(n.name, n.address, n.role, n.gpus) for n in lay.nodes] == [
        ("ctl", "10.79.0.10", "controller", 0),
        ("login", "10.79.0.11", "login", 0),
        ("gpu-001", "10.79.0.21", "compute", 8),
        ("gpu-002", "10.79.0.22", "compute", 8),
        ("cpu-001", "10.79.0.31", "compute", 0),
        ("cpu-002", "10.79.0.32", "compute", 0),
    ]
    assert lay.prefix == "cf79" and lay.bridge == "10.79.0.1"
    assert not any(o.startswith("addresses") for o in lay.overrides)
    assert any("SlurmdParameters=config_overrides" in o for o in lay.overrides)
    assert lay.spec["slurm"]["extra_conf"]["SlurmdParameters"] == "config_overrides"
    # the original file is untouched
    assert "config_overrides" not in (EXAMPLES / "local.yaml").read_text()


def test_another_network_moves_addresses_to_the_same_host_numbers() -> None:
    lay = plan_layout(EXAMPLES / "local.yaml", "10.81.0.0/24")
    assert {n.name: n.address for n in lay.nodes}["gpu-002"] == "10.81.0.22"
    moved = next(o for o in lay.overrides if o.startswith("addresses"))
    assert "gpu-002 10.79.0.22 -> 10.81.0.22" in moved
    groups = {g["name"]: g for g in lay.spec["node_groups"]}
    assert groups["gpu"]["onprem"]["addresses"] == "10.81.0.21,10.81.0.22"


def test_hosts_without_addresses_get_free_ones(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
    for g in data["node_groups"]:
        g["onprem"].pop("addresses")
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(data))
    lay = plan_layout(spec)
    addrs = [n.address for n in lay.nodes]
    assert len(set(addrs)) == len(addrs) and all(a.startswith("10.79.0.") for a in addrs)
    assert "10.79.0.1" not in addrs


@pytest.mark.parametrize(
    ("spec", "net", "message"),
    [
        ("p5-training.yaml", "10.79.0.0/24", r"node_groups\[0\] \(.*\) has no onprem hosts"),
        ("onprem-dgx.yaml", "10.79.0.0/24", r"hosts; a local cluster runs at most 24"),
        ("local.yaml", "10.79.0.0/16", r"must be a private /24"),
        ("local.yaml", "8.8.8.0/24", r"must be a private /24"),
        ("local.yaml", "banana", r"is not a network"),
    ],
)
def test_what_cannot_run_locally_is_refused_with_the_fix(spec: str, net: str, message: str) -> None:
    with pytest.raises(LocalError, match=message):
        plan_layout(EXAMPLES / spec, net)


def test_local_vars_point_at_the_bridge() -> None:
    v = local_vars("10.83.0", "chroot")
    assert v["clusterforge_service_manager"] == "direct"
    assert v["nvidia_driver_repo_url"] == "http://10.83.0.1:8081/nvidia/"


def test_commands_on_a_missing_cluster_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lc = LocalCluster(tmp_path / "nothing")
    with pytest.raises(LocalError, match="run `clusterforge local up` first"):
        lc.status()
    assert lc.down() == []  # nothing there: down is a no-op, not an error
    for argv in (["local", "status", "--state", str(tmp_path / "nothing")],
                 ["local", "run", "--state", str(tmp_path / "nothing"), "--", "true"]):
        with pytest.raises(SystemExit) as exc:
            import sys

            sys.argv = ["clusterforge", *argv]
            cli.main()
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "no local cluster in" in err and "Traceback" not in err


def test_the_node_os_picks_the_debian_release_and_its_slurm() -> None:
    lay = plan_layout(EXAMPLES / "local.yaml")
    assert (lay.suite, lay.spec["os"], lay.spec["slurm"]["version"]) == ("trixie", "debian-13", "24.11")
    assert not any(o.startswith(("os ", "slurm.version")) for o in lay.overrides)
    old = plan_layout(EXAMPLES / "local.yaml", os_name="debian-12")
    assert (old.suite, old.spec["os"], old.spec["slurm"]["version"]) == ("bookworm", "debian-12", "22.05")
    assert "os debian-13 -> debian-12 (--os)" in old.overrides
    assert "slurm.version 24.11 -> 22.05 (what debian-12 ships)" in old.overrides


def test_an_os_the_local_cluster_cannot_boot_is_refused_with_the_fix() -> None:
    with pytest.raises(LocalError, match=r"--os 'ubuntu-22.04': a local cluster boots Debian nodes only.*--os debian-13"):
        plan_layout(EXAMPLES / "local.yaml", os_name="ubuntu-22.04")
    with pytest.raises(LocalError, match=r"--boot 'docker' is not a boot mode; give one of systemd, chroot"):
        plan_layout(EXAMPLES / "local.yaml", boot="docker")


def test_booted_nodes_take_the_systemd_path() -> None:
    assert local_vars("10.86.1", "systemd")["clusterforge_service_manager"] == "systemd"
    lay = plan_layout(EXAMPLES / "local.yaml", "10.86.3.0/24", boot="systemd")
    assert lay.prefix == "cf86x3"  # one name per /24: 10.86.1 and 10.86.3 can run side by side
    assert any("clusterforge_service_manager=systemd" in o for o in lay.overrides)


def test_the_aws_flavour_keeps_chroot_instances() -> None:
    """Its instances' user data runs from the hypervisor, as cloud-init would: no systemd there,
    so they keep sshd as PID 1 and the clusterforge-svc supervisor."""
    from clusterforge.local.aws.flavour import plan_aws_layout
    from clusterforge.resolve import resolve_file

    spec = EXAMPLES / "local-aws.yaml"
    lay = plan_aws_layout(resolve_file(spec), spec, "10.79.0.0/24")
    assert (lay.boot, lay.suite) == ("chroot", "bookworm")
    assert local_vars(lay.net, lay.boot)["clusterforge_service_manager"] == "direct"
    assert plan_layout(EXAMPLES / "local.yaml").boot == "systemd"  # on-prem nodes boot systemd by default


def test_shared_storage_is_a_bound_folder_and_torch_a_layer_only_when_asked() -> None:
    """examples/local.yaml's NFS entry becomes a folder bound at its mount on every node (this
    kernel has no NFS client) and the layout says so; PyTorch is stacked only with --torch."""
    layout = plan_layout(EXAMPLES / "local.yaml")
    assert layout.shared == {"shared": "/shared"}
    assert any(o.startswith("storage shared (nfs) at /shared: a folder of this machine (STATE/storage/shared)")
               for o in layout.overrides), layout.overrides
    assert layout.torch is None and not any("PyTorch" in o for o in layout.overrides)
    with_torch = plan_layout(EXAMPLES / "local.yaml", torch="2.13.0")
    assert with_torch.torch == "2.13.0"
    assert any(o.startswith("PyTorch 2.13.0: a read-only layer") for o in with_torch.overrides)
    assert plan_layout(EXAMPLES / "local-roles.yaml").shared == {}  # no storage: nothing bound


def test_the_torch_flag_is_refused_for_the_aws_flavour(tmp_path: Path) -> None:
    from clusterforge.local import missing_prerequisites

    if missing_prerequisites():
        pytest.skip(f"up checks its prerequisites first: {missing_prerequisites()}")
    with pytest.raises(LocalError, match="--torch applies to on-prem specs only"):
        LocalCluster(tmp_path / "state").up(EXAMPLES / "local-aws.yaml", torch=True, configure=False)
