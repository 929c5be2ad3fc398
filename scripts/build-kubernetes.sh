#!/usr/bin/env bash
# Builds Kubernetes (kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy
# kubectl) from the Go module proxy into /var/cache/roughnet/kubernetes/<version>/bin, and then,
# best effort, flanneld and kube-router into the same folder (one function for both). Idempotent: exits at once when the six binaries
# are there and kubectl reports the version.
#
# k8s.io/kubernetes cannot be `go install`ed at a version (its go.mod replaces k8s.io/* with
# ./staging paths), so a small wrapper module (template: scripts/kubernetes/go.mod.in and
# tools.go) requires it and points those replacements at the published k8s.io/* v0.x modules.
# Caches outside the clone: GOMODCACHE and GOCACHE under /var/cache/roughnet/go.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.32.13}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
# The proxy refuses the v0.32.13 zip of k8s.io/endpointslice (403); v0.32.12 works.
ENDPOINTSLICE_VERSION=${ENDPOINTSLICE_VERSION:-v0.32.12}
FLANNEL_VERSION=${FLANNEL_VERSION:-v0.28.10}
# The one version the module proxy serves here (security reports exist for it: a local test cluster in
# namespaces only; docs/kubernetes.md).
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-v2.1.0}
CACHE=${ROUGHNET_CACHE:-/var/cache/roughnet}
KDIR=$CACHE/kubernetes
SRC=$KDIR/src
BIN=$KDIR/$K8S_VERSION/bin
BINARIES=(kubectl kube-scheduler kube-proxy kube-controller-manager kubelet kube-apiserver)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
  # the output first, then grep: `kubectl ... | grep -q` under pipefail failed when grep quit after the
  # first line and kubectl died of SIGPIPE writing the second (a cold build here, 2026-11-26)
  local out
  out=$("$BIN/kubectl" version --client 2>/dev/null) || return 1
  grep -q "Client Version: $K8S_VERSION\$" <<<"$out"
}

# flanneld is best effort: a failed attempt leaves a marker so reruns stay fast (remove it to retry).
FLANNEL_FAILED=$KDIR/flanneld-$FLANNEL_VERSION.failed
KUBE_ROUTER_FAILED=$KDIR/kube-router-$KUBE_ROUTER_VERSION.failed
if have_all && { [ -x "$BIN/flanneld" ] || [ -e "$FLANNEL_FAILED" ]; } \
    && { [ -x "$BIN/kube-router" ] || [ -e "$KUBE_ROUTER_FAILED" ]; }; then
  exit 0
fi

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
if [ ! -x "$GO" ]; then
  echo "build-kubernetes: go not found (install Go 1.23 or newer, e.g. in /usr/local/go)" >&2
  exit 1
fi
export GOMODCACHE=${GOMODCACHE:-$CACHE/go/mod}
export GOCACHE=${GOCACHE:-$CACHE/go/build}
export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$SRC" "$BIN" "$GOMODCACHE" "$GOCACHE"

t_start=$SECONDS
echo "build-kubernetes: Kubernetes $K8S_VERSION with $("$GO" version | cut -d' ' -f3) into $BIN"

# The wrapper module: regenerated from the template; tidied only when it changed.
sed -e "s/@K8S_VERSION@/$K8S_VERSION/g" -e "s/@STAGING_VERSION@/$STAGING_VERSION/g" \
    -e "s/@ENDPOINTSLICE_VERSION@/$ENDPOINTSLICE_VERSION/g" \
    "$HERE/kubernetes/go.mod.in" > "$SRC/go.mod.template"
cp "$HERE/kubernetes/tools.go" "$SRC/tools.go.new"
if ! cmp -s "$SRC/go.mod.template" "$SRC/go.mod.template.done" || ! cmp -s "$SRC/tools.go.new" "$SRC/tools.go" \
   || [ ! -s "$SRC/go.sum" ]; then
  echo "build-kubernetes: go mod tidy in $SRC (downloads the modules on a first run)"
  t=$SECONDS
  cp "$SRC/go.mod.template" "$SRC/go.mod"
  mv "$SRC/tools.go.new" "$SRC/tools.go"
  rm -f "$SRC/go.sum"
  (cd "$SRC" && "$GO" mod tidy)
  cp "$SRC/go.mod.template" "$SRC/go.mod.template.done"
  echo "build-kubernetes: go mod tidy took $((SECONDS - t)) s"
