# The taskq image: the `taskq` command, installed from a wheel built in the first stage.
#
#   docker build -t taskq .
#   docker run --rm -e TASKQ_DSN=postgresql://... taskq migrate --roles      # once per deploy
#   docker run -e TASKQ_DSN=... -e TASKQ_APP=myservice.tasks:app taskq       # a worker (the CMD)
#
# Your handlers must be importable in the container: build FROM this image and COPY your
# package into /app (the working directory, which is importable), or install it with pip. The
# worker reads --app / --queues from TASKQ_APP / TASKQ_QUEUES, so the CMD needs no arguments.
# See examples/docker-compose.yml for PostgreSQL + migrate + worker + dashboard.
#
# BASE_IMAGE is any Debian-like image with python3 (>= 3.11), its venv module and CA
# certificates. CI builds on a base it bootstraps locally (.ci/container-base); users get the
# public python image.

ARG BASE_IMAGE=python:3.12-slim

# --- build: the taskq wheel, and wheels of its dependencies --------------------------------------
FROM ${BASE_IMAGE} AS build
# pip trusts the system's CA bundle (where a TLS-inspecting proxy's CA would be installed).
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY taskq ./taskq
COPY sql ./sql
COPY migrations ./migrations
# The speed extra: workers run on uvloop.
RUN /opt/build/bin/pip wheel --wheel-dir /wheels '.[dashboard,speed]'

# --- runtime: no compilers, no sources, no pip cache, not root --------------------------------------
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/taskq/bin:$PATH
# The wheels are bind-mounted from the build stage (BuildKit), never copied into a layer.
# pip itself is removed from the venv afterwards: the image runs taskq, it installs nothing.
RUN --mount=type=bind,from=build,source=/wheels,target=/tmp/wheels \
    python3 -m venv /opt/taskq \
    && /opt/taskq/bin/pip install --no-cache-dir --no-index --find-links=/tmp/wheels \
        'taskq[dashboard,speed]' \
    && /opt/taskq/bin/pip uninstall --yes --quiet pip \
    && groupadd --system --gid 10001 taskq \
    && useradd --system --uid 10001 --gid taskq --home-dir /app --create-home taskq
WORKDIR /app
# A numeric UID, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001

# Healthy while the worker of this container heart-beats (taskq health finds it by hostname):
# exit 1 = unhealthy, for Docker; taskq health's own 3 means "database unavailable".
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD taskq health || exit 1

# SIGTERM drains in-flight tasks for --shutdown-timeout (30 s): give `docker stop` longer
# (docker stop -t 45, compose stop_grace_period: 45s, Kubernetes terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["taskq"]
CMD ["worker"]
