#!/usr/bin/env bash
# Builds promtool (the Prometheus rule checker and rule unit-test runner) and the Prometheus
# server itself from their Go module, at the version pinned by the go.mod/go.sum beside this
# script, in one `go build` into a cache outside the repository keyed by those files.
#
# Prints the path of one binary on stdout: promtool by default (the manifests tests read it from
# PROMTOOL), the server with `build.sh prometheus` (the dashboard test reads it from PROMETHEUS).
# Both live in the same directory, so a second call is only the cache lookup.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
wanted="${1:-promtool}"
case "$wanted" in
    promtool | prometheus) ;;
    *)
        echo "build.sh: unknown binary '$wanted' (promtool or prometheus)" >&2
        exit 2
        ;;
esac
key="$(cat "$here"/build.sh "$here"/go.mod "$here"/go.sum | sha256sum | cut -c1-16)"
cache="${PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nutanix-promtool}/$key"
if [[ ! -x "$cache/promtool" || ! -x "$cache/prometheus" ]]; then
    start=$SECONDS
    rm -rf "$cache/partial"
    mkdir -p "$cache/partial"
    # One build of both commands: they share almost every package of the module.
    (cd "$here" && GOFLAGS="-mod=readonly -trimpath" go build -o "$cache/partial/" \
        github.com/prometheus/prometheus/cmd/promtool \
        github.com/prometheus/prometheus/cmd/prometheus)
    mv "$cache/partial/promtool" "$cache/partial/prometheus" "$cache/"
    rmdir "$cache/partial"
    echo "promtool and prometheus: built in $((SECONDS - start)) s" >&2
fi
echo "$cache/$wanted"
