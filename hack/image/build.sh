#!/usr/bin/env bash
# Builds the controller's image from scratch around the locally built binary (profile `shipped`,
# Cargo.toml) with buildah
# (no base image is pulled), then runs the image's binary (`--version`, and `render` on a test
# fixture) to show that the image works. A developer tool, never run by CI (.ci/run): it needs
# buildah and root (or a user namespace buildah can use).
#
# Usage: hack/image/build.sh [IMAGE]          IMAGE defaults to localhost/nutanix-machine-controller:dev
#   CARGO_TARGET_DIR      where cargo builds (default: target/ in the repository)
#   SKIP_CARGO_BUILD=1    use the binary already built
#   STORAGE_DRIVER        buildah's storage driver (default vfs: works without overlay support)
#   ISOLATION             buildah run's isolation for the check (default chroot; see README.md)
#   OCI_ARCHIVE=FILE      also write the image as an OCI archive (podman load -i FILE)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
image=${1:-localhost/nutanix-machine-controller:dev}
target_dir=${CARGO_TARGET_DIR:-$root/target}
binary=$target_dir/shipped/nutanix-machine-controller
buildah=(buildah --storage-driver "${STORAGE_DRIVER:-vfs}")

if ! command -v buildah >/dev/null; then
    echo "$0: buildah is not installed" >&2
    exit 1
fi
if [ "${SKIP_CARGO_BUILD:-0}" != 1 ]; then
    (cd "$root" && cargo build --profile shipped --locked -p nutanix-machine-controller)
fi

staging=$(mktemp -d)
container=""
check_container=""
cleanup() {
    [ -n "$check_container" ] && "${buildah[@]}" rm "$check_container" >/dev/null 2>&1
    [ -n "$container" ] && "${buildah[@]}" rm "$container" >/dev/null 2>&1
    rm -rf "$staging"
}
trap cleanup EXIT

"$root/hack/image/rootfs.sh" "$binary" "$staging/rootfs"

container=$("${buildah[@]}" from scratch)
"${buildah[@]}" copy "$container" "$staging/rootfs" / >/dev/null
version=$("$binary" --version | awk '{ print $2 }')
"${buildah[@]}" config \
    --user 65532:65532 \
    --entrypoint '["/usr/local/bin/nutanix-machine-controller"]' \
    --port 8081 --port 9440 \
    --label org.opencontainers.image.title=nutanix-machine-controller \
    --label "org.opencontainers.image.version=$version" \
    --label org.opencontainers.image.description="OpenShift machine-api provider for Nutanix" \
    "$container"
"${buildah[@]}" commit --quiet "$container" "$image" >/dev/null
"${buildah[@]}" rm "$container" >/dev/null
container=""
echo "built $image ($("${buildah[@]}" images --format '{{.Size}}' "$image"))"

# The check: the image's own binary, libraries and user, run by buildah.
check_container=$("${buildah[@]}" from "$image")
run=("${buildah[@]}" run --isolation "${ISOLATION:-chroot}")
echo "+ $image --version"
"${run[@]}" "$check_container" -- /usr/local/bin/nutanix-machine-controller --version
echo "+ $image (as the machine-api-operator starts it) /machine-controller-manager --version"
"${run[@]}" "$check_container" -- /machine-controller-manager --version
echo "+ $image render --machine machineset-linux.yaml (the request line)"
rendered=$("${run[@]}" --volume "$root/provider/tests/fixtures:/fixtures:ro" "$check_container" -- \
    /usr/local/bin/nutanix-machine-controller render --machine /fixtures/machineset-linux.yaml 2>/dev/null)
grep -m1 '"path"' <<<"$rendered"
# The CA bundle: `validate` builds its Prism client (loading the trusted roots) before its first
# request, which goes to a closed port; its debug log says how many roots it loaded.
echo "+ $image validate (trusted roots loaded from the image's CA bundle)"
echo '[{"type": "basic_auth", "data": {"prismCentral": {"username": "u", "password": "p"}, "prismElements": null}}]' \
    >"$staging/credentials.json"
validated=$(timeout 5 "${run[@]}" --env RUST_LOG=prism_client=debug \
    --volume "$root/provider/tests/fixtures:/fixtures:ro" --volume "$staging/credentials.json:/credentials.json:ro" \
    "$check_container" -- /usr/local/bin/nutanix-machine-controller validate \
    --machine /fixtures/machineset-linux.yaml --credentials-file /credentials.json \
    --prism-endpoint https://127.0.0.1:9 2>&1 || true)
roots=$(grep -o -m1 'system root certificates added=[0-9]*' <<<"$validated" || true)
if [ -z "$roots" ] || [ "$roots" = "system root certificates added=0" ]; then
    echo "$0: the image's binary loaded no trusted root certificate:" >&2
    head -5 <<<"$validated" >&2
    exit 1
fi
echo "$roots"

if [ -n "${OCI_ARCHIVE:-}" ]; then
    "${buildah[@]}" push --quiet "$image" "oci-archive:$OCI_ARCHIVE:$image"
    echo "wrote $OCI_ARCHIVE"
fi
