# outboxd image: the relay (`outboxd`) and the example application
# (`outboxd-example-confirm`, `outboxd-example-billing`) on Debian bookworm.
#
#   docker build -t outboxd .
#   docker run --rm outboxd run --help
#
# Configuration is by environment (every flag has OUTBOXD_<FLAG>: OUTBOXD_PG,
# OUTBOXD_BROKERS, ...), flags after the subcommand, or a mounted TOML file
# (OUTBOXD_CONFIG=/etc/outboxd.toml; docs/configuration.md). docker-compose.yml runs
# the whole stack. tests/deploy/check_compose.sh checks, without Docker, that the runtime
# packages below provide every shared library the binaries load.

# ---- build ------------------------------------------------------------------------
FROM debian:bookworm-slim AS build
# The build packages of scripts/deps, without the test-only ones.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config ca-certificates \
      libpq-dev libssl-dev librdkafka-dev librabbitmq-dev libnats-dev \
      libsimdjson-dev libabsl-dev libcli11-dev libspdlog-dev prometheus-cpp-dev \
      libmicrohttpd-dev libtomlplusplus-dev \
      protobuf-compiler libprotobuf-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DOUTBOXD_BUILD_TESTS=OFF -DOUTBOXD_BUILD_BENCH=OFF \
 && cmake --build /build --target outboxd outboxd_example_confirm \
      outboxd_example_billing_consumer \
 && strip --strip-debug /build/bin/outboxd /build/bin/outboxd-example-confirm \
      /build/bin/outboxd-example-billing

# ---- runtime ----------------------------------------------------------------------
FROM debian:bookworm-slim
# Runtime libraries only (Debian bookworm package names): libpq, libcrypto (libssl3: the
# signature of outboxd_emit's events, the dead-letter table's SHA-256 stand-ins),
# librdkafka, rabbitmq-c (--sink rabbitmq), libnats (--sink nats), simdjson,
# abseil, spdlog/fmt, prometheus-cpp's core (/metrics), libmicrohttpd (the /metrics and
# /healthz server), protobuf (--format protobuf); ca-certificates for TLS; curl for the
# health check.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libpq5 libssl3 librdkafka1 librabbitmq4 libnats3.4 libsimdjson14 libabsl20220623 libspdlog1.10 libfmt9 \
      libprometheus-cpp-core1.0 libmicrohttpd12 libprotobuf32 ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin outboxd
COPY --from=build /build/bin/outboxd /build/bin/outboxd-example-confirm \
     /build/bin/outboxd-example-billing /usr/local/bin/
USER outboxd
# In a container /metrics and /healthz must listen on all interfaces.
ENV OUTBOXD_METRICS=0.0.0.0:9187
EXPOSE 9187
# /healthz answers 200 while the relay streams and the broker acknowledges, 503 with
# the reason otherwise (outboxd run/poll; docs/operations.md, "Metrics and alerts").
# The port follows OUTBOXD_METRICS.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${OUTBOXD_METRICS##*:}/healthz" >/dev/null || exit 1
ENTRYPOINT ["outboxd"]
CMD ["--help"]
