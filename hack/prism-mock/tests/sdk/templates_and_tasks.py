"""Drives prism-mock with Nutanix's own Python SDKs (ntnx-vmm-py-client, ntnx-prism-py-client): template list,
get and deploy, then the deploy task and its subtask. Run by tests/nutanix_sdk.rs; prints one JSON line."""

import json
import os
import time

import ntnx_prism_py_client as prism
import ntnx_vmm_py_client as vmm


def configure(module):
    config = module.Configuration()
    config.host = os.environ["PRISM_HOST"]
    config.port = int(os.environ["PRISM_PORT"])
    config.username = os.environ["PRISM_USERNAME"]
    config.password = os.environ["PRISM_PASSWORD"]
    config.verify_ssl = True
    config.root_ca_certificate_file = os.environ["PRISM_CA_FILE"]
    config.max_retry_attempts = 1
    return config


def main():
    vmm_client = vmm.ApiClient(configuration=configure(vmm))
    templates = vmm.TemplatesApi(api_client=vmm_client)
    listed = templates.list_templates(_limit=10)
    first = listed.data[0]
    template = templates.get_template_by_id(first.ext_id)
    etag = vmm_client.get_etag(template)
    spec = vmm.TemplateDeployment(
        number_of_vms=1,
        cluster_reference=os.environ["PRISM_CLUSTER"],
        override_vm_config_map={"0": vmm.VmConfigOverride(name="sdk-vm-1", num_sockets=2)},
    )
    deployed = templates.deploy_template(first.ext_id, spec, if_match=etag)
    task_id = deployed.data.ext_id

    tasks = prism.TasksApi(api_client=prism.ApiClient(configuration=configure(prism)))
    deadline = time.time() + 20
    task = tasks.get_task_by_id(task_id).data
    while str(task.status) not in ("SUCCEEDED", "FAILED") and time.time() < deadline:
        time.sleep(0.05)
        task = tasks.get_task_by_id(task_id).data
    subtask = tasks.get_task_by_id(task.sub_tasks[0].ext_id).data
    print(json.dumps({
        "templates": listed.metadata.total_available_results,
        "template_name": template.data.template_name,
        "etag": etag,
        "task": task_id,
        "status": str(task.status),
        "affected": [[e.ext_id, e.rel] for e in task.entities_affected],
        "subtask_status": str(subtask.status),
        "vm": subtask.entities_affected[0].ext_id,
    }))


main()
