//! Watch streams: newline-delimited `WatchEvent` JSON over a chunked response.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType, ResKey, Store, Stored};

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// `resourceVersion` unset or "0": synthetic ADDED events for current objects, then changes.
    Now,
    /// `sendInitialEvents=true`: ADDED events for current objects, a BOOKMARK marked
    /// `k8s.io/initial-events-end`, then changes.
    InitialEvents,
    /// Changes after this resourceVersion (410 if it is older than the retained history).
    After(u64),
}

/// A watch request.
#[derive(Debug)]
pub struct WatchRequest {
    /// The resource.
    pub def: Arc<ResourceDef>,
    /// Requested version (objects are labelled with it).
    pub version: String,
    /// Namespace or all.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Start point.
    pub start: WatchStart,
    /// Send BOOKMARK events.
    pub bookmarks: bool,
    /// Close the stream after this long.
    pub timeout: Duration,
    /// Interval between bookmarks.
    pub bookmark_interval: Duration,
    /// Events carry one-row `Table`s (`kubectl get --watch`) instead of objects.
    pub table: Option<TableOutput>,
    /// Objects are shown through another API's view of the stored resource (events.k8s.io over core events).
    pub view: Option<View>,
}

/// Another API's view of a stored resource.
#[derive(Debug, Clone)]
pub struct View {
    /// `apiVersion` of the view.
    pub api_version: String,
    /// Converts a stored object into the view.
    pub convert: fn(&Value) -> Value,
}

/// Table watch output: column definitions go with the first event only, as the real server sends them.
#[derive(Debug)]
pub struct TableOutput {
    /// Embed whole objects (`includeObject=Object`) rather than `PartialObjectMetadata`.
    pub full_objects: bool,
    /// Whether the column definitions went out already.
    pub columns_sent: AtomicBool,
}

impl WatchRequest {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    fn line(&self, kind: &str, stored: &Stored) -> Bytes {
        if let (Some(view), None) = (&self.view, &self.table) {
            let mut line =
                serde_json::to_vec(&json!({"type": kind, "object": (view.convert)(&stored.value)}))
                    .unwrap_or_default();
            line.push(b'\n');
            return Bytes::from(line);
        }
        if let Some(table) = &self.table {
            let rv = meta_rv(&stored.value);
            let mut rows = crate::table::table(
                &self.def,
                &[stored.value.as_ref()],
                rv,
                None,
                table.full_objects,
            );
            if table.columns_sent.swap(true, Ordering::Relaxed) {
                rows["columnDefinitions"] = json!([]);
            }
            let mut line =
                serde_json::to_vec(&json!({"type": kind, "object": rows})).unwrap_or_default();
            line.push(b'\n');
            return Bytes::from(line);
        }
        let wanted = self.def.api_version(&self.version);
        let json =
            if stored.value.get("apiVersion").and_then(Value::as_str) == Some(wanted.as_str()) {
                stored.json.clone()
            } else {
                let mut copy = (*stored.value).clone();
                copy["apiVersion"] = json!(wanted);
                Bytes::from(serde_json::to_vec(&copy).unwrap_or_default())
            };
        let mut line = BytesMut::with_capacity(json.len() + 32);
        line.put_slice(b"{\"type\":\"");
        line.put_slice(kind.as_bytes());
        line.put_slice(b"\",\"object\":");
        line.put_slice(&json);
        line.put_slice(b"}\n");
        line.freeze()
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let api_version = self.view.as_ref().map_or_else(
            || self.def.api_version(&self.version),
            |v| v.api_version.clone(),
        );
        let event = json!({"type": "BOOKMARK", "object": {"kind": self.def.kind, "apiVersion": api_version, "metadata": metadata}});
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }

    /// The event this watcher sees for a change, if any (MODIFIED turns into ADDED or DELETED when the object
    /// enters or leaves the selectors, as the real watch cache does).
    fn translate(&self, key: &ResKey, change: &Change) -> Option<Bytes> {
        if change.resource != *key {
            return None;
        }
        if let Some(ns) = &self.namespace
            && *ns != change.namespace
        {
            return None;
        }
        let now = self.matches(&change.object.value);
        let before = change.previous.as_deref().is_some_and(|p| self.matches(p));
        let kind = match change.kind {
            EventType::Added if now => EventType::Added,
            EventType::Modified if now && before => EventType::Modified,
            EventType::Modified if now => EventType::Added,
            EventType::Modified if before => EventType::Deleted,
            EventType::Deleted if now || before => EventType::Deleted,
            _ => return None,
        };
        Some(self.line(kind.as_str(), &change.object))
    }
}

fn meta_rv(object: &Value) -> u64 {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

fn error_line(error: &ApiError) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": error.to_status()}))
        .unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// Sends a line unless the server shuts down first (a client that stops reading must not hold the task
/// forever). False when the line could not be delivered.
async fn deliver(tx: &mpsc::Sender<Bytes>, line: Bytes, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        sent = tx.send(line) => sent.is_ok(),
        () = shutdown.cancelled() => false,
    }
}

/// Runs a watch, sending lines into `tx` until the timeout, shutdown, the client going away, or the watcher
/// falling too far behind (then a 410 ERROR event, so the client relists).
pub async fn run(
    store: Arc<Store>,
    request: WatchRequest,
    tx: mpsc::Sender<Bytes>,
    shutdown: CancellationToken,
) {
    let key: ResKey = (request.def.group.clone(), request.def.plural.clone());
    let (mut rx, mut last_rv) = match request.start {
        WatchStart::Now | WatchStart::InitialEvents => {
            let (rx, items, rv) = store.subscribe_with_snapshot(&key, request.namespace.as_deref());
            for item in items.iter().filter(|s| request.matches(&s.value)) {
                if !deliver(&tx, request.line("ADDED", item), &shutdown).await {
                    return;
                }
            }
            if request.start == WatchStart::InitialEvents
                && !deliver(&tx, request.bookmark(rv, true), &shutdown).await
            {
                return;
            }
            (rx, rv)
        }
        WatchStart::After(rv) => match store.subscribe_from(rv) {
            Err(error) => {
                deliver(&tx, error_line(&error), &shutdown).await;
                return;
            }
            Ok((rx, backlog)) => {
                let mut last = rv;
                for change in backlog {
                    last = last.max(change.rv);
                    if let Some(line) = request.translate(&key, &change)
                        && !deliver(&tx, line, &shutdown).await
                    {
                        return;
                    }
                }
                (rx, last)
            }
        },
    };
    let deadline = tokio::time::sleep(request.timeout);
    tokio::pin!(deadline);
    let mut bookmark_tick = tokio::time::interval(request.bookmark_interval);
    bookmark_tick.tick().await;
    loop {
        tokio::select! {
            () = &mut deadline => return,
            () = shutdown.cancelled() => return,
            () = tx.closed() => return,
            _ = bookmark_tick.tick(), if request.bookmarks => {
                if !deliver(&tx, request.bookmark(last_rv, false), &shutdown).await {
                    return;
                }
            }
            received = rx.recv() => match received {
                Ok(change) => {
                    if change.rv <= last_rv {
                        continue;
                    }
                    last_rv = change.rv;
                    let Some(line) = request.translate(&key, &change) else {
                        continue;
                    };
                    let delay = store.watch_delay();
                    if !delay.is_zero() {
                        tokio::select! {
                            () = tokio::time::sleep_until((change.at + delay).into()) => {}
                            () = shutdown.cancelled() => return,
                        }
                    }
                    if !deliver(&tx, line, &shutdown).await {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    deliver(&tx, error_line(&ApiError::expired(format!("too old resource version: {last_rv}: the watcher fell behind"))), &shutdown).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}
