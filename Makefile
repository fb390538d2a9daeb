# streamgate: `make run` starts the gateway on its embedded defaults, installing only what
# serving needs; `make test` installs everything the tests need and runs them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: the runtime dependencies ([project] dependencies in pyproject.toml) for `make
# run`, and on top of them the extras that tests, lint, benchmarks and the matrix need.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
COMPILED_STAMP := $(VENV)/.installed-compiled

.PHONY: run compiled test lint bench bench-report compat clean kcat-installed postgresql-installed java-installed javac-installed mosquitto-installed chromium-installed

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(TEST_STAMP): $(RUN_STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[test,bench,bridge]'
	touch $(TEST_STAMP)

# The hot path compiled with mypyc (hotpath/, docs/performance.md): rebuilt when a source
# changed; without a C compiler it says so in one line and everything runs in pure Python.
$(COMPILED_STAMP): $(RUN_STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[compiled]'
	touch $(COMPILED_STAMP)

compiled: $(COMPILED_STAMP)
	$(BIN)/python -m hotpath.build --if-needed

run: $(RUN_STAMP) compiled
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

# Debian's Chromium: the console's browser tests drive it headless with Playwright (no
# browser download).
chromium-installed:
	@[ -x /usr/bin/chromium ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

# The JDK's compiler, for tests/system/test_txn_java.py (the Java transactional producer, run in
# source-file mode against ../shared/kafka's client jars).
javac-installed: java-installed
	@[ ! -d ../shared/kafka ] || command -v javac >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jdk-headless; }

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: $(TEST_STAMP) compiled kcat-installed postgresql-installed java-installed javac-installed mosquitto-installed chromium-installed lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25 -m "not beside_kafka"

# The long runs of whole tools against Apache Kafka too (the compatibility matrix and the
# benchmark runner's quick side-by-side): minutes, so `make test` leaves them out
.PHONY: test-beside-kafka
test-beside-kafka: $(TEST_STAMP) kcat-installed java-installed
	$(BIN)/python -m pytest -q --durations=10 -m beside_kafka tests/system

# The native Spark source's tests with its streaming test, which `make test` skips (minutes)
.PHONY: test-spark-source
test-spark-source: $(TEST_STAMP) java-installed
	STREAMGATE_SPARK_STREAM_TESTS=1 $(BIN)/python -m pytest -q --durations=10 \
	  tests/system/test_spark_source.py tests/system/test_spark_source_secured.py \
	  tests/system/test_spark_source_nodes.py tests/system/test_spark_source_stream.py

# The benchmarks through one runner (docs/performance.md); results go to ./bench-results/
# (or $STREAMGATE_RESULTS), not into the source tree. `make bench BENCH_ARGS=--quick`.
# `make bench-report` regenerates docs/performance.md's tables from compat/results/.
BENCH_ARGS ?=
bench: $(TEST_STAMP) java-installed
	$(BIN)/streamgate bench run scenario:throughput $(BENCH_ARGS)
	$(BIN)/streamgate bench run kafka-vs-streamgate-all $(BENCH_ARGS)

bench-report: $(TEST_STAMP)
	$(BIN)/streamgate bench report

# Java 17 runs Spark (the Spark tests) and Kafka's broker and tools (side-by-side tests, the
# compat matrix's Java column); without a Kafka distribution those tests skip saying so.
java-installed:
	@command -v java >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }

# The compatibility matrix: every client against a fresh streamgate and Apache Kafka side by
# side (./bench-results/compat-<time>/compat_matrix.{md,json}; the published scorecard is
# compat/results/: add `--output-dir compat/results`). `make compat COMPAT_ARGS=` skips Kafka.
COMPAT_ARGS ?= --kafka
compat: $(TEST_STAMP) kcat-installed java-installed
	$(BIN)/streamgate compat run --streamgate $(COMPAT_ARGS)

clean:
	-[ ! -x $(BIN)/python ] || $(BIN)/python -m hotpath.build --clean
	rm -rf $(VENV) data .pytest_cache .hypothesis

# The history checker's soak (harness/history/): 10 minutes of the mixed workload
# (idempotent producers, a consumer group, raw pipelined probes, a split and a merge) with
# 10 SIGKILL restarts, then every promise checked; exit 1 on a violation.
# `make soak-history SOAK_HISTORY_ARGS="--seed 7 --out history.jsonl"` adds options.
# The takeover soak (compat/soak_wal.py): 30 faults (SIGKILL, SIGKILL with the disk removed,
# SIGSTOP past the lease) of random nodes of `serve --nodes 3 --wal object` under load, then
# every acknowledged record checked. `make soak-wal SOAK_WAL_ARGS="--tier2 s3"` adds options.
.PHONY: soak-wal
SOAK_WAL_ARGS ?=
soak-wal: $(TEST_STAMP) postgresql-installed
	$(BIN)/streamgate bench run scenario:soak-wal $(SOAK_WAL_ARGS)

.PHONY: soak-history
SOAK_HISTORY_ARGS ?=
soak-history: $(TEST_STAMP)
	$(BIN)/python -m harness.history run --seconds 600 --kills 10 $(SOAK_HISTORY_ARGS)
