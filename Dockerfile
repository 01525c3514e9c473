# One image for every hami-dcu subcommand (webhook, scheduler, device-plugin, dra-driver, certs, demo).
#
# Reproducible: the base image is pinned to a patch release (pin its digest too, with
# `--build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:...`, in release builds), and every
# runtime dependency is pinned to the version the test suite ran against (constraints.txt).
# Any base with python3 (3.11+) and its venv module works: the kind suite, which has no registry
# to pull from, builds on a Debian bookworm root filesystem of its own (e2e/kind/build.sh).
# Plain Dockerfile syntax, so the classic builder builds it as well as BuildKit.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY constraints.txt /constraints.txt
RUN python3 -m venv /opt/hami-dcu
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common common
COPY webhook webhook
COPY scheduler scheduler
COPY node node
COPY deviceplugin deviceplugin
COPY dra dra
COPY cli cli
# The project and its dependencies into one virtual environment; only it reaches the final image.
RUN /opt/hami-dcu/bin/pip install --constraint /constraints.txt "setuptools==80.9.0" "wheel==0.45.1" \
    && /opt/hami-dcu/bin/pip install --constraint /constraints.txt --no-build-isolation . \
    && /opt/hami-dcu/bin/hami-dcu --help >/dev/null

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/hami-dcu /opt/hami-dcu
ENV PATH=/opt/hami-dcu/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRPC_VERBOSITY=ERROR
# The scheduler (with the webhook) and the certs job run as this user (the chart also sets
# runAsUser/runAsNonRoot); the device plugin needs root for the kubelet's socket directory and
# the host's vdev dirs, and the chart runs it as uid 0.
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin hami
USER 65532
ENTRYPOINT ["hami-dcu"]
