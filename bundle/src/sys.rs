//! Operating-system glue (Unix): advisory file locks, the non-blocking
//! flag, process liveness, and two signal handlers:
//!
//! * a `SIGBUS` handler, installed by the crate on the first bundle mapping,
//!   that turns a fault inside a registered bundle mapping (the file was
//!   truncated under us) into zero-filled pages and a per-mapping flag,
//!   instead of killing the process. A fault anywhere else goes to the
//!   handler installed before it (or kills the process, as without it): the
//!   crate takes only the faults of the memory it mapped itself;
//! * a handler for the terminating signals (`SIGINT`, `SIGTERM`, `SIGHUP`,
//!   `SIGPIPE`) that removes the temporary files of unfinished
//!   [`AtomicFile`](crate::files::AtomicFile)s, then lets the signal kill the
//!   process as it would have. Those signals are the application's: the
//!   crate installs this handler only when the application asks
//!   ([`remove_temp_files_on_signal`](crate::files::remove_temp_files_on_signal):
//!   the `tether` CLI does, at start); an application with handlers of its
//!   own calls [`remove_registered_temp_files`] from them instead
//!   ([`remove_unfinished_temp_files`](crate::files::remove_unfinished_temp_files)).
//!
//! Both handlers only read fixed-size static tables through atomics and make
//! raw system calls (`mmap`, `unlink`, `sigaction`, `raise`); they never
//! allocate or lock.
//!
//! This is the only module with `unsafe` code besides the `mmap` call in the
//! reader.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence};

// ---------------------------------------------------------------------------
// Small wrappers
// ---------------------------------------------------------------------------

/// `flock(fd, LOCK_SH or LOCK_EX | LOCK_NB)`.
///
/// # Errors
/// The `flock` error: `WouldBlock` when another open file description holds
/// a conflicting lock.
pub(crate) fn try_flock(file: &File, exclusive: bool) -> io::Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    // SAFETY: flock only reads the descriptor number, which `file` keeps
    // open for the duration of the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Clears `O_NONBLOCK` on `file` (set by [`open_regular`](crate::files::open_regular)
/// so that opening a FIFO cannot block).
pub(crate) fn clear_nonblock(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor `file` keeps open; no pointers.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if flags & libc::O_NONBLOCK != 0
            && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether a process with id `pid` exists. Only a definite "no such
/// process" (`ESRCH`) answers `false`; a process of another user (`EPERM`)
/// counts as alive.
pub(crate) fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: signal 0 performs only the existence and permission checks;
    // nothing is delivered.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The effective user id of this process.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let v = usize::try_from(v)
        .ok()
        .filter(|v| v.is_power_of_two())
        .unwrap_or(4096);
    PAGE.store(v, Ordering::Relaxed);
    v
}

// ---------------------------------------------------------------------------
// Saved signal dispositions
// ---------------------------------------------------------------------------

/// A `sigaction` saved before ours was installed, so that faults which are
/// not ours go where they went before. Plain data, written once before our
/// handler is installed and only read afterwards.
#[derive(Clone, Copy)]
struct SavedAction(libc::sigaction);

// SAFETY: `libc::sigaction` is plain data (a handler address, a signal mask
// and flags); sharing a copy between threads is sound.
unsafe impl Send for SavedAction {}
// SAFETY: as above; it is never mutated after being stored.
unsafe impl Sync for SavedAction {}

fn current_action(sig: libc::c_int) -> io::Result<libc::sigaction> {
    // SAFETY: an all-zero sigaction is a valid value; with a null `act`,
    // sigaction only writes the current disposition into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(old)
    }
}

fn install_action(
    sig: libc::c_int,
    handler: usize,
    flags: libc::c_int,
) -> io::Result<libc::sigaction> {
    // SAFETY: `act` is fully initialised (zeroed, empty mask, our handler
    // and flags); `old` receives the previous disposition.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = flags;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, &act, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(old)
    }
}

