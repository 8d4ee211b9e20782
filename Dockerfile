# syntax=docker/dockerfile:1
# The taskq image: the `taskq` command, installed from a wheel built in the first stage.
#
#   docker build -t taskq .
#   docker run -e TASKQ_DSN=postgresql://... taskq migrate --roles      # once per deploy
#   docker run -e TASKQ_DSN=... -e TASKQ_APP=myservice.tasks:app taskq  # a worker (the CMD)
#
# Your handlers must be importable in the container: build FROM this image and COPY your
# package into /app (the working directory, which is importable), or install it with pip. The
# worker reads --app / --queues from TASKQ_APP / TASKQ_QUEUES, so the CMD needs no arguments.
# See examples/docker-compose.yml for PostgreSQL + migrate + worker + dashboard.

ARG PYTHON_VERSION=3.12

# --- build: the taskq wheel, and wheels of its dependencies --------------------------------------
FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY taskq ./taskq
COPY sql ./sql
COPY migrations ./migrations
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# --- runtime: no compilers, no sources, not root ---------------------------------------------------
FROM python:${PYTHON_VERSION}-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels taskq \
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
