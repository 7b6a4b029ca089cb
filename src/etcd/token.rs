//! etcd root's token for a cluster, obtained from a member that can issue one and carried on
//! every request of a connection through a channel of our own: etcd-client obtains a token at
//! each connection, which a learner refuses (it proposes nothing) and which costs etcd a bcrypt
//! check and a proposal each time.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use etcd_client::{BalancedChannelBuilder, Channel};
use http::HeaderValue;
use tower::ServiceExt;

use super::Password;

/// etcd forgets a simple token after five minutes without use, and at a restart: one older than
/// this is obtained again.
const TOKEN_AGE: Duration = Duration::from_secs(240);

/// A token kept, when it was obtained, and whether a call carrying it went unanswered.
struct Kept {
    token: HeaderValue,
    at: Instant,
    doubted: bool,
}

/// root's password, and the token last obtained with it.
pub struct Root {
    /// The password.
    pub password: Password,
    token: Mutex<Option<Kept>>,
}

impl Root {
    /// root with `password`, no token yet.
    pub fn new(password: Password) -> Self {
        Root {
            password,
            token: Mutex::new(None),
        }
    }

    /// The token, while it is fresh and no call carrying it went unanswered.
    pub(super) fn token(&self) -> Option<HeaderValue> {
        self.fresh(false)
    }

    /// The token, while it is fresh, even when a call carrying it went unanswered: what a
    /// connection carries when no new token can be obtained. A cluster that lost its quorum
    /// issues none (etcd proposes every authentication), while its survivors still know the
    /// tokens issued before, and ask one for every request, their status included.
    pub(super) fn last_resort(&self) -> Option<HeaderValue> {
        self.fresh(true)
    }

    fn fresh(&self, doubted_too: bool) -> Option<HeaderValue> {
        let kept = self.token.lock().unwrap_or_else(|e| e.into_inner());
        kept.as_ref()
            .filter(|k| k.at.elapsed() < TOKEN_AGE && (doubted_too || !k.doubted))
            .map(|k| k.token.clone())
    }

    pub(super) fn keep(&self, token: &str) {
        if let Ok(value) = HeaderValue::from_str(token) {
            *self.token.lock().unwrap_or_else(|e| e.into_inner()) = Some(Kept {
                token: value,
                at: Instant::now(),
                doubted: false,
            });
        }
    }

    /// Forgets `token` if it is still the one kept: etcd refused it.
    pub(super) fn forget(&self, token: &HeaderValue) {
        let mut kept = self.token.lock().unwrap_or_else(|e| e.into_inner());
        if kept.as_ref().is_some_and(|k| k.token == token) {
            *kept = None;
        }
    }

    /// Doubts `token` if it is still the one kept: a call carrying it went unanswered. The
    /// next connection obtains a new one, and carries this one only if none can be had.
    fn doubt(&self, token: &HeaderValue) {
        let mut kept = self.token.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = kept.as_mut().filter(|k| k.token == token) {
            k.doubted = true;
        }
    }
}

impl PartialEq for Root {
    fn eq(&self, other: &Self) -> bool {
        self.password == other.password
    }
}

impl Eq for Root {}

impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Root { .. }")
    }
}

/// Whether an answer says the token is no longer good (etcd's messages, in the gRPC status
/// that a refusal before the handler carries in the headers).
fn stale(message: &[u8]) -> bool {
    let m = String::from_utf8_lossy(message);
    m.contains("invalid auth token")
        || m.contains("user name is empty")
        || m.contains("auth: revision")
}

/// Doubts the token when dropped unsettled; forgets it when settled as refused.
struct Unanswered(Option<(std::sync::Arc<Root>, HeaderValue)>);

impl Unanswered {
    fn settle(mut self, refused: bool) {
        if let Some((root, token)) = self.0.take()
            && refused
        {
            root.forget(&token);
        }
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some((root, token)) = self.0.take() {
            root.doubt(&token);
        }
    }
}

/// A balanced channel that adds `token` to every request, and forgets it in `root` when etcd
/// refuses it.
pub(super) struct WithToken {
    pub(super) token: HeaderValue,
    pub(super) root: std::sync::Arc<Root>,
}

impl BalancedChannelBuilder for WithToken {
    type Error = tonic::transport::Error;

    fn balanced_channel(
        self,
        buffer_size: usize,
    ) -> Result<
        (
            Channel,
            tokio::sync::mpsc::Sender<
                tonic::transport::channel::Change<http::Uri, tonic::transport::Endpoint>,
            >,
        ),
        Self::Error,
    > {
        let (channel, tx) = tonic::transport::Channel::balance_channel(buffer_size);
        let WithToken { token, root } = self;
        let sent = token.clone();
        let service = channel
            .map_request(move |mut req: http::Request<tonic::body::Body>| {
                if req.uri().path() != "/etcdserverpb.Auth/Authenticate" {
                    req.headers_mut().insert("token", token.clone());
                }
                req
            })
            .map_future(move |call| {
                // A call answered with a refusal of the token forgets it; one given up before
                // its answer doubts it (a caller's deadline: etcd holds a request with a token
                // it does not know for 3 s, waiting to apply it; or a linearizable read of a
                // cluster without quorum). The next connection obtains a new one.
                let unanswered = Unanswered(Some((root.clone(), sent.clone())));
                async move {
                    let answer: Result<http::Response<tonic::body::Body>, _> = call.await;
                    let refused = answer.as_ref().is_ok_and(|resp| {
                        resp.headers()
                            .get("grpc-message")
                            .is_some_and(|m| stale(m.as_bytes()))
                    });
                    unanswered.settle(refused);
                    answer
                }
            })
            .map_err(tower::BoxError::from);
        Ok((
            Channel::Custom(tower::util::BoxCloneSyncService::new(service)),
            tx,
        ))
    }
}
