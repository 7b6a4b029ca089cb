use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};
use etcd_operator::api;

/// A Kubernetes operator for etcd clusters (etcd.database.coreos.com/v1beta2).
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions of EtcdCluster, EtcdBackup and EtcdRestore as YAML.
    Crd {
        /// Write one file per kind into this directory instead of printing them.
        #[arg(long)]
        out_dir: Option<std::path::PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
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