else
  rm -f "$SRC/tools.go.new"
fi

major=${K8S_VERSION#v}; major=${major%%.*}
minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

n=0
for b in "${BINARIES[@]}"; do
  n=$((n + 1))
  if [ -x "$BIN/$b" ] && [ "$BIN/$b" -nt "$SRC/go.sum" ]; then
    echo "build-kubernetes: [$n/${#BINARIES[@]}] $b already built"
    continue
  fi
  t=$SECONDS
  echo "build-kubernetes: [$n/${#BINARIES[@]}] $b ..."
  (cd "$SRC" && "$GO" build -trimpath -ldflags "$ldflags" -o "$BIN/.$b.tmp" "k8s.io/kubernetes/cmd/$b")
  mv -f "$BIN/.$b.tmp" "$BIN/$b"
  echo "build-kubernetes: [$n/${#BINARIES[@]}] $b done in $((SECONDS - t)) s ($(du -h "$BIN/$b" | cut -f1))"
done

if ! have_all; then
  echo "build-kubernetes: built, but '$BIN/kubectl version --client' does not report $K8S_VERSION" >&2
  "$BIN/kubectl" version --client >&2 || true
  exit 1
fi
echo "build-kubernetes: Kubernetes $K8S_VERSION ready after $((SECONDS - t_start)) s"

# The pod networks' daemons, best effort: a failure is reported, leaves a marker (reruns stay fast; remove it to
# retry) and does not fail this script. Each is built by a small wrapper module around the daemon's own main.go
# (copied from the module cache), tidied only when its version changed:
#   best_effort NAME MODULE VERSION MAIN SRC_DIR LOG FAILED CGO LDFLAGS [IMPORT_TO_DROP]
best_effort() {
  local name=$1 module=$2 version=$3 main=$4 src=$5 log=$6 failed=$7 cgo=$8 ldflags=$9 drop=${10:-}
  [ -x "$BIN/$name" ] || [ -e "$failed" ] && return 0
  local t=$SECONDS
  echo "build-kubernetes: $name $version (best effort) ..."
  if (
    set -e
    mkdir -p "$src"
    cd "$src"
    if [ ! -s go.sum ] || ! grep -q "$module $version" go.mod 2>/dev/null; then
      printf 'module roughnet.local/%sbuild\n\ngo 1.26.0\n\nrequire %s %s\n' "${name//-/}" "$module" "$version" > go.mod
      rm -f go.sum
      dir=$("$GO" mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
      if [ -n "$drop" ]; then grep -v "\"$drop\"" "$dir/$main" > main.go; else cat "$dir/$main" > main.go; fi
      "$GO" mod tidy
    fi
    CGO_ENABLED=$cgo "$GO" build -trimpath -ldflags "$ldflags" -o "$BIN/.$name.tmp" .
    mv -f "$BIN/.$name.tmp" "$BIN/$name"
  ) > "$log" 2>&1; then
    rm -f "$failed"
    echo "build-kubernetes: $name done in $((SECONDS - t)) s ($("$BIN/$name" --version 2>&1 | head -n1))"
  else
    echo "build-kubernetes: WARNING: $name $version did not build (log: $log):" >&2
    grep -v '^go: downloading' "$log" | tail -n 5 >&2 || true
    touch "$failed"
  fi
}

# flanneld: not with `go install ...@version`: flannel's tencentvpc backend needs
# github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc v1.3.188, whose zip the proxy refuses (403), so that
# one backend import is dropped. cgo on: the udp backend's amd64 proxy is C.
best_effort flanneld github.com/flannel-io/flannel "$FLANNEL_VERSION" main.go "$KDIR/flannel-src" \
  "$KDIR/flannel-build.log" "$FLANNEL_FAILED" 1 \
  "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" \
  github.com/flannel-io/flannel/pkg/backend/tencentvpc
# kube-router: its cmd/kube-router main; its router only is used (BGP between the nodes, routes to each node's
# pods; docs/kubernetes.md).
best_effort kube-router github.com/cloudnativelabs/kube-router/v2 "$KUBE_ROUTER_VERSION" cmd/kube-router/kube-router.go \
  "$KDIR/kube-router-src" "$KDIR/kube-router-build.log" "$KUBE_ROUTER_FAILED" 0 \
  "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
exit 0
