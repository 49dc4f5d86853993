# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test test-fast demo bench bench-full tools-check lint java-check clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is needed"' \
		|| { echo "offset-ledger needs Python >= 3.11 (tomllib) (found: $$($(PYTHON) --version 2>&1))"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench,server]'
	touch $(STAMP)

java-check:
	@command -v java >/dev/null 2>&1 || { \
		echo "Java 17 is needed for the Spark parts (compaction, replay, audit) and their tests:"; \
		echo "  java was not found on PATH. Install it, e.g.: apt-get install openjdk-17-jre-headless"; \
		exit 1; }
	@java -version 2>&1 | head -1 | grep -Eq '"(17|21)[."]' || { \
		echo "Java 17 (or 21) is needed for Spark 4; found: $$(java -version 2>&1 | head -1)"; exit 1; }

# Debian packages the tests run: prometheus (scrapes the server in tests/server), wrk (HTTP load),
# PostgreSQL's server (the reference server's database) and chromium (the console's browser tests).
# Checked here, installed by .ci/run.
APT_TOOLS := prometheus wrk postgresql chromium
tools-check:
	@missing=""; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v wrk >/dev/null 2>&1 || missing="$$missing wrk"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql(initdb)"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "the tests need these Debian packages, missing here:$$missing"; \
		echo "  install them with: apt-get update && apt-get install -y $(APT_TOOLS)"; \
		exit 1; fi

test: venv java-check tools-check
	$(BIN)/python -m pytest -q

test-fast: venv tools-check
	$(BIN)/python -m pytest -q -m "not spark and not slow"

lint: venv
	$(BIN)/ruff check .

demo: venv
	$(BIN)/offset-ledger demo --serve

# The pinned workload and every feed against SQLite (bench/results/latest.{json,md}), the
# server against its PostgreSQL reference (server-latest.json), a 1M-record Kafka offsets import,
# the Spark audit of 8 shards on a standalone cluster against local[2] (spark-cluster-latest.json).
bench: venv java-check tools-check
	$(BIN)/python -m bench.run --size default
	$(BIN)/python -m bench.server_bench
	$(BIN)/python -m bench.kafka_offsets_dump --records 1000000 --repeats 1 | tee bench/results/kafka-offsets-latest.jsonl
	$(BIN)/python -m bench.spark_cluster_bench

bench-full: venv java-check
	$(BIN)/python -m bench.run --size full

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
