# walrelay developer entry points. The scripts under test/ do the work; see their headers.
#
#   make test    deps, fresh Postgres + Kafka, go vet, go test -race, decoder fuzz, stop all
#   make build   static binary bin/walrelay
#   make release dist/: binaries for RELEASE_PLATFORMS, SBOMs, multi-arch image, chart, SHA256SUMS
#   make demo    Postgres + Kafka + walrelay end to end, printing the Kafka records
#   make bench   walrelay vs pg_recvlogical draining the same WAL (BENCH_N, BENCH_PAYLOAD)
#   make bench-latency  live latency, CPU and RSS at 1k, 5k, 20k events/s, 1 and 10 events/txn
#   make bench-floor    walrelay vs the least a relay on the same libraries does (test/bench/floor)
#   make bench-debezium walrelay vs Debezium 3.7 side by side (catch-up and 1k ev/s latency)
#   make bench-replay   walrelay replay vs run's catch-up on the same rows (rows/s, peak RSS)
#   make up      deps, start a Postgres + Kafka on 55432/59092 (state: WALRELAY_UP_DIR, default
#                /tmp/walrelay-up) and print their env (make -s env prints it again, make down stops them)
#   make clean   stop leftovers, remove bin/ and the state dirs
#
#   PG=14|15|16|17|18  the Postgres major of `make test` and `make up` (default 15, Debian's; the
#                      others come from Maven Central, see test/env/pgversions.sh)

GO ?= go
SHELL := /bin/bash
ENV_DIR := test/env

.PHONY: all test build demo bench up down env deps clean

# PG picks the Postgres major (or a full version such as 17.5.0); unset: Debian's 15.
PG ?=
PG_ENV := $(if $(PG),WALRELAY_TEST_PG_VERSION='$(PG)')

all: build

test:
	$(PG_ENV) bash $(ENV_DIR)/run-tests.sh

# VERSION lands in relay.Version (walrelay version, walrelay_build_info); without git,
# the binary falls back to the VCS revision Go embeds (runtime/debug.ReadBuildInfo).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_PKG := github.com/walrelay/walrelay/relay
LDFLAGS := $(if $(VERSION),-X $(VERSION_PKG).Version=$(VERSION)) $(if $(REVISION),-X $(VERSION_PKG).Revision=$(REVISION))

# BIN: where make build writes the binary (make image builds into its own context instead).
BIN ?= bin/walrelay

build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o "$(BIN)" ./cmd/walrelay

demo: build
	bash $(ENV_DIR)/demo.sh

bench: build
	bash test/bench/bench.sh

# make bench-latency: test/bench/latency.sh at 1k, 5k and 20k events/s with 1 and with 10
# events per transaction (LAT_RATES overrides the steps; the other LAT_* knobs are in its header).
.PHONY: bench-latency
bench-latency:
	LAT_RATES="$${LAT_RATES:-1000 5000 20000 1000x10 5000x10 20000x10}" bash test/bench/latency.sh

# make bench-floor: walrelay against test/bench/floor (the least any relay on walrelay's
# libraries does per event), alternating in one run of test/bench/latency.sh: 1k and 5k events/s,
# 1k x 10 events/txn, and 1k with --linger 0 (LAT_RATES overrides the steps).
.PHONY: bench-floor
bench-floor:
	LAT_RATES="$${LAT_RATES:-1000 1000:floor 1000 1000:floor 5000 5000:floor 5000 5000:floor 1000x10 1000x10:floor 1000:--linger=0 1000:floor,--linger=0 1000:--linger=0 1000:floor,--linger=0}" bash test/bench/latency.sh

# make bench-replay: walrelay replay vs walrelay run catching up on the same rows, rows/s and peak
# RSS (knobs in test/bench/replay.sh's header).
.PHONY: bench-replay
bench-replay: build
	bash test/bench/replay.sh

# make bench-debezium: walrelay vs Debezium (catch-up and latency; knobs in the script's header).
.PHONY: bench-debezium
bench-debezium: build
	bash test/bench/debezium.sh

# make image: the container image walrelay/walrelay:VERSION (and :latest) with buildah, offline,
# from deploy/Containerfile and the static binary of `make build` (see docs/deployment.md).
.PHONY: image
image:
	VERSION='$(VERSION)' IMAGE='$(IMAGE)' bash $(ENV_DIR)/image.sh

# make release: dist/ with a static binary archive per RELEASE_PLATFORMS (-trimpath, VERSION
# from git describe stamped through LDFLAGS), CycloneDX SBOMs, the multi-arch image (linux
# platforms; buildah, as root), the Helm chart and SHA256SUMS (test/env/release.sh). Offline
# but for the Go module proxy; not part of make test. RELEASE_IMAGE=0 skips the image.
RELEASE_PLATFORMS := linux/amd64 linux/arm64 darwin/arm64
.PHONY: release
release:
	VERSION='$(VERSION)' REVISION='$(REVISION)' LDFLAGS='$(LDFLAGS)' PLATFORMS='$(RELEASE_PLATFORMS)' \
		IMAGE='$(IMAGE)' bash $(ENV_DIR)/release.sh

deps:
	bash $(ENV_DIR)/deps.sh

# make up, env and down keep their own state dir, WALRELAY_UP_DIR (default /tmp/walrelay-up), apart
# from make test's: their services listen on the documented ports 55432 and 59092 (or the free
# ones a first start fell back to, remembered there), never on the ports of make test's last run.
UP := WALRELAY_TEST_DIR='$(or $(WALRELAY_UP_DIR),/tmp/walrelay-up)'

up:
	$(PG_ENV) bash $(ENV_DIR)/deps.sh
	$(UP) $(PG_ENV) bash $(ENV_DIR)/pg.sh start
	$(UP) bash $(ENV_DIR)/kafka.sh start
	@$(UP) bash $(ENV_DIR)/pg.sh env; $(UP) bash $(ENV_DIR)/kafka.sh env; echo "export WALRELAY_TEST_ENV_DIR='$(CURDIR)/$(ENV_DIR)'"

env:
	@$(UP) bash $(ENV_DIR)/pg.sh env; $(UP) bash $(ENV_DIR)/kafka.sh env; echo "export WALRELAY_TEST_ENV_DIR='$(CURDIR)/$(ENV_DIR)'"

down:
	-$(UP) bash $(ENV_DIR)/kafka.sh stop
	-$(UP) bash $(ENV_DIR)/pg.sh stop

clean:
	-bash $(ENV_DIR)/clean.sh
	rm -rf bin dist
