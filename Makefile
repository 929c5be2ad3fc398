# roughnet: `make demo` sets up what the quick start needs (TCP and UDP: the agent without its other
# protocol drivers, unless a full one is installed) and `make test` everything, on a fresh Debian 12
# machine (as root). `make setup` / `make build` give every driver without the tests.
# Builds are cached outside the clone: cargo target in $(CARGO_TARGET_DIR), pip's cache in ~/.cache/pip.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CARGO_TARGET_DIR ?= /var/cache/roughnet/target
export CARGO_TARGET_DIR
# The minimal agent (TCP and UDP only, `make demo` on a machine with no agent yet) has a target of its
# own, so building it never touches the full build's artifacts (issue 31).
CARGO_TARGET_DIR_MIN ?= $(CARGO_TARGET_DIR)-min
CARGO ?= $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)
BINARIES := roughnet-agent roughnet-wire

.PHONY: all setup system-deps system-deps-demo python-deps extras kafka build agent-full build-min demo-agent debuginfo cluster demo test test-rust test-python test-unit test-integration bench clean-runs

all: setup

# After the Debian packages, the Python venv, the Kafka jars and the Rust build have nothing to wait
# for from each other: the downloads run while cargo compiles (a cold `make demo` waits for the build
# alone, docs/PERFORMANCE.md "First run").
setup: system-deps
	@$(MAKE) --no-print-directory -j3 python-deps kafka build

system-deps:
	@bash scripts/install-system-deps.sh

# Only the Debian packages the quick start needs (no brokers, Java or the drivers' C libraries).
system-deps-demo:
	@bash scripts/install-system-deps.sh --demo

$(VENV)/.stamp: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

python-deps: $(VENV)/.stamp

# ROS 2 (Kilted wheels, protocol ros2), ns-3 (--backend ns3) and SUMO ([mobility]): about 830 MB and a
# 2-minute cppyy build the first time, so `make demo` does without them; `make test` installs them.
$(VENV)/.extras-stamp: pyproject.toml $(VENV)/.stamp python/roughnet/ros2/typegen.py
	$(PY) -m pip install -q -e '.[test,ros2,sim]'
	$(PY) -m roughnet.ros2.typegen
	@touch $@

extras: $(VENV)/.extras-stamp

# Apache Kafka 4.3.1 jars from Maven Central into /var/cache/roughnet (only when missing).
kafka: system-deps
	@bash scripts/fetch-kafka.sh

# The agent with every protocol driver (cargo feature `full`, the default) and the wire.
build:
	@test -x "$(CARGO)" || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
	@mkdir -p $(CARGO_TARGET_DIR) bin
	"$(CARGO)" build --release --locked -p roughnet-agent -p roughnet-wire
	@for b in $(BINARIES); do echo "install -m 0755 $(CARGO_TARGET_DIR)/release/$$b bin/$$b"; \
	  install -m 0755 $(CARGO_TARGET_DIR)/release/$$b bin/$$b; done

agent-full: build

# Is bin/roughnet-agent an agent with every driver? (Its version line lists the drivers it lacks
# under "missing"; an agent older than issue 31 has no such field and had every driver.)
AGENT_IS_FULL = v="$$(bin/roughnet-agent version 2>/dev/null)" && [ -n "$$v" ] && ! grep -q '"missing":\["' <<<"$$v"

# The agent with the TCP and UDP drivers only (no zenoh, DDS, Kafka, NATS, MQTT, ZeroMQ: a fraction of
# the full build) and the wire, built in $(CARGO_TARGET_DIR_MIN). Never replaces a full agent.
build-min:
	@test -x "$(CARGO)" || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
	@if $(AGENT_IS_FULL); then \
	  echo "build-min: bin/roughnet-agent has every driver; keeping it (remove it to install a minimal one)"; \
	else \
	  mkdir -p $(CARGO_TARGET_DIR_MIN) bin && \
	  echo "build-min: roughnet-agent with the tcp and udp drivers only, and roughnet-wire (\`make build\` adds every driver)" && \
	  CARGO_TARGET_DIR=$(CARGO_TARGET_DIR_MIN) "$(CARGO)" build --release --locked --no-default-features \
	    -p roughnet-agent -p roughnet-wire && \
	  for b in $(BINARIES); do echo "install -m 0755 $(CARGO_TARGET_DIR_MIN)/release/$$b bin/$$b"; \
	    install -m 0755 $(CARGO_TARGET_DIR_MIN)/release/$$b bin/$$b || exit 1; done; \
	fi

