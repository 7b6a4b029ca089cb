//! A thin, typed wrapper over etcd-client for what the operator does to a cluster: list, add as
//! learner, promote and remove members, read each member's status, move leadership.
//!
//! A member's name is empty in etcd until the member has started, so callers match members to
//! pods by peer URL; [`Member::host_label`] gives the first DNS label of the peer URL, which is
//! the member (and pod) name.

use std::sync::Arc;
use std::time::Duration;

pub mod auth;
mod follow;
mod token;

pub use follow::Guarded;

pub use token::Root;

use etcd_client::{
    AlarmAction, AlarmOptions, AlarmType, Certificate, Client, CompactionOptions, ConnectOptions,
    GetOptions, Identity, MemberAddOptions, TlsOptions,
};

/// What failed, named after the action, with the etcd error underneath.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint did not answer, or refused the connection (TLS included).
    #[error("connecting to etcd at {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: etcd_client::Error,
    },
    /// MemberList failed.
    #[error("listing members: {0}")]
    ListMembers(#[source] etcd_client::Error),
    /// MemberAdd failed.
    #[error("adding learner {peer_url}: {source}")]
    AddLearner {
        peer_url: String,
        #[source]
        source: etcd_client::Error,
    },
    /// MemberPromote failed.
    #[error("promoting member {id:x}: {source}")]
    Promote {
        id: u64,
        #[source]
        source: etcd_client::Error,
    },
    /// MemberRemove failed.
    #[error("removing member {id:x}: {source}")]
    Remove {
        id: u64,
        #[source]
        source: etcd_client::Error,
    },
    /// Status failed.
    #[error("reading the status of {endpoint}: {source}")]
    Status {
        endpoint: String,
        #[source]
        source: etcd_client::Error,
    },
    /// Snapshot failed, or its stream broke.
    #[error("streaming a snapshot: {0}")]
    Snapshot(#[source] etcd_client::Error),
    /// Alarm failed.
    #[error("setting an alarm on member {id:x}: {source}")]
    Alarm {
        id: u64,
        #[source]
        source: etcd_client::Error,
    },
    /// MoveLeader failed.
    #[error("moving leadership to {id:x}: {source}")]
    MoveLeader {
        id: u64,
        #[source]
        source: etcd_client::Error,
    },
    /// Compaction failed.
    #[error("compacting to revision {revision}: {source}")]
    Compact {
        revision: i64,
        #[source]
        source: etcd_client::Error,
    },
    /// Defragmentation failed.
    #[error("defragmenting {endpoint}: {source}")]
    Defragment {
        endpoint: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A read failed.
    #[error("reading through {endpoint}: {source}")]
    Read {
        endpoint: String,
        #[source]
        source: etcd_client::Error,
    },
    /// etcd answered without a field it always sends.
    #[error("etcd answered {0} without {1}")]
    Malformed(&'static str, &'static str),
    /// Reading or changing access control failed.
    #[error("{what}: {source}")]
    Auth {
        what: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A standby's replay could not read or write its data.
    #[error("{what}: {source}")]
    Follow {
        what: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A watch could not be opened, or its stream broke.
    #[error("watching from revision {revision}: {source}")]
    Watch {
        revision: i64,
        #[source]
        source: etcd_client::Error,
    },
}

impl Error {
    fn source_text(&self) -> String {
        std::error::Error::source(self)
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Connect { .. } => "etcd_connect",
            Error::ListMembers(_) => "etcd_member_list",
            Error::AddLearner { .. } => "etcd_member_add",
            Error::Promote { .. } => "etcd_member_promote",
            Error::Remove { .. } => "etcd_member_remove",
            Error::Status { .. } => "etcd_status",
            Error::MoveLeader { .. } => "etcd_move_leader",
            Error::Alarm { .. } => "etcd_alarm",
            Error::Snapshot(_) => "etcd_snapshot",
            Error::Compact { .. } => "etcd_compact",
            Error::Defragment { .. } => "etcd_defragment",
            Error::Read { .. } => "etcd_read",
            Error::Malformed(..) => "etcd_malformed",
            Error::Watch { .. } => "etcd_watch",
            Error::Auth { .. } => "etcd_auth",
            Error::Follow { .. } => "etcd_follow",
        }
    }

    /// Whether a promote failed only because the learner has not caught up with the leader yet.
    pub fn is_learner_not_ready(&self) -> bool {
        matches!(self, Error::Promote { .. }) && self.source_text().contains("in sync with leader")
    }

    /// Whether etcd refused a membership change only for now, to protect quorum while it
    /// settles: a member must have been connected to every peer for etcd's health interval (5 s)
    /// before it accepts the next change, and a learner must catch up before promotion. The
    /// change is retried later rather than reported.
    pub fn is_settling(&self) -> bool {
        let text = self.source_text();
        self.is_learner_not_ready()
            || text.contains("unhealthy cluster")
            || text.contains("not enough started members")
    }
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A member as etcd lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// etcd's member ID.
    pub id: u64,
    /// The member's `--name`; empty until it has started.
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Client URLs; empty until it has started.
    pub client_urls: Vec<String>,
    /// Whether it is a learner (non-voting).
    pub is_learner: bool,
}

impl Member {
    fn from_etcd(m: &etcd_client::Member) -> Self {
        Member {
            id: m.id(),
            name: m.name().to_string(),
            peer_urls: m.peer_urls().to_vec(),
            client_urls: m.client_urls().to_vec(),
            is_learner: m.is_learner(),
        }
    }

    /// The first DNS label of the first peer URL: the member's name as the operator assigns it
    /// (`http://<member>.<cluster>.<ns>.svc:2380`), known before the member has started.
    pub fn host_label(&self) -> Option<&str> {
        let url = self.peer_urls.first()?;
        let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
        let host = rest.split([':', '/']).next()?;
        host.split('.').next().filter(|l| !l.is_empty())
    }
}

/// One member's own view of itself and the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// ID of the member that answered.
    pub member_id: u64,
    /// The cluster's ID.
    pub cluster_id: u64,
    /// ID of the leader as this member knows it (0: none).
    pub leader: u64,
    /// Server version.
    pub version: String,
    /// Database size in bytes: the file, which is what etcd holds against its quota.
    pub db_size: i64,
    /// Bytes of the database in use: what is left once the file is defragmented.
    pub db_size_in_use: i64,
    /// Raft index.
    pub raft_index: u64,
    /// Raft term.
    pub raft_term: u64,
    /// The store's revision when the member answered.
    pub revision: i64,
    /// Applied raft index.
    pub raft_applied_index: u64,
    /// Whether the member is a learner (always false before etcd 3.4 reports it).
    pub is_learner: bool,
    /// Errors the member reports (alarms such as NOSPACE).
    pub errors: Vec<String>,
}

impl Status {
    /// Whether this answer shows a problem with member `id`: an alarm raised for it (etcd lists
    /// every member's alarms as `memberID:<decimal id> alarm:NOSPACE`), or an error that names
    /// no member (`etcdserver: no leader`). Another member's alarm is that member's problem.
    ///
    /// NOSPACE is not such a problem: the member still serves reads, deletes and compaction,
    /// and only writes that grow the database are refused, by every member alike (the quota is
    /// the cluster's); see [`Status::nospace`].
    pub fn reports_problem_with(&self, id: u64) -> bool {
        let own = format!("memberID:{id} ");
        self.errors
            .iter()
            .any(|e| (e.contains(&own) && !e.contains(NOSPACE_ALARM)) || !e.contains("memberID:"))
    }

    /// The alarms this answer lists as raised for member `id` (`NOSPACE`, `CORRUPT`), as etcd
    /// names them.
    pub fn alarms_of(&self, id: u64) -> Vec<String> {
        let own = format!("memberID:{id} ");
        self.errors
            .iter()
            .filter(|e| e.contains(&own))
            .filter_map(|e| e.split("alarm:").nth(1)?.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// The members this answer lists with a NOSPACE alarm: one of them reached the quota, and
    /// the cluster refuses every write that would grow the database until it is disarmed.
    pub fn nospace(&self) -> Vec<u64> {
        self.errors
            .iter()
            .filter(|e| e.contains(NOSPACE_ALARM))
            .filter_map(|e| {
                let id = e.split("memberID:").nth(1)?.split_whitespace().next()?;
                id.parse().ok()
            })
            .collect()
    }
}

/// Length of the sha256 etcd appends to a snapshot.
pub const SNAPSHOT_HASH_LEN: usize = 32;

/// How etcd names the NOSPACE alarm in a status answer's errors.
const NOSPACE_ALARM: &str = "alarm:NOSPACE";

/// The client side of a TLS cluster, in PEM: the CA that signed the members' server
/// certificates, and the certificate and key the client presents (etcd runs with
/// `--client-cert-auth`).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// CA bundle the server certificates are checked against.
    pub ca: Vec<u8>,
    /// Client certificate.
    pub cert: Vec<u8>,
    /// Client key.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls { .. }")
    }
}

/// One member's client URL, and what a connection to it needs when it is `https`: the client
/// identity, and the name its certificate must carry. The operator reaches members by pod IP,
/// which no certificate names, so the name is the member's DNS name (what its peers check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `http://` or `https://` URL.
    pub url: String,
    access: Access,
    server_name: Option<String>,
}

/// What the operator presents to a cluster: with TLS, its client identity; with etcd's
/// authentication, root's password (unless the identity is root's: `TLS.auto` issues the
/// operator's certificate with CN `root`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// The client identity, for a cluster whose clients need one.
    pub tls: Option<Arc<ClientTls>>,
    /// root's password (and token), once the cluster's access control was declared.
    pub root: Option<Arc<Root>>,
    /// The client identity is root's (CN `root`): no password is sent, which would cost etcd
    /// a bcrypt check and a proposal at every connection.
    pub cert_is_root: bool,
}

