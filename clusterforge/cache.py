"""The user cache folder: what a verb keeps between runs to skip work it has already done.

Two kinds live here: Jinja's compiled templates (``render``) and the plans of a ``diff``'s base
side (``clusterforge.plan.cache``). Neither is ever an input: every entry is keyed by everything
its value depends on, and deleting the folder changes no output, only the time.

``$CLUSTERFORGE_CACHE_DIR`` names the folder (default ``$XDG_CACHE_HOME/clusterforge``, else
``~/.cache/clusterforge``); ``CLUSTERFORGE_NO_CACHE=1`` turns caching off. A folder another user
owns, or that others may write, is not used: a compiled template is code that runs, and a plan is
what a review trusts.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def cache_root() -> Path:
    if os.environ.get("CLUSTERFORGE_CACHE_DIR"):
        return Path(os.environ["CLUSTERFORGE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clusterforge"


def cache_dir(kind: str) -> Path | None:
    """The folder for one kind of entry (created 0700), or None when caching is off or unsafe."""
    if os.environ.get("CLUSTERFORGE_NO_CACHE", "") not in ("", "0"):
        return None
    try:
        d = cache_root() / kind
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = d.lstat()
    except (OSError, RuntimeError):  # RuntimeError: no home folder to expand ~ in
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o022:
        return None
    return d
