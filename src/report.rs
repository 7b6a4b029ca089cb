//! What a controller found, written back to the API server: status by server-side apply, and
//! Events. Shared by the EtcdCluster tasks and the backup and restore controllers.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

/// Applies `status` to `object`'s status subresource as field manager `manager`.
pub async fn apply_status<K>(
    client: &Client,
    object: &K,
    manager: &str,
    status: &impl Serialize,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
}

/// `message` with the query of every URL in it cut off: errors of object store requests name
/// their URL, and a presigned or SAS-signed URL carries its signature in the query. What is
/// left (scheme, host, path) still says which object failed.
pub fn scrub(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = ["https://", "http://"]
        .iter()
        .filter_map(|s| rest.find(s))
        .min()
    {
        let (before, url) = rest.split_at(at);
        out.push_str(before);
        let end = url
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ','))
            .unwrap_or(url.len());
        let (url, after) = url.split_at(end);
        match url.split_once('?') {
            Some((base, _)) => {
                out.push_str(base);
                out.push_str("?<query removed>");
            }
            None => out.push_str(url),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Publishes the Events of one controller, each with the controller's `action`. A failure is
/// only logged (an Event is never worth a retry).
#[derive(Clone)]
pub struct Reporter {
    recorder: Recorder,
    action: &'static str,
}

impl Reporter {
    /// A reporter for Events of `action` (`Reconcile`, `Backup`, `Restore`).
    pub fn new(recorder: Recorder, action: &'static str) -> Self {
        Reporter { recorder, action }
    }

    /// The recorder, for Events about objects that are not typed (an unreadable one).
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// An Event about `on`.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        on: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.publish_related(on, None, type_, reason, note).await;
    }

    /// As [`Reporter::publish`], naming a second object the Event is about (a member's pod).
    /// kube's recorder folds Events of one reason on one object into a series that keeps the
    /// first note; with the pod named, each member gets an Event of its own.
    pub async fn publish_related<K: Resource<DynamicType = ()>>(
        &self,
        on: &K,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(scrub(&note)),
            action: self.action.into(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&ev, &on.object_ref(&())).await {
            warn!("publishing an event: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::scrub;

    #[test]
    fn signed_queries_never_reach_a_message() {
        let e = "Generic S3 error: error sending request for url \
                 (https://bucket.s3.amazonaws.com/etcd/x.db?X-Amz-Signature=abc&X-Amz-Credential=k): \
                 timed out; and http://azurite:10000/acct/c/b?sv=2022&sig=SECRET, then done";
        let s = scrub(e);
        assert!(
            !s.contains("abc") && !s.contains("SECRET") && !s.contains("Credential"),
            "{s}"
        );
        assert!(
            s.contains("(https://bucket.s3.amazonaws.com/etcd/x.db?<query removed>): timed out"),
            "{s}"
        );
        assert!(
            s.ends_with("http://azurite:10000/acct/c/b?<query removed>, then done"),
            "{s}"
        );
        assert_eq!(scrub("no url here"), "no url here");
        assert_eq!(scrub("s3://bucket/key failed"), "s3://bucket/key failed");
    }
}
