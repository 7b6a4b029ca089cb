//! `kubectl etcd` (a kubectl plugin: kubectl runs `kubectl-etcd` from the PATH): a cluster's
//! state at a glance, and a backup now, with the user's own kubeconfig and rights.

mod backup;
mod defrag;
mod etcdctl;
mod follow;
mod report;
mod restore;
mod status;

use anyhow::Context as _;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use etcd_operator::api::EtcdCluster;
use kube::Client;

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
    /// Restore the cluster from a backup (an EtcdBackup, or a path in its store), after you
    /// type the cluster's name (or --yes); waited for with a line per step.
    Restore(restore::Args),
    /// Run etcdctl against the cluster (through its client Service) from a short-lived pod in
    /// its namespace, with the members' image and, with TLS, the client certificate mounted:
    /// `kubectl etcd etcdctl NAME -- member list -w table`.
    Etcdctl {
        /// The EtcdCluster.
        name: String,
        /// etcdctl's arguments, after `--`.
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
    /// Defragment every voter now, through the operator: one at a time, followers first, the
    /// leader last after leadership moved; each member printed as it is done.
    Defrag {
        /// The EtcdCluster.
        name: String,
        /// Seconds to wait for every voter.
        #[arg(long, default_value_t = 1800)]
        timeout: u64,
    },
    /// Move the leadership to member MEMBER (its pod's name), through etcdctl as above.
    MoveLeader {
        /// The EtcdCluster.
        name: String,
        /// The member to lead.
        member: String,
    },
    /// Write a tarball for a bug report: the cluster's objects, Events, member and operator
    /// logs; Secrets by name and key only, their values redacted.
    Report(report::Args),
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
            Command::Restore(args) => restore::run(client, &ns, args).await,
            Command::Report(args) => report::run(client, &ns, args).await,
            Command::Etcdctl { name, args } => {
                let code =
                    etcdctl::run(client, &ns, &name, &args, etcdctl::Endpoints::Service).await?;
                exit_with(code)
            }
            Command::Defrag { name, timeout } => {
                defrag::run(client, &ns, &name, std::time::Duration::from_secs(timeout)).await
            }
            Command::MoveLeader { name, member } => move_leader(client, &ns, &name, &member).await,
            Command::Completion { .. } => Ok(()),
        }
    })
}

/// etcd accepts a leadership transfer only from the leader, which etcdctl finds among every
/// member's endpoint; the target is named by its ID.
async fn move_leader(client: Client, ns: &str, name: &str, member: &str) -> anyhow::Result<()> {
    let clusters: kube::Api<EtcdCluster> = kube::Api::namespaced(client.clone(), ns);
    let cluster = clusters
        .get(name)
        .await
        .map_err(|e| explain(e, "get", &format!("EtcdCluster {name}"), ns))?;
    let id = etcdctl::member_id(&cluster, member)?;
    let args = vec!["move-leader".to_string(), id];
    let code = etcdctl::run(client, ns, name, &args, etcdctl::Endpoints::Members).await?;
    exit_with(code)
}

/// Ends the process with etcdctl's exit code when it failed.
fn exit_with(code: i32) -> anyhow::Result<()> {
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn completion_scripts_know_every_command_and_flag() {
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kubectl-etcd", &mut script);
            let script = String::from_utf8(script).unwrap();
            for word in [
                "status",
                "backup",
                "restore",
                "etcdctl",
                "defrag",
                "move-leader",
                "report",
                "--to-revision",
                "--no-wait",
            ] {
                assert!(script.contains(word), "{shell}: {word} missing");
            }
        }
        // Parsing agrees with the help: restore's point is a revision or a time, not both.
        assert!(
            Cli::try_parse_from([
                "kubectl-etcd",
                "restore",
                "x",
                "--from",
                "b",
                "--to-revision",
                "5",
                "--to-time",
                "2026-11-29T00:00:00Z",
            ])
            .is_err()
        );
    }

    #[test]
    fn errors_name_the_object_the_namespace_and_the_missing_right() {
        let e = explain(
            refused(
                403,
                "etcdbackups.etcd.database.coreos.com is forbidden: User \"dev\" cannot create \
                 resource \"etcdbackups\"",
            ),
            "create",
            "EtcdBackup now",
            "team-a",
        )
        .to_string();
        assert!(
            e.starts_with("you may not create EtcdBackup now in namespace team-a")
                && e.contains("missing right: create")
                && e.contains("cannot create resource \"etcdbackups\""),
            "{e}"
        );
        let e = explain(
            refused(404, "not found"),
            "get",
            "EtcdCluster example",
            "team-a",
        );
        assert_eq!(
            e.to_string(),
            "EtcdCluster example not found in namespace team-a"
        );
        let e = explain(
            refused(500, "etcdserver: leader changed"),
            "get",
            "pods",
            "team-a",
        );
        assert!(
            format!("{e:#}").starts_with("get pods in namespace team-a: "),
            "{e:#}"
        );
    }
}
