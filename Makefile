# roughnet: `make demo` and `make test` set everything up on a fresh Debian 12 machine (as root).
# Builds are cached outside the clone: cargo target in $(CARGO_TARGET_DIR), pip's cache in ~/.cache/pip.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CARGO_TARGET_DIR ?= /var/cache/roughnet/target
export CARGO_TARGET_DIR
CARGO ?= $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)
BINARIES := roughnet-agent roughnet-wire

.PHONY: all setup system-deps python-deps extras kafka build debuginfo cluster demo test test-rust test-python bench clean-runs

all: setup

# After the Debian packages, the Python venv, the Kafka jars and the Rust build have nothing to wait
# for from each other: the downloads run while cargo compiles (a cold `make demo` waits for the build
# alone, docs/PERFORMANCE.md "First run").
setup: system-deps
	@$(MAKE) --no-print-directory -j3 python-deps kafka build

system-deps:
	@bash scripts/install-system-deps.sh

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

build:
	@test -x "$(CARGO)" || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
	@mkdir -p $(CARGO_TARGET_DIR) bin
	"$(CARGO)" build --release --locked -p roughnet-agent -p roughnet-wire
	@for b in $(BINARIES); do install -m 0755 $(CARGO_TARGET_DIR)/release/$$b bin/$$b; done

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

demo: setup
	$(VENV)/bin/roughnet run scenarios/quickstart.toml

test: setup extras cluster test-rust test-python

test-rust:
	"$(CARGO)" test --release --locked --workspace

test-python:
	$(VENV)/bin/pytest -q -rs -p no:cacheprovider tests

bench: setup
	$(PY) bench/agent_bench.py

clean-runs:
	$(VENV)/bin/roughnet clean
