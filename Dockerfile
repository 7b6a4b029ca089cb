# The operator image for users with a container engine (this repository's own tests build the
# same layout without one: hack/image.sh). Not built on the project's CI machine, which has no engine.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin etcd-operator
# etcd-gate runs inside the etcd image of each new member, which has no libc: linked statically.
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked -p etcd-gate \
      --target "$(rustc -vV | sed -n 's/^host: //p')" --target-dir target/static \
 && cp target/static/*/release/etcd-gate target/etcd-gate

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/etcd-operator /usr/local/bin/etcd-operator
COPY --from=build /src/target/etcd-gate /usr/local/bin/etcd-gate
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/etcd-operator"]
