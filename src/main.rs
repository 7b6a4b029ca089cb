#![forbid(unsafe_code)]

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::time::Duration;

use etcd_operator::kube::apiserver;
use etcd_operator::{
    api, backup, cluster, http, leader, metrics, reference, report, restore, seed, store,
};

/// Freed memory goes back to the system (Cargo.toml says why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Kubernetes operator for etcd clusters (etcd.database.coreos.com/v1beta2).
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers.
    Run(Box<RunArgs>),
    /// EtcdBackup helpers for the operator's own image (no kubectl image is needed).
    Backup {
        #[command(subcommand)]
        command: BackupCommand,
    },
    /// Whether this pod may open a TCP connection to ADDRESS (`host:port`): exits 0 if it
    /// can, 1 if not within --timeout seconds. For checking a cluster's NetworkPolicy from a
    /// pod of the operator's image (`kubectl run ... -- reach example-client:2379`).
    Reach {
        /// `host:port`.
        address: String,
        /// Seconds to wait for the connection.
        #[arg(long, default_value_t = 3)]
        timeout: u64,
    },
    /// Print the CustomResourceDefinitions of EtcdCluster, EtcdBackup and EtcdRestore as YAML.
    Crd {
        /// Write one file per kind into this directory instead of printing them.
        #[arg(long)]
        out_dir: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum BackupCommand {
    /// Create this tick's EtcdBackup of a schedule (run by a CronJob; idempotent per tick), then
    /// delete the schedule's oldest EtcdBackups beyond --keep.
    Create(Box<CreateArgs>),
}

#[derive(clap::Args)]
struct CreateArgs {
    /// The schedule's name: a label on every EtcdBackup it creates.
    #[arg(long)]
    schedule: String,
    /// The EtcdCluster to back up.
    #[arg(long)]
    cluster: String,
    /// Namespace of the cluster and of the EtcdBackups.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// S3, ABS or GCS.
    #[arg(long, default_value = "S3")]
    storage_type: String,
    /// `<bucket>/<key prefix>`; each run writes `<prefix>_<tick as 2006-01-02-15:04:05>`.
    #[arg(long)]
    path_prefix: String,
    /// The storage Secret, in the coreos format of the storage type.
    #[arg(long)]
    secret: Option<String>,
    /// S3: the endpoint of an S3-compatible server.
    #[arg(long)]
    endpoint: Option<String>,
    /// S3: bucket in the path.
    #[arg(long)]
    force_path_style: bool,
    /// Bounds one snapshot (0: 60 s).
    #[arg(long, default_value_t = 0)]
    timeout_in_second: i64,
    /// EtcdBackup objects of this schedule to keep (0: all).
    #[arg(long, default_value_t = 0)]
    keep: usize,
    /// Stored snapshots of this schedule to keep, newest by tick (0: all).
    #[arg(long, default_value_t = 0)]
    keep_snapshots: usize,
    /// The Job's name (`<cronjob>-<minutes>`), from the downward API; names the EtcdBackup.
    #[arg(long, env = "JOB_NAME")]
    job_name: Option<String>,
    /// Compress each snapshot: `zstd`.
    #[arg(long)]
    compression: Option<String>,
    /// zstd's level, 1 (fastest) to 19 (smallest); 3 when unset.
    #[arg(long)]
    compression_level: Option<i32>,
    /// S3: server-side encryption, SSE-S3, SSE-KMS, DSSE-KMS or SSE-C (the key in the
    /// --secret's sse-customer-key).
    #[arg(long)]
    s3_encryption: Option<String>,
    /// S3, SSE-KMS or DSSE-KMS: the KMS key (ID, ARN or alias).
    #[arg(long)]
    s3_kms_key_id: Option<String>,
    /// S3, SSE-KMS or DSSE-KMS: use an S3 Bucket Key.
    #[arg(long)]
    s3_bucket_key: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Watch only these namespaces (comma-separated); the default is every namespace.
    #[arg(long, env = "WATCH_NAMESPACE", value_delimiter = ',')]
    namespace: Vec<String>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_bind_address: std::net::SocketAddr,
    /// Compete for a Lease so that only one replica acts.
    #[arg(long, env = "LEADER_ELECT")]
    leader_elect: bool,
    /// Namespace of the Lease (the operator's own).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    leader_election_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "etcd-operator")]
    leader_election_id: String,
    /// Seconds a leader's lock stays valid after its last renewal.
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// Seconds before expiry the leader renews; half of it is the clock skew tolerated between
    /// nodes.
    #[arg(long, default_value_t = 5)]
    lease_grace: u64,
    /// This replica's identity in the Lease (the pod name in a Deployment).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Log filter, in RUST_LOG syntax (RUST_LOG wins when set).
    #[arg(long, env = "LOG_LEVEL", default_value = "info,kube=warn")]
    log_level: String,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// The operator's own image, whose `etcd-gate` holds a new member's etcd back until the
    /// member is added (the chart sets it). Without it, members are added before their pods
    /// exist, and each addition waits out cluster DNS's negative cache.
    #[arg(long, env = "MEMBER_GATE_IMAGE")]
    member_gate_image: Option<String>,
    /// Seconds a member may stay unhealthy while its pod runs (crash-looping, stuck Pending, an
    /// alarm raised) before it is removed and replaced, when quorum allows.
    #[arg(long, env = "REPLACE_UNHEALTHY_AFTER", default_value_t = 300)]
    replace_unhealthy_after: u64,
    /// Seconds silent members are given (a container restarting) before the cluster is
    /// reported as having lost quorum.
    #[arg(long, env = "QUORUM_LOSS_GRACE", default_value_t = 30)]
    quorum_loss_grace: u64,
    /// Seconds a member's node may be not Ready (its kubelet silent: the node dead or cut off)
    /// while the member does not answer, before the member is removed and replaced on another
    /// node, when quorum allows. Members with volumes wait for their node. 0 turns it off, and
    /// Nodes are then not read at all (namespaced installs have no right to).
    #[arg(long, env = "NODE_LOSS_GRACE", default_value_t = 30)]
    node_loss_grace: u64,
    /// Seconds a member with a volume may wait for its lost node (counted as for
    /// --node-loss-grace, and never less than it) before its data is given up on: the member is
    /// removed and replaced on another node with a new claim, and the old claim deleted. 0
    /// (the default): members with volumes wait for their node, however long it takes.
    #[arg(long, env = "VOLUME_LOSS_AFTER", default_value_t = 0)]
    volume_loss_after: u64,
    /// Install or update this version's CRDs at start (Helm never upgrades CRDs), unless a
    /// newer operator wrote them; needs the right to get, create and patch them.
    #[arg(long, env = "INSTALL_CRDS")]
    install_crds: bool,
    /// Where etcd pods reach this operator's snapshot server (`https://IP:port`, the port of
    /// --snapshot-bind-address), from which a restore's seed member fetches its snapshot over
    /// TLS. The chart sets it to the pod's IP; without it, restores wait with a condition that
    /// says so.
    #[arg(long, env = "SNAPSHOT_URL")]
    snapshot_url: Option<String>,
    /// Where the snapshot server listens (TLS, with a certificate for --snapshot-url's IP
    /// signed by a CA this process makes at start).
    #[arg(long, env = "SNAPSHOT_BIND_ADDRESS", default_value = "0.0.0.0:8443")]
    snapshot_bind_address: std::net::SocketAddr,
    /// Seconds any single request to the Kubernetes API may take (watches excepted).
    #[arg(long, default_value_t = 20)]
    request_timeout: u64,
    /// API requests in flight at once (watches and the leader Lease apart); the others wait
    /// their turn. Each in flight holds a connection to the API server (HTTP/1.1): 10,000
    /// clusters starting together opened 3,209, and the API server stopped answering.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_requests: u16,
    /// Namespaces (`*`: all) whose EtcdBackups and EtcdRestores may use this operator's own
    /// cloud identity (its pod's environment: IRSA, workload identity) when their S3 or GCS
    /// section names no Secret. None by default: such a backup fails, naming the field.
    #[arg(long, env = "AMBIENT_CREDENTIALS_NAMESPACES", value_delimiter = ',')]
    ambient_credentials_namespaces: Vec<String>,
    /// Give every EtcdCluster a NetworkPolicy (unless its spec.networkPolicy.enabled says
    /// otherwise): peers only from its members, clients from those it lists.
    #[arg(long, env = "NETWORK_POLICIES")]
    network_policies: bool,
    /// Namespaces from which members' metrics port may be scraped under their NetworkPolicy;
    /// none: from anyone.
    #[arg(long, value_delimiter = ',')]
    network_policy_metrics_namespaces: Vec<String>,
    /// This operator's pod labels (`key=value`, comma-separated), by which the NetworkPolicies
    /// let it reach the members' client port when clients are listed.
    #[arg(long, value_delimiter = ',')]
    operator_pod_labels: Vec<String>,
    /// Address ranges (`10.0.0.0/8`, `fd00::/8`; comma-separated) beyond a tenant's own
    /// namespace that etcd client URLs in specs may reach (an etcd on VMs that a cluster joins
    /// or backs up). None by default: a spec reaches only its own namespace's Services and
    /// pods. Loopback, link-local and the API server are refused whatever is listed.
    #[arg(long, env = "ALLOWED_EXTERNAL_CIDRS", value_delimiter = ',')]
    allowed_external_cidrs: Vec<String>,
    /// Snapshots streamed at once (backups, and a restore's verification and safety
    /// snapshot), across every namespace; the others wait their turn. One namespace holds at
    /// most all but one, and a freed slot goes to the waiting namespace that holds the fewest.
    #[arg(long, default_value_t = store::slots::DEFAULT)]
    max_concurrent_snapshots: usize,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run(args) => {
            // Crash points armed by FAILPOINTS (src/crash.rs), in builds that have them.
            #[cfg(feature = "failpoints")]
            let _crash_points = fail::FailScenario::setup();
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(run(*args))?;
        }
        Command::Backup {
            command: BackupCommand::Create(args),
        } => {
            init_logs("info,kube=warn", LogFormat::Text)?;
            let storage_type: api::StorageType =
                serde_json::from_value(serde_json::Value::String(args.storage_type.clone()))
                    .with_context(|| {
                        format!("--storage-type {}: not S3, ABS or GCS", args.storage_type)
                    })?;
            let compression = backup::schedule::compression_of(
                args.compression.as_deref(),
                args.compression_level,
            )?;
            let encryption = backup::schedule::encryption_of(
                args.s3_encryption.as_deref(),
                args.s3_kms_key_id,
                args.s3_bucket_key,
            )?;
            let request = backup::schedule::Request {
                namespace: args.namespace,
                schedule: args.schedule,
                cluster: args.cluster,
                storage_type,
                path_prefix: args.path_prefix,
                secret: args.secret.filter(|s| !s.is_empty()),
                endpoint: args.endpoint.filter(|s| !s.is_empty()),
                force_path_style: args.force_path_style,
                timeout_in_second: args.timeout_in_second,
                keep: args.keep,
                keep_snapshots: args.keep_snapshots,
                job: args.job_name.filter(|s| !s.is_empty()),
                compression,
                encryption,
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(async {
                let client = kube::Client::try_default()
                    .await
                    .context("connecting to Kubernetes")?;
                backup::schedule::run(client, &request)
                    .await
                    .context("creating the scheduled EtcdBackup")
            })?;
        }
        Command::Reach { address, timeout } => reach(&address, Duration::from_secs(timeout))?,
        Command::Crd { out_dir: None } => {
            let yaml = api::crds_yaml().context("serializing the CRDs")?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .context("writing the CRDs")?;
        }
        Command::Crd { out_dir: Some(dir) } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for crd in api::crds() {
                let path = dir.join(api::crd_file_name(&crd));
                let yaml = api::crd_yaml(&crd).context("serializing a CRD")?;
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(())
}

/// `etcd-operator reach`: exits 1 unless a TCP connection to `address` opens within `timeout`.
fn reach(address: &str, timeout: Duration) -> anyhow::Result<()> {
    let reached = std::net::ToSocketAddrs::to_socket_addrs(address)
        .with_context(|| format!("resolving {address}"))?
        .any(|a| std::net::TcpStream::connect_timeout(&a, timeout).is_ok());
    println!(
        "{address}: {}",
        if reached { "reached" } else { "not reached" }
    );
    if !reached {
        std::process::exit(1);
    }
    Ok(())
}

fn init_logs(level: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .context("parsing --log-level")?;
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    Ok(())
}

/// A client whose every request is counted in `etcd_operator_api_requests_total`, so that what
/// the operator costs the API server is measured by the operator itself. Its connections go
/// to the API servers' own addresses when the Service refuses them ([`apiserver`]). The stack
/// is kube's own (`ClientBuilder::try_from`) with that connector in place of its HTTP one, and
/// without the proxy settings, which an in-cluster operator does not use.
fn counted_client(
    config: kube::Config,
    metrics: &std::sync::Arc<metrics::Metrics>,
    apiservers: &apiserver::Addresses,
    limit: Option<usize>,
) -> anyhow::Result<kube::Client> {
    use kube::client::ConfigExt;
    use tower::ServiceExt;
    let metrics = metrics.clone();
    // Out of a cluster (a kubeconfig's server, perhaps with exec credentials) kube's own
    // builder does it all; the direct route is for the Service's address only.
    let in_cluster = std::env::var("KUBERNETES_SERVICE_HOST")
        .is_ok_and(|host| config.cluster_url.host() == Some(host.as_str()));
    let count =
        tower::util::MapRequestLayer::new(move |req: hyper::Request<kube::client::Body>| {
            metrics.api_request(metrics::request_labels(
                req.method().as_str(),
                req.uri().path(),
                req.uri().query(),
            ));
            req
        });
    let limit = limit.map(tower::limit::ConcurrencyLimitLayer::new);
    if !in_cluster {
        let builder = kube::client::ClientBuilder::try_from(config)
            .context("connecting to Kubernetes")?
            .with_layer(&count);
        return Ok(match &limit {
            Some(limit) => builder.with_layer(limit).build(),
            None => builder.build(),
        });
    }
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Only fails when another thread installed one first, which is as good.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let tcp = apiserver::Connector::new(apiservers.clone(), Duration::from_secs(3));
    let tls = config
        .rustls_https_connector_with_connector(tcp)
        .context("connecting to Kubernetes")?;
    let mut connector = hyper_timeout::TimeoutConnector::new(tls);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .option_layer(limit)
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().context("the API server credentials")?)
        .layer(
            config
                .extra_headers_layer()
                .context("the API request headers")?,
        )
        .layer(count)
        .map_err(tower::BoxError::from)
        .service(http)
        .map_response(|res| {
            res.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(
                    body,
                    tower::BoxError::from,
                )) as Box<kube::client::DynBody>
            })
        })
        .boxed();
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace.clone()).build())
}

