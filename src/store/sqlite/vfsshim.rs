//! What Parasol's two VFS wrappers (`walvfs`, which gathers the WAL's writes, and `faultvfs`,
//! which fails chosen calls in tests) share: each registers a copy of another VFS whose files are
//! larger by a header of its own, opens the other VFS's file after that header, and passes on
//! every method it does not change. The header of each starts with the fields of `Header`.

use std::ffi::{c_char, c_int, c_void, CStr};

use rusqlite::ffi;

/// How every wrapper's file begins (`#[repr(C)]`, these two fields first): SQLite's own part,
/// then the wrapped file, which lives further on in the same allocation.
#[repr(C)]
pub(super) struct Header {
    pub base: ffi::sqlite3_file,
    pub real: *mut ffi::sqlite3_file,
}

/// Offset of the wrapped file inside a wrapper's file whose header is `T` (aligned for any C
/// struct).
pub(super) const fn real_offset<T>() -> usize {
    std::mem::size_of::<T>().next_multiple_of(16)
}

/// The `xOpen` of a wrapper.
pub(super) type Open = unsafe extern "C" fn(
    *mut ffi::sqlite3_vfs,
    *const c_char,
    *mut ffi::sqlite3_file,
    c_int,
    *mut c_int,
) -> c_int;

/// Registers (not as the default) a copy of `parent` named `name` whose files hold `offset`
/// bytes of the wrapper's before the parent's, opened by `open`. Returns SQLite's code.
///
/// # Safety
/// `parent` must be a VFS registered with SQLite for the life of the process.
pub(super) unsafe fn register_over(
    parent: *mut ffi::sqlite3_vfs,
    name: &'static CStr,
    offset: usize,
    open: Open,
) -> c_int {
    // SAFETY: `parent` is a live, registered VFS (the contract); the copy, leaked, lives as
    // long as the process, as registration needs.
    unsafe {
        let mut vfs: ffi::sqlite3_vfs = *parent;
        vfs.szOsFile = (offset + (*parent).szOsFile as usize) as c_int;
        vfs.pNext = std::ptr::null_mut();
        vfs.zName = name.as_ptr();
        vfs.xOpen = Some(open);
        ffi::sqlite3_vfs_register(Box::leak(Box::new(vfs)), 0)
    }
}

/// Opens the wrapped file with `parent`'s `xOpen`, `offset` bytes into `file`: SQLite's code,
/// and the wrapped file if it opened (else `file` is marked as not open, as SQLite requires).
/// The caller writes its header, `Header::real` included, before setting `file`'s methods.
///
/// # Safety
/// The arguments are those SQLite gave the wrapper's `xOpen`; `file` holds `offset` bytes more
/// than `parent`'s files need (`register_over`).
pub(super) unsafe fn open_real(
    parent: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
    offset: usize,
) -> (c_int, Option<*mut ffi::sqlite3_file>) {
    // SAFETY: SQLite gives `file` szOsFile bytes (the header and the parent's file after it) to
    // fill; the parent's xOpen fills its part.
    unsafe {
        let Some(parent_open) = (*parent).xOpen else {
            (*file).pMethods = std::ptr::null();
            return (ffi::SQLITE_ERROR, None);
        };
        let real = file.cast::<u8>().add(offset).cast::<ffi::sqlite3_file>();
        (*real).pMethods = std::ptr::null();
        let rc = parent_open(parent, name, real, flags, out_flags);
        if (*real).pMethods.is_null() {
            (*file).pMethods = std::ptr::null();
            return (rc, None);
        }
        (rc, Some(real))
    }
}

/// The wrapped file.
///
/// # Safety
/// `f` must be a file a wrapper opened (and not yet closed).
pub(super) unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: per the contract, `f` begins with a `Header` whose `real` was set when it opened.
    unsafe { (*f.cast::<Header>()).real }
}

/// The wrapped file's methods.
///
/// # Safety
/// As for `real`.
pub(super) unsafe fn methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: the parent's xOpen succeeded (`open_real` checked pMethods), so they are its
    // static methods.
    unsafe { &*(*real(f)).pMethods }
}

/// Calls the wrapped file's `$method`; without one, answers `$default` (`SQLITE_OK` unless
/// given).
macro_rules! forward {
    ($f:expr, $method:ident or $default:expr $(, $arg:expr)*) => {
        // SAFETY: `$f` is a file a wrapper opened (SQLite calls its methods only on those); the
        // arguments are SQLite's own, passed on unchanged.
        unsafe {
            match $crate::store::sqlite::vfsshim::methods($f).$method {
                Some(m) => m($crate::store::sqlite::vfsshim::real($f) $(, $arg)*),
                None => $default,
            }
        }
    };
    ($f:expr, $method:ident $(, $arg:expr)*) => {
        forward!($f, $method or ffi::SQLITE_OK $(, $arg)*)
    };
}
pub(super) use forward;

// The methods a wrapper passes on unchanged.

pub(super) unsafe extern "C" fn close(f: *mut ffi::sqlite3_file) -> c_int {
    forward!(f, xClose)
}

pub(super) unsafe extern "C" fn read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    forward!(f, xRead, buf, amount, offset)
}

pub(super) unsafe extern "C" fn write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    forward!(f, xWrite, buf, amount, offset)
}

pub(super) unsafe extern "C" fn truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    forward!(f, xTruncate, size)
}

pub(super) unsafe extern "C" fn sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    forward!(f, xSync, flags)
}

pub(super) unsafe extern "C" fn file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    forward!(f, xFileSize, size)
}

pub(super) unsafe extern "C" fn lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(f, xLock, level)
}

pub(super) unsafe extern "C" fn unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(f, xUnlock, level)
}

pub(super) unsafe extern "C" fn check_reserved_lock(
    f: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    forward!(f, xCheckReservedLock, out)
}

pub(super) unsafe extern "C" fn file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    forward!(f, xFileControl or ffi::SQLITE_NOTFOUND, op, arg)
}

pub(super) unsafe extern "C" fn sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    forward!(f, xSectorSize or 4096)
}

pub(super) unsafe extern "C" fn device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    forward!(f, xDeviceCharacteristics or 0)
}

pub(super) unsafe extern "C" fn shm_map(
    f: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    forward!(f, xShmMap or ffi::SQLITE_IOERR_SHMMAP, region, size, extend, out)
}

pub(super) unsafe extern "C" fn shm_lock(
    f: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    forward!(f, xShmLock or ffi::SQLITE_IOERR_SHMLOCK, offset, n, flags)
}

pub(super) unsafe extern "C" fn shm_barrier(f: *mut ffi::sqlite3_file) {
    // SAFETY: as in `forward!`.
    unsafe {
        if let Some(m) = methods(f).xShmBarrier {
            m(real(f))
        }
    }
}

pub(super) unsafe extern "C" fn shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    forward!(f, xShmUnmap, delete)
}

pub(super) unsafe extern "C" fn fetch(
    f: *mut ffi::sqlite3_file,
    offset: i64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: as in `forward!`; without a fetch method, SQLite reads the page instead.
    unsafe {
        match methods(f).xFetch {
            Some(m) => m(real(f), offset, amount, out),
            None => {
                *out = std::ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

pub(super) unsafe extern "C" fn unfetch(
    f: *mut ffi::sqlite3_file,
    offset: i64,
    page: *mut c_void,
) -> c_int {
    forward!(f, xUnfetch, offset, page)
}

/// The methods of a wrapper that passes everything on: each wrapper starts from these and
/// replaces the ones it changes.
pub(super) const PASS_ON: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};