impl Access {
    /// Access with `tls` only.
    pub fn tls(tls: Option<Arc<ClientTls>>) -> Self {
        Access {
            tls,
            ..Access::default()
        }
    }

    /// root, when it authenticates by password (not by its client certificate).
    fn password(&self) -> Option<&Arc<Root>> {
        let by_cert = self.cert_is_root && self.tls.is_some();
        self.root.as_ref().filter(|_| !by_cert)
    }
}

/// A password, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(pub String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

impl Endpoint {
    /// A plain (or, without a client identity, server-authenticated) endpoint.
    pub fn plain(url: impl Into<String>) -> Self {
        Endpoint {
            url: url.into(),
            access: Access::default(),
            server_name: None,
        }
    }

    /// `url`, reached with `access` (its TLS identity when it is `https`), its certificate
    /// checked against `server_name` (else the URL's host).
    pub fn new(url: impl Into<String>, access: Access, server_name: Option<String>) -> Self {
        Endpoint {
            url: url.into(),
            access,
            server_name,
        }
    }

    /// What it is reached with.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Another member, reached the same way.
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }

    /// The same member, reached with `access`.
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    fn options(&self, options: ConnectOptions) -> ConnectOptions {
        if !self.url.starts_with("https://") {
            return options;
        }
        let mut tls = TlsOptions::new();
        if let Some(id) = &self.access.tls {
            tls = tls
                .ca_certificate(Certificate::from_pem(&id.ca))
                .identity(Identity::from_pem(&id.cert, &id.key));
        }
        if let Some(name) = &self.server_name {
            tls = tls.domain_name(name.clone());
        }
        options.with_tls(tls)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

fn options(timeout: Duration) -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout)
}