/// Async-signal-safe: sets `sig` back to its default action.
fn reset_to_default(sig: libc::c_int) {
    // SAFETY: sigaction is async-signal-safe; `act` is a zeroed struct with
    // SIG_DFL (0) as handler.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, std::ptr::null_mut());
    }
}

// ---------------------------------------------------------------------------
// SIGBUS guard for bundle mappings
// ---------------------------------------------------------------------------

/// How many mappings can be guarded at once. A bundle opened while all slots
/// are taken is still opened, unguarded (a warning is logged).
pub(crate) const MAX_GUARDED_MAPPINGS: usize = 1024;

/// One guarded mapping. `seq` is a sequence lock: odd while the slot is being
/// changed; the handler only trusts `active`/`start`/`len` read between two
/// equal even values of `seq`.
struct GuardSlot {
    claimed: AtomicBool,
    seq: AtomicU64,
    active: AtomicBool,
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

static GUARDS: [GuardSlot; MAX_GUARDED_MAPPINGS] = [const {
    GuardSlot {
        claimed: AtomicBool::new(false),
        seq: AtomicU64::new(0),
        active: AtomicBool::new(false),
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        faulted: AtomicBool::new(false),
    }
}; MAX_GUARDED_MAPPINGS];

static PREV_SIGBUS: OnceLock<SavedAction> = OnceLock::new();
static SIGBUS_INSTALLED: OnceLock<bool> = OnceLock::new();

fn install_sigbus_handler() -> bool {
    *SIGBUS_INSTALLED.get_or_init(|| {
        page_size(); // cache it: sysconf is not on the async-signal-safe list
        let prev = match current_action(libc::SIGBUS) {
            Ok(p) => p,
            Err(e) => {
                log::warn!(
                    "cannot read the SIGBUS disposition ({e}); bundle mappings are unguarded"
                );
                return false;
            }
        };
        // Saved before installing, so the handler always finds it.
        let _ = PREV_SIGBUS.set(SavedAction(prev));
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) = on_sigbus;
        match install_action(
            libc::SIGBUS,
            handler as usize,
            libc::SA_SIGINFO | libc::SA_ONSTACK,
        ) {
            Ok(_) => true,
            Err(e) => {
                log::warn!(
                    "cannot install the SIGBUS handler ({e}); bundle mappings are unguarded"
                );
                false
            }
        }
    })
}

/// Registration of one memory-mapped bundle with the `SIGBUS` handler.
/// Must be dropped before the mapping is unmapped.
#[derive(Debug)]
pub(crate) struct MapGuard {
    slot: usize,
}

impl MapGuard {
    /// Registers `[start, start + len)`. `None` when the handler could not be
    /// installed or every slot is taken.
    pub(crate) fn register(start: *const u8, len: usize) -> Option<MapGuard> {
        if len == 0 || !install_sigbus_handler() {
            return None;
        }
        for (slot, g) in GUARDS.iter().enumerate() {
            if g.claimed
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            g.seq.fetch_add(1, Ordering::AcqRel); // odd: changing
            g.start.store(start as usize, Ordering::Relaxed);
            g.len.store(len, Ordering::Relaxed);
            g.faulted.store(false, Ordering::Relaxed);
            g.active.store(true, Ordering::Relaxed);
            g.seq.fetch_add(1, Ordering::Release); // even: stable
            return Some(MapGuard { slot });
        }
        log::warn!(
            "{MAX_GUARDED_MAPPINGS} bundle mappings are already guarded; this one is not \
             (truncating its file while it is open would raise SIGBUS)"
        );
        None
    }

    /// A read inside the mapping faulted (the file shrank, or an I/O error):
    /// the pages from the fault to the end now read as zeros.
    pub(crate) fn faulted(&self) -> bool {
        GUARDS
            .get(self.slot)
            .is_some_and(|g| g.faulted.load(Ordering::SeqCst))
    }
}

impl Drop for MapGuard {
    fn drop(&mut self) {
        if let Some(g) = GUARDS.get(self.slot) {
            g.seq.fetch_add(1, Ordering::AcqRel);
            g.active.store(false, Ordering::Relaxed);
            g.seq.fetch_add(1, Ordering::Release);
            g.claimed.store(false, Ordering::Release);
        }
    }
}

