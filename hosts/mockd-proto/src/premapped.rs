//! [`Premapped`]: the records that describe the memfds a successful ALLOC_MEMORY or
//! CREATE_STREAM reply carries (docs/mockd-protocol.md, IOCTL).
#![forbid(unsafe_code)]

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut raw = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        raw.copy_from_slice(s);
    }
    u64::from_le_bytes(raw)
}

/// One descriptor a successful ALLOC_MEMORY or CREATE_STREAM reply carries (since this
/// daemon version): the object behind mmap cookie `cookie` starts at `offset` of the memfd and
/// is `len` bytes long, exactly what an MMAP of that cookie would answer. The reply's payload
/// is one record per attached descriptor, in order; a client may map those instead of
/// sending MMAP (one round trip less per object) or close them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Premapped {
    /// The mmap cookie (`mmap_offset`, `cmd_ring.mmap_offset`, `doorbell_offset`...).
    pub cookie: u64,
    /// Offset of the object in the memfd (page aligned).
    pub offset: u64,
    /// Length of the object: the most that may be mapped.
    pub len: u64,
}

impl Premapped {
    /// Encoded size of one record.
    pub const SIZE: usize = 24;

    /// Encodes records, in order.
    pub fn encode_all(records: &[Premapped]) -> Vec<u8> {
        let mut out = Vec::with_capacity(records.len() * Self::SIZE);
        for r in records {
            out.extend_from_slice(&r.cookie.to_le_bytes());
            out.extend_from_slice(&r.offset.to_le_bytes());
            out.extend_from_slice(&r.len.to_le_bytes());
        }
        out
    }

    /// Decodes exactly `n` records (`None` for a payload of another size).
    pub fn decode_all(b: &[u8], n: usize) -> Option<Vec<Premapped>> {
        if b.len() != n.checked_mul(Self::SIZE)? {
            return None;
        }
        Some(
            b.chunks_exact(Self::SIZE)
                .map(|c| Premapped {
                    cookie: u64_at(c, 0),
                    offset: u64_at(c, 8),
                    len: u64_at(c, 16),
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn premapped_records_round_trip_and_sizes_are_checked() {
        let r = [
            Premapped {
                cookie: 1 << 48,
                offset: 0,
                len: 4096,
            },
            Premapped {
                cookie: 2 << 48,
                offset: 8192,
                len: 12288,
            },
        ];
        let b = Premapped::encode_all(&r);
        assert_eq!(b.len(), 48);
        assert_eq!(Premapped::decode_all(&b, 2).unwrap(), r);
        assert_eq!(Premapped::decode_all(&b, 1), None);
        assert_eq!(Premapped::decode_all(&b[..47], 2), None);
        assert_eq!(Premapped::decode_all(&[], 0).unwrap(), []);
    }
}
