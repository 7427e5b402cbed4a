#!/usr/bin/env python3
"""Nutanix's own read-then-update flows against a running prism-mock, through the official Python SDKs'
API classes (ntnx-vmm-py-client, ntnx-prism-py-client), over HTTPS trusting only the mock's CA.

For a template, a VM and a task read from the mock, `ApiClient.get_etag(answer)` must be the ETag header
the mock sent (the SDKs copy the header into the `$reserved` of the answer's `data`; get_etag reads it
from there). Then the flows that send it back as `If-Match`:
- template: get, then deploy with the template's ETag (the Ansible collection's ntnx_templates_deploy_v2);
- VM: get, change it, update_vm_by_id with its ETag (prism-go-client converged/v4/vms.go UpdateAsync);
  the update's task succeeds, the VM reads back changed with a new ETag, and an update sent with the old
  ETag is refused with 412.

Run by sdk-check/run.sh with PRISM_URL (https://127.0.0.1:PORT), PRISM_CA_FILE, PRISM_USERNAME and
PRISM_PASSWORD. Prints one line per check and a closing
"N passed, N failed" line; exits 1 if any check failed.
"""

import base64
import importlib.metadata
import json
import os
import ssl
import sys
import time
import urllib.request
from urllib.parse import urlsplit

import ntnx_prism_py_client as prism
import ntnx_vmm_py_client as vmm

VM_REL = "vmm:ahv:config:vm"


class Checks:
    def __init__(self, label):
        self.label = label
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"{self.label}: ok: {name}")
        else:
            self.failed += 1
            print(f"{self.label}: FAILED: {name}: {detail}")
        return ok


def configure(module):
    url = urlsplit(os.environ["PRISM_URL"])
    config = module.Configuration()
    config.host = url.hostname
    config.port = url.port
    config.username = os.environ["PRISM_USERNAME"]
    config.password = os.environ["PRISM_PASSWORD"]
    config.verify_ssl = True
    config.root_ca_certificate_file = os.environ["PRISM_CA_FILE"]
    config.max_retry_attempts = 1
    return config


def prism_element():
    """The UUID of a Prism Element to deploy on (the SDKs at hand have no cluster API: v3 clusters/list)."""
    request = urllib.request.Request(
        os.environ["PRISM_URL"] + "/api/nutanix/v3/clusters/list",
        data=json.dumps({"kind": "cluster"}).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic "
            + base64.b64encode(f"{os.environ['PRISM_USERNAME']}:{os.environ['PRISM_PASSWORD']}".encode()).decode(),
        },
    )
    context = ssl.create_default_context(cafile=os.environ["PRISM_CA_FILE"])
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        entities = json.load(answer)["entities"]
    return next(
        e["metadata"]["uuid"]
        for e in entities
        if "PRISM_CENTRAL" not in e["status"]["resources"]["config"].get("service_list", [])
    )


def header_etag(client):
    """The ETag header of the client's last answer."""
    return client.last_response.getheader("ETag")


def ended_task(tasks, ext_id):
    deadline = time.monotonic() + 30
    task = tasks.get_task_by_id(ext_id)
    while str(task.data.status) not in ("SUCCEEDED", "FAILED") and time.monotonic() < deadline:
        time.sleep(0.05)
        task = tasks.get_task_by_id(ext_id)
    return task


def deployed_vm(tasks, task):
    """The deployed VM: on the parent task or on its subtasks, by the deploy task's shape."""
    for entity in task.data.entities_affected or []:
        if entity.rel == VM_REL:
            return entity.ext_id
    for sub in task.data.sub_tasks or []:
        for entity in ended_task(tasks, sub.ext_id).data.entities_affected or []:
            if entity.rel == VM_REL:
                return entity.ext_id
    return None


def main():
    versions = {
        package: importlib.metadata.version(package)
        for package in ("ntnx-vmm-py-client", "ntnx-prism-py-client")
    }
    label = " ".join(f"{p}=={v}" for p, v in versions.items())
    checks = Checks(label)

    vmm_client = vmm.ApiClient(configuration=configure(vmm))
    prism_client = prism.ApiClient(configuration=configure(prism))
    templates = vmm.TemplatesApi(api_client=vmm_client)
    vms = vmm.VmApi(api_client=vmm_client)
    tasks = prism.TasksApi(api_client=prism_client)

    # A template: read, then deployed with its ETag as If-Match.
    template_id = templates.list_templates(_limit=1).data[0].ext_id
    template = templates.get_template_by_id(template_id)
    etag = vmm_client.get_etag(template)
    checks.check(
        "get_etag finds the template's ETag",
        etag is not None and etag == header_etag(vmm_client),
        f"get_etag {etag!r}, header {header_etag(vmm_client)!r}",
    )
    spec = vmm.TemplateDeployment(
        number_of_vms=1,
        cluster_reference=prism_element(),
        override_vm_config_map={"0": vmm.VmConfigOverride(name="sdk-etag-vm")},
    )
    deployed = templates.deploy_template(template_id, spec, if_match=etag)

    # A task.
    task = ended_task(tasks, deployed.data.ext_id)
    etag = prism_client.get_etag(task)
    checks.check(
        "get_etag finds the task's ETag",
        etag is not None and etag == header_etag(prism_client),
        f"get_etag {etag!r}, header {header_etag(prism_client)!r}",
    )
    checks.check("the deploy task succeeds", str(task.data.status) == "SUCCEEDED", str(task.data.status))

    # A VM: read, changed, updated with its ETag as If-Match.
    vm_id = deployed_vm(tasks, task)
    if not checks.check("the deploy task names its VM", vm_id is not None, "no vmm:ahv:config:vm entity"):
        return finish(checks)
    read = vms.get_vm_by_id(vm_id)
    etag = vmm_client.get_etag(read)
    checks.check(
        "get_etag finds the VM's ETag",
        etag is not None and etag == header_etag(vmm_client),
        f"get_etag {etag!r}, header {header_etag(vmm_client)!r}",
    )
    vm = read.data
    vm.name = "sdk-etag-vm-renamed"
    vm.num_sockets = (vm.num_sockets or 1) + 1
    updated = vms.update_vm_by_id(vm_id, vm, if_match=etag)
    update_task = ended_task(tasks, updated.data.ext_id)
    checks.check(
        "the update with the VM's ETag succeeds",
        str(update_task.data.status) == "SUCCEEDED",
        str(update_task.data.status),
    )
    again = vms.get_vm_by_id(vm_id)
    new_etag = vmm_client.get_etag(again)
    checks.check(
        "the VM reads back changed",
        again.data.name == vm.name and again.data.num_sockets == vm.num_sockets,
        f"name {again.data.name!r}, sockets {again.data.num_sockets!r}",
    )
    checks.check(
        "the changed VM has a new ETag",
        new_etag is not None and new_etag != etag and new_etag == header_etag(vmm_client),
        f"before {etag!r}, after {new_etag!r}, header {header_etag(vmm_client)!r}",
    )
    status = None
    try:
        vms.update_vm_by_id(vm_id, vm, if_match=etag)
    except vmm.rest.ApiException as error:
        status = error.status
    checks.check("an update with the old ETag is refused with 412", status == 412, f"status {status!r}")
    return finish(checks)


def finish(checks):
    print(f"{checks.label}: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (vmm.rest.ApiException, prism.rest.ApiException) as error:
        # An answer the flow did not expect (a refused update, a missing entity): the check fails, naming it.
        print(f"FAILED: unexpected answer: {error}")
        sys.exit(1)
