# storage-gateway. `make help` lists the targets.
#
# Everything a target needs is built or installed here: the Kubernetes control
# plane for tests (test/tools/build-control-plane.sh, cached outside the clone)
# and golangci-lint (pinned, cached outside the clone).

SHELL := bash
comma := ,
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
# One build configuration for all that make builds — the tests, the binaries
# they start, make build and run, and the image test's reproduction of the
# Containerfile's build (static, paths trimmed) — so that each package
# compiles once, not once per configuration.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/storage-gateway
# make run INSTANCE=n runs another instance beside the first: its own state
# directory, ports (8080 + 10n and so on) and databases, each derived from n
# unless set (SG_STATE_DIR, SG_LISTEN_ADDR, SG_DATABASE_URL,
# SG_EMBEDDED_NATS_LISTEN, DCM_ADDR, DCM_DATABASE).
ifdef INSTANCE
ifeq ($(shell [ "$(INSTANCE)" -ge 1 ] 2>/dev/null && [ "$(INSTANCE)" -le 99 ] && echo ok),)
$(error INSTANCE must be a number from 1 to 99)
endif
port = $(shell echo $$(($(1) + 10 * $(INSTANCE))))
export SG_STATE_DIR ?= $(or $(XDG_STATE_HOME),$(HOME)/.local/state)/storage-gateway-$(INSTANCE)
export SG_LISTEN_ADDR ?= :$(call port,8080)
export SG_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/storage_gateway_$(INSTANCE)?sslmode=disable
export SG_EMBEDDED_NATS_LISTEN ?= 127.0.0.1:$(call port,4223)
DCM_ADDR ?= 127.0.0.1:$(call port,8081)
DCM_DATABASE ?= service_provider_$(INSTANCE)
endif
STATE_DIR ?= $(or $(SG_STATE_DIR),$(or $(XDG_STATE_HOME),$(HOME)/.local/state)/storage-gateway)
BIN       := bin/storage-gateway
# make run: local clusters listen on loopback, which production never allows.
DEV_CLUSTER_CIDRS := 127.0.0.0/8,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7
LISTEN_ADDR := $(or $(SG_LISTEN_ADDR),:8080)
GATEWAY_URL := http://127.0.0.1:$(lastword $(subst :, ,$(LISTEN_ADDR)))
# make run DCM=1: DCM's service-provider-manager beside the gateway, started
# before it (so the gateway's first registrations reach it), both on a NATS
# server local-clusters runs on the embedded server's address.
DCM_ADDR      ?= 127.0.0.1:8081
DCM_DATABASE  ?= service_provider
EMBEDDED_NATS := $(or $(SG_EMBEDDED_NATS_LISTEN),127.0.0.1:4223)
# make run DCM=agents: the stand-in for DCM's control plane (its agent
# dispatch, test/controlplane) in its place: each environment is its
# storage agent.
ifeq ($(DCM),agents)
DCM_BUILD := $(GO) build -o bin/dcm-controlplane ./test/controlplane/cmd/controlplane
DCM_RUN   := bin/dcm-controlplane -listen $(DCM_ADDR) -nats nats://$(EMBEDDED_NATS)
DCM_READY := http://$(DCM_ADDR)/api/v1alpha1/agents
DCM_ENV   := SG_DCM_AGENT_API_URL=http://$(DCM_ADDR)/api/v1alpha1
else ifdef DCM
DCM_BUILD := $(GO) build -o bin/dcm-spm ./test/dcmtest/cmd/spm
DCM_RUN   := bin/dcm-spm -listen $(DCM_ADDR) -nats nats://$(EMBEDDED_NATS) -database $(DCM_DATABASE)
DCM_READY := http://$(DCM_ADDR)/api/v1alpha1/health
DCM_ENV   := SG_DCM_REGISTRATION_URL=http://$(DCM_ADDR)/api/v1alpha1 SG_PUBLIC_URL=$(GATEWAY_URL) SG_HEALTH_UNHEALTHY_CODE=503 SG_AUTH_DCM_TRUSTED_NETWORKS=127.0.0.0/8
endif
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || c=$$c-dirty; echo $$c; })
LDFLAGS   := -s -w -X github.com/dcm-project/storage-gateway/internal/version.Version=$(VERSION) \
             -X github.com/dcm-project/storage-gateway/internal/version.Commit=$(COMMIT)

GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CACHE_DIR)/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

# The control plane the harness runs; prints its directory (builds it once).
CONTROL_PLANE = $$(bash test/tools/build-control-plane.sh)

