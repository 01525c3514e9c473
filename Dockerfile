# One image for every hami-dcu subcommand (webhook, scheduler, device-plugin, certs).
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common common
COPY webhook webhook
COPY scheduler scheduler
COPY deviceplugin deviceplugin
COPY cli cli
COPY e2e e2e
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11.11-slim-bookworm
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 \
    GRPC_VERBOSITY=ERROR
# The webhook, the scheduler and the certs job run as this user (the chart sets runAsUser);
# the device plugin runs as root for the kubelet's socket directory and the host's vdev dirs.
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin hami
USER 65532
ENTRYPOINT ["hami-dcu"]
