# streamgate: `make run` starts the gateway on its embedded defaults,
# `make test` installs everything the tests need and runs them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean java-installed javac-installed

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test,bench]'
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
# Java 17 runs Kafka's broker and tools for the side-by-side tests, when ../shared/kafka is
# there (without it those tests skip the Kafka half and say why).
java-installed:
	@[ ! -d ../shared/kafka ] || command -v java >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }

# The JDK's compiler, for tests/test_txn_java.py (the Java transactional producer, run in
# source-file mode against ../shared/kafka's client jars).
javac-installed: java-installed
	@[ ! -d ../shared/kafka ] || command -v javac >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jdk-headless; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: $(STAMP) kcat-installed postgresql-installed java-installed javac-installed lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python compat/bench_throughput.py

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis
