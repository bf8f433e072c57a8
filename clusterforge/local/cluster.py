"""The local cluster's lifecycle: up, status, exec/ssh/run on a node, down.

State lives in one folder (default ``/var/lib/clusterforge/local``, or ``--state`` /
``CLUSTERFORGE_LOCAL_STATE``): ``layout.json`` (nodes, addresses, overrides), ``spec.yaml`` (the
effective spec), the recorded PIDs and namespaces of ``nodes.sh``, the SSH key, the generated
inventory and its render, the local Ansible variables, the generated slurmdbd password (0600,
never printed) and the scrubbed ansible-runner artifacts of the last run.

One module, one class: the lifecycle's steps share the state folder and its invariants (what `up`
records, `down` removes). The parts that stand alone are modules of their own: ``layout``
(addresses, overrides), ``registry`` (node names in use), ``standin_hw``, ``nodes.sh``, ``aws/``.

Ansible reaches the nodes from the bridge's network namespace; ``in_netns`` moves this thread
there for the run, so ansible-runner and its SSH children start inside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from clusterforge import proc
from clusterforge.local.layout import (
    DEFAULT_BOOT,
    DEFAULT_NET,
    TORCH_VERSION,
    LocalError,
    LocalLayout,
    LocalNode,
    check_boot,
    local_vars,
    plan_layout,
)

HERE = Path(__file__).resolve().parent
NODES_SH = HERE / "nodes.sh"
ROOTFS_SH = HERE / "rootfs.sh"
REPO_SH = HERE / "repo.sh"
TORCH_SH = HERE / "torch.sh"
#: the first PyTorch layer downloads and installs about 3 GB (torch.sh); a busy machine is slow
TORCH_TIMEOUT_S = 2400
PACKAGES = HERE / "packages.txt"
DEFAULT_STATE = Path(os.environ.get("CLUSTERFORGE_LOCAL_STATE", "/var/lib/clusterforge/local"))
DEFAULT_SPEC = Path(__file__).resolve().parents[2] / "examples" / "local.yaml"
CLONE_NEWNET = 0x40000000


@dataclass
class UpResult:
    layout: LocalLayout
    seconds: dict[str, float]  # phase -> wall seconds (rootfs, repo, nodes, configure)
    configure: Any | None  # ConfigureResult of the playbook run, None with configure=False


def _is_aws(spec_path: Path) -> bool:
    from clusterforge.local.aws.flavour import is_aws_spec
    from clusterforge.resolve import resolve_file

    return is_aws_spec(resolve_file(spec_path))


def missing_prerequisites(boot: str = DEFAULT_BOOT) -> str | None:
    """Why this machine cannot run a local cluster (with nodes booted ``boot``), or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, mounts, chroot): run it with sudo"
    for tool in ("debootstrap", "dpkg-scanpackages", "apt-ftparchive", "gpg", "ip", "unshare", "nsenter", "ssh"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: run `make setup` (scripts/setup-deps.sh) first"
    if boot == "systemd" and shutil.which("systemd-nspawn") is None:
        return "systemd-nspawn is not installed (booted nodes): apt-get install -y systemd-container, or --boot chroot"
    if shutil.which("ansible-playbook") is None:
        return "ansible-playbook is not installed: run `make setup` (scripts/setup-deps.sh) first"
    return None


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the body (and every child it starts) in network namespace ``name``, then come back."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/thread-self/ns/net", "rb") as home, open(f"/run/netns/{name}", "rb") as target:
        if libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise LocalError(f"cannot enter network namespace {name}: {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            libc.setns(home.fileno(), CLONE_NEWNET)


class LocalCluster:
    """A local cluster's state folder and the operations on it."""

    def __init__(self, state: Path | None = None) -> None:
        self.state = Path(state) if state else DEFAULT_STATE

    # ------------------------------------------------------------------------------ state
    @property
    def layout_file(self) -> Path:
        return self.state / "layout.json"

    @property
    def spec_file(self) -> Path:
        return self.state / "spec.yaml"

    def layout(self) -> LocalLayout:
        if not self.layout_file.is_file():
            raise LocalError(f"no local cluster in {self.state}: run `clusterforge local up` first")
        d = json.loads(self.layout_file.read_text())
        return LocalLayout(
            cluster=d["cluster"], net=d["net"], nodes=[LocalNode(**n) for n in d["nodes"]],
            spec=d["spec"], overrides=d["overrides"], source=d["source"], flavour=d.get("flavour", "onprem"),
            suite=d.get("suite", "bookworm"), boot=d.get("boot", "chroot"), shared=d.get("shared", {}),
            torch=d.get("torch"), images=d.get("images", {}),
        )

    def save_layout(self, layout: LocalLayout) -> None:
        tmp = self.layout_file.with_name("layout.json.tmp")
        tmp.write_text(json.dumps(asdict(layout), indent=1))
        os.replace(tmp, self.layout_file)

    def aws(self) -> Any:
        """The AWS flavour's operations on this cluster (an error for an on-prem local cluster)."""
        from clusterforge.local.aws.flavour import AwsFlavour

        layout = self.layout()
        if layout.flavour != "aws":
            raise LocalError(f"local cluster {layout.cluster} is on-prem: it has no emulated AWS")
        return AwsFlavour(self, layout)

    def is_up(self) -> bool:
        return (self.state / "net.env").is_file()

    def _nodes_sh(
        self, *args: str, timeout: float = 120, check: bool = True, boot: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        more = {**({"NODES_BOOT": boot} if boot else {}), **(extra_env or {})}
        env = {**os.environ, **more} if more else None
        try:
            p = proc.run([str(NODES_SH), args[0], str(self.state), *args[1:]], timeout=timeout, env=env)
        except proc.ProcTimeout:
            raise LocalError(
                f"nodes.sh {args[0]} did not finish within {timeout:.0f} s; run `clusterforge local down"
                f" --state {self.state}` again (it is safe to repeat)"
            ) from None
        if check and p.returncode != 0:
            raise LocalError(f"nodes.sh {args[0]} failed (rc={p.returncode}): {p.stderr.strip()[-2000:]}")
        return p

    # -------------------------------------------------------------------------------- up
    def up(
        self,
        spec_path: Path = DEFAULT_SPEC,
        *,
        net: str = DEFAULT_NET,
        os_name: str | None = None,
        boot: str | None = None,
        torch: bool = False,
        image: str = "bare",
        configure: bool = True,
        check: bool = False,
        diff: bool = False,
        progress: Callable[[str], Any] | None = None,
        ansible_progress: Callable[[Any], None] | None = None,
    ) -> UpResult:
        """Create the nodes (unless they are up already) and run ``playbooks/site.yml`` on them.

        A second ``up`` on a running cluster re-runs the playbook only (an idempotent re-run).
        ``os_name`` (``--os``) replaces the spec's ``os`` (the nodes' Debian release and its Slurm);
        ``boot`` is how nodes boot: ``systemd`` (systemd-nspawn, systemd as PID 1; the default) or
        ``chroot`` (sshd as PID 1, clusterforge-svc); the AWS flavour's instances are chroot nodes.
        ``torch`` stacks the PyTorch layer (``torch.sh``, built once, cached) under every node's
        /usr/local; without it nothing of PyTorch is built or downloaded. ``image``: ``bare`` (the
        Debian minbase: the roles install every package) or ``baked`` (each node boots on its node
        group's image with the roles' packages installed; a missing image is baked first from the
        image phase of site.yml on the bare node: ``image.py``).
        """
        from clusterforge.local import image as img

        say = progress or (lambda _m: None)
        img.check_image_mode(image)
        why = missing_prerequisites(boot or DEFAULT_BOOT)
        if why:
            raise LocalError(why)
        seconds: dict[str, float] = {}
        images: dict[str, Any] = {}
        if self.is_up():
            layout = self.layout()
            if Path(spec_path).resolve() != Path(layout.source):
                raise LocalError(
                    f"local cluster {layout.cluster} is up from {layout.source}; "
                    "run `clusterforge local down` before bringing up another spec"
                )
            say(f"local cluster {layout.cluster} is up: re-running the playbook")
        elif _is_aws(Path(spec_path)):
            if image != "bare":
                raise LocalError("--image baked applies to on-prem specs only: the AWS flavour's instances boot "
                                 "its AMI, the bare rootfs, and run their user data")
            if torch:
                raise LocalError("--torch applies to on-prem specs only: the AWS flavour's instances boot its AMI")
            if os_name or boot == "systemd":
                raise LocalError(
                    "--os/--boot systemd apply to on-prem specs only: the AWS flavour boots its instances from the "
                    "spec's own os as chroot nodes (the instances' user data runs as cloud-init would, without systemd)"
                )
            return self._up_aws(Path(spec_path), net, configure=configure, check=check, diff=diff, say=say,
                                ansible_progress=ansible_progress)
        else:
            if image == "baked" and (check or not configure):
                raise LocalError("--image baked bakes missing images by installing packages: not with --check or "
                                 "--nodes-only (use --image bare)")
            layout = plan_layout(Path(spec_path), net, os_name=os_name, boot=check_boot(boot or DEFAULT_BOOT),
                                 torch=TORCH_VERSION if torch else None)
            with self._removed_on_failure():
                rootfs, repo = self._prepare(layout, say, seconds,
                                             [n.name for n in layout.nodes if n.role == "compute"])
                layers = self._layers(layout, rootfs, say, seconds)
                binds = self._shared_folders(layout)
                if image == "baked":
                    images = self._images(layout, rootfs, repo, say)
                t = time.monotonic()
                how = "systemd as PID 1 (systemd-nspawn)" if layout.boot == "systemd" else "sshd as PID 1 (chroot)"
                say(f"nodes: starting {len(layout.nodes)} on {layout.net}.0/24 ({', '.join(layout.names)}), {how}")
                specs = [f"{n.name}={n.address}" + (f":gpu{n.gpus}" if n.gpus else "") for n in layout.nodes]
                self._nodes_sh("up", rootfs, repo, layout.net, layout.prefix, *specs, timeout=600, boot=layout.boot,
                               extra_env={"NODES_LAYERS": ":".join(layers), "NODES_BINDS": " ".join(binds)})
                self._attach_standins(layout, Path(spec_path), say)
                seconds["nodes"] = time.monotonic() - t
            if images:
                self._bake(layout, images, say, seconds, ansible_progress)
        result = None
        if configure:
            t = time.monotonic()
            result = self.configure(check=check, diff=diff, progress=ansible_progress)
            seconds["configure"] = time.monotonic() - t
        return UpResult(layout=layout, seconds=seconds, configure=result)

    @contextlib.contextmanager
    def _removed_on_failure(self) -> Iterator[None]:
        """An ``up`` that fails (or is interrupted) before its nodes are up removes what it made and
        gives back its node names, then re-raises: otherwise the next ``up`` of the same spec is
        refused for names a cluster that never came up still holds. A state folder that existed
        before keeps its files (``down`` would delete them; it may hold what the user wants back).
        A failed configure is not undone: its nodes stay up for the operator to look at."""
        from clusterforge.local import registry

        existed = self.state.exists()
        try:
            yield
        except BaseException as e:
            claimed = registry.holds(self.state)  # False: refused before anything was made
            with contextlib.suppress(LocalError):  # the cause is the error to show, not a failed teardown
                self.down(keep_folder=existed)
            if isinstance(e, LocalError) and claimed:
                raise LocalError(f"{e}\n(up removed what it had made and freed its node names: nothing is left "
                                 "running; fix the cause and run up again)") from None
            raise

    def _attach_standins(self, layout: LocalLayout, spec_path: Path, say: Callable[[str], Any]) -> None:
        """Stand-in hardware (AMD device files, EFA group, NVMe loop devices) and the roles' local
        variables, before Ansible runs (standin_hw.py); its notes join the layout's overrides."""
        from clusterforge.local import standin_hw

        notes = standin_hw.attach(self.state, layout, spec_path, self.on)
        for n in notes:
            say(f"local override: {n}")
        layout.overrides.extend(notes)
        self.save_layout(layout)

    def _up_aws(
        self, spec_path: Path, net: str, *, configure: bool, check: bool, diff: bool, say: Callable[[str], Any],
        ansible_progress: Callable[[Any], None] | None,
    ) -> UpResult:
        """The AWS flavour: bridge, emulated AWS from the plan, instances that name themselves, configure."""
        from clusterforge.local.aws import flavour as fl
        from clusterforge.resolve import resolve_file

        rc = resolve_file(spec_path).require_valid("run locally")
        layout = fl.plan_aws_layout(rc, spec_path, net)
        seconds: dict[str, float] = {}
        with self._removed_on_failure():
            # the instances claim their names at boot, from the group's hosts: those are the names
            rootfs, repo = self._prepare(layout, say, seconds, [h for g in rc.with_role("compute") for h in g.hosts])
            self._nodes_sh("bridge", rootfs, repo, layout.net, layout.prefix, timeout=120)
            aws = fl.AwsFlavour(self, layout)
            t = time.monotonic()
            aws.start_cloud(rc, say)
            want = fl.expected_instances(rc)
            say(f"instances: waiting for {want} to boot and claim their names (at most {fl.BOOT_TIMEOUT_S} s)")
            aws.wait_named(want)
            layout = aws.refresh_layout()
            seconds["instances"] = time.monotonic() - t
        say("instances: " + ", ".join(f"{n.name}={n.instance_id}@{n.address}" for n in layout.nodes))
        result = None
        if configure:
            t = time.monotonic()
            result = self.configure(check=check, diff=diff, progress=ansible_progress)
            seconds["configure"] = time.monotonic() - t
        return UpResult(layout=layout, seconds=seconds, configure=result)

    def _prepare(
        self, layout: LocalLayout, say: Callable[[str], Any], seconds: dict[str, float], slurmd_names: Sequence[str],
    ) -> tuple[str, str]:
        """Claim the slurmd node names (registry.py), print the overrides, make the state folder,
        the cached rootfs (the local image; the AWS flavour's AMI) and apt repository, and write
        the state files. Returns (rootfs, repo)."""
        from clusterforge.local import registry

        existed = self.state.exists()
        self.state.mkdir(parents=True, exist_ok=True)
        try:
            registry.claim(self.state, layout.cluster, slurmd_names, layout.source)
        except LocalError:
            if not existed:
                self.state.rmdir()  # refused before anything was made: leave nothing behind
            raise
        for o in layout.overrides:
            say(f"local override: {o}")
        os.chmod(self.state, 0o700)
        t = time.monotonic()
        cache = os.environ.get("CLUSTERFORGE_CACHE", "/var/cache/clusterforge")
        say(f"rootfs: Debian {layout.suite} minbase with systemd (cached after the first run)")
        rootfs = self._script(ROOTFS_SH, cache, layout.suite, "node", timeout=900)
        seconds["rootfs"] = time.monotonic() - t
        t = time.monotonic()
        say(f"apt repository: Debian {layout.suite} packages + vendor stand-ins (cached after the first run)")
        repo = self._script(REPO_SH, str(PACKAGES), cache, layout.suite, timeout=900)
        seconds["repo"] = time.monotonic() - t
        self._write_state(layout)
        return rootfs, repo

    def _layers(
        self, layout: LocalLayout, rootfs: str, say: Callable[[str], Any], seconds: dict[str, float]
    ) -> list[str]:
        """The read-only layers over the nodes' rootfs, top first: the PyTorch one when asked for."""
        if layout.torch is None:
            return []
        t = time.monotonic()
        say(f"torch: PyTorch {layout.torch} for the nodes' python3, a layer of the rootfs (cached after the first "
            "run; the first downloads and installs about 3 GB)")
        cache = os.environ.get("CLUSTERFORGE_CACHE", "/var/cache/clusterforge")
        layer = self._script(TORCH_SH, rootfs, layout.torch, cache, timeout=TORCH_TIMEOUT_S)
        seconds["torch"] = time.monotonic() - t
        return [layer]

    def _images(self, layout: LocalLayout, rootfs: str, repo: str, say: Callable[[str], Any]) -> dict[str, Any]:
        """``--image baked``: each node's image (image.py); the baked ones go into STATE/node-images,
        which nodes.sh stacks under the node's own layer. Returns node name -> NodeImage."""
        from clusterforge.local import image as img

        images = img.node_images(layout, self.spec_file, rootfs, repo)
        ready = {name: im for name, im in images.items() if im.ready}
        for im in ready.values():
            img.used(im)
        tmp = self.state / "node-images.tmp"
        tmp.write_text("".join(f"{name} {im.path}\n" for name, im in ready.items()))
        os.replace(tmp, self.state / "node-images")
        layout.images = {name: im.key for name, im in images.items()}
        self.save_layout(layout)
        keys = sorted({im.key for im in images.values()})
        missing = sorted({im.key for im in images.values() if not im.ready})
        say(f"images: {len(keys)} for {len(images)} nodes (one per node group), {len(keys) - len(missing)} baked"
            + (f", {len(missing)} to bake from the image phase of site.yml (--tags packages) on bare nodes"
               if missing else ""))
        return images

    def _bake(
        self, layout: LocalLayout, images: dict[str, Any], say: Callable[[str], Any], seconds: dict[str, float],
        ansible_progress: Callable[[Any], None] | None,
    ) -> None:
        """Bake the images the nodes lack: the image phase of site.yml on the nodes that booted bare
        (one per missing image is enough, but every such node runs it: the full run needs the
        packages on all of them anyway), then each missing image from one of them."""
        from clusterforge.local import image as img

        bare = [name for name, im in images.items() if not im.ready]
        if not bare:
            return
        t = time.monotonic()
        r = self.configure(tags="packages", limit=",".join(bare), progress=ansible_progress)
        if not r.ok:
            raise LocalError(f"the image phase (site.yml --tags packages) failed on {', '.join(bare)} "
                             f"(rc={r.rc}); no image was baked and the nodes are up to look at: "
                             f"`clusterforge local status --state {self.state}`")
        baked: dict[str, Path] = {}
        for name in bare:
            im = images[name]
            if im.key in baked:
                continue
            n = layout.node(name)
            meta = {"baked_from": name, "cluster": layout.cluster, "source": layout.source, "suite": layout.suite,
                    "net": layout.net}
            baked[im.key] = img.bake(im, self.state / "nodes" / n.node_id / "upper", meta,
                                     keep=[i.path for i in images.values()])
            say(f"image: baked {baked[im.key]} (node group {im.node_group}) from {name}")
        seconds["image"] = time.monotonic() - t

    def _shared_folders(self, layout: LocalLayout) -> list[str]:
        """SRC:DST binds of the storage stand-ins: one folder of this machine per storage[] entry,
        world-writable with the sticky bit (as /tmp: each user's job makes its own folder there)."""
        binds = []
        for name, mount in layout.shared.items():
            src = self.state / "storage" / name
            src.mkdir(parents=True, exist_ok=True)
            os.chmod(src, 0o1777)
            binds.append(f"{src}:{mount}")
        return binds

    def _script(self, script: Path, *args: str, timeout: float) -> str:
        try:
            p = proc.run([str(script), *args], timeout=timeout)
        except proc.ProcTimeout:
            raise LocalError(f"{script.name} did not finish within {timeout:.0f} s") from None
        if p.returncode != 0:
            raise LocalError(f"{script.name} failed (rc={p.returncode}): {p.stderr.strip()[-2000:]}")
        return p.stdout.strip().splitlines()[-1]

    def _write_state(self, layout: LocalLayout) -> None:
        self.spec_file.write_text(
            f"# The effective spec of the local cluster: {layout.source} with local mode's overrides.\n"
            + yaml.safe_dump(layout.spec, sort_keys=False)
        )
        self.save_layout(layout)
        inv = self.state / "inventory-local"
        (inv / "group_vars").mkdir(parents=True, exist_ok=True)
        # an (empty) hosts file makes the folder an inventory source whose group_vars apply
        (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {}}, explicit_start=True))  # "---\nall: {}\n"
        lv = local_vars(layout.net, layout.boot)
        lv["ansible_ssh_private_key_file"] = str(self.state / "id_ed25519")
        # SSH control masters in the state folder, so that `down` finds and stops them
        lv["ansible_control_path_dir"] = str(self.state / "cp")
        (inv / "group_vars" / "all.yml").write_text(
            "# Local mode's Ansible variables (clusterforge/local/layout.py: local_vars).\n"
            + yaml.safe_dump(lv, sort_keys=False)
        )
        sfile = self.state / "secrets.yml"
        if not sfile.exists():  # generated once, 0600, never printed; what Ansible Vault holds in production
            fd = os.open(sfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                yaml.safe_dump({"slurmdbd_storage_pass": secrets.token_urlsafe(24)}, fh)

    def secrets(self) -> dict[str, str]:
        data = yaml.safe_load((self.state / "secrets.yml").read_text())
        return {str(k): str(v) for k, v in data.items()}

    # ------------------------------------------------------------------------- configure
    def configure(
        self,
        *,
        check: bool = False,
        diff: bool = False,
        tags: str | None = None,
        limit: str | None = None,
        progress: Callable[[Any], None] | None = None,
        playbook: str = "site.yml",
        extra_vars: dict[str, Any] | None = None,
        strategy: str | None = None,
    ) -> Any:
        """``clusterforge configure`` on the local nodes: the production playbook, from the bridge.
        ``strategy``: linear or mitogen (``configure``'s; default $CLUSTERFORGE_ANSIBLE_STRATEGY)."""
        from clusterforge.configure import configure

        layout = self.layout()
        if not self.is_up():
            raise LocalError(f"local cluster {layout.cluster} is not up: run `clusterforge local up`")
        aws_kw: dict[str, Any] = {}
        if layout.flavour == "aws":
            from clusterforge.local.aws.flavour import aws_env

            aws = self.aws()
            # the inventory plugin reaches the emulated AWS through AWS_URL; the stack outputs
            # come from its state, in the program's StackOutputs shape
            aws_kw = {"stack_outputs": aws.write_stack_outputs(), "envvars": aws_env(layout.net, aws.region)}
        with in_netns(f"{layout.prefix}-br"):
            return configure(
                self.spec_file,
                **aws_kw,
                inventory_dir=self.state / "inventory" / layout.cluster,
                extra_inventories=[self.state / "inventory-local"],
                secrets=self.secrets(),
                keep_artifacts=self.state / "artifacts",
                progress=progress,
                check=check,
                diff=diff,
                tags=tags,
                limit=limit,
                playbook=playbook,
                extra_vars=extra_vars,
                strategy=strategy,
            )

    # -------------------------------------------------------------------- on the nodes
    def exec_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """argv that runs ``argv`` inside node ``node`` (its namespaces and root)."""
        n = self.layout().node(node)  # a clear error for an unknown name
        return [str(NODES_SH), "exec", str(self.state), n.node_id, *argv]

    def on(self, node: str, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a shell script on a node, as root, with a login shell's environment (a deadline that
        passes is a ``ProcTimeout``: one message, not a traceback)."""
        return proc.run(self.exec_argv(node, ["/bin/bash", "-lc", script]), timeout=timeout)

    def ssh_argv(self, node: str, argv: Sequence[str] = ()) -> list[str]:
        """argv of a real SSH login to ``node`` from the bridge (as an operator would log in)."""
        layout = self.layout()
        n = layout.node(node)
        return [
            "ip", "netns", "exec", f"{layout.prefix}-br", "ssh", "-i", str(self.state / "id_ed25519"),
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            *(["-t"] if not argv else []), f"root@{n.address}", *argv,
        ]

    def submit_node(self) -> str:
        """Where users run Slurm commands: the login node, else the controller."""
        layout = self.layout()
        n = layout.first("login") or layout.first("controller")
        if n is None:
            raise LocalError(f"local cluster {layout.cluster} has neither a login node nor a controller")
        return n.name

    def status(self) -> dict[str, Any]:
        """Nodes (running or not) and, when the controller answers, ``sinfo``'s view."""
        layout = self.layout()
        nodes = {}
        for n in layout.nodes:
            alive = self._nodes_sh("alive", n.node_id, check=False).returncode == 0
            nodes[n.name] = {"address": n.address, "role": n.role, "group": n.group, "gpus": n.gpus, "running": alive}
        sinfo = ""
        if self.is_up() and nodes[self.submit_node()]["running"]:
            p = self.on(self.submit_node(), "timeout 20 sinfo -N -o '%N %P %T %G %E'", timeout=40)
            sinfo = p.stdout if p.returncode == 0 else f"sinfo failed: {p.stderr.strip()}"
        st: dict[str, Any] = {
            "cluster": layout.cluster, "state": str(self.state), "up": self.is_up(), "nodes": nodes, "sinfo": sinfo,
        }
        if layout.flavour == "aws":
            from clusterforge.local.aws.hypervisor import read_instances

            st["instances"] = {
                iid: {"address": b.address, "group": b.group, "state": b.state, "name": b.name,
                      "claim_error": b.claim_error}
                for iid, b in read_instances(self.state).items()
            }
            st["notes"] = self.aws().inventory_notes()
        return st

    # ------------------------------------------------------------------------------ down
    def down(self, *, keep_folder: bool = False) -> list[str]:
        """Remove everything ``up`` made; safe to run twice or after a crash. Returns what it removed.
        ``keep_folder`` keeps the state folder's other files (a failed ``up`` in a folder that existed)."""
        removed: list[str] = []
        if not self.state.exists():
            return removed
        for f in ("pids", "netns"):
            p = self.state / f
            if p.is_file():
                removed += [f"{f[:-1] if f == 'pids' else f}: {ln}" for ln in p.read_text().split() if ln]
        self._nodes_sh("down", timeout=600)
        from clusterforge.local import standin_hw

        removed += standin_hw.detach(self.state)  # after the nodes: their mounts held the loops
        # Ansible's SSH control masters of this cluster (their sockets are in the state folder)
        cp = proc.run(["pgrep", "-f", f"{self.state}/cp/"], timeout=30)
        for pid in cp.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 15)
                removed.append(f"ssh control master: {pid}")
        if not keep_folder:
            shutil.rmtree(self.state)
            removed.append(f"state folder {self.state}")
        from clusterforge.local import registry

        if registry.release(self.state):
            removed.append(f"node names of {self.state} ({registry.REGISTRY})")
        return removed
