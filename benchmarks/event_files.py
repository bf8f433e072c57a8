"""What ansible-runner's event files cost on disk and in memory (tmpfs), per event.

    python3 benchmarks/event_files.py [--events 1500] [--bytes 4700] [--disk DIR] [--repeat 5]

Writes ``--events`` events of about ``--bytes`` each with ansible-runner's own
``IsolatedFileWrite.set`` (what the ``awx_display`` callback does for every event, in
ansible-playbook's controller thread: JSON-encode, create, write, rename), once in a folder on
``--disk`` (default: the system's temporary folder) and once in ``/dev/shm``, and prints the median
microseconds per event of ``--repeat`` rounds and the ratio. 1,500 events of 4.7 kB is the six-node
local cluster's re-run (1,444 events, 6.7 MB). ``clusterforge configure`` puts ansible-runner's
private folder on tmpfs when it has room (``clusterforge/configure/workdir.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path


def one_round(parent: Path, events: int, size: int) -> float:
    """Seconds for ``events`` calls of IsolatedFileWrite.set in a new folder under ``parent``."""
    from ansible_runner.display_callback.callback.awx_display import IsolatedFileWrite

    d = Path(tempfile.mkdtemp(prefix="cf-event-files-", dir=parent))
    try:
        os.environ["AWX_ISOLATED_DATA_DIR"] = str(d)
        w = IsolatedFileWrite()
        payload = {"event": "runner_on_ok", "event_data": {"res": {"stdout": "x" * size}}}
        keys = [f":1:ev-{uuid.uuid4()}" for _ in range(events)]
        t = time.perf_counter()
        for k in keys:
            w.set(k, payload)
        return time.perf_counter() - t
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1500)
    ap.add_argument("--bytes", type=int, default=4700)
    ap.add_argument("--disk", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    shm = Path("/dev/shm")
    if not shm.is_dir():
        print("no /dev/shm on this machine")
        return 2
    print(f"load {os.getloadavg()[0]:.2f}; {args.events} events of {args.bytes} bytes, median of {args.repeat}")
    per: dict[str, float] = {}
    for label, parent in (("disk " + str(args.disk), args.disk), ("tmpfs /dev/shm", shm)):
        runs = [one_round(parent, args.events, args.bytes) for _ in range(args.repeat)]
        per[label] = statistics.median(runs) / args.events * 1e6
        print(f"  {label:<28} {per[label]:8.1f} us per event  ({statistics.median(runs):.3f} s a run)")
    disk, mem = per.values()
    print(f"  disk / tmpfs: {disk / mem:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