/// The guarded range containing `addr`, read consistently, as
/// `(slot, start, len)`.
fn guarded_range(addr: usize) -> Option<(usize, usize, usize)> {
    for (i, g) in GUARDS.iter().enumerate() {
        if !g.claimed.load(Ordering::Acquire) {
            continue;
        }
        let s1 = g.seq.load(Ordering::Acquire);
        if s1 % 2 == 1 {
            continue; // being registered or released: not the mapping being read
        }
        let active = g.active.load(Ordering::Relaxed);
        let start = g.start.load(Ordering::Relaxed);
        let len = g.len.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if g.seq.load(Ordering::Relaxed) != s1 || !active {
            continue;
        }
        if addr >= start && addr - start < len {
            return Some((i, start, len));
        }
    }
    None
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    // si_addr is meaningful for kernel-generated SIGBUS (si_code > 0); a
    // SIGBUS sent by kill()/tgkill() (si_code <= 0) is never ours.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code > 0
        && let Some((slot, start, len)) = guarded_range(addr)
    {
        let page = page_size();
        let from = addr & !(page - 1);
        let end = start.saturating_add(len).saturating_add(page - 1) & !(page - 1);
        // SAFETY: [from, end) lies inside a live mapping that this crate
        // created and registered (a registered mapping is unregistered
        // before it is unmapped), so replacing those pages cannot clobber
        // memory anybody else owns. The file pages there are gone (the file
        // was truncated, or its storage failed); anonymous zero pages make
        // the faulting read, and every later one, see zeros instead.
        let p = unsafe {
            libc::mmap(
                from as *mut c_void,
                end - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            if let Some(g) = GUARDS.get(slot) {
                g.faulted.store(true, Ordering::SeqCst);
            }
            return; // the faulting load is retried and reads zeros
        }
    }
    // Not ours: hand it to whoever had SIGBUS before us.
    match PREV_SIGBUS.get() {
        Some(SavedAction(prev))
            if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN =>
        {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous disposition was installed with
                // SA_SIGINFO, so its address is a three-argument handler.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO the address is a one-argument
                // handler.
                let f: extern "C" fn(libc::c_int) =
                    unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig);
            }
        }
        // Default (or ignored, which a synchronous fault cannot be): restore
        // the default and return; the faulting instruction faults again and
        // the process dies of SIGBUS as it would have without us.
        _ => reset_to_default(sig),
    }
}

// ---------------------------------------------------------------------------
// Temporary files removed on terminating signals
// ---------------------------------------------------------------------------

/// How many temporary files can be registered at once (further ones are
/// still removed on error and by the sweep, just not on a signal).
pub(crate) const MAX_TEMP_FILES: usize = 64;
/// Longest registrable path, in bytes (without the terminating NUL).
const TEMP_PATH_MAX: usize = 4095;

struct TempSlot {
    claimed: AtomicBool,
    seq: AtomicU64,
    active: AtomicBool,
    len: AtomicUsize,
    path: [AtomicU8; TEMP_PATH_MAX],
}

static TEMPS: [TempSlot; MAX_TEMP_FILES] = [const {
    TempSlot {
        claimed: AtomicBool::new(false),
        seq: AtomicU64::new(0),
        active: AtomicBool::new(false),
        len: AtomicUsize::new(0),
        path: [const { AtomicU8::new(0) }; TEMP_PATH_MAX],
    }
}; MAX_TEMP_FILES];

/// The signals after which a process normally just dies, and whose default
/// action we wrap with a cleanup.
const CLEANUP_SIGNALS: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE];

