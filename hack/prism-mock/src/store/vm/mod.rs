//! VMs: every request on one (what the store keeps of a VM is `store::record`). A VM body is validated as real Prism
//! rejects requests and filled with server defaults (`prepare`, with `disks`, `nics`, `gpus` and `guest`),
//! committed to the store (`commit`), created, updated and deleted through v3 (`requests`), cloned (`clone`),
//! changed as its tasks end and its guest boots (`lifecycle`; what a Windows guest's user data does to its
//! address in `cloudbase`), and rendered in the v3 shapes (`render`).

mod clone;
mod cloudbase;
mod commit;
mod disks;
mod gpus;
mod guest;
mod lifecycle;
mod nics;
mod prepare;
mod render;
mod requests;

use serde_json::Value;

use crate::store::record::{GuestCustomization, NicRuntime, VmMeta};

const KIND: &str = "vm";

/// A VM body validated and filled with server defaults, not yet committed.
#[derive(Debug)]
struct Prepared {
    spec: Value,
    meta: VmMeta,
    nics: Vec<NicPlan>,
    gpus: Vec<(String, usize)>,
    guest: Option<GuestCustomization>,
    cluster_uuid: String,
    boot_image: Option<String>,
}

#[derive(Debug)]
struct NicPlan {
    uuid: String,
    subnet_uuid: String,
    requested_ip: Option<u32>,
    kept: Option<NicRuntime>,
}

type Details = Vec<(String, String)>;

fn detail(details: &mut Details, field: impl Into<String>, message: impl Into<String>) {
    details.push((field.into(), message.into()));
}
