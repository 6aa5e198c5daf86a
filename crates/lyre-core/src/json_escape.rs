//! JSON strings written at memory speed. Every record a REST read answers in JSON
//! has its text copied through here (`raw::write_json`), so a string is scanned
//! sixteen bytes at a time (SSE2, on x86_64; eight in a `u64` elsewhere) for the few
//! bytes JSON must escape (`"`, `\` and the control characters), and checked for
//! UTF-8 only when a byte outside ASCII turns up: most stored text is ASCII, and the
//! scan that finds escapes sees that too.

/// The string was not UTF-8 (a damaged store: Lyre writes only `String`s).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NotUtf8;

/// Writes `bytes` as a JSON string, quotes included, escaped byte for byte as
/// `serde_json` escapes a `str`: `"` and `\`, the control characters (the short
/// forms where JSON has them, else `\u00xx`), nothing else. On error `out` holds a
/// partial string and must be discarded.
pub(crate) fn write_string(bytes: &[u8], out: &mut Vec<u8>) -> Result<(), NotUtf8> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // The quotes, and the room `copy_clean_prefix` stores whole chunks into.
    out.reserve(bytes.len() + 2 + 16);
    out.push(b'"');
    // Most strings are one clean run, copied as it is scanned.
    let (mut at, mut beyond_ascii) = copy_clean_prefix(bytes, out);
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 15)],
            ]),
        }
        let from = at + 1;
        let wide;
        (at, wide) = clean_run(bytes, from);
        beyond_ascii |= wide;
        out.extend_from_slice(&bytes[from..at]);
    }
    out.push(b'"');
    // Every byte was in a clean run or escaped (escaped bytes are ASCII), so a
    // string whose runs were all ASCII is UTF-8 without a second look.
    if beyond_ascii && std::str::from_utf8(bytes).is_err() {
        return Err(NotUtf8);
    }
    Ok(())
}

/// Where the run of bytes JSON does not escape that starts at `from` ends (the
/// index of the first byte to escape, else `bytes.len()`), and whether a byte outside
/// ASCII may be in the run (may say yes for one past it; never says no when there
/// is one).
#[cfg(target_arch = "x86_64")]
fn clean_run(bytes: &[u8], from: usize) -> (usize, bool) {
    // SAFETY: SSE2 is part of every x86_64 target (its baseline), so the function
    // the feature is enabled for runs on any CPU this build runs on; nothing is
    // stored.
    unsafe { scan_sse2::<false>(bytes, from, std::ptr::null_mut()) }
}

/// Copies the longest prefix of `bytes` with no byte to escape onto the end of
/// `out`, which must have room for `bytes.len() + 16` more bytes; answers its length
/// and whether a byte outside ASCII may be in it (as [`clean_run`]). Each sixteen
/// bytes are stored as they are scanned (what lands past the prefix is spare
/// capacity, overwritten by what `out` gets next), so a clean string is read once.
#[cfg(target_arch = "x86_64")]
fn copy_clean_prefix(bytes: &[u8], out: &mut Vec<u8>) -> (usize, bool) {
    assert!(out.capacity() - out.len() >= bytes.len() + 16, "room for the chunks is reserved");
    // SAFETY: SSE2 is part of every x86_64 target, and the room is there (above).
    let (run, wide) = unsafe { scan_sse2::<true>(bytes, 0, out.as_mut_ptr().add(out.len())) };
    // SAFETY: the first `run` bytes past the end were written (copies of `bytes`).
    unsafe { out.set_len(out.len() + run) };
    (run, wide)
}

/// The bytes of `v` to escape and those beyond ASCII, one bit each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn escape_masks(v: std::arch::x86_64::__m128i) -> (u32, u32) {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8};
    // A byte is a control character when the unsigned minimum with 0x1f is itself.
    let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    let special = _mm_or_si128(control, _mm_or_si128(quote, backslash));
    (_mm_movemask_epi8(special) as u32, _mm_movemask_epi8(v) as u32)
}

/// `bytes` shorter than sixteen, padded with spaces (never escaped) to sixteen.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn padded(bytes: &[u8]) -> std::arch::x86_64::__m128i {
    let mut padded = [b' '; 16];
    padded[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `padded` is 16 readable bytes, and an unaligned load takes any address.
    unsafe { std::arch::x86_64::_mm_loadu_si128(padded.as_ptr().cast()) }
}

