#!/usr/bin/env bash
# Builds promtool (the Prometheus rule checker and rule unit-test runner) from its Go module, at
# the version pinned by the go.mod/go.sum beside this script, into a cache outside the
# repository keyed by those files. Prints the path of the binary on stdout; the manifests tests
# read it from PROMTOOL.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
key="$(cat "$here"/build.sh "$here"/go.mod "$here"/go.sum | sha256sum | cut -c1-16)"
cache="${PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nutanix-promtool}/$key"
if [[ ! -x "$cache/promtool" ]]; then
    start=$SECONDS
    mkdir -p "$cache"
    (cd "$here" && GOFLAGS="-mod=readonly -trimpath" go build -o "$cache/promtool.partial" \
        github.com/prometheus/prometheus/cmd/promtool)
    mv "$cache/promtool.partial" "$cache/promtool"
    echo "promtool: built in $((SECONDS - start)) s" >&2
fi
echo "$cache/promtool"
