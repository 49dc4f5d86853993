# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test test-fast demo bench bench-full bench-tools lint java-check clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python >= 3.10 is needed"' \
		|| { echo "offset-ledger needs Python >= 3.10 (found: $$($(PYTHON) --version 2>&1))"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

java-check:
	@command -v java >/dev/null 2>&1 || { \
		echo "Java 17 is needed for the Spark parts (compaction, replay, audit) and their tests:"; \
		echo "  java was not found on PATH. Install it, e.g.: apt-get install openjdk-17-jre-headless"; \
		exit 1; }
	@java -version 2>&1 | head -1 | grep -Eq '"(17|21)[."]' || { \
		echo "Java 17 (or 21) is needed for Spark 4; found: $$(java -version 2>&1 | head -1)"; exit 1; }

# wrk (HTTP load) and PostgreSQL's server (the reference server's database), from Debian.
bench-tools:
	@command -v wrk >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing wrk and postgresql (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk postgresql >/dev/null; }

test: venv java-check bench-tools
	@command -v chromium >/dev/null 2>&1 || { echo "The console's browser tests need Debian's Chromium: apt-get install chromium chromium-driver (.ci/run installs it)"; exit 1; }
	$(BIN)/python -m pytest -q

test-fast: venv bench-tools
	$(BIN)/python -m pytest -q -m "not spark and not slow"

lint: venv
	$(BIN)/ruff check .

demo: venv
	$(BIN)/offset-ledger demo --serve

bench: venv java-check
	$(BIN)/python -m bench.run --size default

bench-full: venv java-check
	$(BIN)/python -m bench.run --size full

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