# Locally a package whose code and inputs did not change is not run again
# (go's test cache); CI (CI set, as .ci/run does) runs everything. The
# tests mostly wait (on clusters, outages, timeouts; make test kept two
# cores a third busy with two packages at once): four packages at once,
# and four tests marked parallel.
GO_TEST_FLAGS ?= -timeout 45m -p 4 -parallel 4 $(if $(CI),-count=1)

.PHONY: help build run run-reset test bench lint fmt generate check-generated control-plane kind-up clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build bin/storage-gateway
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/storage-gateway

control-plane: ## build and cache etcd, kube-apiserver, kube-controller-manager (once)
	@echo "control plane: $(CONTROL_PLANE)"

# make run authenticates API callers with static tokens: each run replaces the
# admin token of the subject make-run and prints it once the clusters are
# registered. With DCM=1, token-less requests from loopback get the dcm role
# (DCM's service-provider-manager sends no token). The recipe is one shell:
# it opens the state directory's lock file on fd 9 and local-clusters
# -preflight locks it, so a second run is refused before anything is
# written, and every process of the run holds the lock until it ends. fleet
# runs in place of the recipe's shell, so a signal from the terminal
# (Ctrl-C, or SIGHUP when it is closed) reaches it directly: it stops the
# gateway and every cluster process and exits 0.
run: build ## run the gateway (embedded NATS) with two local clusters, registered; DCM=1 adds DCM's service-provider-manager, DCM=agents a stand-in for DCM's control plane; INSTANCE=n another one beside it
	@mkdir -p $(STATE_DIR)
	$(GO) build -o bin/local-clusters ./cmd/local-clusters
	$(DCM_BUILD)
	@exec 9>>$(STATE_DIR)/make-run.lock; \
	bin/local-clusters -preflight -lock-fd 9 -state $(STATE_DIR) \
		-addresses $(LISTEN_ADDR),$(if $(filter off,$(EMBEDDED_NATS)),,$(EMBEDDED_NATS))$(if $(DCM),$(comma)$(DCM_ADDR)) || exit 1; \
	echo "$(BIN) keys init --if-missing --file $(STATE_DIR)/keyring.json"; \
	$(BIN) keys init --if-missing --file $(STATE_DIR)/keyring.json; \
	echo "$(BIN) migrate --create-database"; \
	$(BIN) migrate --create-database; \
	token=$$($(BIN) tokens create --replace --file $(STATE_DIR)/tokens.json --role admin --subject make-run | tail -n 1) || exit 1; \
	export SG_GATEWAY_TOKEN=$$token MAKE_RUN_NOTE="$$(printf '%s\n' \
		'make run: the gateway is ready. The API needs a bearer token; the admin token of this run (replaced by the next run):' \
		"  export SG_GATEWAY_TOKEN=$$token SG_GATEWAY_URL=$(GATEWAY_URL)$(if $(DCM), DCM_URL=http://$(DCM_ADDR)/api/v1alpha1)" \
		'  bin/storage-gateway env list      # the CLI sends $$SG_GATEWAY_TOKEN to $$SG_GATEWAY_URL' \
		'  curl -H "Authorization: Bearer $$SG_GATEWAY_TOKEN" $$SG_GATEWAY_URL/api/v1alpha1/environments')"; \
	SG_K8S_BIN_DIR=$(CONTROL_PLANE) SG_KEY_RING_FILE=$(STATE_DIR)/keyring.json \
	SG_AUTH_MODE=static SG_AUTH_TOKEN_FILE=$(STATE_DIR)/tokens.json \
	SG_ALLOWED_CLUSTER_CIDRS=$(DEV_CLUSTER_CIDRS) \
	$(if $(DCM),$(DCM_ENV) SG_NATS_URL=nats://$(EMBEDDED_NATS)) \
	exec bin/local-clusters -out $(STATE_DIR)/clusters \
		-gateway $(GATEWAY_URL) -register "$(BIN) env apply" -note-env MAKE_RUN_NOTE \
		-reset-hint "make run-reset$(if $(INSTANCE), INSTANCE=$(INSTANCE)) (with make run stopped) drops the local database and state to start afresh" \
		$(if $(DCM),-nats $(EMBEDDED_NATS) -also-ready $(DCM_READY) -also "$(DCM_RUN)") -- $(BIN) serve

run-reset: ## drop what make run keeps between runs: the local database (and DCM's), key ring, tokens, state (INSTANCE=n: that instance's)
	$(GO) run ./cmd/local-reset -state $(STATE_DIR) -dcm-database $(DCM_DATABASE) -gateway $(GATEWAY_URL)

kind-up: ## create kind clusters from environments/kind (laptops with a container engine)
	$(GO) run ./test/kind/cmd/kind-up -out $(STATE_DIR)/kind

