# syntax=docker/dockerfile:1.7
#
# extauthz: a static Go binary on distroless "static:nonroot" (no shell, no
# package manager, CA certificates included for rediss://).
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t extauthz .
#
# test/k8s parses the `go build` line below and builds the binary with exactly
# these flags in CI, so keep it one RUN instruction with one `go build`.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
# Cross-compile on the build platform: CGO_ENABLED=0 gives a static binary
# that runs without libc; -trimpath drops local paths from it.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/extauthz ./cmd/extauthz
# Envoy Gateway starts its rate limit container as /bin/ratelimit: the same
# binary under that name, by a link (the runtime image has no shell to make
# one).
RUN mkdir -p /out/bin && ln -s /usr/local/bin/extauthz /out/bin/ratelimit

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="extauthz" \
      org.opencontainers.image.description="Rate limits and Idempotency-Key for Envoy (RLS, ext_authz, ext_proc)" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/extauthz /usr/local/bin/extauthz
COPY --from=build /out/bin/ /bin/
# The example policy makes the image run as is; Kubernetes mounts its
# ConfigMap over this directory. No ENV names it: the binary reads it when
# EXTAUTHZ_CONFIG is unset, so that, started as /bin/ratelimit, the peer's
# RUNTIME_ROOT policy directory is not shadowed by an image default.
COPY examples/policy/ /etc/extauthz/policy/
# Numeric, so that the kubelet can verify runAsNonRoot without /etc/passwd.
USER 65532:65532
# gRPC (RLS, ext_authz, ext_proc, health, reflection) and HTTP (/metrics, /healthz, /readyz).
EXPOSE 9001 9090
ENTRYPOINT ["/usr/local/bin/extauthz"]
