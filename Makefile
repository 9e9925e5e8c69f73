# extauthz developer tasks. `make run` and `make test` are the two that
# matter; CI (.ci/run) runs `make test`.

GO         ?= go
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GRPC_ADDR  ?= 127.0.0.1:9001
HTTP_ADDR  ?= 127.0.0.1:9090
POLICY     ?= examples/policy
# make run is for a terminal: Ctrl-C stops at once instead of serving on for
# the production drain delay (see docs/reference.md, EXTAUTHZ_DRAIN_DELAY).
DRAIN      ?= 0s
TEST_FLAGS ?= -race -shuffle=on -count=1 -timeout=30m
BENCH      ?= .
# The core end-to-end cases run a second time with Envoy started by `docker
# run` of the pinned image (E2E_ENVOY=docker): limits exact across two
# replicas, an idempotent replay, a replica restart under load.
E2E_DOCKER_RUN ?= ^(TestFrontProxy|TestRollingRestartSameAddress|TestEnvoyDockerRunMatchesDocs)$$/^(ratelimit|idempotency)$$
# Nested modules (each with its own go.mod) that ./... does not reach; not
# the tools scripts/test-deps.sh builds under .cache/ (kube-apiserver's
# build module among them).
SUBMODULES := $(patsubst ./%/go.mod,%,$(shell find . -mindepth 2 -name go.mod -not -path './.git/*' -not -path './.cache/*' | sort))
# test/cluster runs k8s/ on a real single-node cluster: test-only runs it
# last, alone (it needs the machine: a kubelet, containerd and the pods);
# `make test-cluster` runs only it.
CLUSTER_MODULE := test/cluster
TEST_SUBMODULES := $(filter-out $(CLUSTER_MODULE),$(SUBMODULES))
LDFLAGS    := -X main.version=$(VERSION)
# The linter, pinned; `make lint` builds it into .cache/ (gitignored) once.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/.cache/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

.PHONY: run validate try build test test-only test-cluster test-cluster-only lint bench vet fmt-check clean

## run: serve the example policy with the memory store (gRPC $(GRPC_ADDR), HTTP $(HTTP_ADDR))
run:
	EXTAUTHZ_CONFIG=$(POLICY) EXTAUTHZ_GRPC_ADDR=$(GRPC_ADDR) EXTAUTHZ_HTTP_ADDR=$(HTTP_ADDR) \
		EXTAUTHZ_DRAIN_DELAY=$(DRAIN) $(GO) run -ldflags "$(LDFLAGS)" ./cmd/extauthz

## validate: check the policy at $(POLICY) offline, as the server would load it
validate:
	$(GO) run ./cmd/extauthz validate $(POLICY)

## try: with `make run` serving, send the README's example decision and print the answer
try:
	$(GO) run ./cmd/extauthz try -addr $(GRPC_ADDR)

## build: a static, stripped binary in bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/extauthz ./cmd/extauthz

## test: every test of every module, with the race detector, in random order
## (all modules run even when one fails; the exit status is non-zero if any did).
## scripts/test-deps.sh first installs redis-server and Envoy if missing, or
## stops naming what is missing and how to install it.
test:
	@scripts/test-deps.sh $(MAKE) --no-print-directory test-only

## test-only: `make test` without the dependency check
test-only:
	@status=0; \
	echo "== go test $(TEST_FLAGS) ./... (all but ./test/e2e/... and ./test/gateway/...)"; \
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v -e '/test/e2e' -e '/test/gateway') || status=1; \
	echo "== go test $(TEST_FLAGS) ./test/gateway/... (alone: Envoy Gateway's controller holds fixed host ports)"; \
	$(GO) test $(TEST_FLAGS) ./test/gateway/... || status=1; \
	echo "== go test $(TEST_FLAGS) ./test/e2e/... (alone: its load tests need the machine to themselves)"; \
	$(GO) test $(TEST_FLAGS) ./test/e2e/... || status=1; \
	echo "== E2E_ENVOY=docker go test $(TEST_FLAGS) -run '$(E2E_DOCKER_RUN)' ./test/e2e/ (Envoy with docker run)"; \
	E2E_ENVOY=docker $(GO) test $(TEST_FLAGS) -run '$(E2E_DOCKER_RUN)' ./test/e2e/ || status=1; \
	for m in $(TEST_SUBMODULES); do \
		echo "== (cd $$m && go test $(TEST_FLAGS) ./...)"; \
		(cd $$m && $(GO) test $(TEST_FLAGS) ./...) || status=1; \
	done; \
	echo "== (cd $(CLUSTER_MODULE) && go test $(TEST_FLAGS) ./...) (alone, last: a kubelet and its pods)"; \
	(cd $(CLUSTER_MODULE) && $(GO) test $(TEST_FLAGS) ./...) || status=1; \
	exit $$status

## test-cluster: k8s/ applied to a real single-node Kubernetes cluster (root;
## scripts/test-deps.sh builds its parts into .cache/ first): docs/testing.md
test-cluster:
	@scripts/test-deps.sh $(MAKE) --no-print-directory test-cluster-only

## test-cluster-only: `make test-cluster` without the dependency check
test-cluster-only:
	@echo "== (cd $(CLUSTER_MODULE) && go test $(TEST_FLAGS) ./...) (alone: a kubelet and its pods)"
	@cd $(CLUSTER_MODULE) && $(GO) test $(TEST_FLAGS) ./...

## bench: benchmarks only (no tests), with allocations
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem ./...

## lint: golangci-lint (.golangci.yml) on every module; CI runs it
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	@for m in $(SUBMODULES); do echo "== (cd $$m && golangci-lint run ./...)"; (cd $$m && $(GOLANGCI_LINT) run ./...) || exit 1; done

$(GOLANGCI_LINT):
	GOBIN=$(dir $(GOLANGCI_LINT)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

## vet: go vet on every module
vet:
	$(GO) vet ./...
	@for m in $(SUBMODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

## fmt-check: fail listing the files gofmt would change
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin/
