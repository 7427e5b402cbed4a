#!/usr/bin/env bash
# Contract check: the prism-client example commands against prism-mock over HTTPS with the generated CA.
# Builds both (debug), starts the mock on a free port, runs each read command (basic auth and session auth),
# checks a refused password exits non-zero, and stops the mock. Exit code 0 when everything passed.
set -euo pipefail

root="$(cd "$(dirname "$0")/../../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
cargo build -q --manifest-path "$root/Cargo.toml" -p prism-mock --bin prism-mock
cargo build -q --manifest-path "$root/Cargo.toml" -p prism-client --example prism

work="$(mktemp -d)"
mock_pid=""
cleanup() {
    if [[ -n "$mock_pid" ]]; then kill "$mock_pid" 2>/dev/null || true; wait "$mock_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

"$target/debug/prism-mock" --listen 127.0.0.1:0 --ca-out "$work/ca.pem" >"$work/stdout" 2>"$work/stderr" &
mock_pid=$!
for _ in $(seq 1 300); do
    [[ -s "$work/stdout" ]] && break
    sleep 0.1
done
url="$(head -n 1 "$work/stdout")"
[[ "$url" == https://127.0.0.1:* ]] || { echo "prism-mock printed no URL"; cat "$work/stderr"; exit 1; }

prism="$target/debug/examples/prism"
export PRISM_PASSWORD=mock-password
passed=0
failed=0
check() {
    local name="$1"; shift
    if "$@" >"$work/out" 2>"$work/err"; then
        passed=$((passed + 1)); echo "ok   $name"
    else
        failed=$((failed + 1)); echo "FAIL $name"; cat "$work/err"
    fi
}
common=(--endpoint "$url" --ca-file "$work/ca.pem" --username admin)
for command in whoami list-vms list-images list-subnets list-clusters list-templates; do
    check "$command" "$prism" "${common[@]}" "$command"
    check "$command (session)" "$prism" "${common[@]}" --session "$command"
done
vm_uuid="$("$prism" "${common[@]}" list-vms | sed -n 's/.*"uuid": "\([^"]*\)".*/\1/p' | head -n 1)"
check "get-vm $vm_uuid" "$prism" "${common[@]}" get-vm "$vm_uuid"
if PRISM_PASSWORD=wrong "$prism" "${common[@]}" whoami >/dev/null 2>&1; then
    failed=$((failed + 1)); echo "FAIL a wrong password was accepted"
else
    passed=$((passed + 1)); echo "ok   wrong password refused"
fi
echo "$passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
