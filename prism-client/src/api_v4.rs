//! Typed v4 calls: templates, deploy, tasks, volume group detach.

use reqwest::Method;

use crate::api_v3::single_match;
use crate::client::{Call, Client};
use crate::endpoints;
use crate::error::Error;
use crate::observe::Api;
use crate::v4::{
    Envelope, ExtIdReference, ListEnvelope, Task, Template, TemplateDeployRequest, VmAttachment,
};

/// Most templates v4 returns per page.
const V4_MAX_PAGE: u32 = 100;

/// Most tasks one v4 task listing returns: `$limit` is "a positive integer between 1 and 100"
/// (ntnx-prism-py-client 4.0.1, `TasksApi.list_tasks`).
pub const V4_TASKS_MAX_PAGE: usize = 100;

/// The v4 extId of a task: v4 calls answer `<prefix>:<uuid>` (the pattern of `Task.extId` in
/// ntnx-prism-py-client 4.0.1, `^[a-zA-Z0-9/+]*={0,2}:<uuid>`), and a task made through v3 has
/// a bare UUID. Ergon is Prism's task service and `ZXJnb24=` its name in base64, the prefix
/// real v4 task extIds carry (hack/prism-mock's README, "Task extIds"); a prefixed id is kept.
pub fn v4_task_ext_id(task: &str) -> String {
    if task.contains(':') {
        task.to_owned()
    } else {
        format!("ZXJnb24=:{task}")
    }
}

/// `text` with every byte but RFC 3986's unreserved ones (section 2.3) percent-encoded, as a
/// query value.
fn percent_encoded(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() * 2);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The UUID part of a task id, lower-cased: what a v3 UUID and a v4 extId of one task share.
pub fn task_uuid_part(task: &str) -> String {
    task.rsplit_once(':')
        .map_or(task, |(_, uuid)| uuid)
        .to_ascii_lowercase()
}

/// What a deploy returned: the task to watch, and the request id that identifies this deploy (send it again to
/// get the same task back instead of a second deploy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployAccepted {
    pub task_ext_id: String,
    pub request_id: String,
}

impl Client {
    /// One page of templates (`$page` is 0-based). A Prism Central without templates may answer without `data`:
    /// that is an empty page.
    pub async fn list_templates(
        &self,
        page: u32,
        limit: u32,
    ) -> Result<ListEnvelope<Template>, Error> {
        let mut call = Call::new(
            Api::VmmV4,
            Method::GET,
            endpoints::TEMPLATES_LIST,
            &["content", "templates"],
        );
        call.query = Some(format!("$page={page}&$limit={limit}"));
        self.call_json(call).await
    }

    /// Every template, page by page until `totalAvailableResults` (or a short page).
    pub async fn list_all_templates(&self) -> Result<Vec<Template>, Error> {
        let limit = self.page_size().min(V4_MAX_PAGE);
        let mut templates = Vec::new();
        for page in 0..crate::MAX_LIST_PAGES {
            let response = self.list_templates(page, limit).await?;
            let received = response.data.len();
            templates.extend(response.data);
            let total = response
                .metadata
                .and_then(|metadata| metadata.total_available_results);
            let done = match total {
                Some(total) => received == 0 || templates.len() as u64 >= total,
                None => received < limit as usize,
            };
            if done {
                return Ok(templates);
            }
        }
        Err(Error::ListDidNotEnd {
            endpoint: endpoints::TEMPLATES_LIST,
            pages: crate::MAX_LIST_PAGES,
            collected: templates.len(),
        })
    }

    /// The one template named exactly `name`; [`Error::DuplicateName`] lists the extIds of several.
    pub async fn find_template_by_name(&self, name: &str) -> Result<Option<Template>, Error> {
        let matches: Vec<Template> = self
            .list_all_templates()
            .await?
            .into_iter()
            .filter(|template| template.template_name.as_deref() == Some(name))
            .collect();
        single_match("template", name, matches, |template| {
            template
                .ext_id
                .clone()
                .unwrap_or_else(|| "<no extId>".to_owned())
        })
    }

    pub async fn get_template(&self, ext_id: &str) -> Result<Template, Error> {
        let call = Call::new(
            Api::VmmV4,
            Method::GET,
            endpoints::TEMPLATES_GET,
            &["content", "templates", ext_id],
        );
        let envelope: Envelope<Template> = self.call_json(call).await?;
        Ok(envelope.data)
    }

