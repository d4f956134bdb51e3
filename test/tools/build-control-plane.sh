#!/usr/bin/env bash
# Builds the Kubernetes control plane the test harness runs (etcd, kube-apiserver,
# kube-controller-manager) from the pinned Go modules in test/tools/{etcd,k8s}, once,
# into a cache outside the clone so CI runs and later sessions reuse it. Prints the
# directory that holds the binaries. Safe to run concurrently (flock).
set -euo pipefail

# sha256sum is GNU's; macOS has shasum.
sha256() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi; }

k8s_version=v1.36.3
etcd_version=v3.6.7
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=36 -X $pkg.gitTreeState=clean"
# The cache key hashes the tools modules and the link flags, so a changed pin
# or flag rebuilds while edits elsewhere in this script do not.
key=$( { cat "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/etcd/go.mod "$here"/etcd/go.sum; echo "$ldflags"; } | sha256 | cut -c1-12)
dir=${SG_K8S_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/storage-gateway/k8s/$k8s_version-$key}

if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi

mkdir -p "$dir"
# flock(1) is util-linux's: without it (macOS) concurrent builds only
# duplicate work, since each writes its own temporary file.
if command -v flock >/dev/null; then exec 9>"$dir/.lock"; flock 9; fi
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

start=$(date +%s)
echo "building Kubernetes $k8s_version and etcd $etcd_version control plane into $dir (first time only, ~10 min on 2 cores)" >&2
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$dir/etcd.tmp.$$" go.etcd.io/etcd/server/v3) >&2
mv "$dir/etcd.tmp.$$" "$dir/etcd"
for cmd in kube-apiserver kube-controller-manager; do
	(cd "$here/k8s" && go build -trimpath -ldflags "$ldflags" -o "$dir/$cmd.tmp.$$" "k8s.io/kubernetes/cmd/$cmd") >&2
	mv "$dir/$cmd.tmp.$$" "$dir/$cmd"
done
touch "$dir/.complete"
echo "control plane built in $(( $(date +%s) - start )) s" >&2
echo "$dir"
