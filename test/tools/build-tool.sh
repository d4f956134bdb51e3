#!/usr/bin/env bash
# Builds a program the tests run — DCM's service-provider-manager, kubectl,
# the Helm 3 and Helm 4 CLIs — from a pinned tools module in test/tools,
# once, into a cache outside the clone, and prints the binary's path. Safe
# to run concurrently (flock).
#
#   test/tools/build-tool.sh MODULE_DIR PACKAGE    (MODULE_DIR under test/tools)
#   test/tools/build-tool.sh helm4 helm.sh/helm/v4/cmd/helm
set -euo pipefail

# sha256sum is GNU's; macOS has shasum.
sha256() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi; }

if [ $# -ne 2 ]; then echo "usage: $0 MODULE_DIR PACKAGE" >&2; exit 2; fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=$here/$1 pkg=$2
# The cache key hashes the module's pins and the package, so a changed pin
# rebuilds while edits elsewhere do not.
key=$( { cat "$module/go.mod" "$module/go.sum"; echo "$pkg"; } | sha256 | cut -c1-12)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/storage-gateway/tools/$1-$(basename "$pkg")-$key
bin=$dir/$(basename "$pkg")

if [ -f "$dir/.complete" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
# flock(1) is util-linux's: without it (macOS) concurrent builds only
# duplicate work, since each writes its own temporary file.
if command -v flock >/dev/null; then exec 9>"$dir/.lock"; flock 9; fi
if [ -f "$dir/.complete" ]; then echo "$bin"; exit 0; fi

start=$(date +%s)
echo "building $pkg from test/tools/$1 into $dir (first time only)" >&2
(cd "$module" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$bin.tmp.$$" "$pkg") >&2
mv "$bin.tmp.$$" "$bin"
touch "$dir/.complete"
echo "built $(basename "$pkg") in $(( $(date +%s) - start )) s" >&2
echo "$bin"