# gotestsum runs make test's tests (test/tools/gotestsum); it prints how
# many ran, and then the slowest, so that the next slow test is seen.
GOTESTSUM = $$(bash test/tools/build-tool.sh gotestsum gotest.tools/gotestsum)
SLOW_TEST ?= 20s
# The longest packages first: go starts them before the short ones, which
# then run beside them, instead of after.
TEST_PACKAGES ?= ./test/e2e ./internal/clusters ./cmd/storage-gateway ./test/makerun ./...

test: check-generated ## run every test (unit, Postgres, NATS, real clusters, e2e); then the count run and the slowest
	bash test/tools/build-tools.sh
	@json=$$(mktemp); trap 'rm -f "$$json"' EXIT; status=0; \
	SG_K8S_BIN_DIR=$(CONTROL_PLANE) $(GOTESTSUM) --format pkgname-and-test-fails --jsonfile "$$json" -- $(GO_TEST_FLAGS) $(TEST_PACKAGES) || status=$$?; \
	echo "tests slower than $(SLOW_TEST), slowest first:"; \
	$(GOTESTSUM) tool slowest --jsonfile "$$json" --threshold $(SLOW_TEST); \
	exit $$status

# make bench: the product's figures against harness clusters, each beside
# its baseline of the same run (client-go straight to the cluster, a bare
# watch, the gateway with no environments), then every target beside the
# figure measured and their ratio (test/benchreport, which holds the
# targets). Every benchmark runs even when an earlier one fails; make bench
# fails when one did or a target was missed. About 45 minutes on 2 cores;
# BENCH_ENVIRONMENTS and BENCH_REPLICAS set the idle fleet's size and its
# replicas (default 10,000 on 3).
BENCH_ENVIRONMENTS ?= 10000
BENCH_REPLICAS ?= 3
bench: ## run the benchmarks (README, Benchmarks); print each target beside its figure and ratio
	@bash test/tools/build-tools.sh
	@dir=$(CONTROL_PLANE); out=$$(mktemp); trap 'rm -f "$$out"' EXIT; failed=0; \
	run() { echo "--- $$*"; SG_K8S_BIN_DIR=$$dir SG_BENCH_ENVIRONMENTS=$(BENCH_ENVIRONMENTS) SG_BENCH_REPLICAS=$(BENCH_REPLICAS) \
		$(GO) test -run '^$$' -timeout 90m "$$@" | tee -a "$$out" || failed=1; }; \
	run -bench VolumeOperations -benchtime 100x ./test/e2e; \
	run -bench ConcurrentCreates -benchtime 5x ./test/e2e; \
	run -bench 'BoundToRunning|StatusLatency|FlappingClaim' -benchtime 40x ./test/e2e; \
	run -bench SnapshotReady -benchtime 20x ./test/e2e; \
	run -bench IdleFleet -benchtime 1x ./test/e2e; \
	run -bench Replicas -benchtime 1x ./test/e2e; \
	run -bench 'FleetQuery|Placement|Authentication' -benchtime 1000x ./internal/api; \
	run -bench MetricsScrape -benchtime 1x ./internal/gateway; \
	$(GO) run ./test/benchreport -q < "$$out" || failed=1; \
	exit $$failed

# make run and make test work on macOS too: lint checks that the launcher
# behind make run, the dev commands, the gateway and every package with its
# tests build for darwin (only a Linux kernel has a parent-death signal;
# elsewhere the launcher kills its programs' process group when its parent
# dies: test/harness/lifetime_other.go). Here, not in make test, whose
# build of the tree it would double.
DARWIN := GOOS=darwin GOARCH=arm64

lint: $(GOLANGCI_LINT) ## run golangci-lint (installed at a pinned version); check the macOS build
	$(GOLANGCI_LINT) run ./...
	$(DARWIN) $(GO) build ./cmd/... ./test/dcmtest/cmd/spm
	$(DARWIN) $(GO) vet ./...

fmt: $(GOLANGCI_LINT) ## format the code (gofmt, goimports)
	$(GOLANGCI_LINT) fmt ./...

generate: ## regenerate code from the OpenAPI contract; copy the dashboard and alerts into the chart; write its schema's setting names
	$(GO) generate ./...

check-generated: ## fail when generated code is stale
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	sed "s|^output:.*|output: $$tmp/api.gen.go|" internal/api/oapi-codegen.yaml > $$tmp/config.yaml; \
	$(GO) tool oapi-codegen -config $$tmp/config.yaml internal/api/openapi.yaml; \
	if ! diff -q $$tmp/api.gen.go internal/api/api.gen.go >/dev/null; then \
		echo "internal/api/api.gen.go is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

clean: ## remove build output (keeps the cached control plane)
	rm -rf bin
	$(GO) clean -testcache