/// `config` with every request bounded by `timeout`.
fn bounded(mut config: kube::Config, timeout: Duration) -> kube::Config {
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    config.connect_timeout = Some(timeout);
    config.reset_reader_on_write = true;
    config
}

/// Leadership by a Lease when asked for, else always leading. The Lease gets a fresh suffix
/// per process, so a container restarted after a crash never mistakes its predecessor's lock
/// for its own.
async fn leadership(
    args: &RunArgs,
    instance: &str,
    client: &kube::Client,
    watch_client: &kube::Client,
) -> anyhow::Result<leader::Leadership> {
    if !args.leader_elect {
        return Ok(leader::Leadership::always());
    }
    let identity = format!("{instance}_{}", uuid::Uuid::new_v4().simple());
    Ok(leader::Leadership::elect(
        client.clone(),
        watch_client.clone(),
        leader::Settings {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_id.clone(),
            identity,
            duration: Duration::from_secs(args.lease_duration),
            grace: Duration::from_secs(args.lease_grace),
        },
    )
    .await?)
}

/// What every cluster task shares.
fn cluster_context(
    args: &RunArgs,
    client: kube::Client,
    recorder: kube::runtime::events::Recorder,
    metrics: std::sync::Arc<metrics::Metrics>,
    sources: std::sync::Arc<seed::Sources>,
    snapshot: Option<seed::SnapshotServer>,
) -> cluster::task::Context {
    cluster::task::Context {
        client,
        events: report::Reporter::new(recorder, "Reconcile"),
        metrics,
        gate_image: args.member_gate_image.clone().filter(|i| !i.is_empty()),
        snapshot,
        caches: Default::default(),
        sources,
        tasks: Default::default(),
        network: cluster::network_policy::PolicySettings {
            enabled: args.network_policies,
            operator_namespace: args.leader_election_namespace.clone(),
            operator_labels: args
                .operator_pod_labels
                .iter()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            metrics_namespaces: args.network_policy_metrics_namespaces.clone(),
        },
        timings: cluster::task::Timings {
            replace_unhealthy_after: Duration::from_secs(args.replace_unhealthy_after),
            quorum_grace: Duration::from_secs(args.quorum_loss_grace),
            node_loss_grace: Duration::from_secs(args.node_loss_grace),
            volume_loss_after: Duration::from_secs(args.volume_loss_after),
        },
    }
}

