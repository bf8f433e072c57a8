"""Run ``clusterforge.configure.configure`` once and print its result as JSON (test helper).

Runs inside the test bridge namespace (``testhosts.sh ctl STATE python3 run_configure.py ...``),
where the test hosts are reachable. The secret is read from a file and handed to configure() as
a mapping, the way a caller holding it in memory (AWS SSM, a vault client) would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from clusterforge.configure import TextProgress, configure


def main() -> int:
    spec, inv_dir, test_inv, secrets_file, artifacts = sys.argv[1:6]
    extra = sys.argv[6:]
    secrets = yaml.safe_load(Path(secrets_file).read_text())["clusterforge_secrets"]
    lines: list[str] = []
    res = configure(
        Path(spec),
        inventory_dir=Path(inv_dir),
        extra_inventories=[Path(test_inv)],
        secrets=secrets,
        keep_artifacts=Path(artifacts),
        progress=TextProgress(lines.append),
        check="--check" in extra,
        diff="--diff" in extra,
    )
    print(json.dumps({"rc": res.rc, "status": res.status, "stats": res.stats, "changed": res.changed,
                      "seconds": round(res.duration_s, 1), "failures": res.failures, "progress": lines}))
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