/// Installs the cleanup handler for each of [`CLEANUP_SIGNALS`] whose
/// disposition is the default one (a program that handles or ignores a
/// signal keeps doing so). Returns the signals now covered. Only on the
/// application's request: nothing in the crate calls it.
pub(crate) fn install_cleanup_handler() -> &'static [libc::c_int] {
    static COVERED: OnceLock<Vec<libc::c_int>> = OnceLock::new();
    COVERED.get_or_init(|| {
        let handler: extern "C" fn(libc::c_int) = on_terminating_signal;
        let mut covered = Vec::new();
        for sig in CLEANUP_SIGNALS {
            match current_action(sig) {
                Ok(a) if a.sa_sigaction == libc::SIG_DFL => {}
                _ => continue,
            }
            // SA_RESETHAND: the disposition is back to the default on entry;
            // SA_NODEFER: the re-raised signal is delivered at once.
            if install_action(sig, handler as usize, libc::SA_RESETHAND | libc::SA_NODEFER).is_ok()
            {
                covered.push(sig);
            }
        }
        covered
    })
}

extern "C" fn on_terminating_signal(sig: libc::c_int) {
    remove_registered_temp_files();
    // The disposition is the default again (SA_RESETHAND): die of `sig`.
    // SAFETY: raise and _exit are async-signal-safe.
    unsafe {
        libc::raise(sig);
        libc::_exit(128 + sig);
    }
}

/// Unlinks every registered temporary file; returns how many were unlinked.
/// Async-signal-safe: reads the static table through atomics, copies each
/// path into a stack buffer and calls `unlink`; no allocation, no lock.
pub(crate) fn remove_registered_temp_files() -> usize {
    let mut removed = 0;
    let mut buf = [0u8; TEMP_PATH_MAX + 1];
    for t in &TEMPS {
        if !t.claimed.load(Ordering::Acquire) {
            continue;
        }
        let s1 = t.seq.load(Ordering::Acquire);
        if s1 % 2 == 1 || !t.active.load(Ordering::Relaxed) {
            continue;
        }
        let len = t.len.load(Ordering::Relaxed).min(TEMP_PATH_MAX);
        for (b, a) in buf.iter_mut().zip(&t.path).take(len) {
            *b = a.load(Ordering::Relaxed);
        }
        if let Some(nul) = buf.get_mut(len) {
            *nul = 0;
        }
        fence(Ordering::Acquire);
        if t.seq.load(Ordering::Relaxed) != s1 || len == 0 {
            continue;
        }
        // SAFETY: `buf` is NUL-terminated at `len`; unlink is
        // async-signal-safe. The path is one of our temporary files (names
        // are never reused), so at worst it is already gone (ENOENT).
        if unsafe { libc::unlink(buf.as_ptr().cast()) } == 0 {
            removed += 1;
        }
    }
    removed
}

/// A temporary file registered for removal on a terminating signal;
/// unregisters on drop.
#[derive(Debug)]
pub(crate) struct TempRegistration {
    slot: usize,
}

impl TempRegistration {
    /// Registers `path` (should be absolute). `None` if the path is too long
    /// or every slot is taken.
    pub(crate) fn register(path: &Path) -> Option<TempRegistration> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.is_empty() || bytes.len() > TEMP_PATH_MAX || bytes.contains(&0) {
            return None;
        }
        for (slot, t) in TEMPS.iter().enumerate() {
            if t.claimed
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            t.seq.fetch_add(1, Ordering::AcqRel);
            for (a, &b) in t.path.iter().zip(bytes) {
                a.store(b, Ordering::Relaxed);
            }
            t.len.store(bytes.len(), Ordering::Relaxed);
            t.active.store(true, Ordering::Relaxed);
            t.seq.fetch_add(1, Ordering::Release);
            return Some(TempRegistration { slot });
        }
        None
    }
}

impl Drop for TempRegistration {
    fn drop(&mut self) {
        if let Some(t) = TEMPS.get(self.slot) {
            t.seq.fetch_add(1, Ordering::AcqRel);
            t.active.store(false, Ordering::Relaxed);
            t.len.store(0, Ordering::Relaxed);
            t.seq.fetch_add(1, Ordering::Release);
            t.claimed.store(false, Ordering::Release);
        }
    }
}