/// The CRDs installed or updated; a failure is logged and the operator goes on with the CRDs
/// the cluster has (a crash loop would look after no cluster at all).
async fn install_crds(client: &kube::Client) {
    use etcd_operator::kube::crds::{Outcome, install};
    match install(client).await {
        Ok(outcomes) => {
            for o in outcomes {
                match o {
                    Outcome::Applied(name) => {
                        tracing::info!(crd = name, "CRD installed or updated")
                    }
                    Outcome::Newer(name, version) => tracing::warn!(
                        crd = name,
                        version,
                        "CRD left as it is: operator {version} wrote it, newer than this one"
                    ),
                }
            }
        }
        Err(e) => tracing::error!(
            "installing the CRDs (--install-crds) failed, going on with the ones the cluster \
             has: {e}"
        ),
    }
}

/// The operator's clients. Watches stay open for minutes and are guarded by the watcher's
/// own idle timeout; every other request is bounded, so a hung API server connection never
/// holds a cluster's task, and at most `--max-concurrent-requests` are in flight. The leader
/// Lease has a client of its own: its renewal never waits behind the clusters' requests.
/// All fall back on the API servers' own addresses, which a task follows.
struct Clients {
    client: kube::Client,
    watch: kube::Client,
    lease: kube::Client,
}

