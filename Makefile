# Everything installs itself: a fresh clone needs only Python 3.10+, Java 17+ and Maven
# (or KAFKA_HOME / KAFKA_BOOTSTRAP_SERVERS, or a Docker engine).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: upstream-share demo check test test-container docker-engine kafka-image browser docs lint typecheck bench soak soak-long clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make demo: start the embedded brokers (local jars, also where a Docker engine runs) and show
## SafeConsumer at work
demo: $(STAMP)
	SAFECONSUMER_BROKER=$${SAFECONSUMER_BROKER:-local} $(PY) -m examples.demo

## make check: the inner loop, in about a minute: lint, types, the unit tests and the broker-less
## conformance suite (no broker, no browser)
check: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest tests/unit tests/conformance -m "not kafka" -n 2 -q $(PYTEST_ARGS)

## make test: lint, type-check, then every test against real brokers run from local jars (no Docker
## needed, even where an engine runs; the container path has its own target). The tests run in
## TEST_WORKERS processes, each with its own brokers; those marked serial (timing-sensitive
## stimuli, CPU-heavy jobs) then run alone. Both phases always run; either failing fails the target.
## A worker that dies (a test past its timeout) ends the parallel phase: xdist's replacement
## worker under --dist loadgroup was seen waiting forever for work.
TEST_WORKERS ?= 4
test: $(STAMP) browser
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	status=0; \
	SAFECONSUMER_BROKER=local $(PY) -m pytest --ignore=tests/container -m "not serial" \
		-n $(TEST_WORKERS) --dist loadgroup --max-worker-restart=0 $(PYTEST_ARGS) || status=$$?; \
	SAFECONSUMER_BROKER=local $(PY) -m pytest --ignore=tests/container -m serial $(PYTEST_ARGS) || status=$$?; \
	exit $$status

## make browser: Debian's chromium and chromedriver, for the docs site's headless check (tests/docs)
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null \
			|| { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }; \
		else echo "tests/docs needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver" >&2; fi; \
	fi

## make docker-engine: a Docker engine that answers (as root on Debian: installs docker.io and
## debootstrap where missing and starts dockerd; otherwise says what to do)
docker-engine:
	bash docker/engine.sh

## make kafka-image: build a Kafka image without a registry (Debian packages + the resolved jars);
## an image already built from the same inputs is kept
## KAFKA_VERSION=4.3.1: the image (and make test-container) of another supported Kafka release
DEFAULT_KAFKA_VERSION := $(shell sed -n 's/^KAFKA_VERSION = "\(.*\)"$$/\1/p' safeconsumer/testing/_local.py)
KAFKA_VERSION ?= $(DEFAULT_KAFKA_VERSION)
LOCAL_IMAGE := safeconsumer/kafka:$(KAFKA_VERSION)-local
KAFKA_IMAGE ?= $(LOCAL_IMAGE)
# The other supported releases (tests marked kafka_versions run on them too), each with the
# variable naming its image (SAFECONSUMER_KAFKA_IMAGE_4_3_1); test-container builds those unset.
OTHER_KAFKA_VERSIONS := $(filter-out $(DEFAULT_KAFKA_VERSION),$(shell sed -n 's/^KAFKA_VERSIONS = (\(.*\))$$/\1/p' safeconsumer/testing/_local.py | tr -d '",'))
image_var = SAFECONSUMER_KAFKA_IMAGE_$(subst .,_,$(1))
UNNAMED_OTHER_VERSIONS = $(foreach v,$(OTHER_KAFKA_VERSIONS),$(if $($(call image_var,$(v))),,$(v)))
OTHER_IMAGES = $(foreach v,$(UNNAMED_OTHER_VERSIONS),$(call image_var,$(v))=safeconsumer/kafka:$(v)-local)
kafka-image: $(STAMP) docker-engine
	PYTHON=$(PY) KAFKA_VERSION=$(KAFKA_VERSION) bash docker/kafka-local/build.sh $(KAFKA_IMAGE)

