use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};
use etcd_operator::{api, cluster};

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
    Run {
        /// Watch only this namespace (the default is every namespace).
        #[arg(long, env = "WATCH_NAMESPACE")]
        namespace: Option<String>,
    },
    /// Print the CustomResourceDefinitions of EtcdCluster, EtcdBackup and EtcdRestore as YAML.
    Crd {
        /// Write one file per kind into this directory instead of printing them.
        #[arg(long)]
        out_dir: Option<std::path::PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run { namespace } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(run(namespace))?;
        }
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

async fn run(namespace: Option<String>) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes")?;
    let reporter = kube::runtime::events::Reporter {
        controller: "etcd-operator".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let recorder = kube::runtime::events::Recorder::new(client.clone(), reporter);
    let ctx = std::sync::Arc::new(cluster::task::Context { client, recorder });
    tokio::select! {
        _ = cluster::supervisor::run(ctx, namespace) => anyhow::bail!("the EtcdCluster watch ended"),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
