# custody build, demo and test entry points. Every target installs what it
# needs, idempotently, so a fresh Debian machine only needs `make demo` or
# `make test`.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
# Debian's python3, where python3-pytest and python3-pip install: the Python
# client's suite (clients/python/tests) runs with it under make test.
PYTHON ?= /usr/bin/python3
ROOT := $(abspath .)
BUILD := $(ROOT)/build
DEMO := $(BUILD)/demo
APT_PACKAGES := gcc libc6-dev libseccomp-dev pkg-config busybox-static e2fsprogs iproute2 file python3 erofs-utils python3-pytest python3-pip jq
GO_SOURCES := $(shell find . \( -name '*.go' -o -name '*.s' \) -not -path './build/*') go.mod go.sum
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/custody-dev/custody/matrix.Version=$(VERSION)

.PHONY: soak soak-short docs all deps docker-deps bench-deps vm-deps image-deps browser-deps mcp-node-deps build runc demo test test-kube test-images test-race test-short test-vm-pooled fuzz bench clean qualify-vm install

all: build

# Idempotent: installs only what is missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@command -v $(GO) >/dev/null || { echo "Go is required (expected at /usr/local/go)"; exit 1; }

# The Docker engine the pack tests run as their own isolated daemon
# (internal/dockertest): Debian's docker.io and containerd, and iptables for
# the rules dockerd keeps inside the daemon's network namespace. Installing
# never starts the packages' system services: a policy-rc.d that denies
# starts is in place for the install (and removed after, if we added it).
DOCKER_PACKAGES := docker.io containerd iptables
docker-deps: deps
	@if ! command -v dockerd >/dev/null || ! command -v containerd >/dev/null || ! command -v iptables >/dev/null; then \
		echo "installing: $(DOCKER_PACKAGES) (no service is started)"; \
		added=""; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && added=1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DOCKER_PACKAGES) >/dev/null; rc=$$?; \
		if [ -n "$$added" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; \
	fi

# What builds the Debian images of the acceptance tests (TestDebianUserland,
# the systemd pack test) from Debian's packages: mmdebstrap. The images are
# cached under build/_images (or CUSTODY_IMAGE_CACHE), keyed by their package lists; the first run
# of make test builds them (about 4.5 and 3.5 minutes here, under load).
image-deps: deps
	@command -v mmdebstrap >/dev/null || { echo "installing: mmdebstrap"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }

# What the vm backend's tests boot: QEMU and Debian's guest kernel,
# unpacked (not installed) under build/vm by the script make qualify-vm
# uses too.
vm-deps: deps
	@./scripts/vm/deps.sh >/dev/null

# Headless Chromium, which the matrix page's screenshot test drives
# (internal/testenv.Chromium; under CI=true a missing browser fails it).
# Its own target, not deps: a build does not need a browser.
BROWSER_PACKAGES := chromium
# The TypeScript MCP SDK that drives custody mcp in its cross-ecosystem
# test: installed from npm by the lockfile in clients/mcp-node-test, into a
# cache outside the clone keyed by the lockfile's hash (CUSTODY_NPM_CACHE).
mcp-node-deps:
	@./scripts/mcp-node-deps.sh >/dev/null

browser-deps: deps
	@if ! command -v chromium >/dev/null; then \
		echo "installing: $(BROWSER_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null; \
	fi

# What make bench needs beyond the build: the isolated engine's packages and
# Debian's docker-compose (1.29), the pack row's baseline on that engine.
# make test needs it too: the bench package's tests bring the pack row's
# pack up with it.
BENCH_PACKAGES := docker-compose
bench-deps: docker-deps
	@if ! command -v docker-compose >/dev/null; then \
		echo "installing: $(BENCH_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BENCH_PACKAGES) >/dev/null; \
	fi

# The pinned runtime: runc at the version tools/runc/go.mod pins (tool
# directive), in a module of its own so that no dependency of custody's
# own code can change the runtime binary; built from the Go module proxy
# with seccomp support.
# bin/runc is runc's own CLI; custody launches through bin/custody-runc,
# the same library (libcontainer) from the same module, served by one
# long-lived process instead of a runc process per launch. bin/runc stays
# the bench's raw baseline and the runtime of the guests' smoke tests.
runc: bin/runc bin/custody-runc
bin/runc: tools/runc/go.mod tools/runc/go.sum | deps
	@mkdir -p bin
	cd tools/runc && CGO_ENABLED=1 $(GO) build -trimpath -tags seccomp -o ../../bin/runc github.com/opencontainers/runc
	@./bin/runc --version | head -1
bin/custody-runc: tools/runc/go.mod tools/runc/go.sum $(wildcard tools/runc/custody-runc/*.go) | deps
	@mkdir -p bin
	cd tools/runc && CGO_ENABLED=1 $(GO) build -trimpath -tags seccomp -o ../../bin/custody-runc ./custody-runc
	@./bin/custody-runc --version | head -1

build: bin/custody bin/custodyd bin/custodyd-faultinject bin/custody-probe bin/runc bin/custody-runc bin/custody-gate bin/custody-vminit bin/custody-vmstage
# The gate every container starts with (cmd/custody-gate): static C, so it
# adds no threads and almost no memory to a workload's budgets. It sits
# beside runc, where custodyd looks for it by default.
bin/custody-gate: cmd/custody-gate/gate.c | deps
	@mkdir -p bin
	gcc -static -Os -s -Wall -Wextra -Werror -o bin/custody-gate cmd/custody-gate/gate.c
bin/custody: $(GO_SOURCES)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/custody ./cmd/custody
# The in-sandbox observer: static, standard library only.
bin/custody-probe: $(GO_SOURCES)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/custody-probe ./cmd/custody-probe
# PID 1 of the vm backend's guests: static, pinned by sha256 like runc.
bin/custody-vminit: $(GO_SOURCES)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -o bin/custody-vminit ./cmd/custody-vminit
# The guests' workload stage, which execs the workload: static C (a second
# Go runtime cost a good part of a small phase's boot under TCG), pinned
# beside the init.
bin/custody-vmstage: cmd/custody-vmstage/stage.c | deps
	@mkdir -p bin
	gcc -static -Os -s -Wall -Wextra -Werror -o bin/custody-vmstage cmd/custody-vmstage/stage.c
bin/custodyd: $(GO_SOURCES)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/custodyd ./cmd/custodyd
# A test-only build that can die at a named stage (CUSTODY_FAULT); never installed.
bin/custodyd-faultinject: $(GO_SOURCES)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -tags faultinject -o bin/custodyd-faultinject ./cmd/custodyd

# cosign, pinned in its own module (tools/cosign), as a test tool: the suite
# checks that a third party verifies custody receipts with it.
bin/cosign: tools/cosign/go.mod tools/cosign/go.sum
	@mkdir -p bin
	cd tools/cosign && CGO_ENABLED=0 $(GO) build -trimpath -o ../../bin/cosign github.com/sigstore/cosign/v3/cmd/cosign

# A tiny test image: static busybox and its applets.
$(BUILD)/testimage/rootfs: | deps
	@rm -rf $(BUILD)/testimage && mkdir -p $@/bin $@/etc $@/root $@/tmp
	cp /bin/busybox $@/bin/busybox
	@for a in $$(/bin/busybox --list); do [ "$$a" = busybox ] || ln -s busybox $@/bin/$$a; done
	@printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > $@/etc/passwd

demo: build bin/cosign $(BUILD)/testimage/rootfs
	./scripts/demo.sh

# Packages in the order go test starts them (each once; ./... adds the
# rest): with two cores the longest test binaries start first, so the suite
# is not left waiting on one that started last (the docker packs in
# workspace and the end-to-end tests in integration/ take 6-8 minutes each).
TEST_PKGS := ./workspace/ ./integration/ ./backend/vm/ ./backend/docker/ ./daemon/ ./cmd/custodyd/ ./evidence/ ./host/ ./bench/ ./...

# The whole default suite: real runc, real kernel enforcement; run as root.
test: build bin/cosign bench-deps vm-deps image-deps browser-deps mcp-node-deps
	CUSTODY_MCP_NODE_DIR=$$(./scripts/mcp-node-deps.sh) CUSTODY_DEBIAN_IMAGES=1 CUSTODY_PYTHON=$(PYTHON) CUSTODY_VMINIT=$(ROOT)/bin/custody-vminit CUSTODY_VMSTAGE=$(ROOT)/bin/custody-vmstage CUSTODY_VM_KERNEL=$(BUILD)/vm/vmlinux CUSTODY_COSIGN=$(ROOT)/bin/cosign CUSTODY_PROBE=$(ROOT)/bin/custody-probe CUSTODY_RUNC=$(ROOT)/bin/custody-runc CUSTODY_BIN=$(ROOT)/bin/custody CUSTODYD_BIN=$(ROOT)/bin/custodyd CUSTODYD_FAULT_BIN=$(ROOT)/bin/custodyd-faultinject $(GO) test -count=1 -timeout 20m $(TEST_PKGS)

# The Kubernetes backend against a real control plane on loopback (Cluster
# A): etcd, kube-apiserver, kube-controller-manager and kube-scheduler built
# from the Go module proxy through tools/kube (never release downloads), and
# kwok simulating nodes. scripts/kube/build.sh builds them once into
# $(KUBE_CACHE)/<kubernetes version>/ and prints that directory.
KUBE_CACHE ?= /var/cache/custody/kube
# The backend's own tests, then custodyd's phases on the cluster (the
# integration tests named Kube) with the built binaries.
test-kube: build | deps
	bin="$$(CUSTODY_KUBE_CACHE=$(KUBE_CACHE) ./scripts/kube/build.sh)" && \
	CUSTODY_KUBE_BIN="$$bin" $(GO) test -count=1 -timeout 20m -v ./backend/kube/ && \
	CUSTODY_KUBE_BIN="$$bin" CUSTODY_PROBE=$(ROOT)/bin/custody-probe CUSTODY_RUNC=$(ROOT)/bin/custody-runc CUSTODY_BIN=$(ROOT)/bin/custody \
	CUSTODYD_BIN=$(ROOT)/bin/custodyd CUSTODYD_FAULT_BIN=$(ROOT)/bin/custodyd-faultinject \
	$(GO) test -count=1 -timeout 20m -v -run 'Kube' ./integration/

# The real-image acceptance test (issue 15): a Debian bookworm rootfs with
# gcc, make, Go and pytest, made once with mmdebstrap from Debian's mirror
# (cached in build/_images/debian-toolchain), imported as a rootfs tar and as
# an OCI layout; C, Go and pytest work run in it with network denied. It
# logs import times, disk use and launch p50 against busybox.
test-images: build
	@command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y mmdebstrap
	CUSTODY_IMAGE_TESTS=1 CUSTODY_PROBE=$(ROOT)/bin/custody-probe CUSTODY_RUNC=$(ROOT)/bin/custody-runc CUSTODY_BIN=$(ROOT)/bin/custody CUSTODYD_BIN=$(ROOT)/bin/custodyd CUSTODYD_FAULT_BIN=$(ROOT)/bin/custodyd-faultinject $(GO) test -count=1 -timeout 40m -v -run '^TestDebianToolchains$$' ./integration/

# The whole suite under the race detector: every test binary with -race, and
# the CLI and daemons the tests start (CUSTODY_BIN, CUSTODYD_BIN,
# CUSTODYD_FAULT_BIN) built with -race too (the race runtime needs cgo).
# GORACE=halt_on_error=1 makes a race in a child daemon kill it, so the test
# driving it fails. custody-probe and runc stay the static binaries that run
# inside containers. About 4 minutes on a 2-core machine.
RACE_BINS := bin/custody-race bin/custodyd-race bin/custodyd-faultinject-race
bin/custody-race: $(GO_SOURCES) | deps
	@mkdir -p bin
	CGO_ENABLED=1 $(GO) build -race -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/custody
bin/custodyd-race: $(GO_SOURCES) | deps
	@mkdir -p bin
	CGO_ENABLED=1 $(GO) build -race -trimpath -o $@ ./cmd/custodyd
bin/custodyd-faultinject-race: $(GO_SOURCES) | deps
	@mkdir -p bin
	CGO_ENABLED=1 $(GO) build -race -trimpath -tags faultinject -o $@ ./cmd/custodyd
test-race: build bin/cosign bench-deps vm-deps image-deps browser-deps mcp-node-deps $(RACE_BINS)
	CUSTODY_MCP_NODE_DIR=$$(./scripts/mcp-node-deps.sh) CUSTODY_DEBIAN_IMAGES=1 CUSTODY_PYTHON=$(PYTHON) CUSTODY_VMINIT=$(ROOT)/bin/custody-vminit CUSTODY_VMSTAGE=$(ROOT)/bin/custody-vmstage CUSTODY_VM_KERNEL=$(BUILD)/vm/vmlinux GORACE=halt_on_error=1 CGO_ENABLED=1 CUSTODY_COSIGN=$(ROOT)/bin/cosign CUSTODY_PROBE=$(ROOT)/bin/custody-probe CUSTODY_RUNC=$(ROOT)/bin/custody-runc CUSTODY_BIN=$(ROOT)/bin/custody-race CUSTODYD_BIN=$(ROOT)/bin/custodyd-race CUSTODYD_FAULT_BIN=$(ROOT)/bin/custodyd-faultinject-race $(GO) test -race -count=1 -timeout 45m $(TEST_PKGS)

# Qualify this platform: the development tier on this host and the
# production tier inside a real cgroup-v2 guest (QEMU), both signed rows in
# build/matrix with an HTML report; then the release gate is checked.
# The whole backend suite with every vm launch served by a warm guest:
# about fifty TCG guests, so outside make test.
test-vm-pooled: build
	CUSTODY_VM_POOLED_SUITE=1 CUSTODY_VMINIT=$(ROOT)/bin/custody-vminit CUSTODY_VMSTAGE=$(ROOT)/bin/custody-vmstage CUSTODY_VM_KERNEL=$(BUILD)/vm/vmlinux CUSTODY_RUNC=$(ROOT)/bin/custody-runc $(GO) test -count=1 -timeout 30m -run '^TestBackendContractPooled$$' ./backend/vm/

qualify-vm: build
	./scripts/qualify-vm.sh

# Benchmarks against their baselines, measured in one run; one table
# (BENCH_JSON=path also writes it as JSON). Root; about 6 minutes.
bench: build $(BUILD)/testimage/rootfs
	./scripts/bench.sh $(BENCH_ARGS)

# A day of load (docs/how-to/check-a-release-with-soak.md): mixed traffic
# through a real custodyd at concurrency 8, its resource curves sampled,
# custodyd killed (SIGKILL) about 100 times, its runtime process killed and
# its state filesystem (a loop-mounted image of its own) filled, a small
# share of phases on the vm backend, and a verdict per property that must
# hold; exits non-zero if one fails. Root. SOAK_ARGS overrides the run,
# e.g. SOAK_ARGS="-duration 24h -chaos all".
SOAK_ARGS ?= -phases 10000 -concurrency 8 -chaos all -chaos-actions 145 -state-fs-mib 8192 -vm-kernel $(BUILD)/vm/vmlinux
soak: build vm-deps $(BUILD)/testimage/rootfs bin/custody-soak
	./bin/custody-soak $(SOAK_ARGS)
# Its short form, in CI after make test: about two minutes here (no vm
# phases: the vm backend's own end-to-end tests cover those).
soak-short: build $(BUILD)/testimage/rootfs bin/custody-soak
	./bin/custody-soak -phases 1000 -concurrency 4 -chaos kill,fill -chaos-actions 8 -sample-every 5s -state-fs-mib 1024 -quiet
bin/custody-soak: $(GO_SOURCES)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/custody-soak ./bench/cmd/custody-soak

# Fuzz every parser of untrusted input for a short while each.
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./request
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./policy
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./matrix
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./probe
	$(GO) test -run='^$$' -fuzz='^FuzzVerify$$' -fuzztime=$(FUZZTIME) ./grant
	$(GO) test -run='^$$' -fuzz='^FuzzVerifyStatement$$' -fuzztime=$(FUZZTIME) ./grant
	$(GO) test -run='^$$' -fuzz='^FuzzVerify$$' -fuzztime=$(FUZZTIME) ./evidence
	$(GO) test -run='^$$' -fuzz='^FuzzParseTrust$$' -fuzztime=$(FUZZTIME) ./evidence
	$(GO) test -run='^$$' -fuzz='^FuzzReceiptStatement$$' -fuzztime=$(FUZZTIME) ./evidence
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeEnvelope$$' -fuzztime=$(FUZZTIME) ./internal/dsse
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeCanonical$$' -fuzztime=$(FUZZTIME) ./internal/dsse
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeCanonicalRaw$$' -fuzztime=$(FUZZTIME) ./internal/dsse
	$(GO) test -run='^$$' -fuzz='^FuzzIsCompactJSON$$' -fuzztime=$(FUZZTIME) ./internal/dsse
	$(GO) test -run='^$$' -fuzz='^FuzzExtract$$' -fuzztime=$(FUZZTIME) ./internal/untar
	$(GO) test -run='^$$' -fuzz='^FuzzExtractOutput$$' -fuzztime=$(FUZZTIME) ./backend/vm
	$(GO) test -run='^$$' -fuzz='^FuzzDemux$$' -fuzztime=$(FUZZTIME) ./backend/vm/guest
	$(GO) test -run='^$$' -fuzz='^FuzzConfig$$' -fuzztime=$(FUZZTIME) ./backend/vm/guest
	$(GO) test -run='^$$' -fuzz='^FuzzReportJSON$$' -fuzztime=$(FUZZTIME) ./backend/vm/guest
	$(GO) test -run='^$$' -fuzz='^FuzzParseStat$$' -fuzztime=$(FUZZTIME) ./internal/procfs
	$(GO) test -run='^$$' -fuzz='^FuzzParseStatus$$' -fuzztime=$(FUZZTIME) ./internal/procfs
	$(GO) test -run='^$$' -fuzz='^FuzzParseNetDev$$' -fuzztime=$(FUZZTIME) ./internal/procfs
	$(GO) test -run='^$$' -fuzz='^FuzzParseProof$$' -fuzztime=$(FUZZTIME) ./backend/docker
	$(GO) test -run='^$$' -fuzz='^FuzzParseCgroup$$' -fuzztime=$(FUZZTIME) ./internal/procfs
	$(GO) test -run='^$$' -fuzz='^FuzzLoad$$' -fuzztime=$(FUZZTIME) ./pack
	$(GO) test -run='^$$' -fuzz='^FuzzAdmitPack$$' -fuzztime=$(FUZZTIME) ./admission
	$(GO) test -run='^$$' -fuzz='^FuzzVerifyPack$$' -fuzztime=$(FUZZTIME) ./grant
	$(GO) test -run='^$$' -fuzz='^FuzzVerifyPackStatement$$' -fuzztime=$(FUZZTIME) ./grant
	$(GO) test -run='^$$' -fuzz='^FuzzVerifyPack$$' -fuzztime=$(FUZZTIME) ./evidence
	$(GO) test -run='^$$' -fuzz='^FuzzPackStatement$$' -fuzztime=$(FUZZTIME) ./evidence
	$(GO) test -run='^$$' -fuzz='^FuzzVerifyOpLog$$' -fuzztime=$(FUZZTIME) ./evidence
	$(GO) test -run='^$$' -fuzz='^FuzzResolveLayout$$' -fuzztime=$(FUZZTIME) ./image
	$(GO) test -run='^$$' -fuzz='^FuzzParseSource$$' -fuzztime=$(FUZZTIME) ./image
	$(GO) test -run='^$$' -fuzz='^FuzzDecompress$$' -fuzztime=$(FUZZTIME) ./image

# Install (as root, or into DESTDIR for packaging): custody and custodyd in
# PREFIX/bin, the pinned runc and custody-gate in PREFIX/lib/custody, a man
# page per custody command in PREFIX/share/man/man1 and custodyd's in
# PREFIX/share/man/man8, the
# systemd unit in UNITDIR, and a custodyd.yaml pinning that runc's digest
# and an example policy in SYSCONFDIR/custody unless they exist already.
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR ?= /lib/systemd/system
DESTDIR ?=
install: build
	install -d -m 0755 $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/custody $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8
	install -d -m 0700 $(DESTDIR)$(SYSCONFDIR)/custody
	install -m 0755 bin/custody bin/custodyd $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 bin/custody-runc bin/custody-gate $(DESTDIR)$(PREFIX)/lib/custody/
	bin/custody docs --man $(DESTDIR)$(PREFIX)/share/man/man1 --man8 $(DESTDIR)$(PREFIX)/share/man/man8 && chmod 0644 $(DESTDIR)$(PREFIX)/share/man/man1/custody*.1 $(DESTDIR)$(PREFIX)/share/man/man8/custodyd.8
	sed 's|/usr/local/bin/custodyd|$(PREFIX)/bin/custodyd|; s|/etc/custody/|$(SYSCONFDIR)/custody/|' dist/custodyd.service > $(DESTDIR)$(UNITDIR)/custodyd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/custodyd.service
	@cfg=$(DESTDIR)$(SYSCONFDIR)/custody/custodyd.yaml; if [ -e $$cfg ]; then echo "kept $$cfg"; else \
		sed -e 's|@LIBDIR@|$(PREFIX)/lib/custody|' -e "s|@RUNC_VERSION@|$$(bin/custody-runc --version | sed -n 's/^custody-runc version //p')|" \
		    -e "s|@RUNC_SHA256@|$$(sha256sum bin/custody-runc | cut -d' ' -f1)|" -e 's|/etc/custody/|$(SYSCONFDIR)/custody/|' \
		    dist/custodyd.yaml.in > $$cfg && chmod 0600 $$cfg && echo "wrote $$cfg"; fi
	@pol=$(DESTDIR)$(SYSCONFDIR)/custody/policy.yaml; if [ -e $$pol ]; then echo "kept $$pol"; else \
		install -m 0600 examples/policy.yaml $$pol && echo "wrote $$pol (the example: edit its images and inputRoots)"; fi

# The generated references: a page per command (from the CLI's command
# tree), custodyd's (from the daemon's flag set) and one per input format
# (from its JSON Schema), and the compose key table of packs. go test
# ./cmd/custody/ ./pack/ fails while they are out of date.
docs: bin/custody
	bin/custody docs --markdown docs/reference/commands --schemas docs/reference/schemas
	go run ./pack/keydoc docs/reference/compose-keys.md

clean:
	rm -rf bin $(BUILD)
