//! What a standby's replay does to its own etcd: read how far it has replayed (a marker key),
//! and apply the next changes together with the marker's new value, in one transaction that
//! holds only if the marker still says what was read ([`crate::api::MARKER_KEY`]).

use etcd_client::{Compare, CompareOp, DeleteOptions, Txn, TxnOp};

use super::{Error, Etcd, Result, within};

/// One guarded transaction: the changes, and the marker before and after.
pub struct Guarded<'a> {
    /// The marker key.
    pub marker: &'a [u8],
    /// Its value as read: the transaction holds only while it is still this (`None`: absent).
    pub expected: Option<&'a [u8]>,
    /// Each key's new value, or `None` to delete it.
    pub ops: &'a [(Vec<u8>, Option<Vec<u8>>)],
    /// The marker's new value, or `None` to delete it.
    pub after: Option<&'a [u8]>,
}

impl Etcd {
    /// The value of `key`, read linearizably (the leader's, not a lagging member's).
    pub async fn value(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let got = within(self.timeout, self.client.get(key, None))
            .await
            .map_err(|source| Error::Follow {
                what: "reading the standby marker".into(),
                source,
            })?;
        Ok(got.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Applies `g`; returns etcd's revision after it, or `None` when the marker no longer
    /// says what was read (someone else applied these changes, or others): nothing changed.
    pub async fn apply_guarded(&mut self, g: &Guarded<'_>) -> Result<Option<i64>> {
        let compare = match g.expected {
            Some(v) => Compare::value(g.marker, CompareOp::Equal, v),
            None => Compare::create_revision(g.marker, CompareOp::Equal, 0),
        };
        let mut ops: Vec<TxnOp> = g
            .ops
            .iter()
            .map(|(k, v)| match v {
                Some(v) => TxnOp::put(k.clone(), v.clone(), None),
                None => TxnOp::delete(k.clone(), None::<DeleteOptions>),
            })
            .collect();
        ops.push(match g.after {
            Some(v) => TxnOp::put(g.marker, v, None),
            None => TxnOp::delete(g.marker, None::<DeleteOptions>),
        });
        let txn = Txn::new().when([compare]).and_then(ops);
        let answer = within(self.timeout, self.client.txn(txn))
            .await
            .map_err(|source| Error::Follow {
                what: format!("applying {} replayed changes", g.ops.len()),
                source,
            })?;
        let revision = answer.header().map(|h| h.revision()).unwrap_or_default();
        Ok(answer.succeeded().then_some(revision))
    }
}
