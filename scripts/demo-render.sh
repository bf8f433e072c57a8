#!/usr/bin/env bash
# The main job on the built-in default, no cloud account needed: validate and render every
# example, prove the local cluster's configs with the real Slurm daemons, and plan the p5
# training cluster offline (AWS resources, rendered files, hourly cost).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
for spec in examples/*.yaml; do
  name=$(basename "$spec" .yaml)
  echo "== clusterforge validate $spec"
  clusterforge validate "$spec" | tail -1
  echo "== clusterforge render $spec --out $OUT/$name"
  clusterforge render "$spec" --out "$OUT/$name" | tail -1
done
echo "== clusterforge check $OUT/local   (real slurmctld + slurmd -G on the rendered files)"
clusterforge check "$OUT/local" --timeout 120 | grep -vE '^  slurm.conf \('
if clusterforge plan --help >/dev/null 2>&1; then
  echo "== clusterforge plan examples/p5-training.yaml   (offline, Pulumi mock engine)"
  clusterforge plan examples/p5-training.yaml | tail -40
fi
echo
echo "Rendered configs are in $OUT/<example>/ (manifest.json lists where each file goes)."
