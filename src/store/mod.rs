//! Object storage as the backup and restore controllers use it, owned by neither: both stand
//! on it, and it imports no controller (`hack/import-rules.py`).
//!
//! - [`snapshot`]: one member's snapshot streamed into object storage, verified as it passes
//!   and never held whole in memory;
//! - [`storage`]: the object store of a storage section and its Secret, in coreos's formats;
//! - [`location`]: a storage section read with its Secret;
//! - [`endpoint`]: the member a snapshot is taken from;
//! - [`error`]: why a backup (or the reading of a restore's snapshot) failed;
//! - [`naming`]: periodic names, retention that keeps the right ones, and a schedule anchored
//!   on status;
//! - [`compress`]: snapshots stored compressed with zstd, and read back;
//! - [`chunk`]: the continuous archive's chunks (the changes between full snapshots), and
//!   their replay to a revision or a time;
//! - [`pitr`]: a restore to a revision or a time, planned from the store, and the changes
//!   its seed replays;
//! - [`follow`]: a standby following an archive: the chunks after what it replayed, the
//!   transactions that apply them, and a demoted primary's handover record;
//! - [`slots`]: how many snapshots stream at once, process-wide.

pub mod chunk;
pub mod compress;
pub mod endpoint;
pub mod error;
pub mod follow;
pub mod location;
pub mod naming;
pub mod pitr;
pub mod slots;
pub mod snapshot;
pub mod storage;
