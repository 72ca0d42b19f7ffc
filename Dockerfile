# retentiond in a container: one daemon per broker store.
#
#   docker build -t retentiond .                      # the daemon (no Java)
#   docker build -t retentiond-analysis --target analysis .   # + Java and the spark extra
#   docker run -d --name retentiond-broker-a \
#       -v /data/rocketmq/store-a:/store \
#       -v retentiond-journal:/var/lib/retentiond \
#       -v /etc/retentiond/broker-a.yaml:/etc/retentiond/retentiond.yaml:ro \
#       -p 9465:9465 retentiond
#
# The config's storePathRootDir must then be /store. The container runs as uid 3000; give the
# store that owner (or run with --user set to the broker's uid): deleting needs write access
# to the store's directories, exactly as the broker has.

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: a wheel, so the runtime images carry no build tools or sources ---------------
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY retentiond ./retentiond
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- base: Python, the service user, the fixed paths ---------------------------------------
FROM ${PYTHON_IMAGE} AS base
# RUNTIME_DIRECTORY: where the daemon puts its control socket and `status` looks for it;
# STATE_DIRECTORY: the deletion journal goes to $STATE_DIRECTORY/journal (as under systemd).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RUNTIME_DIRECTORY=/run/retentiond \
    STATE_DIRECTORY=/var/lib/retentiond
RUN groupadd --system --gid 3000 rocketmq \
 && useradd --system --uid 3000 --gid rocketmq --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin rocketmq \
 && install -d -o rocketmq -g rocketmq -m 0700 /run/retentiond \
 && install -d -o rocketmq -g rocketmq -m 0750 /var/lib/retentiond /store \
 && install -d -m 0755 /etc/retentiond
COPY --from=build /wheels /wheels

# --- analysis: the PySpark job needs a JVM; kept out of the daemon image --------------------
FROM base AS analysis
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-cache-dir "$(ls /wheels/retentiond-*.whl)[spark]" \
 && rm -rf /wheels
USER rocketmq
ENTRYPOINT ["retentiond"]
CMD ["--help"]

# --- daemon (the default target: last in the file) ------------------------------------------
FROM base AS daemon
RUN pip install --no-cache-dir /wheels/retentiond-*.whl && rm -rf /wheels
# The store is the broker's data: always a mount, never part of the image.
VOLUME ["/store", "/var/lib/retentiond"]
# Prometheus metrics (served from the next release on).
EXPOSE 9465
USER rocketmq
# Healthy = the daemon answers on its control socket. The start period covers the first scan.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["retentiond", "status", "--config", "/etc/retentiond/retentiond.yaml"]
# The daemon is PID 1: it handles SIGTERM itself (docker stop) and spawns no children.
ENTRYPOINT ["retentiond", "--log-format", "json"]
CMD ["run", "--config", "/etc/retentiond/retentiond.yaml"]