## make test-container: the broker-backed suites through the container path, on a Docker engine.
## With the default image it also builds the other supported releases' images (for the tests marked
## kafka_versions) unless SAFECONSUMER_KAFKA_IMAGE_<version> names one.
## KAFKA_IMAGE=apache/kafka:<version> uses Apache's images where a registry is reachable (no build then).
test-container: $(STAMP) docker-engine
	@if [ "$(KAFKA_IMAGE)" = "$(LOCAL_IMAGE)" ]; then \
		$(MAKE) kafka-image && \
		for v in $(UNNAMED_OTHER_VERSIONS); do \
			$(MAKE) kafka-image KAFKA_VERSION=$$v KAFKA_IMAGE=safeconsumer/kafka:$$v-local || exit 1; \
		done; \
	fi
	SAFECONSUMER_BROKER=container SAFECONSUMER_KAFKA_IMAGE=$(KAFKA_IMAGE) \
	$(if $(filter $(LOCAL_IMAGE),$(KAFKA_IMAGE)),$(OTHER_IMAGES)) \
	TESTCONTAINERS_RYUK_DISABLED=$${TESTCONTAINERS_RYUK_DISABLED:-true} \
	$(PY) -m pytest tests/container tests/integration tests/conformance $(PYTEST_ARGS)

## make docs: build the documentation site (strict) into .site/
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy

## make bench: every line of SPEC's Budgets table in one run, side by side with the raw client
## (benchmarks/budgets.py; benchmarks/throughput.py and benchmarks/aio.py go deeper into one line)
bench: $(STAMP)
	SAFECONSUMER_BROKER=$${SAFECONSUMER_BROKER:-local} $(PY) -m benchmarks.budgets; status=$$?; \
	$(PY) -m benchmarks.report && exit $$status

## make soak: member processes started, killed and terminated at random, under every protocol, then
## share-group members in both acknowledgement modes (SOAK_SECONDS of chaos each, default 180), both on
## two brokers of which one is SIGKILLed and restarted now and then; fails on any lost record, invariant
## violation, record archived without a copy or processed twice unexplained, or member that died.
## SOAK_LONG=1: the share soak's long mode, SOAK_LONG_SECONDS (default 1800) of chaos per mode
## (make soak-long runs that alone); member logs kept in out/soak/share-long-<date>.
## SOAK_KAFKA=4.3.1: the brokers' Apache Kafka release (default the newest). Where the cluster has share-group
## DLQs (Kafka 4.4) the dead-letter topic is also the group's DLQ in the broker, which copies what it archives;
## SOAK_BROKER_DLQ=off: the consumers' own last-delivery copies only (on: insist on the broker's).
SOAK_SECONDS ?= 180
SOAK_LONG_SECONDS ?= 1800
SHARE_SOAK_ARGS = $(if $(SOAK_LONG),--seconds $(SOAK_LONG_SECONDS) --logs out/soak/share-long-$(shell date +%Y%m%d-%H%M%S),--seconds $(SOAK_SECONDS)) \
	$(if $(SOAK_KAFKA),--kafka-version $(SOAK_KAFKA)) $(if $(SOAK_BROKER_DLQ),--broker-dlq $(SOAK_BROKER_DLQ))
soak: $(STAMP)
	SAFECONSUMER_BROKER=$${SAFECONSUMER_BROKER:-local} $(PY) -m tests.soak.run --seconds $(SOAK_SECONDS)
	SAFECONSUMER_BROKER=$${SAFECONSUMER_BROKER:-local} $(PY) -m tests.soak.share $(SHARE_SOAK_ARGS)

## make soak-long: the share soak alone in its long mode (SOAK_LONG_SECONDS per acknowledgement mode)
soak-long: $(STAMP)
	SAFECONSUMER_BROKER=$${SAFECONSUMER_BROKER:-local} $(PY) -m tests.soak.share $(SHARE_SOAK_ARGS)
soak-long: SOAK_LONG = 1

## make upstream-share: confluent-kafka-python's own share consumer tests, with upstream's classes and
## with ours (fails on a test that passes with upstream's only). They are not on PyPI: CONFLUENT_SOURCE
## names a checkout or git directory of confluent-kafka-python, else the installed release's tag is cloned.
upstream-share: $(STAMP)
	$(PY) -m tests.confluent_share.published $${CONFLUENT_SOURCE:+--source $$CONFLUENT_SOURCE}

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
