# ddp-operator: every target creates .venv (the project, editable, with its test and trainer
# extras: hack/venv.sh) when missing, and uses it. See README.md.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help venv lint docs docs-serve format unit test cluster-up cluster-down cluster-status multikueue-up demo clean kind-up e2e \
	bench bench-quick bench-gang chaos prereqs-demo prereqs-test prereqs-cluster release

help:
	@echo "make demo         local cluster (unless KUBECONFIG names another), CRD, operator, a sample job to Succeeded"
	@echo "make test         lint, unit tests and cluster tests (brings the local cluster up if needed)"
	@echo "make cluster-up | cluster-down | cluster-status   the local control plane"
	@echo "make multikueue-up  a second local cluster (MultiKueue's worker), Kueue on both, connected"
	@echo "make docs | docs-serve  the documentation site (docs/): built strictly into .site/, or served"
	@echo "make release REGISTRY=host/path   the operator and trainer images and the chart, built and pushed there"
	@echo "make bench | bench-quick   benchmarks: ours vs raw client vs Kubeflow's operator"
	@echo "make bench-gang            what gang scheduling costs (64-worker job, each mode vs none)"
	@echo "make chaos [CHAOS_MINUTES=3] [CHAOS_SEED=n]   scripted jobs under random faults (local)"

# Every tool the target will need, checked (as root on Debian: installed) before it starts
# anything: hack/prereqs.sh.
prereqs-demo prereqs-test prereqs-cluster:
	hack/prereqs.sh $(@:prereqs-%=%)

# The project, editable, on its dependencies' environment cached in ~/.cache/ddp-operator.
$(STAMP): pyproject.toml hack/venv.sh
	PYTHON=$(PYTHON) hack/venv.sh
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

SHELL_SCRIPTS := $(wildcard hack/*.sh hack/cluster/*.sh) .ci/run

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	@if command -v shellcheck >/dev/null; then shellcheck -x $(SHELL_SCRIPTS); \
	else echo "lint: shellcheck not installed; shell scripts not checked (apt-get install shellcheck)"; fi

# The documentation site (docs/, mkdocs.yml): strict, so a broken link or anchor fails.
# tests/test_docs.py builds it in `make test` too.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

unit: $(STAMP)
	$(BIN)/pytest -m "not cluster and not torch" $(PYTEST_ARGS)

# Everything that can run here runs here: no test is skipped (docker/gpu tests are not selected).
# hack/test.sh: lint beside the local cluster's build (unless KUBECONFIG), the cluster up, the
# suite (four pytest sessions, see docs/development/tests.md; DDP_TEST_WORKERS=0: one), the
# cluster down if it brought it up, the 25 slowest tests and the time against the budget.
test: prereqs-test
	PYTEST_ARGS="$(PYTEST_ARGS)" hack/test.sh

cluster-up: prereqs-cluster $(STAMP)
	hack/cluster/cluster.sh up

cluster-down:
	hack/cluster/cluster.sh down

cluster-status:
	hack/cluster/cluster.sh status

# MultiKueue for real: the local cluster as manager, a second one as worker (cluster-down takes
# both down); docs/tasks/multikueue.md.
multikueue-up: cluster-up
	hack/cluster/multikueue.sh up

demo: prereqs-demo $(STAMP)
	hack/demo.sh

# The release of this checkout (docs/getting-started/your-cluster.md): REGISTRY/ddp-operator and
# REGISTRY/ddp-trainer at the chart's version, and the chart as oci://REGISTRY/charts; needs
# helm and docker, podman or buildah (hack/release.sh).
REGISTRY ?=
release:
	REGISTRY="$(REGISTRY)" hack/release.sh

# Benchmarks against the local cluster (brought up if needed); see bench/README.md.
bench: cluster-up
	$(BIN)/python bench/run.py

bench-quick: cluster-up
	$(BIN)/python bench/run.py --quick

# What gang scheduling costs: one 64-worker job, each gang mode the cluster serves vs none.
bench-gang: cluster-up
	if [[ -z "$${KUBECONFIG:-}" ]]; then for s in kueue coscheduling volcano; do hack/cluster/$$s.sh up; done; fi
	$(BIN)/python bench/gang.py

# Scripted jobs under random faults on the local cluster (brought up if needed); the faults,
# the checks and the report: tests/harness/chaos.py.
CHAOS_MINUTES ?= 3
CHAOS_SEED ?=
chaos: cluster-up
	PYTHONPATH=tests $(BIN)/python -m harness.chaos --minutes $(CHAOS_MINUTES) \
		$(if $(CHAOS_SEED),--seed $(CHAOS_SEED))

# For users with Docker: a kind cluster with the images, the chart and kwok's fake nodes.
kind-up: $(STAMP)
	hack/kind-up.sh

e2e: $(STAMP)
	hack/e2e.sh $(PYTEST_ARGS)

clean: cluster-down
	rm -rf .cluster $(VENV)
