//! Handing freed heap back to the operating system after bursts of start-up work.
//!
//! Reading a large configuration (10,000 stream tables is a 1 MB TOML file) builds a
//! document tree of tens of megabytes that is dropped as soon as the typed config
//! exists. glibc keeps such freed memory in its arenas and returns only the top of
//! each heap, so the process would carry it as resident memory for its whole life
//! (measured at 10,000 streams: 45 MB resident after start-up, 32 MB after a trim).
//! `malloc_trim(0)` gives the free pages of every arena back. It is called only at
//! the moments that allocate in bulk and then free: after start-up, once more when
//! the tasks' first pass has run ([`STARTUP_SETTLE`]), and after a reload. A no-op where the allocator is not glibc's.
//!
//! This is the crate's only `unsafe` (tests/it/unsafe_code.rs keeps it so): the one
//! foreign call has no arguments to get wrong, and no safe wrapper exists in the
//! crates we depend on.

/// How long after start-up the first pass of every per-stream task has
/// run, so a second trim catches what it freed.
pub const STARTUP_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Returns free heap pages to the operating system (glibc only).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes no pointers from us; glibc serialises it with every
    // other allocator call, so it is sound from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
