#!/usr/bin/env bash
# Nutanix's official Python SDKs against a running prism-mock binary (etag_flow.py), at two versions each:
# ntnx-vmm-py-client and ntnx-prism-py-client 4.0.1 (the v4.0 API that pc.2024.3 ships) and the newest
# ones (upgraded on every run). The SDKs live in venvs under ${XDG_CACHE_HOME:-$HOME/.cache}/prism-mock-sdk/,
# outside the repository. Where Python 3 with venv and pip is missing, or pip cannot install the SDKs, CI
# (SDK_CHECK_REQUIRED=1, which .ci/run sets) fails and a developer gets a skip message.
set -euo pipefail
cd "$(dirname "$0")/../../.."

cache="${XDG_CACHE_HOME:-$HOME/.cache}/prism-mock-sdk"
# Each venv: its directory name and the requirements pip installs into it.
sets=(
    "4.0.1|ntnx-vmm-py-client==4.0.1 ntnx-prism-py-client==4.0.1"
    "newest|ntnx-vmm-py-client ntnx-prism-py-client"
)

# Fails under SDK_CHECK_REQUIRED=1 (CI can install Python and reach the package registry), else skips with the reason.
missing() {
    if [ "${SDK_CHECK_REQUIRED:-}" = "1" ]; then
        echo "sdk-check: FAILED: $1: CI needs Python 3 with venv and pip (apt-get install python3 python3-venv python3-pip) and the package registry"
        exit 1
    fi
    echo "sdk-check: skipped: $1 (it needs Python 3 with venv and pip, and the package registry)"
    exit 0
}

command -v python3 >/dev/null 2>&1 || missing "python3 is not installed"
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing "python3 has no venv or ensurepip module"

# The newest set is upgraded each run, so that a new SDK release is checked as soon as it is out.
for set in "${sets[@]}"; do
    name="${set%%|*}"
    read -r -a requirements <<<"${set#*|}"
    venv="$cache/$name"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    "$venv/bin/python" -m pip --version >/dev/null 2>&1 || missing "pip does not run in $venv"
    upgrade=()
    if [ "$name" = "newest" ]; then
        upgrade=(--upgrade)
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${upgrade[@]}" "${requirements[@]}" ||
        missing "pip could not install ${requirements[*]} (no network?)"
done

cargo build --quiet --locked -p prism-mock --bin prism-mock
target_dir="$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"

work="$(mktemp -d)"
mock_pid=""
cleanup() {
    if [ -n "$mock_pid" ]; then
        kill "$mock_pid" 2>/dev/null || true
        wait "$mock_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# Short task and boot times: the flows wait for three tasks per SDK version.
"$target_dir/debug/prism-mock" --listen 127.0.0.1:0 --ca-out "$work/ca.pem" \
    --task-queued-ms 20 --task-running-ms 100 --boot-ms 100 >"$work/url" 2>"$work/mock.log" &
mock_pid=$!
for _ in $(seq 1 300); do
    [ -s "$work/url" ] && break
    kill -0 "$mock_pid" 2>/dev/null || break
    sleep 0.1
done
url="$(head -n 1 "$work/url")"
if [ -z "$url" ]; then
    echo "sdk-check: FAILED: prism-mock did not start:"
    cat "$work/mock.log"
    exit 1
fi

export PRISM_URL="$url" PRISM_CA_FILE="$work/ca.pem" PRISM_USERNAME=admin PRISM_PASSWORD=mock-password

failed=0
for set in "${sets[@]}"; do
    name="${set%%|*}"
    if ! "$cache/$name/bin/python" hack/prism-mock/sdk-check/etag_flow.py; then
        failed=$((failed + 1))
    fi
done
echo "sdk-check: ${#sets[@]} SDK versions checked, $failed failed"
[ "$failed" -eq 0 ]
