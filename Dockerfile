# The operator image for users with a container engine (this repository's own tests build the
# same layout without one: hack/image.sh). Not built on the project's CI machine, which has no engine.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin etcd-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/etcd-operator /usr/local/bin/etcd-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/etcd-operator"]