/// [`clean_run`] sixteen bytes at a time with SSE2. The last bytes are read as the
/// string's last sixteen (a string shorter than that is padded with spaces), so no
/// byte is looked at alone: a ten-field record's keys and values each end in such
/// a tail. With `COPY`, each sixteen bytes read are also stored at `to` plus their
/// offset in `bytes` ([`copy_clean_prefix`]): `from` is then 0 and `to` has room for
/// `bytes.len() + 16` bytes, as every store starts at most at `bytes.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
unsafe fn scan_sse2<const COPY: bool>(bytes: &[u8], from: usize, to: *mut u8) -> (usize, bool) {
    use std::arch::x86_64::{_mm_loadu_si128, _mm_storeu_si128};
    debug_assert!(!COPY || from == 0, "a copy starts at the string's start");
    let len = bytes.len();
    if len < 16 {
        let v = padded(bytes);
        let (special, wide) = escape_masks(v);
        if COPY {
            // SAFETY: `to` has room for sixteen bytes (the caller's promise).
            unsafe { _mm_storeu_si128(to.cast(), v) };
        }
        // Spaces are never escaped, so a run that reaches the padding ends at `len`.
        let special = special >> from;
        return (from + (special.trailing_zeros() as usize).min(len - from), wide >> from != 0);
    }
    let mut wide = 0;
    let mut at = from;
    while at + 16 <= len {
        // SAFETY: `at + 16 <= len`: sixteen readable bytes.
        let v = unsafe { _mm_loadu_si128(bytes.as_ptr().add(at).cast()) };
        let (special, chunk_wide) = escape_masks(v);
        if COPY {
            // SAFETY: a store starting before `len` (the caller's promise).
            unsafe { _mm_storeu_si128(to.add(at).cast(), v) };
        }
        wide |= chunk_wide;
        if special != 0 {
            return (at + special.trailing_zeros() as usize, wide != 0);
        }
        at += 16;
    }
    if at < len {
        // The last sixteen bytes, of which the first `seen` were checked above (and,
        // copying, are stored again at the same place, unchanged).
        let seen = at - (len - 16);
        // SAFETY: `len >= 16`: the last sixteen bytes are readable.
        let v = unsafe { _mm_loadu_si128(bytes.as_ptr().add(len - 16).cast()) };
        let (special, tail_wide) = escape_masks(v);
        if COPY {
            // SAFETY: a store starting before `len` (the caller's promise).
            unsafe { _mm_storeu_si128(to.add(len - 16).cast(), v) };
        }
        wide |= tail_wide >> seen;
        let special = special >> seen;
        if special != 0 {
            return (at + special.trailing_zeros() as usize, wide != 0);
        }
    }
    (len, wide != 0)
}

/// [`copy_clean_prefix`] where SSE2 is not part of the target: scanned eight bytes
/// at a time, then copied.
#[cfg(not(target_arch = "x86_64"))]
fn copy_clean_prefix(bytes: &[u8], out: &mut Vec<u8>) -> (usize, bool) {
    let (run, wide) = clean_run(bytes, 0);
    out.extend_from_slice(&bytes[..run]);
    (run, wide)
}

/// [`clean_run`] where SSE2 is not part of the target: eight bytes at a time in a
/// `u64`.
#[cfg(not(target_arch = "x86_64"))]
fn clean_run(bytes: &[u8], from: usize) -> (usize, bool) {
    let (run, wide) = clean_prefix_by_words(&bytes[from..]);
    (from + run, wide)
}

/// The length of the longest prefix of `bytes` with no byte JSON escapes, and
/// whether a byte outside ASCII may be in it: [`clean_run`]'s answer, eight bytes
/// at a time in a `u64` (any target; on x86_64 only its tests use it).
#[cfg(any(not(target_arch = "x86_64"), test))]
fn clean_prefix_by_words(bytes: &[u8]) -> (usize, bool) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The high bit of a byte that is zero. Right about whether a word holds one, not
    // always about which: a borrow out of a zero byte can flag the byte after it.
    // A byte from 0x80 up is never flagged (`!word` clears its high bit).
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut wide = 0;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        let special =
            below_space | zero_in(word ^ (ONES * u64::from(b'"'))) | zero_in(word ^ (ONES * u64::from(b'\\')));
        wide |= word & HIGHS;
        if special != 0 {
            // A borrow can flag a clean byte just after a special one, never
            // before it, so the chunk holds one: found exactly a byte at a time
            // (and should a word ever be flagged for nothing, the scan goes on).
            let (run, _) = clean_prefix_bytewise(chunk);
            if run < chunk.len() {
                return (at + run, wide != 0);
            }
        }
        at += 8;
    }
    let (run, tail_wide) = clean_prefix_bytewise(chunks.remainder());
    (at + run, wide != 0 || tail_wide)
}

