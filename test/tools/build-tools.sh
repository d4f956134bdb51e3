#!/usr/bin/env bash
# Builds every program test/tools/programs lists (test/tools/build-tool.sh,
# cached outside the clone: instant once built). make test runs it before
# the tests, so that a fresh machine builds them once, one after another,
# rather than inside several test packages' deadlines at once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
while read -r module pkg; do
	case $module in '' | '#'*) continue ;; esac
	bash "$here/build-tool.sh" "$module" "$pkg" >/dev/null
done <"$here/programs"
