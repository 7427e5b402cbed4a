//! A VM's GPUs matched to unused GPUs of its cluster's hosts, and each host GPU's consumer kept.

use serde_json::{Map, Value, json};

use super::{Details, detail};
use crate::store::Store;
use crate::store::entities::reference;
use crate::store::record::Vm;

impl Store {
    pub(super) fn prepare_gpus(
        &self,
        res: &Map<String, Value>,
        cluster_uuid: &str,
        existing: Option<&Vm>,
        details: &mut Details,
    ) -> Vec<(String, usize)> {
        let requested: Vec<Value> = res
            .get("gpu_list")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(vm) = existing {
            let before = vm
                .spec
                .pointer("/resources/gpu_list")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ids = |list: &[Value]| {
                list.iter()
                    .map(|g| g.get("device_id").and_then(Value::as_i64))
                    .collect::<Vec<_>>()
            };
            if ids(&before) != ids(&requested) {
                detail(
                    details,
                    "spec.resources.gpu_list",
                    "the mock does not change GPUs after create",
                );
            }
            return vm.gpus.clone();
        }
        let mut picked: Vec<(String, usize)> = Vec::new();
        for (i, gpu) in requested.iter().enumerate() {
            let device_id = gpu.get("device_id").and_then(Value::as_i64);
            let vendor = gpu.get("vendor").and_then(Value::as_str);
            let mode = gpu.get("mode").and_then(Value::as_str);
            let found = self.hosts.iter().find_map(|host| {
                if host
                    .pointer("/status/cluster_reference/uuid")
                    .and_then(Value::as_str)
                    != Some(cluster_uuid)
                {
                    return None;
                }
                let host_uuid = host.pointer("/metadata/uuid").and_then(Value::as_str)?;
                let list = host
                    .pointer("/status/resources/gpu_list")
                    .and_then(Value::as_array)?;
                list.iter().enumerate().find_map(|(idx, g)| {
                    let free = g.get("status").and_then(Value::as_str) == Some("UNUSED")
                        && !picked.iter().any(|(h, x)| h == host_uuid && *x == idx);
                    let fits = g.get("device_id").and_then(Value::as_i64) == device_id
                        && vendor
                            .is_none_or(|v| g.get("vendor").and_then(Value::as_str) == Some(v))
                        && mode.is_none_or(|m| g.get("mode").and_then(Value::as_str) == Some(m));
                    (free && fits).then(|| (host_uuid.to_owned(), idx))
                })
            });
            match found {
                Some(pick) => picked.push(pick),
                None => detail(
                    details,
                    format!("spec.resources.gpu_list[{i}]"),
                    format!("no UNUSED GPU with device_id {device_id:?} on the cluster"),
                ),
            }
        }
        picked
    }

    pub(super) fn set_gpu_consumer(
        &mut self,
        host: &str,
        index: usize,
        consumer: Option<(&str, &str)>,
    ) {
        let Some(gpu) = self
            .hosts
            .get_mut(host)
            .and_then(|h| h.pointer_mut(&format!("/status/resources/gpu_list/{index}")))
        else {
            return;
        };
        let Some(obj) = gpu.as_object_mut() else {
            return;
        };
        match consumer {
            Some((uuid, name)) => {
                obj.insert("status".to_owned(), json!("USED"));
                obj.insert("assignable".to_owned(), json!(false));
                obj.insert(
                    "consumer_reference".to_owned(),
                    reference("vm", uuid, Some(name)),
                );
            }
            None => {
                obj.insert("status".to_owned(), json!("UNUSED"));
                obj.insert("assignable".to_owned(), json!(true));
                obj.remove("consumer_reference");
            }
        }
    }
}
