# hushwatch container image.
#
#   docker build -t hushwatch:0.1.0 .
#
# Multi-stage: a Debian bookworm Rust toolchain builds the release binary
# (SQLite is compiled in by rusqlite's "bundled" feature); the final image is
# distroless (glibc + libgcc, no shell, no package manager) and runs as the
# non-root user 65532. No HEALTHCHECK: Kubernetes probes /healthz and /readyz.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
COPY src ./src
COPY crates ./crates
RUN cargo build --release --locked --bin hushwatch \
 && install -D -m 0755 target/release/hushwatch /out/usr/local/bin/hushwatch \
 && install -d -m 0750 -o 65532 -g 65532 /out/var/lib/hushwatch
# A default config that works inside a container: listens on all interfaces,
# keeps state in /var/lib/hushwatch. The Helm chart mounts its own ConfigMap
# over /etc/hushwatch.
COPY config/hushwatch.toml /tmp/hushwatch.toml
RUN install -d /out/etc/hushwatch \
 && sed -e 's|^listen = .*|listen = "0.0.0.0:9477"|' \
        -e 's|^data_dir = .*|data_dir = "/var/lib/hushwatch"|' \
        /tmp/hushwatch.toml > /out/etc/hushwatch/hushwatch.toml \
 && grep -q '^listen = "0.0.0.0:9477"' /out/etc/hushwatch/hushwatch.toml \
 && grep -q '^data_dir = "/var/lib/hushwatch"' /out/etc/hushwatch/hushwatch.toml \
 && /out/usr/local/bin/hushwatch check --config /out/etc/hushwatch/hushwatch.toml

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/usr/local/bin/hushwatch /usr/local/bin/hushwatch
COPY --from=build /out/etc/hushwatch/ /etc/hushwatch/
# The state directory must be writable by the runtime user.
COPY --from=build --chown=65532:65532 /out/var/lib/hushwatch/ /var/lib/hushwatch/
USER 65532:65532
EXPOSE 9477
ENTRYPOINT ["hushwatch"]
CMD ["serve", "--config", "/etc/hushwatch/hushwatch.toml"]