/// [`clean_prefix_by_words`] a byte at a time: the tail shorter than a chunk.
#[cfg(any(not(target_arch = "x86_64"), test))]
fn clean_prefix_bytewise(bytes: &[u8]) -> (usize, bool) {
    let mut wide = false;
    for (at, &byte) in bytes.iter().enumerate() {
        if byte < 0x20 || byte == b'"' || byte == b'\\' {
            return (at, wide);
        }
        wide |= byte >= 0x80;
    }
    (bytes.len(), wide)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What each scan must answer: the first byte to escape, and whether a byte
    /// before it is outside ASCII.
    fn expected(bytes: &[u8]) -> (usize, bool) {
        let run = bytes.iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\').unwrap_or(bytes.len());
        (run, bytes[..run].iter().any(|&b| b >= 0x80))
    }

    /// Checks every scan of `bytes`, from every starting point.
    fn check_scan(bytes: &[u8]) -> Result<(), TestCaseError> {
        for from in 0..=bytes.len() {
            let (run, wide) = expected(&bytes[from..]);
            let sixteen = clean_run(bytes, from);
            let sixteen = (sixteen.0 - from, sixteen.1);
            for (name, (found, said_wide)) in [
                ("sixteen", sixteen),
                ("words", clean_prefix_by_words(&bytes[from..])),
                ("bytes", clean_prefix_bytewise(&bytes[from..])),
            ] {
                prop_assert_eq!(found, run, "{} scan of {:?} from {}", name, bytes, from);
                // Saying "wide" too often only costs a UTF-8 check; too rarely would skip one.
                prop_assert!(
                    said_wide || !wide,
                    "{} scan missed a byte beyond ASCII in {:?} from {}",
                    name,
                    bytes,
                    from
                );
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn every_scan_stops_at_the_first_byte_to_escape(
            bytes in proptest::collection::vec(prop_oneof![
                8 => 0x20u8..0x7f,
                1 => 0u8..0x20,
                1 => Just(b'"'),
                1 => Just(b'\\'),
                1 => 0x7fu8..=0xff,
            ], 0..80)
        ) {
            check_scan(&bytes)?;
        }

        #[test]
        fn strings_are_written_as_serde_json_writes_them(s in "\\PC{0,40}|[\\x00-\\x7f]{0,50}[\\u{80}-\\u{10ffff}]?[\\x00-\\x7f]{0,20}") {
            let mut json = Vec::new();
            write_string(s.as_bytes(), &mut json).unwrap();
            prop_assert_eq!(String::from_utf8(json).unwrap(), serde_json::to_string(&s).unwrap());
        }

        #[test]
        fn strings_in_a_row_keep_what_came_before(a in "[ -~]{0,40}", b in "[ -~\\n\\x01]{0,40}") {
            // Chunks are stored past a string's end: the next string (or an escape)
            // must overwrite them, never follow them.
            let mut json = b"[".to_vec();
            write_string(a.as_bytes(), &mut json).unwrap();
            json.push(b',');
            write_string(b.as_bytes(), &mut json).unwrap();
            json.push(b']');
            prop_assert_eq!(String::from_utf8(json).unwrap(), serde_json::to_string(&[&a, &b]).unwrap());
        }
    }

    #[test]
    fn each_position_of_each_chunk_is_seen() {
        // A special byte at every offset of a 40-byte ASCII string (two sixteen-byte
        // chunks, five words and a tail), alone and after a byte beyond ASCII.
        for special in [0u8, 0x1f, b'"', b'\\'] {
            for at in 0..40 {
                let mut bytes = vec![b'a'; 40];
                bytes[at] = special;
                check_scan(&bytes).unwrap();
                if at > 0 {
                    bytes[at - 1] = 0xc3;
                    check_scan(&bytes).unwrap();
                }
            }
        }
        // Bytes that only a borrow between bytes could confuse: 0x20, 0x21, 0x7f, 0x80.
        check_scan(b"\x20\x21\x7f\x80\x22\x20\x21\x7f\x80\x5c\x20\x21\x7f\x80\x5b\x5d\x23\x1f").unwrap();
    }

    #[test]
    fn a_string_s_first_run_is_copied_whole_and_no_further() {
        // Every length around the chunk sizes, a byte to escape at every position
        // (or none), written after bytes `out` already holds.
        for len in 0..48 {
            for special in std::iter::once(None).chain((0..len).map(Some)) {
                let mut text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP"[..len].to_string();
                if let Some(at) = special {
                    text.replace_range(at..at + 1, "\"");
                }
                let mut json = b"[1,".to_vec();
                write_string(text.as_bytes(), &mut json).unwrap();
                json.push(b']');
                let expected = format!("[1,{}]", serde_json::to_string(&text).unwrap());
                assert_eq!(String::from_utf8(json).unwrap(), expected, "{len} {special:?}");
            }
        }
    }

    #[test]
    fn text_that_is_not_utf8_is_refused() {
        for bytes in
            [&b"\xff"[..], b"abcdefghijklmnopqrstuvwxyz\xc3", b"\xc3\x28", b"a\"\xe2\x82", b"\xff\xfeabcdefghijklmnopq"]
        {
            assert_eq!(write_string(bytes, &mut Vec::new()), Err(NotUtf8), "{bytes:?}");
        }
        let mut json = Vec::new();
        write_string("naïve \"quote\"\u{1}".as_bytes(), &mut json).unwrap();
        assert_eq!(String::from_utf8(json).unwrap(), r#""naïve \"quote\"\u0001""#);
    }
}
