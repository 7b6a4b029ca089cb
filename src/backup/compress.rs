//! zstd for snapshots, chunk by chunk as they stream: a backup may be stored compressed, and
//! whatever reads a stored snapshot back (the restore's verification, the snapshot served to a
//! restore's seed) recognizes a zstd frame by its first four bytes and decompresses it, so
//! that etcd's own trailing hash is always checked on the snapshot itself and the seed always
//! receives what `etcdctl snapshot save` would have written. A bbolt file never starts with
//! those bytes (its first page's ID is 0).

use std::io::Write;

/// The first four bytes of a zstd frame.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// zstd's levels that are worth offering: 1 (fastest) to 19 (smallest).
pub const LEVELS: std::ops::RangeInclusive<i32> = 1..=19;

/// Compresses a stream handed over in chunks.
pub struct Compressor(zstd::stream::write::Encoder<'static, Vec<u8>>);

impl Compressor {
    /// A compressor at `level` (clamped to [`LEVELS`]).
    pub fn new(level: i32) -> std::io::Result<Self> {
        let level = level.clamp(*LEVELS.start(), *LEVELS.end());
        Ok(Compressor(zstd::stream::write::Encoder::new(
            Vec::new(),
            level,
        )?))
    }

    /// Takes the next chunk; returns what is ready of the compressed stream.
    pub fn push(&mut self, chunk: &[u8]) -> std::io::Result<Vec<u8>> {
        self.0.write_all(chunk)?;
        Ok(std::mem::take(self.0.get_mut()))
    }

    /// The end of the compressed stream.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        self.0.finish()
    }
}

enum State {
    /// Fewer than four bytes seen: not known yet.
    Undecided(Vec<u8>),
    /// Not zstd: passed through.
    Plain,
    /// A zstd frame: decompressed.
    Zstd(Box<zstd::stream::write::Decoder<'static, Vec<u8>>>),
}

/// A stored snapshot read back: decompressed if it is a zstd frame, passed through otherwise,
/// decided by its first four bytes.
pub struct Unpack(State);

impl Default for Unpack {
    fn default() -> Self {
        Unpack(State::Undecided(Vec::new()))
    }
}

impl Unpack {
    /// Takes the next chunk of what was stored; returns the next bytes of the snapshot.
    pub fn push(&mut self, chunk: &[u8]) -> std::io::Result<Vec<u8>> {
        if let State::Undecided(seen) = &mut self.0 {
            seen.extend_from_slice(chunk);
            if seen.len() < ZSTD_MAGIC.len() {
                return Ok(Vec::new());
            }
            let seen = std::mem::take(seen);
            if seen[..4] == ZSTD_MAGIC {
                self.0 = State::Zstd(Box::new(zstd::stream::write::Decoder::new(Vec::new())?));
                return self.push(&seen);
            }
            self.0 = State::Plain;
            return Ok(seen);
        }
        match &mut self.0 {
            State::Zstd(d) => {
                d.write_all(chunk)?;
                d.flush()?;
                Ok(std::mem::take(d.get_mut()))
            }
            _ => Ok(chunk.to_vec()),
        }
    }

    /// Whether what was stored is known to be the snapshot itself (four bytes were seen and
    /// they are not zstd's magic).
    pub fn plain(&self) -> bool {
        matches!(self.0, State::Plain)
    }

    /// Whether what was stored is a zstd frame (known once four bytes were seen).
    pub fn compressed(&self) -> bool {
        matches!(self.0, State::Zstd(_))
    }

    /// The end of what was stored: whatever is left (a snapshot shorter than four bytes,
    /// passed through, for the checks that follow to refuse).
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        match self.0 {
            State::Undecided(seen) => Ok(seen),
            State::Plain => Ok(Vec::new()),
            State::Zstd(mut d) => {
                d.flush()?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Something like a snapshot: repetitive, not zeros.
    fn data() -> Vec<u8> {
        (0..200_000u32)
            .flat_map(|i| {
                format!("/registry/pods/default/pod-{}:{{\"uid\":{i}}}", i % 977).into_bytes()
            })
            .collect()
    }

    fn unpack_in(chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut u = Unpack::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(u.push(c).unwrap());
        }
        let compressed = u.compressed();
        out.extend(u.finish().unwrap());
        (out, compressed)
    }

    #[test]
    fn a_compressed_stream_comes_back_whole_in_any_chunking() {
        let raw = data();
        let mut c = Compressor::new(3).unwrap();
        let mut stored = Vec::new();
        for chunk in raw.chunks(32 * 1024) {
            stored.extend(c.push(chunk).unwrap());
        }
        stored.extend(c.finish().unwrap());
        assert_eq!(stored[..4], ZSTD_MAGIC);
        assert!(
            stored.len() * 5 < raw.len(),
            "{} of {}",
            stored.len(),
            raw.len()
        );
        for size in [1, 3, 7, 4096, 1 << 20] {
            let chunks: Vec<&[u8]> = stored.chunks(size).collect();
            let (back, compressed) = unpack_in(&chunks);
            assert!(compressed);
            assert!(back == raw, "chunks of {size}");
        }
    }

    #[test]
    fn a_plain_snapshot_passes_through_and_a_cut_one_comes_back_short() {
        let raw = data();
        let chunks: Vec<&[u8]> = raw.chunks(3).collect();
        let (back, compressed) = unpack_in(&chunks);
        assert!(!compressed && back == raw);
        assert_eq!(unpack_in(&[b"ab"]).0, b"ab");
        let mut c = Compressor::new(3).unwrap();
        let mut stored = c.push(&raw).unwrap();
        stored.extend(c.finish().unwrap());
        let (short, _) = unpack_in(&[&stored[..stored.len() / 2]]);
        assert!(short.len() < raw.len() && raw.starts_with(&short));
    }
}
