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
