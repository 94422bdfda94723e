# berth node in a container: a static binary on an empty, non-root image.
#
#   docker build -t berth .
#   docker run --rm -e BERTH_DB=postgres://... berth -name n1 -listen :7000 ...
#
# The build stage's command is the one TestTheDockerfileBuildsAStaticBinary
# (cmd/berth) runs: CGO off, so the binary needs no libc and runs on
# scratch. A program of its own kinds (package node) builds the same way:
# put its main package in place of ./cmd/berth and drop "node" from the
# ENTRYPOINT.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/berth ./cmd/berth

FROM scratch
COPY --from=build /out/berth /berth
# The system's CA roots, for a database reached with sslmode=verify-full
# (the peers use the CA of -tls-ca).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532
# 7000: the peers' transport; 9090: /metrics, /healthz, /readyz,
# /dashboard/; 9443: the admin API. Each is served only when set.
EXPOSE 7000 9090 9443
ENTRYPOINT ["/berth", "node"]
