#!/bin/bash
# Install the Ansible collections the roles use, without Ansible Galaxy.
#   scripts/fetch-collections.sh [DEST]      (DEST default: ~/.ansible/collections)
# Where Galaxy is reachable, `ansible-galaxy collection install -r collections/requirements.yml`
# does the same. Here Galaxy is not: the collections are taken from the `ansible` wheel on PyPI
# (one download, only the needed folders unpacked). The wheel version pins the collection set.
set -euo pipefail
DEST=${1:-${ANSIBLE_COLLECTIONS_DIR:-$HOME/.ansible/collections}}
ANSIBLE_WHEEL_VERSION=${ANSIBLE_WHEEL_VERSION:-12.3.0}
NEEDED=(community/general ansible/posix community/mysql amazon/aws)
have=1
for c in "${NEEDED[@]}"; do [ -d "$DEST/ansible_collections/$c" ] || have=0; done
if [ $have = 1 ]; then echo "collections present in $DEST"; exit 0; fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
python3 -m pip download -q --no-deps "ansible==$ANSIBLE_WHEEL_VERSION" -d "$TMP"
mkdir -p "$DEST"
python3 - "$TMP"/ansible-*.whl "$DEST" "${NEEDED[@]}" <<'PY'
import sys, zipfile
whl, dest, *needed = sys.argv[1:]
prefixes = tuple(f"ansible_collections/{c}/" for c in needed)
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.startswith(prefixes)]
    z.extractall(dest, members)
print(f"unpacked {len(members)} files of {', '.join(needed)} into {dest}")
PY
