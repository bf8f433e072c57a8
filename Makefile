# clusterforge: the two commands a new user needs (README, first lines).
#   make demo   set up (apt + pip, as root) and run the main job on the built-in example
#   make test   set up and run the whole test-suite (what CI runs)
.PHONY: setup demo test lint bench

setup:
	scripts/setup-deps.sh

demo: setup
	scripts/demo.sh

test: setup
	python3 -m pytest -q -p no:cacheprovider

lint:
	ruff check clusterforge tests benchmarks infra policy
	mypy --strict clusterforge

bench:
	python3 benchmarks/render_scale.py
	python3 benchmarks/plan_scale.py
