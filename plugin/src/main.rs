//! `kubectl etcd` (a kubectl plugin: kubectl runs `kubectl-etcd` from the PATH): a cluster's
//! state at a glance, and a backup now, with the user's own kubeconfig and rights.

mod backup;
mod status;

use anyhow::Context as _;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "kubectl-etcd",
    bin_name = "kubectl etcd",
    version,
    about = "Look at and act on the etcd clusters of etcd-operator",
    long_about = "Look at and act on the etcd clusters of etcd-operator (EtcdCluster, \
                  EtcdBackup), with your kubeconfig's context and rights."
)]
struct Cli {
    /// Namespace of the EtcdCluster; the kubeconfig context's when unset.
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Phase and conditions, each member (role, version, health, raft index and lag, database
    /// size, pod, node, zone), the leader, the last backup and its age, and recent Events.
    Status {
        /// The EtcdCluster.
        name: String,
        /// `text` for people, `json` or `yaml` for scripts.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Back the cluster up now: an EtcdBackup with the storage settings of the cluster's newest
    /// succeeded EtcdBackup (or the flags), waited for with a line per step.
    Backup(backup::Args),
    /// Print a completion script: `source <(kubectl-etcd completion bash)`.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// How `status` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A summary for people.
    Text,
    /// The report as JSON.
    Json,
    /// The report as YAML.
    Yaml,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Completion { shell } = cli.command {
        let mut command = Cli::command();
        clap_complete::generate(shell, &mut command, "kubectl-etcd", &mut std::io::stdout());
        return Ok(());
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async {
        let client = kube::Client::try_default()
            .await
            .context("connecting to Kubernetes with the kubeconfig")?;
        let ns = cli
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        match cli.command {
            Command::Status { name, output } => status::run(client, &ns, &name, output).await,
            Command::Backup(args) => backup::run(client, &ns, args).await,
            Command::Completion { .. } => Ok(()),
        }
    })
}

/// A Kubernetes error, said with what was asked and, when refused, the right that is missing.
pub fn explain(e: kube::Error, verb: &str, what: &str, ns: &str) -> anyhow::Error {
    match &e {
        kube::Error::Api(s) if s.code == 404 => {
            anyhow::anyhow!("{what} not found in namespace {ns}")
        }
        kube::Error::Api(s) if s.code == 403 => anyhow::anyhow!(
            "you may not {verb} {what} in namespace {ns} (missing right: {verb} on that \
             resource): {}",
            s.message
        ),
        _ => anyhow::Error::new(e).context(format!("{verb} {what} in namespace {ns}")),
    }
}
