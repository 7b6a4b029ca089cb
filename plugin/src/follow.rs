//! Following an object until it ends: one line per new step, printed with the time since the
//! start, for `backup` and `restore`.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::bail;

/// What one look at the object found.
pub enum Step {
    /// Still going.
    Going,
    /// Ended well: the last line to print.
    Done(String),
    /// Ended badly: why.
    Failed(String),
}

/// Looks with `look` every 500 ms until it ends or `timeout` passes (then `what` is named).
pub async fn follow<F, Fut>(what: &str, timeout: Duration, mut look: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<(String, Step)>>,
{
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < timeout {
        let (line, step) = look().await?;
        if line != last {
            println!("[{:6.1}s] {line}", start.elapsed().as_secs_f64());
            last = line;
        }
        match step {
            Step::Done(end) => {
                println!("{end}");
                return Ok(());
            }
            Step::Failed(why) => bail!("{what} failed: {why}"),
            Step::Going => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    bail!(
        "{what} has not ended after {} s; `kubectl get {} -o yaml` says where it is",
        timeout.as_secs(),
        what.to_lowercase().replace(' ', "/")
    )
}

/// A phase and its message as one line.
pub fn line(phase: Option<String>, message: &str) -> String {
    let phase = phase.unwrap_or_else(|| "Pending".into());
    if message.is_empty() {
        phase
    } else {
        format!("{phase}: {message}")
    }
}
