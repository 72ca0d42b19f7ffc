# The two commands a newcomer needs: `make run` (demo daemon on a generated store) and
# `make test` (the whole suite). Everything installs into .venv from PyPI.
#
# One .venv; each target installs only what it needs into it (a stamp file per set):
#   the package alone   what the daemon needs: `make run`, `make demo-store`, the benches
#   + test, spark       the suite (`make test`, `make lint`; the Spark job's tests run
#                       `analyze`), `make bench-spark` and `make demo-report`
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := demo
DAEMON_ENV := $(VENV)/.installed
FULL_ENV := $(VENV)/.installed-test-spark

.PHONY: venv venv-full system-deps test lint run demo-store demo-report bench bench-round bench-check bench-plan bench-progress bench-spark bench-kafka clean

venv: $(DAEMON_ENV)
venv-full: $(FULL_ENV)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(DAEMON_ENV): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install -q -e .  # no extras: the daemon never imports Spark
	touch $@

$(FULL_ENV): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,spark]'  # spark: the fleet analysis job and its tests
	touch $@ $(DAEMON_ENV)

lint: venv-full
	$(BIN)/ruff check retentiond tests bench
	$(BIN)/ruff format --check retentiond tests bench
	$(BIN)/lint-imports  # the layering contracts in pyproject.toml (docs/architecture.md)
	$(BIN)/mypy  # the package but analytics/, as [tool.mypy] in pyproject.toml says

system-deps:  # apt packages the suite needs (installed as root, named otherwise)
	bash .ci/system-deps

test: venv-full system-deps lint
	$(BIN)/pytest -q

demo-store: venv
	rm -rf $(DEMO)
	$(BIN)/python -m retentiond gen-store $(DEMO)/store --preset demo --config-out $(DEMO)/broker.yaml.gen
	sed 's#@DEMO@#$(abspath $(DEMO))#g' config/demo-overrides.yaml | cat $(DEMO)/broker.yaml.gen - > $(DEMO)/broker.yaml

run: demo-store
	@echo "In another terminal: $(BIN)/retentiond status --config $(DEMO)/broker.yaml"
	@echo "Prometheus metrics:  curl -s http://127.0.0.1:9465/metrics | grep ^retentiond_"
	$(BIN)/retentiond --log-format console run --config $(DEMO)/broker.yaml

demo-report: venv-full  # the fleet report of a synthetic mixed fleet: $(DEMO)/report/report.html
	rm -rf $(DEMO)/fleet $(DEMO)/tables $(DEMO)/report
	$(BIN)/python -m retentiond.analytics.synth $(DEMO)/fleet
	$(BIN)/retentiond analyze --master 'local[2]' --input $(DEMO)/fleet --output $(DEMO)/tables --report $(DEMO)/report
	@echo "open $(abspath $(DEMO))/report/report.html (one file, no network needed)"

bench: venv  # issue 28: plan, rounds, daemon memory and READY on four store shapes beside find
	$(BIN)/python bench/bench_shapes.py

bench-round: venv  # issue 11's detail on bench-100k: rounds, in-process plan, a daemon's idle CPU
	$(BIN)/python bench/bench_round.py

bench-check: venv  # the same deletions as main on every shape, with and without the scan cache
	$(BIN)/python bench/check_plans.py --base main

bench-plan: venv  # `retentiond plan` (text, --json) end to end beside find, and its stages
	$(BIN)/python bench/bench_plan.py

bench-progress: venv  # issue 24: `plan` with 1,000 groups' consumer progress vs without, bench-100k
	$(BIN)/python bench/bench_progress.py

bench-spark: venv-full  # PySpark and DuckDB (extra spark)
	$(BIN)/python bench/bench_spark.py

bench-kafka: venv  # issue 10: Kafka plan vs find, 10,000 partitions x 20 segments
	$(BIN)/python bench/bench_kafka.py --plan-round

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .ruff_cache .mypy_cache .hypothesis
