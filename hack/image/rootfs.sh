#!/usr/bin/env bash
# Assembles the image's root filesystem around the controller binary, with nothing else in it:
#   /usr/local/bin/nutanix-machine-controller   the binary
#   /machine-controller-manager                 a link to it: the command the machine-api-operator
#                                               gives the provider's container (docs/migration.md)
#   the shared libraries `ldd` names, at the same paths, and the dynamic loader
#   /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem
#                                               the CA bundle Prism Central's certificate is checked
#                                               against (plus --prism-ca-file). OpenShift operators
#                                               mount the cluster's trusted bundle over this very
#                                               directory (the machine-api-operator does for its
#                                               machine-controller), and nothing else is probed first:
#                                               no /etc/ssl/certs, whose bundle would take precedence
#   /etc/passwd, /etc/group                     the unprivileged user and group 65532 (nonroot)
# Used by the Containerfile's build stage and by hack/image/build.sh (buildah, from scratch).
#
# Usage: hack/image/rootfs.sh BINARY DEST_DIR     (DEST_DIR must not exist yet)
#   CA_BUNDLE=FILE   the CA bundle to copy (default /etc/ssl/certs/ca-certificates.crt)
set -euo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 BINARY DEST_DIR" >&2
    exit 2
fi
binary=$1
dest=$2
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

if [ ! -x "$binary" ]; then
    echo "$0: $binary is not an executable file" >&2
    exit 1
fi
if [ -e "$dest" ]; then
    echo "$0: $dest exists already" >&2
    exit 1
fi
if [ ! -f "$ca_bundle" ]; then
    echo "$0: no CA bundle at $ca_bundle (set CA_BUNDLE)" >&2
    exit 1
fi

mkdir -p "$dest/usr/local/bin" "$dest/etc/pki/ca-trust/extracted/pem"
install -m 0755 "$binary" "$dest/usr/local/bin/nutanix-machine-controller"
ln -s usr/local/bin/nutanix-machine-controller "$dest/machine-controller-manager"

# A statically linked binary needs no libraries; otherwise copy every one ldd resolves (the
# binary uses rustls, so this is glibc and libgcc_s only) and refuse a missing one.
if ldd_output=$(ldd "$binary" 2>&1); then
    if grep -q "not found" <<<"$ldd_output"; then
        echo "$0: unresolved shared libraries:" >&2
        grep "not found" <<<"$ldd_output" >&2
        exit 1
    fi
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' <<<"$ldd_output" | sort -u |
        while read -r library; do
            mkdir -p "$dest$(dirname "$library")"
            cp -L "$library" "$dest$library"
        done
elif ! grep -q "not a dynamic executable\|statically linked" <<<"$ldd_output"; then
    echo "$0: ldd $binary failed: $ldd_output" >&2
    exit 1
fi

cp -L "$ca_bundle" "$dest/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"
echo "nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin" >"$dest/etc/passwd"
echo "nonroot:x:65532:" >"$dest/etc/group"
chmod 0644 "$dest/etc/passwd" "$dest/etc/group" "$dest/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"
