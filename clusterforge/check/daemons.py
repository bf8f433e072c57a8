"""Where the check's Slurm and munge binaries come from, and how each one is started (``Daemons``).

The host's own daemons serve when they are of the target's release family (``releases``).
Otherwise the daemons of the family's cached Debian root filesystem run chrooted, each inside a
private mount namespace that the check already creates for it, over a private *view* of the
root filesystem: a read-only overlay of a small stub layer (the mount points below) over the
cached root, with the check's temp dir bind-mounted at its own path, ``/proc``, ``/sys``,
``/dev`` (or the fake-GPU overlay of ``slurmd -G``) and the namespace's ``/etc/hosts``. Nothing
is written into the shared cached root, the mounts die with the namespace, and two checks can
run at once. Paths in the copies of slurm.conf are the same inside and outside (the temp dir is
at its own path), so the rest of the check does not care which daemons run.
"""

from __future__ import annotations

import pwd
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clusterforge.check.releases import Family

__all__ = ["SLURM_TOOLS", "Daemons", "rootfs_user"]

# what the check runs from the family's release (host paths in host mode, rootfs paths otherwise)
SLURM_TOOLS = ("slurmctld", "slurmd", "scontrol", "munge", "munged")


def rootfs_user(root: Path, name: str) -> pwd.struct_passwd | None:
    """The user ``name`` as the root filesystem's /etc/passwd has it: the chrooted slurmctld drops
    to that uid (Debian's slurm is 64030 there, whatever the host says), so the check's state
    folders must belong to it."""
    try:
        text = (root / "etc" / "passwd").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        f = line.split(":")
        if len(f) == 7 and f[0] == name and f[2].isdigit() and f[3].isdigit():
            return pwd.struct_passwd((f[0], f[1], int(f[2]), int(f[3]), f[4], f[5], f[6]))
    return None


@dataclass(frozen=True)
class Daemons:
    """The release that loads this check's render. ``tools``: host paths of ``unshare``,
    ``nsenter``, ``ip`` and ``chroot``, and the paths of ``SLURM_TOOLS`` (on the host, or inside
    ``root``, the cached root filesystem; None for the host's own daemons)."""

    family: Family
    version: str  # what ``slurmctld -V`` says: "slurm-wlm 24.11.5"
    tools: Mapping[str, str]
    root: Path | None = None
    tmp: Path | None = None  # the check's temp dir (root mode: bind-mounted into the view)

    @property
    def where(self) -> str:
        return "this host's daemons" if self.root is None else f"{self.family.debian} root filesystem {self.root}"

    @property
    def view(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "rootfs" / "view"

    def prepare(self) -> None:
        """Root mode: the stub layer's mount points (the temp dir's own path, /etc/hosts) and the
        view's mount point, all inside the temp dir."""
        if self.root is None or self.tmp is None:
            return
        stub = self.tmp / "rootfs" / "stub"
        (stub / self.tmp.relative_to("/")).mkdir(parents=True)
        (stub / "etc").mkdir(parents=True, exist_ok=True)
        (stub / "etc" / "hosts").touch(0o644)
        self.view.mkdir()
        for d in (self.tmp / "rootfs", stub, self.view):
            d.chmod(0o755)

    def mounts(self, hosts: Path | None = None, dev_lower: Path | None = None) -> str:
        """Shell commands (``&&``-joined, ending in ``&&`` when not empty) that set up a fresh mount
        namespace for one daemon: ``hosts`` over /etc/hosts, ``dev_lower`` laid over /dev."""
        q = shlex.quote
        cmds: list[str] = []
        if self.root is None:
            if dev_lower is not None:
                cmds.append(f"mount -t overlay overlay -o lowerdir={q(str(dev_lower))}:/dev /dev")
            if hosts is not None:
                cmds.append(f"mount --bind {q(str(hosts))} /etc/hosts")
        else:
            assert self.tmp is not None
            v, stub = str(self.view), str(self.tmp / "rootfs" / "stub")
            cmds += [
                f"mount -t overlay overlay -o ro,lowerdir={q(stub)}:{q(str(self.root))} {q(v)}",
                f"mount --bind {q(str(self.tmp))} {q(v + str(self.tmp))}",
                f"mount -t proc proc {q(v)}/proc",
                f"mount --rbind /sys {q(v)}/sys",
            ]
            if dev_lower is not None:
                cmds.append(f"mount -t overlay overlay -o lowerdir={q(str(dev_lower))}:/dev {q(v)}/dev")
            else:
                cmds.append(f"mount --rbind /dev {q(v)}/dev")
            if hosts is not None:
                cmds.append(f"mount --bind {q(str(hosts))} {q(v)}/etc/hosts")
        return "".join(c + " && " for c in cmds)

    def argv(self, tool: str) -> list[str]:
        """How to run ``tool`` in a namespace whose mounts are set up (``mounts``): the host's
        binary, or the root filesystem's one chrooted into the view."""
        if self.root is None:
            return [self.tools[tool]]
        return [self.tools["chroot"], str(self.view), self.tools[tool]]

    def exec(self, tool: str) -> str:
        return "exec " + " ".join(shlex.quote(a) for a in self.argv(tool))

    def isolated(self, tool: str, args: list[str], hosts: Path | None = None) -> list[str]:
        """``tool args`` in a private mount namespace of its own (the client parse, munged):
        host mode needs none, root mode needs the view."""
        if self.root is None:
            return [self.tools[tool], *args]
        script = self.mounts(hosts) + self.exec(tool) + ' "$@"'
        return [self.tools["unshare"], "--mount", "--", "sh", "-c", script, "sh", *args]
