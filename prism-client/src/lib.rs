//! Client for Nutanix Prism Central: v3 endpoints, v4 template deploy, auth, TLS, retry, rate limit and tasks.
//! It knows nothing of Kubernetes.