async fn clients(
    args: &RunArgs,
    metrics: &std::sync::Arc<metrics::Metrics>,
) -> anyhow::Result<Clients> {
    let config = kube::Config::infer()
        .await
        .context("finding the Kubernetes configuration")?;
    reference::kube::set_api_server(config.cluster_url.host());
    let apiservers = apiserver::Addresses::default();
    let watch = counted_client(config.clone(), metrics, &apiservers, None)?;
    let config = bounded(config, Duration::from_secs(args.request_timeout));
    let lease = counted_client(config.clone(), metrics, &apiservers, None)?;
    let limit = Some(usize::from(args.max_concurrent_requests));
    let client = counted_client(config, metrics, &apiservers, limit)?;
    tokio::spawn(apiserver::follow(
        client.clone(),
        apiservers,
        Duration::from_secs(30),
    ));
    Ok(Clients {
        client,
        watch,
        lease,
    })
}

/// The TLS snapshot server, with a CA of this process's own, when `--snapshot-url` is set; what
/// the seeds it serves are told.
async fn serve_snapshots(
    args: &RunArgs,
    snapshots: std::sync::Arc<restore::serve::Snapshots>,
) -> anyhow::Result<Option<seed::SnapshotServer>> {
    let Some(url) = args.snapshot_url.as_deref().filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let identity = restore::identity::Identity::new(url, time::OffsetDateTime::now_utc())
        .map_err(|e| anyhow::anyhow!(e))?;
    let (_, serve) =
        http::serve_snapshots(args.snapshot_bind_address, snapshots, &identity).await?;
    tokio::spawn(serve);
    Ok(Some(identity.server))
}

