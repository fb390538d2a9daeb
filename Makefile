# streamgate: `make run` starts the gateway on its embedded defaults,
# `make test` installs everything the tests need and runs them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

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

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) kcat-installed lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python compat/bench_throughput.py

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis
