//! The stored record: a fixed header (version, metadata word) then an opaque body.
//!
//! ```text
//! [ version: f64, 8 bytes big-endian ][ format: u8 ][ flags: u8 ][ node: u16 BE ][ body ... ]
//! ```
//!
//! The body is whatever the caller encoded (MessagePack in lyre-core); the store only
//! reads the header.

use crate::error::{Error, Result};

/// Size of the header in bytes.
pub const HEADER_LEN: usize = 12;
/// Format byte of records written by this version of Lyre.
const FORMAT_V1: u8 = 1;

/// Flag bits of the metadata word. Each bit is defined here once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(u8);

impl Flags {
    /// The record was deleted; the entry remains only to carry its version.
    pub const TOMBSTONE: Flags = Flags(1 << 0);
    /// The stored version did not advance on the last write (an older write was
    /// merged in), so version equality does not imply content equality.
    pub const VERSION_NOT_UNIQUE: Flags = Flags(1 << 1);
    /// The record carries an expiry time.
    pub const HAS_EXPIRY: Flags = Flags(1 << 2);
    /// The body also carries the versions of properties written at a version other
    /// than the record's (lyre-core's property clock, for out-of-order merges).
    pub const PROPERTY_VERSIONS: Flags = Flags(1 << 3);

    const ALL: [Flags; 4] = [Self::TOMBSTONE, Self::VERSION_NOT_UNIQUE, Self::HAS_EXPIRY, Self::PROPERTY_VERSIONS];

    /// No flags.
    pub const fn empty() -> Self {
        Flags(0)
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` with the bits of `other` set.
    #[must_use]
    pub const fn with(self, other: Flags) -> Self {
        Flags(self.0 | other.0)
    }

    /// `self` with the bits of `other` cleared.
    #[must_use]
    pub const fn without(self, other: Flags) -> Self {
        Flags(self.0 & !other.0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

// Compile-time proof that no two flags share a bit and each is exactly one bit.
const _: () = {
    let mut seen = 0u8;
    let mut i = 0;
    while i < Flags::ALL.len() {
        let bits = Flags::ALL[i].0;
        assert!(bits.count_ones() == 1, "a flag must be a single bit");
        assert!(seen & bits == 0, "two flags overlap");
        seen |= bits;
        i += 1;
    }
};

/// The decoded header of a stored record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordHeader {
    /// The version (f64 milliseconds since the epoch) of the last write.
    pub version: f64,
    /// The record's flags.
    pub flags: Flags,
    /// The node that made the last write.
    pub node: u16,
}

/// Encodes a record: header followed by `body`.
pub fn encode_record(header: &RecordHeader, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&header.version.to_be_bytes());
    out.push(FORMAT_V1);
    out.push(header.flags.0);
    out.extend_from_slice(&header.node.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Splits a stored record into its header and body.
pub fn decode_record(bytes: &[u8]) -> Result<(RecordHeader, &[u8])> {
    if bytes.len() < HEADER_LEN {
        return Err(Error::Corrupt(format!("record of {} bytes is shorter than its header", bytes.len())));
    }
    if bytes[8] != FORMAT_V1 {
        return Err(Error::Corrupt(format!("unknown record format {}", bytes[8])));
    }
    let mut version = [0u8; 8];
    version.copy_from_slice(&bytes[..8]);
    let header = RecordHeader {
        version: f64::from_be_bytes(version),
        flags: Flags(bytes[9]),
        node: u16::from_be_bytes([bytes[10], bytes[11]]),
    };
    Ok((header, &bytes[HEADER_LEN..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn records_round_trip(version in any::<f64>(), flags in 0u8..8, node in any::<u16>(), body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let header = RecordHeader { version, flags: Flags(flags), node };
            let bytes = encode_record(&header, &body);
            let (decoded, decoded_body) = decode_record(&bytes).unwrap();
            prop_assert_eq!(decoded.version.to_bits(), version.to_bits());
            prop_assert_eq!(decoded.flags, header.flags);
            prop_assert_eq!(decoded.node, node);
            prop_assert_eq!(decoded_body, &body[..]);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            let _ = decode_record(&bytes);
        }
    }

    #[test]
    fn flags_compose() {
        let f = Flags::empty().with(Flags::TOMBSTONE).with(Flags::HAS_EXPIRY);
        assert!(f.contains(Flags::TOMBSTONE));
        assert!(!f.contains(Flags::VERSION_NOT_UNIQUE));
        assert!(!f.without(Flags::TOMBSTONE).contains(Flags::TOMBSTONE));
    }
}
