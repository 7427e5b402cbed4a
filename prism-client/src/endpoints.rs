//! Endpoint templates: `"<METHOD> <path relative to the API base>"`, with `{uuid}`, `{extId}`, `{key}`,
//! `{value}` and `{client_identifier}` for the variable parts. They label errors, logs and [`crate::RequestEvent`]s,
//! so a metric has one series per endpoint, never one per entity. v3 paths are relative to `/api/nutanix/v3`,
//! v4 template paths to `/api/vmm/v4.0`, v4 task paths to `/api/prism/v4.0`, v4 volume group paths to
//! `/api/volumes/v4.0`.

pub const USERS_ME: &str = "GET /users/me";

pub const VMS_CREATE: &str = "POST /vms";
pub const VMS_GET: &str = "GET /vms/{uuid}";
pub const VMS_LIST: &str = "POST /vms/list";
pub const VMS_UPDATE: &str = "PUT /vms/{uuid}";
pub const VMS_DELETE: &str = "DELETE /vms/{uuid}";
pub const VMS_CLONE: &str = "POST /vms/{uuid}/clone";

pub const IMAGES_GET: &str = "GET /images/{uuid}";
pub const IMAGES_LIST: &str = "POST /images/list";
pub const SUBNETS_GET: &str = "GET /subnets/{uuid}";
pub const SUBNETS_LIST: &str = "POST /subnets/list";
pub const CLUSTERS_GET: &str = "GET /clusters/{uuid}";
pub const CLUSTERS_LIST: &str = "POST /clusters/list";
pub const PROJECTS_GET: &str = "GET /projects/{uuid}";
pub const PROJECTS_LIST: &str = "POST /projects/list";
pub const HOSTS_GET: &str = "GET /hosts/{uuid}";
pub const HOSTS_LIST: &str = "POST /hosts/list";

pub const CATEGORY_KEYS_LIST: &str = "POST /categories/list";
pub const CATEGORY_KEY_GET: &str = "GET /categories/{key}";
pub const CATEGORY_KEY_PUT: &str = "PUT /categories/{key}";
pub const CATEGORY_VALUES_LIST: &str = "POST /categories/{key}/list";
pub const CATEGORY_VALUE_GET: &str = "GET /categories/{key}/{value}";
pub const CATEGORY_VALUE_PUT: &str = "PUT /categories/{key}/{value}";

pub const TASKS_GET: &str = "GET /tasks/{uuid}";

pub const IDEMPOTENCE_RESERVE: &str = "POST /idempotence_identifiers";
pub const IDEMPOTENCE_GET: &str = "GET /idempotence_identifiers/{client_identifier}";
pub const IDEMPOTENCE_DELETE: &str = "DELETE /idempotence_identifiers/{client_identifier}";

pub const TEMPLATES_LIST: &str = "GET /content/templates";
pub const TEMPLATES_GET: &str = "GET /content/templates/{extId}";
pub const TEMPLATES_DEPLOY: &str = "POST /content/templates/{extId}/$actions/deploy";
pub const V4_TASKS_GET: &str = "GET /config/tasks/{extId}";
pub const V4_TASKS_LIST: &str = "GET /config/tasks";
pub const VOLUME_GROUPS_DETACH_VM: &str = "POST /config/volume-groups/{extId}/$actions/detach-vm";

/// Every template, for registering metric series up front.
pub const ALL: &[&str] = &[
    USERS_ME,
    VMS_CREATE,
    VMS_GET,
    VMS_LIST,
    VMS_UPDATE,
    VMS_DELETE,
    VMS_CLONE,
    IMAGES_GET,
    IMAGES_LIST,
    SUBNETS_GET,
    SUBNETS_LIST,
    CLUSTERS_GET,
    CLUSTERS_LIST,
    PROJECTS_GET,
    PROJECTS_LIST,
    HOSTS_GET,
    HOSTS_LIST,
    CATEGORY_KEYS_LIST,
    CATEGORY_KEY_GET,
    CATEGORY_KEY_PUT,
    CATEGORY_VALUES_LIST,
    CATEGORY_VALUE_GET,
    CATEGORY_VALUE_PUT,
    TASKS_GET,
    IDEMPOTENCE_RESERVE,
    IDEMPOTENCE_GET,
    IDEMPOTENCE_DELETE,
    TEMPLATES_LIST,
    TEMPLATES_GET,
    TEMPLATES_DEPLOY,
    V4_TASKS_GET,
    V4_TASKS_LIST,
    VOLUME_GROUPS_DETACH_VM,
];
