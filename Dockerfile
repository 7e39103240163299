# syntax=docker/dockerfile:1
# dedupd image: docker build -t dedupd:0.1.0 .   (docs/deploy.md)
#
# CARGO_FEATURES: extra cargo features, passed as --features to both cargo builds below. TLS
# does not depend on it: Cargo.toml always enables rdkafka's `ssl` feature, so every build,
# a plain `cargo build` included, links librdkafka against OpenSSL (security.protocol
# PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL; SASL PLAIN and SCRAM; no GSSAPI, no OIDC:
# docs/security.md). The
# default, rdkafka/ssl, only names that feature again: --build-arg CARGO_FEATURES= builds the
# same binary.
ARG CARGO_FEATURES=rdkafka/ssl

FROM rust:1-bookworm AS build
ARG CARGO_FEATURES
# rdkafka-sys builds librdkafka from its bundled source with librdkafka's own configure and
# make (no cmake): make, gcc/g++, pkg-config, zlib (the libz feature) and the OpenSSL
# headers (rdkafka's ssl feature, always on). rust:1-bookworm ships all of them; listed so a
# change of base image fails here rather than inside the librdkafka build.
RUN apt-get update \
 && apt-get install -y --no-install-recommends make gcc g++ pkg-config python3 zlib1g-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src

# Dependencies first, against stub targets: this layer (librdkafka included, the slow part)
# is rebuilt only when Cargo.toml or Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs && echo 'fn main() {}' > benches/filter.rs \
 && cargo build --release --locked --features "$CARGO_FEATURES" --bin dedupd \
 && rm -rf src benches

COPY src ./src
COPY benches ./benches
# COPY keeps the sources' older mtimes: touch them so cargo rebuilds over the stub.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --features "$CARGO_FEATURES" --bin dedupd \
 && strip --strip-debug -o /usr/local/bin/dedupd target/release/dedupd \
 && /usr/local/bin/dedupd --version

FROM debian:bookworm-slim
# ca-certificates: the system CAs for TLS to the brokers; libssl3 and zlib1g: librdkafka's
# shared libraries (the rest, libc and libgcc_s, is in the base image).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 dedupd \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin dedupd
COPY --from=build /usr/local/bin/dedupd /usr/local/bin/dedupd
# Found by `dedupd run` without --config: the last place of its search (--config,
# DEDUPD_CONFIG, ./config/dedupd.toml, /etc/dedupd/dedupd.toml), so DEDUPD_CONFIG can name
# another file, and a mounted /etc/dedupd/dedupd.toml replaces this one.
COPY config/dedupd.toml /etc/dedupd/dedupd.toml
# The admin endpoint (/metrics, /healthz, /readyz, /v1/slices) must be reachable from outside
# the container; the file's 127.0.0.1 is for running on a workstation.
ENV DEDUPD__ADMIN__LISTEN=0.0.0.0:9464
# /healthz and /readyz alone, with connection slots of their own: for liveness and readiness
# probes, which clients holding the admin port's connections open then cannot fail.
ENV DEDUPD__ADMIN__HEALTH_LISTEN=0.0.0.0:9465
USER 10001:10001
EXPOSE 9464 9465
# dedupd stops gracefully on SIGTERM within shutdown.timeout (default 30s): give
# `docker stop` more than that, e.g. docker stop -t 45.
STOPSIGNAL SIGTERM
ENTRYPOINT ["dedupd"]
CMD ["run"]
