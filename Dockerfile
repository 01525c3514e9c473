# syntax=docker/dockerfile:1.7
# One image for every hami-dcu subcommand (webhook, scheduler, device-plugin, dra-driver, certs, demo).
#
# Reproducible: the base image is pinned to a patch release (pin its digest too, with
# `--build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:...`, in release builds), and every
# runtime dependency is pinned to the version the test suite ran against (constraints below).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONSTRAINT=/constraints.txt
COPY <<EOF /constraints.txt
setuptools==80.9.0
wheel==0.45.1
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
attrs==26.1.0
certifi==2026.10.18
cffi==2.1.1
charset-normalizer==3.5.2
cryptography==50.0.2
durationpy==0.11
frozenlist==1.8.0
grpcio==1.85.1
idna==3.20
jsonpatch==1.47
jsonpointer==3.12
kubernetes==36.0.3
multidict==7.2.1
oauthlib==4.0.1
prometheus-client==0.26.0
propcache==0.5.4
protobuf==7.36.2
pycparser==3.12
python-dateutil==4.0.0
pyyaml==6.0.3
requests==2.34.2
requests-oauthlib==2.0.0
six==1.17.0
typing-extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
websocket-client==1.9.2
yarl==1.25.1
EOF
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common common
COPY webhook webhook
COPY scheduler scheduler
COPY deviceplugin deviceplugin
COPY dra dra
COPY cli cli
COPY e2e e2e
# Wheels for the project and all its dependencies; only these reach the final image.
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
COPY --from=build /constraints.txt /constraints.txt
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    pip install --no-index --find-links /wheels --constraint /constraints.txt hami-dcu \
    && hami-dcu --help >/dev/null
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRPC_VERBOSITY=ERROR
# The scheduler (with the webhook) and the certs job run as this user (the chart also sets
# runAsUser/runAsNonRoot); the device plugin needs root for the kubelet's socket directory and
# the host's vdev dirs, and the chart runs it as uid 0.
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin hami
USER 65532
ENTRYPOINT ["hami-dcu"]
