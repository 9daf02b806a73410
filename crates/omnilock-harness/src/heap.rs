//! The bytes this process's heap holds live, counted by a global allocator
//! that a tool's binary installs (`omnilock-bench`, `omnilock-chaos`).
//!
//! Resident memory alone cannot tell what a program holds: the allocator
//! keeps freed pages and hands them out again, and glibc's arenas grow
//! under many threads and give little back. The live count can: a leak
//! lifts it, fragmentation does not, and a second store's locks are not
//! hidden in memory a first one freed. The cost is a relaxed atomic
//! addition or two per call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting the bytes it holds live. Install it with
/// `#[global_allocator]`; [`live_bytes`] then reads the count.
pub struct CountingAllocator;

// SAFETY: every call goes to `System` unchanged; the counters only watch.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            counted(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            counted(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            counted(new_size);
        }
        moved
    }
}

fn counted(size: usize) {
    LIVE.fetch_add(size, Ordering::Relaxed);
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

/// The bytes held live through [`CountingAllocator`]; `None` when it is not
/// this process's global allocator (the library's own tests).
pub fn live_bytes() -> Option<u64> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| LIVE.load(Ordering::Relaxed) as u64)
}
