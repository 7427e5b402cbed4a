//! A mock with subnets Prism does not manage beside a managed one, and helpers for VMs on them
//! (`tests/unmanaged_subnets.rs`, `tests/unmanaged_guests.rs`).

use base64::Engine as _;
use prism_mock::{GuestBehaviour, MockConfig, RunningMock, Seed};
use reqwest::Method;
use serde_json::{Value, json};

use super::{Api, Reply, V3, start_with, wait_for};

pub const SEED: &str = r#"
clusters:
  - name: pe-1
subnets:
  - {name: managed-net, cluster: pe-1, vlan_id: 10, cidr: 10.41.0.0/24, gateway: 10.41.0.1, pool_start: 10.41.0.100, pool_end: 10.41.0.199}
  - {name: plain-vlan, cluster: pe-1, vlan_id: 40, managed: false, cidr: 10.40.0.0/20}
  - {name: plain-vlan-2, cluster: pe-1, vlan_id: 41, managed: false, cidr: 10.42.0.0/24}
images:
  - {name: rhcos, os: linux, size_mib: 1024}
  - {name: windows, os: windows, size_mib: 1024}
templates:
  - {name: win-template, image: windows, os: windows, subnet: plain-vlan}
"#;

/// The user data the provider gives a Windows Machine with a static address (cloudbase-init runs the
/// `<powershell>` block).
pub const STATIC_USER_DATA: &str = "<powershell>
$adapters = @(Get-NetAdapter -Physical)
if ($adapters.Count -ne 1) { throw \"expected one physical adapter, found $($adapters.Count)\" }
$index = $adapters[0].ifIndex
New-NetIPAddress -InterfaceIndex $index -AddressFamily IPv4 -IPAddress 10.40.0.21 -PrefixLength 20 -DefaultGateway 10.40.0.1
</powershell>
";

pub fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The mock, a client, and the seeded UUIDs.
pub struct Env {
    pub mock: RunningMock,
    pub api: Api,
    pub pe: String,
    pub managed: String,
    pub plain: String,
    pub plain_2: String,
    pub rhcos: String,
    pub windows: String,
}

pub async fn env(guest: GuestBehaviour) -> Env {
    let mock = start_with(MockConfig {
        seed: Seed::from_yaml(SEED).unwrap(),
        guest,
        ..MockConfig::default()
    })
    .await;
    let api = Api::new(&mock);
    Env {
        pe: api.uuid_of("cluster", "pe-1").await,
        managed: api.uuid_of("subnet", "managed-net").await,
        plain: api.uuid_of("subnet", "plain-vlan").await,
        plain_2: api.uuid_of("subnet", "plain-vlan-2").await,
        rhcos: api.uuid_of("image", "rhcos").await,
        windows: api.uuid_of("image", "windows").await,
        mock,
        api,
    }
}

/// A v3 NIC on `subnet`, with an ASSIGNED address when given one.
pub fn nic(subnet: &str, ip: Option<&str>) -> Value {
    match ip {
        Some(ip) => json!({"subnet_reference": {"kind": "subnet", "uuid": subnet},
            "ip_endpoint_list": [{"ip": ip, "type": "ASSIGNED"}]}),
        None => json!({"subnet_reference": {"kind": "subnet", "uuid": subnet}}),
    }
}

impl Env {
    /// A create body for a powered-on VM, with cloud-init user data when given some.
    pub fn vm_body(
        &self,
        name: &str,
        image: &str,
        nics: Vec<Value>,
        user_data: Option<&str>,
    ) -> Value {
        let mut resources = json!({
            "num_sockets": 2,
            "memory_size_mib": 4096,
            "power_state": "ON",
            "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}}],
            "nic_list": nics,
        });
        if let Some(data) = user_data {
            resources["guest_customization"] = json!({"cloud_init": {"user_data": b64(data)}});
        }
        json!({
            "api_version": "3.1",
            "metadata": {"kind": "vm"},
            "spec": {"name": name, "cluster_reference": {"kind": "cluster", "uuid": self.pe}, "resources": resources},
        })
    }

    /// Creates a VM and waits for its task to succeed.
    pub async fn create(&self, body: &Value) -> String {
        let reply = self.api.post(&format!("{V3}/vms"), body).await;
        assert_eq!(reply.status, 202, "{}", reply.text);
        let task = self.api.wait_task(reply.task_uuid()).await;
        assert_eq!(task["status"], "SUCCEEDED", "{task}");
        reply.uuid()
    }

    /// What each NIC reports, as (ip, type).
    pub async fn addresses(&self, uuid: &str) -> Vec<Vec<(String, String)>> {
        let vm = self.api.get(&format!("{V3}/vms/{uuid}")).await.body;
        vm["status"]["resources"]["nic_list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|nic| {
                nic["ip_endpoint_list"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|ep| {
                        let field = |key: &str| ep[key].as_str().unwrap().to_owned();
                        (field("ip"), field("type"))
                    })
                    .collect()
            })
            .collect()
    }

    /// Waits until every NIC reports something.
    pub async fn booted(&self, uuid: &str) -> Vec<Vec<(String, String)>> {
        wait_for(|| async {
            let a = self.addresses(uuid).await;
            a.iter().all(|nic| !nic.is_empty()).then_some(a)
        })
        .await
    }

    /// Deploys the seeded Windows template as one VM named `name` on the unmanaged subnet, with the static
    /// user data, and an ASSIGNED address (`ipv4Config.ipAddress`) when given one; waits for the v4 task.
    pub async fn deploy(&self, name: &str, ip: Option<&str>) -> Value {
        let templates = self.api.get("/api/vmm/v4.0/content/templates").await.body;
        let ext_id = templates["data"][0]["extId"].as_str().unwrap().to_owned();
        let mut info = json!({"subnet": {"extId": self.plain}});
        if let Some(ip) = ip {
            info["ipv4Config"] = json!({"ipAddress": {"value": ip}});
        }
        let body = json!({
            "numberOfVms": 1,
            "clusterReference": self.pe,
            "overrideVmConfigMap": {"0": {
                "name": name,
                "nics": [{"networkInfo": info}],
                "guestCustomization": {"config": {"$objectType": "vmm.v4.ahv.config.CloudInit",
                    "cloudInitScript": {"$objectType": "vmm.v4.ahv.config.Userdata", "value": b64(STATIC_USER_DATA)}}},
            }},
        });
        let path = format!("/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy");
        let reply: Reply = self
            .api
            .call(
                Method::POST,
                &path,
                Some(&body),
                &[("NTNX-Request-Id", name)],
            )
            .await;
        assert_eq!(reply.status, 202, "{}", reply.text);
        let task = reply.body["data"]["extId"].as_str().unwrap().to_owned();
        wait_for(|| async {
            let body = self
                .api
                .get(&format!("/api/prism/v4.0/config/tasks/{task}"))
                .await
                .body;
            let status = body["data"]["status"].as_str().unwrap_or("").to_owned();
            (status == "SUCCEEDED" || status == "FAILED").then_some(body["data"].clone())
        })
        .await
    }
}
