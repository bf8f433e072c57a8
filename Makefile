# clusterforge: the two commands a new user needs (README, first lines).
#   make demo   set up (apt + pip, as root) and run the main job on the built-in examples
#   make test   set up and run the whole test-suite (what CI runs)
.PHONY: setup demo demo-local test test-local lint bench

setup:
	scripts/setup-deps.sh

demo: setup
	scripts/demo.sh

# the local GPU Slurm cluster (clusterforge local up) and jobs on it; not yet green end to end
demo-local: setup
	scripts/demo-local.sh

test: setup
	python3 -m pytest -q -p no:cacheprovider --durations=25

# only the end-to-end local cluster test (tests/test_local_cluster.py): bare nodes -> jobs -> faults -> down
test-local: setup
	python3 -m pytest -q -p no:cacheprovider -m local

lint:
	ruff check clusterforge tests benchmarks infra policy
	mypy --strict clusterforge

bench:
	python3 benchmarks/render_scale.py
	python3 benchmarks/plan_scale.py
