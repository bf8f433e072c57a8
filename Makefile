# clusterforge: the two commands a new user needs (README, first lines).
#   make demo   set up (apt + pip, as root) and run the main job on the built-in example
#   make test   set up and run the whole test-suite (what CI runs)
.PHONY: setup demo test test-hosts lint bench

setup:
	scripts/setup-deps.sh

demo: setup
	scripts/demo.sh

test: setup
	python3 -m pytest -q -p no:cacheprovider -m "not hosts"

# Ansible roles against local test hosts (netns + debootstrap rootfs + sshd): minutes, not yet in CI
test-hosts: setup
	python3 -m pytest -q -p no:cacheprovider -m hosts

lint:
	ruff check clusterforge tests benchmarks infra policy
	mypy --strict clusterforge

bench:
	python3 benchmarks/render_scale.py
	python3 benchmarks/plan_scale.py
