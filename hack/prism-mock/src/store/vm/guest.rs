//! A VM's guest customization (cloud-init or Sysprep) decoded and checked against Prism's limits, and the guest
//! OS family a VM has.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::prepare::enum_field;
use super::{Details, Prepared, detail};
use crate::seed::GuestOs;
use crate::store::Store;
use crate::store::record::{GuestCustomization, Vm};

/// Size limits from the v3 swagger (characters of the base64 text as sent).
const MAX_USER_DATA: usize = 128_000;
const MAX_META_DATA: usize = 32_000;
const MAX_UNATTEND_XML: usize = 32_000;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn decode_b64(text: &str, field: &str, max: usize, details: &mut Details) -> Option<String> {
    if text.len() > max {
        detail(
            details,
            field,
            format!(
                "is {} characters long, more than the maximum {max}",
                text.len()
            ),
        );
        return None;
    }
    match b64().decode(text) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(_) => {
            detail(details, field, "is not valid base64");
            None
        }
    }
}

impl Store {
    pub(super) fn prepare_guest(
        &self,
        res: &mut Map<String, Value>,
        existing: Option<&Vm>,
        details: &mut Details,
    ) -> Option<GuestCustomization> {
        let given = match res.get("guest_customization") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.clone()),
        };
        if let Some(vm) = existing {
            let before = vm.spec.pointer("/resources/guest_customization").cloned();
            match given {
                // Absent on PUT keeps what was set at create (mock choice).
                None => {
                    if let Some(before) = before {
                        res.insert("guest_customization".to_owned(), before);
                    }
                }
                Some(now) if Some(&now) != before.as_ref() => {
                    detail(
                        details,
                        "spec.resources.guest_customization",
                        "cannot be changed after the VM is created",
                    );
                }
                Some(_) => {}
            }
            return vm.guest.clone();
        }
        let mut gc = match given {
            None => return None,
            Some(Value::Object(map)) => map,
            Some(_) => {
                detail(
                    details,
                    "spec.resources.guest_customization",
                    "must be an object",
                );
                return None;
            }
        };
        let field = "spec.resources.guest_customization";
        let is_overridable = gc
            .get("is_overridable")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        gc.insert("is_overridable".to_owned(), json!(is_overridable));
        let cloud_init = gc.get("cloud_init").filter(|v| !v.is_null()).cloned();
        let sysprep = gc.get("sysprep").filter(|v| !v.is_null()).cloned();
        let view = match (cloud_init, sysprep) {
            (Some(_), Some(_)) => {
                detail(
                    details,
                    field,
                    "only one of cloud_init and sysprep may be set",
                );
                None
            }
            (None, None) => {
                detail(details, field, "needs cloud_init or sysprep");
                None
            }
            (Some(ci), None) => {
                let text = |key: &str| ci.get(key).and_then(Value::as_str).map(str::to_owned);
                let user_data = text("user_data").and_then(|t| {
                    decode_b64(
                        &t,
                        &format!("{field}.cloud_init.user_data"),
                        MAX_USER_DATA,
                        details,
                    )
                });
                let meta_data = text("meta_data").and_then(|t| {
                    decode_b64(
                        &t,
                        &format!("{field}.cloud_init.meta_data"),
                        MAX_META_DATA,
                        details,
                    )
                });
                Some(GuestCustomization {
                    kind: "cloud_init".to_owned(),
                    user_data,
                    meta_data,
                    unattend_xml: None,
                    install_type: None,
                    custom_key_values: ci.get("custom_key_values").cloned(),
                    is_overridable,
                })
            }
            (None, Some(sp)) => {
                let mut sp = sp.as_object().cloned().unwrap_or_default();
                let install_type = enum_field(
                    &mut sp,
                    &format!("{field}.sysprep"),
                    "install_type",
                    "PREPARED",
                    &["PREPARED", "FRESH"],
                    details,
                );
                let unattend = sp
                    .get("unattend_xml")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let unattend_xml = unattend.and_then(|t| {
                    decode_b64(
                        &t,
                        &format!("{field}.sysprep.unattend_xml"),
                        MAX_UNATTEND_XML,
                        details,
                    )
                });
                let custom = sp.get("custom_key_values").cloned();
                if unattend_xml.is_none() && custom.is_none() {
                    detail(
                        details,
                        format!("{field}.sysprep"),
                        "needs unattend_xml or custom_key_values",
                    );
                }
                gc.insert("sysprep".to_owned(), Value::Object(sp));
                Some(GuestCustomization {
                    kind: "sysprep".to_owned(),
                    user_data: None,
                    meta_data: None,
                    unattend_xml,
                    install_type: Some(install_type),
                    custom_key_values: custom,
                    is_overridable,
                })
            }
        };
        res.insert("guest_customization".to_owned(), Value::Object(gc));
        view
    }

    pub(super) fn os_of(&self, prepared: &Prepared, inherited: Option<GuestOs>) -> GuestOs {
        if let Some(os) = inherited {
            return os;
        }
        if prepared.guest.as_ref().is_some_and(|g| g.kind == "sysprep") {
            return GuestOs::Windows;
        }
        prepared
            .boot_image
            .as_deref()
            .map(|img| self.image_os(img))
            .unwrap_or_default()
    }
}
