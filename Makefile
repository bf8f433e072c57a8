# clusterforge: the two commands a new user needs (README, first lines).
#   make demo   set up (apt + pip, as root), build the local 6-node GPU Slurm cluster, run jobs on it
#   make test   set up and run the whole test-suite (what CI runs)
.PHONY: setup demo demo-render test test-local lint bench

setup:
	scripts/setup-deps.sh

demo: setup
	scripts/demo.sh

# validate and render every example, check the local render with real daemons, plan p5 offline
demo-render: setup
	scripts/demo-render.sh

# the end-to-end local clusters and the rest of the suite side by side (scripts/run-tests.sh says why)
test: setup
	scripts/run-tests.sh

# only the end-to-end local cluster test (tests/test_local_cluster.py): bare nodes -> jobs -> faults -> down
test-local: setup
	python3 -m pytest -q -p no:cacheprovider -m local

lint:
	ruff check clusterforge tests benchmarks infra policy
	mypy --strict clusterforge

bench:
	python3 benchmarks/render_scale.py
	python3 benchmarks/plan_scale.py
