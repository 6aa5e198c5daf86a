//! The process's allocator: mimalloc (glibc's free and consolidation paths were a
//! fifth of the server's CPU on the write benchmarks), asked through its plain
//! `malloc` for the alignments every mimalloc block already has.
//!
//! The `mimalloc` crate sends every allocation through `mi_malloc_aligned`, and in
//! mimalloc 3 that call takes its over-allocating path (the size plus the alignment,
//! then an offset into it) for any block above 1 KiB whose size class is not a
//! power of two: a request's future, a record's JSON, hyper's buffers, five per REST
//! read. A Rust type rarely asks for more than a word's alignment, and every
//! mimalloc block is word-aligned, so those go to `mi_malloc` and only larger
//! alignments to the aligned calls: about 500 instructions less per read
//! (`bench/results/2026-12-07-hot-path-instructions.md`).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every block `mi_malloc` returns has: its size classes are whole
/// words, and its pages' first blocks start word-aligned (mimalloc's own
/// `mi_realloc_aligned` relies on the same). Not so with mimalloc's `debug` build,
/// whose guarded blocks may end at a page boundary: `Cargo.toml` leaves it off.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator (`main.rs` installs it).
pub struct Allocator;

// SAFETY: each call keeps `GlobalAlloc`'s contract: a block of at least the size
// with at least the alignment asked for (mimalloc's plain calls give word
// alignment, its aligned calls any power of two), freed by `mi_free`, which takes
// blocks from both; `realloc` keeps the alignment the same way.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation calls take any size and alignment.
        let block: *mut u8 = unsafe {
            match layout.align() <= WORD {
                true => mi::mi_malloc(layout.size()).cast(),
                false => mi::mi_malloc_aligned(layout.size(), layout.align()).cast(),
            }
        };
        debug_assert!(
            (block as usize).is_multiple_of(layout.align()),
            "mimalloc gave a block less aligned than {layout:?}"
        );
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            match layout.align() <= WORD {
                true => mi::mi_zalloc(layout.size()).cast(),
                false => mi::mi_zalloc_aligned(layout.size(), layout.align()).cast(),
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`'s alignment, which
        // the call that moves it keeps.
        unsafe {
            match layout.align() <= WORD {
                true => mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast(),
                false => mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocates `size` bytes aligned to `align`, checks the alignment, fills the
    /// block, grows it (the filled bytes kept), and frees it.
    fn round_trip(size: usize, align: usize, zeroed: bool) {
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: a non-zero size; the block is used within its size and freed once.
        unsafe {
            let block = if zeroed { Allocator.alloc_zeroed(layout) } else { Allocator.alloc(layout) };
            assert!(!block.is_null(), "{size} bytes");
            assert_eq!(block as usize % align, 0, "{size} bytes aligned to {align}");
            if zeroed {
                assert!(std::slice::from_raw_parts(block, size).iter().all(|&b| b == 0), "{size} zeroed bytes");
            }
            std::ptr::write_bytes(block, 0xa5, size);
            let grown = Allocator.realloc(block, layout, size * 3);
            assert_eq!(grown as usize % align, 0, "{size} bytes grown, aligned to {align}");
            assert!(std::slice::from_raw_parts(grown, size).iter().all(|&b| b == 0xa5), "{size} bytes kept");
            Allocator.dealloc(grown, Layout::from_size_align(size * 3, align).unwrap());
        }
    }

    #[test]
    fn every_block_has_the_alignment_asked_for() {
        // Sizes across mimalloc's small, medium and large classes, above and below
        // 1 KiB, with word-or-less alignments (plain calls) and larger ones.
        let sizes = (1..=64).chain((65..=4096).step_by(37)).chain([1 << 16, 300_000, 5 << 20]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 64, 4096] {
                round_trip(size, align, size % 2 == 0);
            }
        }
    }
}
