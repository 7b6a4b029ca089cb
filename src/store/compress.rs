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
    Zstd(Box<Inflate>),
}

/// The largest window a stored snapshot's frames may ask for (2^25: 32 MiB of decoder
/// memory); this operator's own levels use at most 8 MiB. A frame asking for more is refused
/// rather than given the memory.
pub const WINDOW_LOG_MAX: u32 = 25;
/// The most bytes one call gives back: whatever the input expands to, memory stays flat.
pub const OUT_MAX: usize = 1 << 20;

/// A zstd decoder with the input it has not consumed yet.
struct Inflate {
    decoder: zstd::stream::raw::Decoder<'static>,
    pending: Vec<u8>,
    at: usize,
    /// Where the decoder writes, made once.
    out: Vec<u8>,
}

impl Inflate {
    fn new() -> std::io::Result<Self> {
        let mut decoder = zstd::stream::raw::Decoder::new()?;
        decoder.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(WINDOW_LOG_MAX))?;
        Ok(Inflate {
            decoder,
            pending: Vec::new(),
            at: 0,
            out: vec![0u8; OUT_MAX],
        })
    }

    /// At most [`OUT_MAX`] bytes more of the output, or `None` once the input given so far
    /// is used up and nothing is left in the decoder.
    fn next(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let mut input = InBuffer::around(&self.pending[self.at..]);
        let mut output = OutBuffer::around(&mut self.out[..]);
        self.decoder.run(&mut input, &mut output)?;
        let (read, written) = (input.pos(), output.pos());
        self.at += read;
        if self.at == self.pending.len() {
            self.pending.clear();
            self.at = 0;
        }
        if written == 0 && read == 0 {
            return Ok(None);
        }
        Ok(Some(self.out[..written].to_vec()))
    }
}

/// A stored snapshot read back: decompressed if it is a zstd frame, passed through otherwise,
/// decided by its first four bytes. Fed one stored chunk at a time ([`Unpack::feed`]), it gives
/// the snapshot back in pieces of at most [`OUT_MAX`] bytes ([`Unpack::take`]), so that a
/// frame that expands enormously (a decompression bomb) costs time, never memory.
pub struct Unpack(State, Vec<u8>);

impl Default for Unpack {
    fn default() -> Self {
        Unpack(State::Undecided(Vec::new()), Vec::new())
    }
}

impl Unpack {
    /// Takes the next chunk of what was stored; [`Unpack::take`] gives what it holds.
    pub fn feed(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        match &mut self.0 {
            State::Undecided(seen) => {
                seen.extend_from_slice(chunk);
                if seen.len() < ZSTD_MAGIC.len() {
                    return Ok(());
                }
                let seen = std::mem::take(seen);
                if seen[..4] == ZSTD_MAGIC {
                    let mut inflate = Inflate::new()?;
                    inflate.pending = seen;
                    self.0 = State::Zstd(Box::new(inflate));
                } else {
                    self.0 = State::Plain;
                    self.1 = seen;
                }
            }
            State::Plain => self.1.extend_from_slice(chunk),
            State::Zstd(z) => z.pending.extend_from_slice(chunk),
        }
        Ok(())
    }

    /// The next piece of the snapshot from what was fed, or `None` when that is used up.
    pub fn take(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        match &mut self.0 {
            State::Undecided(_) => Ok(None),
            State::Plain => Ok((!self.1.is_empty()).then(|| std::mem::take(&mut self.1))),
            State::Zstd(z) => z.next(),
        }
    }

    /// Takes the next chunk and gives back every piece it makes (for callers that hash as they
    /// go: `each` sees at most [`OUT_MAX`] bytes at a time).
    pub fn push_each(&mut self, chunk: &[u8], mut each: impl FnMut(&[u8])) -> std::io::Result<()> {
        self.feed(chunk)?;
        while let Some(piece) = self.take()? {
            each(&piece);
        }
        Ok(())
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

    /// The end of what was stored: a snapshot shorter than four bytes comes back as it is,
    /// for the checks that follow to refuse; everything else was given by [`Unpack::take`].
    pub fn finish(self) -> Vec<u8> {
        match self.0 {
            State::Undecided(seen) => seen,
            State::Plain | State::Zstd(_) => self.1,
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
            u.push_each(c, |piece| out.extend_from_slice(piece))
                .unwrap();
        }
        let compressed = u.compressed();
        out.extend(u.finish());
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

    #[test]
    fn a_bomb_comes_back_in_bounded_pieces_and_a_huge_window_is_refused() {
        // 64 MiB of zeros compress to a few KiB: every piece given back is at most OUT_MAX.
        let mut c = Compressor::new(1).unwrap();
        let zeros = vec![0u8; 1 << 20];
        let mut stored = Vec::new();
        for _ in 0..64 {
            stored.extend(c.push(&zeros).unwrap());
        }
        stored.extend(c.finish().unwrap());
        assert!(stored.len() < 64 * 1024, "{}", stored.len());
        let mut u = Unpack::default();
        let (mut total, mut largest) = (0usize, 0usize);
        u.push_each(&stored, |p| {
            total += p.len();
            largest = largest.max(p.len());
        })
        .unwrap();
        assert_eq!(total, 64 << 20);
        assert!(largest <= OUT_MAX, "{largest}");

        // A frame that asks for a 1 GiB window is refused, not given the memory.
        let mut big = zstd::stream::raw::Encoder::new(1).unwrap();
        big.set_parameter(zstd::zstd_safe::CParameter::WindowLog(30))
            .unwrap();
        let mut wide = zstd::stream::write::Encoder::with_encoder(Vec::new(), big);
        wide.write_all(&data()).unwrap();
        let wide = wide.finish().unwrap();
        let mut u = Unpack::default();
        assert!(
            u.push_each(&wide, |_| {}).is_err(),
            "a 2^30 window was accepted"
        );
    }
}
