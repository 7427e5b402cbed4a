#!/usr/bin/env bash
# Builds the real control plane's programs from their Go modules, at the versions pinned by the
# go.mod/go.sum files beside this script, into a cache outside the repository keyed by those
# files: a second run with the same pins reuses it. Prints the cache directory on stdout (the
# tests read it from REAL_CLUSTER_DIR).
#
#   kube/  k8s.io/kubernetes v1.34.2 (kube-apiserver, kube-controller-manager, kubectl) and go.etcd.io/etcd/server/v3
#          v3.6.4 (etcd): Kubernetes 1.34, as OpenShift 4.21 ships it
#   mao/   github.com/openshift/machine-api-operator (its operator, machine-api-operator; machineset
#          with its webhooks, nodelink-controller, machine-healthcheck) at a commit whose k8s.io
#          modules are 0.34
#
# The openshift/api CRD manifests the tests apply are copied, unedited, from the module cache at
# the openshift/api version mao/go.sum pins, and the IPAM CRDs from the machine-api-operator's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
key="$(cat "$here"/build.sh "$here"/kube/go.mod "$here"/kube/go.sum "$here"/mao/go.mod "$here"/mao/go.sum \
    | sha256sum | cut -c1-16)"
cache="${REAL_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nutanix-real-cluster}/$key"
if [[ -f "$cache/complete" ]]; then
    echo "$cache"
    exit 0
fi
mkdir -p "$cache/bin" "$cache/crds"
export GOFLAGS="-mod=readonly -trimpath"
log() { echo "real-cluster: $*" >&2; }

start=$SECONDS
log "building kube-apiserver, kube-controller-manager, kubectl and etcd (kube/go.mod)"
(cd "$here/kube" && go build -o "$cache/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3)
mv "$cache/bin/server" "$cache/bin/etcd"
log "kube built in $((SECONDS - start)) s"

start=$SECONDS
log "building machine-api-operator, machineset, nodelink-controller and machine-healthcheck (mao/go.mod)"
(cd "$here/mao" && go build -o "$cache/bin/" \
    github.com/openshift/machine-api-operator/cmd/machine-api-operator \
    github.com/openshift/machine-api-operator/cmd/machineset \
    github.com/openshift/machine-api-operator/cmd/nodelink-controller \
    github.com/openshift/machine-api-operator/cmd/machine-healthcheck)
log "mao built in $((SECONDS - start)) s"

api="$(cd "$here/mao" && go list -m -f '{{.Dir}}' github.com/openshift/api)"
cp "$api"/machine/v1beta1/zz_generated.crd-manifests/0000_10_machine-api_01_machines-Default.crd.yaml \
    "$api"/machine/v1beta1/zz_generated.crd-manifests/0000_10_machine-api_01_machinesets-Default.crd.yaml \
    "$api"/machine/v1beta1/zz_generated.crd-manifests/0000_10_machine-api_01_machinehealthchecks.crd.yaml \
    "$api"/config/v1/zz_generated.crd-manifests/0000_10_config-operator_01_infrastructures-Default.crd.yaml \
    "$api"/config/v1/zz_generated.crd-manifests/0000_10_config-operator_01_networks.crd.yaml \
    "$api"/config/v1/zz_generated.crd-manifests/0000_10_config-operator_01_dnses.crd.yaml \
    "$api"/operator/v1/zz_generated.crd-manifests/0000_70_network_01_networks.crd.yaml \
    "$api"/config/v1/zz_generated.crd-manifests/0000_00_cluster-version-operator_01_clusteroperators.crd.yaml \
    "$api"/config/v1/zz_generated.crd-manifests/0000_00_cluster-version-operator_01_clusterversions-Default.crd.yaml \
    "$api"/config/v1/zz_generated.crd-manifests/0000_10_config-operator_01_featuregates.crd.yaml \
    "$api"/config/v1/zz_generated.crd-manifests/0000_03_config-operator_01_proxies.crd.yaml \
    "$cache/crds/"
# The Cluster API's IPAM kinds (IPAddressClaim, IPAddress) as the machine-api-operator ships them
# (its third_party/cluster-api/crd/), at the commit mao/go.sum pins.
mao="$(cd "$here/mao" && go list -m -f '{{.Dir}}' github.com/openshift/machine-api-operator)"
cp "$mao"/third_party/cluster-api/crd/ipam.cluster.x-k8s.io_ipaddressclaims.yaml \
    "$mao"/third_party/cluster-api/crd/ipam.cluster.x-k8s.io_ipaddresses.yaml \
    "$cache/crds/"
chmod u+w "$cache"/crds/*
(cd "$here/mao" && go list -m github.com/openshift/api github.com/openshift/machine-api-operator) > "$cache/versions"
(cd "$here/kube" && go list -m k8s.io/kubernetes go.etcd.io/etcd/server/v3) >> "$cache/versions"
touch "$cache/complete"
echo "$cache"
