//! Request paths parsed into routes: discovery documents, OpenAPI, resource collections, objects
//! and their subresources.

/// A parsed resource path.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ResourcePath {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) namespace: Option<String>,
    pub(super) plural: String,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    Version,
    Health,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList(String, String),
    Resource(ResourcePath),
    AdminRequests,
    AdminObjects,
    OpenApiRoot,
    OpenApiGroupVersion(String, String),
    OpenApiV2,
    Unknown,
}

pub(super) fn route(path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["kube-sim", "requests"] => Route::AdminRequests,
        ["kube-sim", "objects"] => Route::AdminObjects,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiRoot,
        ["openapi", "v3", "api", version] => {
            Route::OpenApiGroupVersion(String::new(), version.to_string())
        }
        ["openapi", "v3", "apis", group, version] => {
            Route::OpenApiGroupVersion(group.to_string(), version.to_string())
        }
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", group] => Route::Group(group.to_string()),
        ["api", version] => Route::ResourceList(String::new(), version.to_string()),
        ["apis", group, version] => Route::ResourceList(group.to_string(), version.to_string()),
        ["api", version, rest @ ..] => resource_route("", version, rest),
        ["apis", group, version, rest @ ..] => resource_route(group, version, rest),
        _ => Route::Unknown,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let mut p = ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        ..Default::default()
    };
    let rest = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            p.namespace = Some(ns.to_string());
            p.plural = plural.to_string();
            tail
        }
        [plural, tail @ ..] => {
            p.plural = plural.to_string();
            tail
        }
        [] => return Route::Unknown,
    };
    match rest {
        [] => {}
        [name] => p.name = Some(name.to_string()),
        [name, sub] => {
            p.name = Some(name.to_string());
            p.subresource = Some(sub.to_string());
        }
        _ => return Route::Unknown,
    }
    Route::Resource(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_resource_paths() {
        let p =
            |group: &str, ns: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>| {
                Route::Resource(ResourcePath {
                    group: group.into(),
                    version: if group.is_empty() {
                        "v1".into()
                    } else {
                        "v1beta1".into()
                    },
                    namespace: ns.map(Into::into),
                    plural: plural.into(),
                    name: name.map(Into::into),
                    subresource: sub.map(Into::into),
                })
            };
        assert_eq!(
            route("/api/v1/namespaces/ns1/pods/p/eviction"),
            p("", Some("ns1"), "pods", Some("p"), Some("eviction"))
        );
        assert_eq!(
            route("/api/v1/namespaces/ns1"),
            p("", None, "namespaces", Some("ns1"), None)
        );
        assert_eq!(
            route("/api/v1/namespaces/ns1/status"),
            p("", None, "namespaces", Some("ns1"), Some("status"))
        );
        assert_eq!(route("/api/v1/pods"), p("", None, "pods", None, None));
        assert_eq!(
            route("/apis/machine.openshift.io/v1beta1/namespaces/x/machinesets/m/scale"),
            p(
                "machine.openshift.io",
                Some("x"),
                "machinesets",
                Some("m"),
                Some("scale")
            )
        );
        assert_eq!(
            route("/apis/machine.openshift.io/v1beta1"),
            Route::ResourceList("machine.openshift.io".into(), "v1beta1".into())
        );
        assert_eq!(route("/api"), Route::CoreVersions);
        assert_eq!(route("/openapi/v2"), Route::OpenApiV2);
    }
}