# What `make demo` builds: the minimal agent, unless a full one is installed (then that is kept and
# brought up to date, so `make demo` after `make test` never loses a driver).
demo-agent:
	@if $(AGENT_IS_FULL); then $(MAKE) --no-print-directory build; else $(MAKE) --no-print-directory build-min; fi

# The same binaries with line tables, for a crash report with file and line numbers (profile
# release-debuginfo in Cargo.toml; `make build` leaves debuginfo out to keep a first build short).
debuginfo:
	@test -x "$(CARGO)" || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
	@mkdir -p $(CARGO_TARGET_DIR) bin
	"$(CARGO)" build --profile release-debuginfo --locked -p roughnet-agent -p roughnet-wire
	@for b in $(BINARIES); do install -m 0755 $(CARGO_TARGET_DIR)/release-debuginfo/$$b bin/$$b; done

# The local Kubernetes cluster's parts (docs/kubernetes.md): Debian packages (containerd, etcd, ...),
# Kubernetes built from the Go module proxy into /var/cache/roughnet/kubernetes (only when missing),
# the pause and roughnet images as OCI archives in /var/cache/roughnet/images (only when outdated).
cluster: system-deps python-deps build
	@bash scripts/install-cluster-deps.sh
	@bash scripts/build-kubernetes.sh
	$(VENV)/bin/roughnet image build

# Only what the quick start needs (TCP and UDP): no Kafka jars, and the minimal agent when none is
# installed. A scenario with another protocol is then refused in preflight, naming `make build`.
demo: system-deps-demo
	@$(MAKE) --no-print-directory -j2 python-deps demo-agent
	$(VENV)/bin/roughnet run scenarios/quickstart.toml

# `make setup` and `make extras` with the extras' pip beside cargo (as setup's own pip is), then the cluster,
# the Rust tests and the Python tests, in that order.
test: system-deps
	@$(MAKE) --no-print-directory -j3 extras kafka build
	@$(MAKE) --no-print-directory cluster test-rust test-python

test-rust:
	"$(CARGO)" test --release --locked --workspace
	CARGO_TARGET_DIR=$(CARGO_TARGET_DIR_MIN) "$(CARGO)" test --release --locked -p roughnet-agent \
	  --no-default-features --test drivers

# Each test's outcome and duration from the last `make test`, outside the clone (where make test's time goes):
# the integration tests' in TEST_REPORT, the unit tests' beside it. xunit1: the format that keeps record_property
# (tests record measured figures; with pytest's default xunit2 that is a PytestWarning, an error under the
# project's filterwarnings).
TEST_REPORT ?= /var/cache/roughnet/pytest-last.xml
PYTEST = $(VENV)/bin/pytest -q -rs -p no:cacheprovider -o junit_family=xunit1

# The unit tests (no namespaces, no timing: CPU only) on two workers, one per core: 85 s instead of 160 s. The
# integration tests one at a time, as ever: they measure real stacks on emulated links, and a second test beside
# them would take the CPU they are judged by (a run whose machine is saturated is `suspect`). Except those marked
# `slowlink` (waiting with the CPU mostly idle: HF links of a few kbit/s, slow links' timeouts, TCP back-off,
# outages; each mark carries its CI time): first, side by side, longest first (tests/integration/conftest.py). Keep
# SLOWLINK_WORKERS above half their number: then each worker is handed one or two, the longest with the shortest.
test-python: test-unit test-integration

test-unit:
	@mkdir -p $(dir $(TEST_REPORT))
	$(PYTEST) -n 2 --junitxml=$(basename $(TEST_REPORT))-unit.xml tests/unit

SLOWLINK_WORKERS ?= 8

test-integration:
	@mkdir -p $(dir $(TEST_REPORT))
	$(PYTEST) -n $(SLOWLINK_WORKERS) --dist load -m slowlink \
	  --junitxml=$(basename $(TEST_REPORT))-slowlink.xml tests/integration
	$(PYTEST) -m "not slowlink" --junitxml=$(TEST_REPORT) tests/integration

bench: setup
	$(PY) bench/agent_bench.py

clean-runs:
	$(VENV)/bin/roughnet clean