/// A connection to one etcd member's client endpoint.
pub struct Etcd {
    client: Client,
    /// What bounds connecting and each request, beside tonic's own timeouts (see [`within`]).
    timeout: Option<Duration>,
    /// root and the token this connection carries, if it carries one: forgotten when a change
    /// of access control makes etcd drop its tokens.
    token: Option<(Arc<Root>, http::HeaderValue)>,
}

/// `call`, given up after `timeout`. tonic's timeouts sit behind the balanced channel that
/// etcd-client always uses: a member that takes the TCP connection and never completes the
/// TLS handshake (a frozen etcd: the kernel still accepts for it) left a request waiting for
/// a ready endpoint forever, and a cluster's task with it (tests/etcd_unanswered.rs).
async fn within<T>(
    timeout: Option<Duration>,
    call: impl std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> std::result::Result<T, etcd_client::Error> {
    let Some(timeout) = timeout else {
        return call.await;
    };
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(etcd_client::Error::IoError(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {timeout:?}"),
            )))
        })
}

/// root's token from the member behind `client`, kept in `root`: none while etcd's
/// authentication is off (etcd refuses to authenticate anyone then), nor from a learner (it
/// cannot issue one; the token a voter issued serves on it too), nor from a cluster without
/// quorum (etcd proposes every authentication), nor when the password is not root's (the
/// requests then fail on their own, naming why).
async fn obtain_token(
    client: &mut Client,
    root: &Root,
    timeout: Option<Duration>,
) -> Option<http::HeaderValue> {
    let mut auth = client.auth_client();
    let asked = auth.authenticate(auth::ROOT.into(), root.password.0.clone());
    match within(timeout, asked).await {
        Ok(resp) => {
            root.keep(resp.token());
            root.token()
        }
        Err(e) => {
            if !auth::not_enabled(&e) {
                tracing::debug!(error = %e, "no root token from this member");
            }
            None
        }
    }
}

impl Etcd {
    /// Connects to `endpoint`; every request is bounded by `timeout`.
    pub async fn connect(endpoint: &Endpoint, timeout: Duration) -> Result<Self> {
        Self::connect_with(endpoint, options(timeout), timeout, Some(timeout)).await
    }

    async fn connect_with(
        endpoint: &Endpoint,
        options: ConnectOptions,
        connect_timeout: Duration,
        timeout: Option<Duration>,
    ) -> Result<Self> {
        let url = [endpoint.url.as_str()];
        let connect_err = |source| Error::Connect {
            endpoint: endpoint.url.clone(),
            source,
        };
        let options = endpoint.options(options);
        let plain = || {
            within(
                Some(connect_timeout),
                Client::connect(url, Some(options.clone())),
            )
        };
        let root = endpoint.access.password();
        // A token kept from an earlier connection serves at once; without one, the plain
        // connection asks for it and is kept when none comes (authentication off, a learner).
        let mut carried = root.and_then(|r| Some((r.clone(), r.token()?)));
        let mut asked = None;
        if let (Some(root), None) = (root, &carried) {
            let mut client = plain().await.map_err(connect_err)?;
            carried = obtain_token(&mut client, root, timeout)
                .await
                .or_else(|| root.last_resort())
                .map(|t| (root.clone(), t));
            asked = Some(client);
        }
        let client = match (&carried, asked) {
            (Some((root, token)), _) => {
                let channel = token::WithToken {
                    token: token.clone(),
                    root: root.clone(),
                };
                let with =
                    Client::connect_with_balanced_channel(url, Some(options.clone()), channel);
                within(Some(connect_timeout), with)
                    .await
                    .map_err(connect_err)?
            }
            (None, Some(client)) => client,
            (None, None) => plain().await.map_err(connect_err)?,
        };
        Ok(Etcd {
            client,
            timeout,
            token: carried,
        })
    }

    /// Connects to `endpoint` for a long stream (a snapshot): only connecting is bounded by
    /// `connect_timeout`; the caller bounds the stream as a whole.
    pub async fn connect_streaming(endpoint: &Endpoint, connect_timeout: Duration) -> Result<Self> {
        Self::connect_with(
            endpoint,
            ConnectOptions::new().with_connect_timeout(connect_timeout),
            connect_timeout,
            None,
        )
        .await
    }

    /// The cluster's revision as of now, bounded by `timeout`: a linearizable read (the leader
    /// confirms it), of a key that never exists, so it costs nothing. What a continuous
    /// archive compares its watch with: a watch that stalls delivers nothing and says nothing.
    pub async fn revision(&mut self, timeout: Duration) -> Result<i64> {
        let read = self.client.get(
            "\0etcd-operator/revision",
            Some(GetOptions::new().with_count_only()),
        );
        let resp = within(Some(timeout), read)
            .await
            .map_err(|source| Error::Read {
                endpoint: "the archived member".into(),
                source,
            })?;
        let header = resp.header().ok_or(Error::Malformed("Range", "a header"))?;
        Ok(header.revision())
    }

    /// A watch of the whole key space from `revision` on (inclusive): what a continuous
    /// archive reads. etcd cancels it at once, with its compaction revision, when `revision`
    /// has been compacted.
    pub async fn watch_all(&mut self, revision: i64) -> Result<etcd_client::WatchStream> {
        let options = etcd_client::WatchOptions::new()
            .with_all_keys()
            .with_start_revision(revision);
        self.client
            .watch(vec![0u8], Some(options))
            .await
            .map_err(|source| Error::Watch { revision, source })
    }

    /// The snapshot of the member behind this connection, as etcd streams it: the database in
    /// chunks, then its sha256 (see [`crate::store::snapshot`]). The stream ends after its
    /// first error.
    pub async fn snapshot(
        &mut self,
    ) -> Result<std::pin::Pin<Box<dyn futures::Stream<Item = Result<Vec<u8>>> + Send>>> {
        Ok(self.snapshot_sized().await?.1)
    }

    /// A snapshot with its size in bytes, known before the body from etcd's first message
    /// (what it carries and what remains of the database, to which etcd appends the sha256 of
    /// it all: [`SNAPSHOT_HASH_LEN`] bytes more).
    pub async fn snapshot_sized(
        &mut self,
    ) -> Result<(
        u64,
        std::pin::Pin<Box<dyn futures::Stream<Item = Result<Vec<u8>>> + Send>>,
    )> {
        let mut stream = self.client.snapshot().await.map_err(Error::Snapshot)?;
        let first = stream.message().await.map_err(Error::Snapshot)?;
        let (size, first) = match first {
            Some(m) => (
                m.remaining_bytes() + (m.blob().len() + SNAPSHOT_HASH_LEN) as u64,
                m.blob().to_vec(),
            ),
            None => (0, Vec::new()),
        };
        let rest = futures::stream::unfold(Some(stream), |state| async move {
            let mut stream = state?;
            match stream.message().await {
                Ok(Some(m)) => Some((Ok(m.blob().to_vec()), Some(stream))),
                Ok(None) => None,
                Err(e) => Some((Err(Error::Snapshot(e)), None)),
            }
        });
        Ok((
            size,
            Box::pin(futures::StreamExt::chain(
                futures::stream::once(async move { Ok(first) }),
                rest,
            )),
        ))
    }

    /// The member list, in etcd's order.
    pub async fn members(&mut self) -> Result<Vec<Member>> {
        let resp = within(self.timeout, self.client.member_list())
            .await
            .map_err(Error::ListMembers)?;
        Ok(resp.members().iter().map(Member::from_etcd).collect())
    }

    /// The member list as of now: a linearizable read first (etcd confirms with the leader that
    /// this member has applied everything committed), then the list, which this member serves
    /// from what it has applied. etcd 3.5 offers the same as `MemberList{linearizable}`, which
    /// etcd-client does not expose; this works on 3.4 too. The key read is one that never
    /// exists, so the read costs nothing.
    pub async fn members_linearizable(&mut self) -> Result<Vec<Member>> {
        let read = self.client.get(
            "\0etcd-operator/observe",
            Some(GetOptions::new().with_count_only()),
        );
        within(self.timeout, read)
            .await
            .map_err(Error::ListMembers)?;
        self.members().await
    }

    /// Adds a learner with `peer_url`; returns it and the member list after the change.
    pub async fn add_learner(&mut self, peer_url: &str) -> Result<(Member, Vec<Member>)> {
        let add = self
            .client
            .member_add([peer_url], Some(MemberAddOptions::new().with_is_learner()));
        let resp = within(self.timeout, add)
            .await
            .map_err(|source| Error::AddLearner {
                peer_url: peer_url.to_string(),
                source,
            })?;
        let added = resp
            .member()
            .ok_or(Error::Malformed("MemberAdd", "the member"))?;
        Ok((
            Member::from_etcd(added),
            resp.member_list().iter().map(Member::from_etcd).collect(),
        ))
    }

    /// Promotes learner `id` to a voter; etcd refuses until it has caught up
    /// ([`Error::is_learner_not_ready`]).
    pub async fn promote(&mut self, id: u64) -> Result<Vec<Member>> {
        let resp = within(self.timeout, self.client.member_promote(id))
            .await
            .map_err(|source| Error::Promote { id, source })?;
        Ok(resp.members().iter().map(Member::from_etcd).collect())
    }

    /// Removes member `id`; returns the member list after the change.
    pub async fn remove(&mut self, id: u64) -> Result<Vec<Member>> {
        let resp = within(self.timeout, self.client.member_remove(id))
            .await
            .map_err(|source| Error::Remove { id, source })?;
        Ok(resp.members().iter().map(Member::from_etcd).collect())
    }

    /// Raises (or, with `active` false, disarms) the NOSPACE alarm of member `id`, as etcd does
    /// itself when a member's database reaches its quota; disarming is how a user recovers after
    /// compacting and defragmenting.
    pub async fn set_nospace_alarm(&mut self, id: u64, active: bool) -> Result<()> {
        let action = if active {
            AlarmAction::Activate
        } else {
            AlarmAction::Deactivate
        };
        let mut options = AlarmOptions::new();
        options.with_member(id);
        let alarm = self.client.alarm(action, AlarmType::Nospace, Some(options));
        within(self.timeout, alarm)
            .await
            .map_err(|source| Error::Alarm { id, source })?;
        Ok(())
    }

    /// Compacts the history up to `revision`, physically: it returns once the member behind
    /// this connection has dropped it from its database. Returns false when `revision` was
    /// already compacted, which is no error: compaction is idempotent, and a crash between
    /// compacting and acting on it is retried from the start.
    pub async fn compact(&mut self, revision: i64) -> Result<bool> {
        let compact = self
            .client
            .compact(revision, Some(CompactionOptions::new().with_physical()));
        match within(self.timeout, compact).await {
            Ok(_) => Ok(true),
            Err(e)
                if e.to_string()
                    .contains("required revision has been compacted") =>
            {
                Ok(false)
            }
            Err(source) => Err(Error::Compact { revision, source }),
        }
    }

    /// Defragments the member behind this connection (etcd defragments only the member
    /// asked), which blocks its reads and writes meanwhile; `endpoint` names it in errors.
    pub async fn defragment(&mut self, endpoint: &str) -> Result<()> {
        within(self.timeout, self.client.defragment())
            .await
            .map_err(|source| Error::Defragment {
                endpoint: endpoint.to_string(),
                source,
            })?;
        Ok(())
    }

    /// Hands leadership to voter `id`. etcd only accepts this from the current leader, so the
    /// connection must go to the leader's endpoint alone.
    pub async fn move_leader(&mut self, id: u64) -> Result<()> {
        within(self.timeout, self.client.move_leader(id))
            .await
            .map_err(|source| Error::MoveLeader { id, source })?;
        Ok(())
    }
}

/// The status of the one member behind `endpoint`, over a connection of its own, so the answer
/// is that member's and not whichever member a balanced channel picked.
pub async fn status(endpoint: &Endpoint, timeout: Duration) -> Result<Status> {
    let mut etcd = Etcd::connect(endpoint, timeout).await?;
    let asked = etcd.client.status();
    let resp = within(etcd.timeout, asked)
        .await
        .map_err(|source| Error::Status {
            endpoint: endpoint.url.clone(),
            source,
        })?;
    let header = resp
        .header()
        .ok_or(Error::Malformed("Status", "a header"))?;
    Ok(Status {
        member_id: header.member_id(),
        cluster_id: header.cluster_id(),
        leader: resp.leader(),
        version: resp.version().to_string(),
        db_size: resp.db_size(),
        db_size_in_use: resp.raft_used_db_size(),
        raft_index: resp.raft_index(),
        raft_term: resp.raft_term(),
        revision: header.revision(),
        raft_applied_index: resp.raft_applied_index(),
        is_learner: resp.is_learner(),
        errors: resp.errors().to_vec(),
    })
}

/// A linearizable read through `endpoint` (a Service's address: whichever member it leads to),
/// over a connection of its own. Returns the ID of the cluster that answered, so that an
/// address that still leads to another cluster's member (a Service address reused before every
/// proxy caught up) is told apart. The key read never exists, so the read costs nothing.
pub async fn linearizable_read(endpoint: &Endpoint, timeout: Duration) -> Result<u64> {
    let mut etcd = Etcd::connect(endpoint, timeout).await?;
    let read = etcd.client.get(
        "\0etcd-operator/serve",
        Some(GetOptions::new().with_count_only()),
    );
    let resp = within(etcd.timeout, read)
        .await
        .map_err(|source| Error::Read {
            endpoint: endpoint.url.clone(),
            source,
        })?;
    let header = resp.header().ok_or(Error::Malformed("Range", "a header"))?;
    Ok(header.cluster_id())
}

/// The member list read linearizably from the first of `endpoints` that answers, each over a
/// connection of its own; `None` when none answers. A membership call that failed may have been
/// applied all the same (it committed and its answer was lost to a timeout or a cut
/// connection), and the member it went through may be the one that stopped answering: reading
/// the list back elsewhere settles which.
pub async fn members_from(endpoints: &[Endpoint], timeout: Duration) -> Option<Vec<Member>> {
    for endpoint in endpoints {
        let Ok(mut etcd) = Etcd::connect(endpoint, timeout).await else {
            continue;
        };
        if let Ok(members) = etcd.members_linearizable().await {
            return Some(members);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(peer: &str) -> Member {
        Member {
            id: 1,
            name: String::new(),
            peer_urls: vec![peer.into()],
            client_urls: vec![],
            is_learner: true,
        }
    }

    #[test]
    fn host_label_is_the_member_name() {
        assert_eq!(
            member("http://ex-abc12.ex.default.svc:2380").host_label(),
            Some("ex-abc12")
        );
        assert_eq!(member("https://m1:2380").host_label(), Some("m1"));
        assert_eq!(member("http://127.0.0.1:2380").host_label(), Some("127"));
        assert_eq!(
            Member {
                peer_urls: vec![],
                ..member("x")
            }
            .host_label(),
            None
        );
    }
}
