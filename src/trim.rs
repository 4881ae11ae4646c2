//! Handing freed memory back to the system. glibc keeps freed small blocks in its arenas, and
//! after a large request or an export round has been parsed or built into many small
//! allocations, that kept memory would otherwise set the process's resident size for good. Every
//! caller decides when it is worth it; this is the one call.

/// Returns the memory glibc's arenas hold free to the system, now (it takes a few milliseconds
/// on a large heap: not on a request's thread). Does nothing where glibc is not the allocator.
pub fn malloc_trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `malloc_trim` on a blocking thread, when there is a runtime to run it (a caller may run after
/// the runtime is gone, at exit).
pub fn in_background() {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn_blocking(malloc_trim);
    }
}