    /// `POST /content/templates/{extId}/$actions/deploy` with `NTNX-Request-Id`.
    ///
    /// Pass the `request_id` you recorded before deploying to repeat a deploy safely (Prism returns the same
    /// task); without one, a new UUID is generated. The client never repeats a deploy on its own (only after a
    /// session 401, with the same request id).
    pub async fn deploy_template(
        &self,
        template_ext_id: &str,
        request: &TemplateDeployRequest,
        request_id: Option<&str>,
    ) -> Result<DeployAccepted, Error> {
        let request_id = request_id.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        let mut call = Call::new(
            Api::VmmV4,
            Method::POST,
            endpoints::TEMPLATES_DEPLOY,
            &[
                "content",
                "templates",
                template_ext_id,
                "$actions",
                "deploy",
            ],
        )
        .json(request)?;
        call.request_id = Some(request_id.clone());
        let accepted: Envelope<ExtIdReference> = self.call_json(call).await?;
        Ok(DeployAccepted {
            task_ext_id: accepted.data.ext_id,
            request_id,
        })
    }

    /// `POST /api/volumes/v4.0/config/volume-groups/{extId}/$actions/detach-vm` with `NTNX-Request-Id`: detaches VM
    /// `vm_ext_id` from volume group `volume_group_ext_id` (the volume group itself stays); returns the task's extId.
    ///
    /// The path and body are those of Nutanix's ntnx-volumes-py-client 4.3.2 (`VolumeGroupsApi.detach_vm`,
    /// `VmAttachment`), the call CAPX makes before deleting a VM (#460, #477). The action takes no `If-Match`
    /// (the SDK sends none). Prism answers a repeat of a `request_id` with the first request's task ("as per
    /// Nutanix API semantics", CAPX af415bf6, which derived the id from the VG and VM for that reason), so the call
    /// is retried like a read.
    pub async fn detach_volume_group(
        &self,
        volume_group_ext_id: &str,
        vm_ext_id: &str,
        request_id: &str,
    ) -> Result<String, Error> {
        let mut call = Call::new(
            Api::VolumesV4,
            Method::POST,
            endpoints::VOLUME_GROUPS_DETACH_VM,
            &[
                "config",
                "volume-groups",
                volume_group_ext_id,
                "$actions",
                "detach-vm",
            ],
        )
        .json(&VmAttachment::of_vm(vm_ext_id))?
        .idempotent();
        call.request_id = Some(request_id.to_owned());
        let accepted: Envelope<ExtIdReference> = self.call_json(call).await?;
        Ok(accepted.data.ext_id)
    }

    /// `GET /api/prism/v4.0/config/tasks?$filter=extId in (...)&$limit=N`: the tasks among `tasks`
    /// (v3 UUIDs or v4 extIds, at most [`V4_TASKS_MAX_PAGE`]) that Prism Central knows, in one
    /// call. The listing, its `$filter` on `extId` and its `$limit` are ntnx-prism-py-client
    /// 4.0.1's `TasksApi.list_tasks` (filterable fields include `extId` and `status`; a filter
    /// "must conform to the OData V4.01 URL conventions", whose `in` operator is OData 4.01 part 2
    /// §5.1.1.1.12); prism-go-client `converged/v4/tasks.go` (`TasksService.List`) lists the same way.
    pub async fn list_v4_tasks(&self, tasks: &[String]) -> Result<Vec<Task>, Error> {
        let mut call = Call::new(
            Api::PrismV4,
            Method::GET,
            endpoints::V4_TASKS_LIST,
            &["config", "tasks"],
        );
        let ids: Vec<String> = tasks
            .iter()
            .take(V4_TASKS_MAX_PAGE)
            .map(|task| format!("'{}'", v4_task_ext_id(task).replace('\'', "''")))
            .collect();
        let limit = ids.len().max(1);
        let filter = format!("extId in ({})", ids.join(","));
        call.query = Some(format!(
            "$filter={}&$limit={limit}",
            percent_encoded(&filter)
        ));
        let listed: ListEnvelope<Task> = self.call_json(call).await?;
        Ok(listed.data)
    }

    /// `GET /api/prism/v4.0/config/tasks/{extId}`, as returned.
    pub async fn get_v4_task_raw(&self, ext_id: &str) -> Result<Task, Error> {
        let call = Call::new(
            Api::PrismV4,
            Method::GET,
            endpoints::V4_TASKS_GET,
            &["config", "tasks", ext_id],
        );
        let envelope: Envelope<Task> = self.call_json(call).await?;
        Ok(envelope.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_filter_is_percent_encoded_but_its_unreserved_characters() {
        assert_eq!(
            percent_encoded("extId in ('ZXJnb24=:a-1')"),
            "extId%20in%20%28%27ZXJnb24%3D%3Aa-1%27%29"
        );
    }
}
