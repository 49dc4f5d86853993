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
	$(BIN)/python -m pip install --quiet -e '.[test,bench,server,kafka,s3]'
	touch $(STAMP)

java-check:
	@command -v java >/dev/null 2>&1 || { \
		echo "Java 17 is needed for the Spark parts (compaction, replay, audit) and their tests:"; \
		echo "  java was not found on PATH. Install it, e.g.: apt-get install openjdk-17-jre-headless"; \
		exit 1; }
	@java -version 2>&1 | head -1 | grep -Eq '"(17|21)[."]' || { \
		echo "Java 17 (or 21) is needed for Spark 4; found: $$(java -version 2>&1 | head -1)"; exit 1; }

# Debian packages the tests run (prometheus, wrk, postgresql, chromium, a Java runtime): installed
# when missing if make runs as root or with sudo (no password), else the command is printed.
tools-check:
	@./.ci/debian-tools

test: venv tools-check java-check
	$(BIN)/python -m pytest -q

test-fast: venv tools-check
	$(BIN)/python -m pytest -q -m "not spark and not slow"

lint: venv
	$(BIN)/ruff check .

demo: venv
	$(BIN)/offset-ledger demo --serve

# The pinned workload and every feed against SQLite (bench/results/latest.{json,md}), the
# server against its PostgreSQL reference (server-latest.json), 4 shards against 1
# (cluster-latest.json), a 1M-record Kafka offsets import
# and `follow kafka` of the same records from a mock cluster against it, a Kafka consumer with its
# offsets in the ledger against Kafka's own (kafka-consumer-latest.json), the Spark audit of 8
# shards on a standalone cluster against local[2] (spark-cluster-latest.json),
# and the read-scaling table (1M and 10M events; ledgers cached in bench/.cache) next to SQLite,
# with history through serve (read-scaling-latest.{json,md}).
bench: venv tools-check java-check
	$(BIN)/python -m bench.run --size default
	$(BIN)/python -m bench.server_bench
	$(BIN)/python -m bench.cluster_bench
	$(BIN)/python -m bench.kafka_offsets_dump --records 1000000 --repeats 1 | tee bench/results/kafka-offsets-latest.jsonl
	$(BIN)/python -m bench.kafka_follow --records 1000000 | tee bench/results/kafka-follow-latest.json
	$(BIN)/python -m bench.kafka_consumer_bench
	$(BIN)/python -m bench.read_scaling --size default --http --mechanisms
	$(BIN)/python -m bench.spark_cluster_bench

bench-full: venv java-check tools-check
	$(BIN)/python -m bench.run --size full
	$(BIN)/python -m bench.read_scaling --size full --http

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
