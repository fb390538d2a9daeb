# streamgate: `make run` starts the gateway on its embedded defaults,
# `make test` installs everything the tests need and runs them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench compat clean kcat-installed postgresql-installed java-installed mosquitto-installed

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test,bench,bridge]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/streamgate serve

# kcat is a Debian package; the tests drive it as a real client.
kcat-installed:
	@command -v kcat >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat; }

# harness/postgres.py runs Debian's PostgreSQL (initdb + postgres in a temp folder).
postgresql-installed:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql; }

# ruff (lint and format) over the whole tree; mypy over the packages, as configured in
# pyproject.toml ([tool.mypy] files).
# mosquitto (Debian package) is the MQTT broker of the bridge tests; never run as a service.
mosquitto-installed:
	@command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq mosquitto; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: $(STAMP) kcat-installed postgresql-installed java-installed mosquitto-installed lint
	$(BIN)/python -m pytest -q

bench: $(STAMP) java-installed
	$(BIN)/python compat/bench_throughput.py
	$(BIN)/python compat/bench_kafka_vs_streamgate.py

# Java 17 runs Kafka's tools (the compat matrix's Java column) when a Kafka distribution is
# at ../shared/kafka or KAFKA_HOME; without one the Java tests skip saying so.
java-installed:
	@command -v java >/dev/null || { [ -z "$$KAFKA_HOME" ] && [ ! -d ../shared/kafka ]; } || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }

# The compatibility matrix: every client against a fresh streamgate and Apache Kafka side by
# side (compat/results/compat_matrix.{md,json}). `make compat COMPAT_ARGS=` skips Kafka.
COMPAT_ARGS ?= --kafka
compat: $(STAMP) kcat-installed java-installed
	$(BIN)/streamgate compat run --streamgate $(COMPAT_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis
