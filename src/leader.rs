//! Leader election over a coordination.k8s.io Lease (kube-lease-manager), with a fence: the
//! replica also watches the Lease and stands down as soon as it cannot show that it still holds
//! an unexpired lock, so a replica cut off from the API server stops acting before another one
//! may take over. The fence watches rather than reads: a replica at rest sends the API server
//! nothing but its renewals (and a watch that reopens every few minutes).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Lease could not be read or created at start-up.
    #[error("setting up the Lease {namespace}/{name}: {source}")]
    Setup {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// Why.
        source: kube_lease_manager::LeaseManagerError,
    },
}

/// Whether setting up the Lease may succeed if tried again: the API server unreachable, busy
/// or failing, or another replica creating the Lease at the same moment. Refusals (no right to
/// the Lease, an invalid name) end the start-up with the error.
fn transient(e: &kube_lease_manager::LeaseManagerError) -> bool {
    use kube_lease_manager::LeaseManagerError as E;
    match e {
        E::KubeError(kube::Error::Api(s)) => s.code >= 500 || s.code == 429 || s.code == 409,
        E::KubeError(_) | E::LeaseAlreadyExists(_) => true,
        _ => false,
    }
}

/// Lease settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace of the Lease (the operator's own).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a lock is valid after its last renewal.
    pub duration: Duration,
    /// How long before expiry the holder renews.
    pub grace: Duration,
}

/// Whether this replica may act, published on a watch channel.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    manager: Option<JoinHandle<kube_lease_manager::Result<LeaseManager>>>,
}

impl Leadership {
    /// No election: this replica always leads.
    pub fn always() -> Self {
        let (tx, leading) = watch::channel(true);
        // The sender lives as long as the process, so `leading` never reports a closed channel.
        let keep = tokio::spawn(async move {
            tx.closed().await;
        });
        Leadership {
            leading,
            tasks: vec![keep],
            manager: None,
        }
    }

    /// Starts competing for the Lease. `watch_client` serves the fence's watch of it (a client
    /// without a response timeout, which would cut a quiet watch).
    pub async fn elect(
        client: Client,
        watch_client: Client,
        settings: Settings,
    ) -> Result<Self, Error> {
        use backon::Retryable;
        let build = || {
            LeaseManagerBuilder::new(client.clone(), &settings.name)
                .with_namespace(&settings.namespace)
                .with_identity(&settings.identity)
                .with_duration(settings.duration.as_secs())
                .with_grace(settings.grace.as_secs())
                .build()
        };
        // A replica started while the API server is away (restarted by its kubelet during an
        // outage, or with its node) waits for it: exiting would put it in its kubelet's
        // crash-loop back-off, up to 5 minutes without a standby after the server is back.
        let manager = build
            .retry(crate::kube::exponential(
                Duration::from_millis(250),
                Duration::from_secs(2),
            ))
            .when(transient)
            .notify(|e, after| {
                warn!(
                    "setting up the Lease {}/{}: {e}; trying again in {after:?}",
                    settings.namespace, settings.name
                )
            })
            .await
            .map_err(|source| Error::Setup {
                namespace: settings.namespace.clone(),
                name: settings.name.clone(),
                source,
            })?;
        drop(client);
        let (held_tx, mut held) = watch::channel(false);
        let manager = tokio::spawn(campaign(manager, held_tx));
        let (tx, leading) = watch::channel(false);
        let leases: Api<Lease> = Api::namespaced(watch_client, &settings.namespace);
        let (seen_tx, mut seen) = watch::channel(None);
        let follow = tokio::spawn(follow(leases, settings.name.clone(), seen_tx));
        let fence = tokio::spawn(async move {
            let mut following = true;
            loop {
                let claims = *held.borrow_and_update();
                let holds = claims && still_holds(seen.borrow_and_update().as_ref(), &settings);
                if *tx.borrow() != holds {
                    info!(
                        identity = %settings.identity,
                        "{}",
                        if holds { "leading" } else { "standing by" }
                    );
                    tx.send_replace(holds);
                }
                tokio::select! {
                    changed = held.changed() => if changed.is_err() { tx.send_replace(false); return },
                    _ = tokio::time::sleep(Duration::from_secs(1)), if claims => {}
                    // Claimed but not yet seen: leading as soon as the watch shows the Lease
                    // taken, not at the next tick (a second or two after an API outage).
                    changed = seen.changed(), if claims && !holds && following => following = changed.is_ok(),
                }
            }
        });
        Ok(Leadership {
            leading,
            tasks: vec![fence, follow],
            manager: Some(manager),
        })
    }

    /// A receiver of the leadership state.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Gives the Lease up (so a standby takes over at once, not after expiry) and waits up to
    /// `within` for that to be written.
    pub async fn release(self, within: Duration) {
        for t in &self.tasks {
            t.abort();
        }
        drop(self.leading);
        // The fence held the manager's receiver; with it gone the manager releases and ends.
        if let Some(manager) = self.manager
            && tokio::time::timeout(within, manager).await.is_err()
        {
            warn!("the Lease was not released in time; a standby takes over when it expires");
        }
    }
}

/// Renews or acquires the Lease, publishing on `held` whether this replica holds it, until
/// every receiver of `held` is gone; then releases it. This is the manager's own `watch()`
/// loop, but a failed API call is retried within 2 s rather than after the manager's backoff,
/// which grows to 30 s: after a 20 s API server outage that alone could keep every replica
/// from renewing for half a minute more. The watches' backoff (up to 4 s with its jitter) cost
/// a chaos run's outage 2.5 s between the API server answering and the Lease taken; one small
/// request a second per replica is nothing to the server.
async fn campaign(
    manager: LeaseManager,
    held: watch::Sender<bool>,
) -> kube_lease_manager::Result<LeaseManager> {
    let mut retries: kube::runtime::watcher::ExponentialBackoff =
        crate::kube::exponential(Duration::from_millis(250), Duration::from_secs(1)).into();
    loop {
        tokio::select! {
            biased;
            _ = held.closed() => break,
            changed = manager.changed() => match changed {
                Ok(holds) => {
                    kube::runtime::utils::Backoff::reset(&mut retries);
                    held.send_replace(holds);
                }
                Err(e) => {
                    warn!("renewing or acquiring the Lease: {e}");
                    let delay = retries.next().unwrap_or(Duration::from_secs(2));
                    tokio::select! {
                        _ = held.closed() => break,
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            },
        }
    }
    manager.release().await?;
    Ok(manager)
}

/// Keeps `seen` at the Lease as the watch last showed it (`None` once deleted).
async fn follow(leases: Api<Lease>, name: String, seen: watch::Sender<Option<Lease>>) {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(leases, config)
        .backoff(crate::kube::watch_backoff())
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Apply(l) | Event::InitApply(l)) => {
                seen.send_replace(Some(l));
            }
            Ok(Event::Delete(_)) => {
                seen.send_replace(None);
            }
            Ok(Event::Init | Event::InitDone) => {}
            Err(e) => warn!("watching the Lease: {e}"),
        }
    }
}

/// Whether `lease`, as last seen, names this replica with a lock that has not expired, less
/// half the grace. The manager renews exactly `grace` before expiry, so a fence at the whole
/// grace stood down at every renewal that had not landed yet, and took leadership away for a
/// second every renewal or two under load (a task aborted mid-action each time); half leaves
/// the renewal that much time to land and still stands down before another replica, at most
/// half the grace of clock skew away, may see the lock expired. A watch that stopped
/// delivering leaves the last renewal seen, which expires in turn.
fn still_holds(lease: Option<&Lease>, settings: &Settings) -> bool {
    let renewed = lease
        .and_then(|l| l.spec.as_ref())
        .filter(|spec| spec.holder_identity.as_deref() == Some(settings.identity.as_str()))
        .and_then(|spec| spec.renew_time.as_ref())
        .map(|t| t.0);
    let valid_for = settings.duration.saturating_sub(settings.grace / 2);
    renewed.is_some_and(|renewed| {
        let age = Timestamp::now().duration_since(renewed);
        age.as_secs_f64() < valid_for.as_secs_f64()
    })
}

/// Runs the future `work` makes while this replica leads: started on gaining leadership,
/// dropped on losing it, made again on regaining it. Returns when `work` ends on its own or
/// `leading` closes.
pub async fn while_leading<F, Fut>(mut leading: watch::Receiver<bool>, what: &str, mut work: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        while !*leading.borrow_and_update() {
            if leading.changed().await.is_err() {
                return;
            }
        }
        let lost = async {
            loop {
                if leading.changed().await.is_err() || !*leading.borrow_and_update() {
                    return;
                }
            }
        };
        tokio::select! {
            _ = work() => return,
            _ = lost => info!("standing by: the {what} stops"),
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;
    use kube_lease_manager::LeaseManagerError as E;

    use super::transient;

    fn api(code: u16) -> E {
        E::KubeError(kube::Error::Api(
            Status::failure("m", "r").with_code(code).boxed(),
        ))
    }

    #[test]
    fn the_lease_is_set_up_again_while_the_api_server_is_away_or_busy_not_when_it_refuses() {
        for e in [
            api(500),
            api(503),
            api(429),
            api(409),
            E::LeaseAlreadyExists("etcd-operator".into()),
            // What a refused connection is to the client (the server stopped).
            E::KubeError(kube::Error::Service(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )))),
        ] {
            assert!(transient(&e), "{e}");
        }
        for e in [
            api(403),
            api(404),
            api(422),
            E::InconsistentState("x".into()),
        ] {
            assert!(!transient(&e), "{e}");
        }
    }
}
