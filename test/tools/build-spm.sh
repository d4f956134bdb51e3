#!/usr/bin/env bash
# Builds DCM's service-provider-manager (the real peer of the DCM
# interoperability tests) from the pinned tools module test/tools/spm, once,
# into a cache outside the clone. Prints the path of the binary. Safe to run
# concurrently (flock).
set -euo pipefail

version=v0.1.0-rc.1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$(cat "$here"/spm/go.mod "$here"/spm/go.sum | sha256sum | cut -c1-12)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/storage-gateway/spm/$version-$key
bin=$dir/service-provider-manager

if [ -f "$dir/.complete" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$bin"; exit 0; fi

echo "building DCM service-provider-manager $version into $dir (first time only, ~1 min)" >&2
(cd "$here/spm" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$bin.tmp" \
	github.com/dcm-project/service-provider-manager/cmd/service-provider-manager) >&2
mv "$bin.tmp" "$bin"
touch "$dir/.complete"
echo "$bin"
