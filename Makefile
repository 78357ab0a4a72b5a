# Two commands do everything on a fresh machine: `make run` and `make test`.
# Both are idempotent: the venv, ZooKeeper and nats-server are only installed when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA_DIR ?= ./data
PYTEST_ARGS ?=

.PHONY: run test test-slow venv zookeeper rabbitmq bench loadtest proto clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark,fuzz]'
	$(PY) -m connectors.spark.pyspark_zip  # Spark's Python processes then stop compiling pyspark at every start
	touch $(STAMP)

# ZooKeeper (the real-ZooKeeper test tier) and nats-server (the peer in `bench peers`) from Debian packages;
# openssl writes the htpasswd lines the authentication tests check (an implementation independent of ours);
# chromium and chromium-driver run the console's browser tests (tests/console).
zookeeper:
	@missing=""; \
	[ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper"; \
	command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || missing="$$missing nats-server"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	[ -x /usr/bin/chromedriver ] || missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	fi

# RabbitMQ (the durable peer in `bench peers` and its test). The bench runs its own node as a child process with
# the rabbitmq_stream plugin enabled through a per-node enabled_plugins file, so nothing under /etc is changed;
# where an init system starts the package's own service on install, it is stopped and disabled: nothing uses it.
rabbitmq:
	@if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then \
		echo "installing Debian package: rabbitmq-server"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq rabbitmq-server; \
		if command -v systemctl >/dev/null && systemctl is-active -q rabbitmq-server 2>/dev/null; then \
			$$SUDO systemctl disable --now rabbitmq-server; \
		fi; \
	fi

run: venv
	$(VENV)/bin/broker standalone --data-dir $(DATA_DIR)

# pytest exit code 5 means "no tests collected": that is a failure, not a pass.
test: venv zookeeper rabbitmq
	$(PY) -m pytest --durations=25 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

test-slow: venv zookeeper rabbitmq
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

bench: venv
	$(PY) -m loadtest.bench ledger

# A short headless locust scenario (50 users) against its own `broker standalone`; prints the summary.
loadtest: venv
	$(PY) -m loadtest.locust_run --users 50 --spawn-rate 10 --duration 30s

# Regenerate the Pulsar protocol's and the Stream API's Python code from our own .proto files (the output is committed).
proto: venv
	$(PY) -m pip install --quiet 'grpcio-tools==1.85.1'
	cd clients/python/magnetar/protocol && ../../../../$(PY) -m grpc_tools.protoc -I. --python_out=. pulsar_api.proto
	cd clients/python && ../../$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. magnetar/streams/stream_api.proto

clean:
	rm -rf $(VENV) *.egg-info