/// What specs may reach beyond their namespace (`--allowed-external-cidrs`); a range that does
/// not parse stops the start, naming it.
fn tenancy(allowed_external_cidrs: &[String]) -> anyhow::Result<reference::Policy> {
    let external = (allowed_external_cidrs.iter())
        .filter(|c| !c.trim().is_empty())
        .map(|c| reference::Cidr::parse(c.trim()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--allowed-external-cidrs: {e}"))?;
    Ok(reference::Policy { external })
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logs(&args.log_level, args.log_format)?;
    store::storage::allow_ambient(args.ambient_credentials_namespaces.clone());
    store::slots::set(args.max_concurrent_snapshots);
    reference::set_policy(tenancy(&args.allowed_external_cidrs)?);
    let metrics = std::sync::Arc::new(metrics::Metrics::new());
    let Clients {
        client,
        watch: watch_client,
        lease,
    } = clients(&args, &metrics).await?;
    if args.install_crds {
        install_crds(&client).await;
    }
    let sources = std::sync::Arc::new(seed::Sources::default());
    let snapshots = std::sync::Arc::new(restore::serve::Snapshots {
        client: client.clone(),
        sources: sources.clone(),
    });
    let (_, serve) = http::serve(args.metrics_bind_address, metrics.clone()).await?;
    tokio::spawn(serve);
    let snapshot = serve_snapshots(&args, snapshots).await?;
    // The pod name names the replica in Events.
    let instance = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "etcd-operator".into());
    let leadership = leadership(&args, &instance, &lease, &watch_client).await?;
    let reporter = kube::runtime::events::Reporter {
        controller: "etcd-operator".into(),
        instance: Some(instance),
    };
    let recorder = kube::runtime::events::Recorder::new(client.clone(), reporter);
    let backups = std::sync::Arc::new(backup::controller::Context {
        client: client.clone(),
        events: report::Reporter::new(recorder.clone(), "Backup"),
        metrics: metrics.clone(),
        leading: leadership.subscribe(),
        archives: backup::archive::Archives::default(),
    });
    let restores = std::sync::Arc::new(restore::controller::Context {
        client: client.clone(),
        events: report::Reporter::new(recorder.clone(), "Restore"),
    });
    let ctx = std::sync::Arc::new(cluster_context(
        &args, client, recorder, metrics, sources, snapshot,
    ));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let backup_controller = backup::controller::run(
        backups,
        watch_client.clone(),
        args.namespace.clone(),
        leadership.subscribe(),
    );
    let restore_controller = restore::controller::run(
        restores,
        watch_client.clone(),
        args.namespace.clone(),
        leadership.subscribe(),
    );
    let supervisor =
        cluster::supervisor::run(ctx, watch_client, args.namespace, leadership.subscribe());
    let result = tokio::select! {
        _ = supervisor => Err(anyhow::anyhow!("the EtcdCluster watch ended")),
        _ = backup_controller => Err(anyhow::anyhow!("the EtcdBackup controller ended")),
        _ = restore_controller => Err(anyhow::anyhow!("the EtcdRestore controller ended")),
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = term.recv() => Ok(()),
    };
    // The cluster tasks are gone with the supervisor; a standby may take over now.
    tracing::info!("shutting down");
    leadership.release(Duration::from_secs(3)).await;
    result
}
