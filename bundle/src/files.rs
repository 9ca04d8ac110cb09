//! Safe file input and output, for bundles and for every other file tether
//! reads or writes (images, annotated PNGs, JSON reports, plots).
//!
//! * [`open_regular`] opens a file for reading only if it is a regular file:
//!   a FIFO, device, socket or directory is refused with
//!   [`FileError::NotRegular`] instead of blocking in `open` or reading a
//!   device.
//! * [`AtomicFile`] writes a file so that the destination is either left
//!   untouched or replaced by the complete new contents:
//!
//!   1. [`AtomicFile::create`] checks the destination first. It may be
//!      missing (its directory must exist: [`FileError::MissingDirectory`]
//!      otherwise) or a regular file, whose permission bits (and, where
//!      allowed, owner) the new file keeps. A **symbolic link is followed**:
//!      the file it points to is replaced and the link stays a link (a link
//!      to nothing is refused with [`FileError::DanglingSymlink`]). Anything
//!      else — a directory, FIFO, character or block device (`/dev/null`),
//!      socket — is refused with [`FileError::NotRegular`], so nothing that
//!      is not a regular file is ever replaced.
//!   2. The data goes to a temporary file in the destination's directory,
//!      named `.NAME.tmp-PID-N` ([`is_temp_file_name`]).
//!   3. [`AtomicFile::persist`] flushes and `fsync`s it, sets the
//!      permissions, checks the destination again, renames the temporary
//!      file over it and `fsync`s the directory.
//!
//!   The temporary file is removed when the `AtomicFile` is dropped without
//!   `persist` (an error, an early return, a panic that unwinds). When the
//!   process is killed by `SIGINT`, `SIGTERM`, `SIGHUP` or `SIGPIPE`, it is
//!   removed if the application asked for it: the signals are the
//!   application's, so this crate installs no handler for them by itself;
//!   the application either calls [`remove_temp_files_on_signal`] at start
//!   (the `tether` CLI does) or calls [`remove_unfinished_temp_files`] from
//!   its own handler. A process killed by `SIGKILL` or a crash cannot clean
//!   up; the first `AtomicFile` created in a directory afterwards removes
//!   temporary files of this naming whose process no longer exists
//!   ([`sweep_stale_temp_files`]).
//!
//! ```no_run
//! use std::io::Write as _;
//! use tether_bundle::files::AtomicFile;
//!
//! let mut out = AtomicFile::create("report.json")?; // refuses /dev/null, FIFOs, ...
//! out.write_all(b"{\"p50_ms\": 4.2}\n")
//!     .map_err(|e| out.io_error("writing", e))?;
//! out.persist()?; // nothing at report.json changes before this line
//! # Ok::<(), tether_bundle::files::FileError>(())
//! ```
//!
//! An encoder that needs `Write + Seek` (the `image` crate's `write_to`) can
//! write into an `AtomicFile` directly.
//!
//! Files replaced this way get a new inode: a process that has the old file
//! open or mapped keeps reading the old contents, and other hard links to
//! the old file keep the old contents too.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File, Metadata, OpenOptions, Permissions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

/// What a path names, as far as this module cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link (only seen when a link is not followed).
    Symlink,
    /// A FIFO (named pipe).
    Fifo,
    /// A Unix-domain socket.
    Socket,
    /// A character device (`/dev/null`, a terminal, ...).
    CharDevice,
    /// A block device (a disk).
    BlockDevice,
    /// Anything else the operating system reports.
    Other,
}

impl FileKind {
    /// The kind of a file from its metadata (`lstat` or `stat`).
    pub fn of(meta: &Metadata) -> FileKind {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_file() {
            FileKind::Regular
        } else if t.is_dir() {
            FileKind::Directory
        } else if t.is_symlink() {
            FileKind::Symlink
        } else if t.is_fifo() {
            FileKind::Fifo
        } else if t.is_socket() {
            FileKind::Socket
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::Other
        }
    }

    /// Words for messages: `"regular file"`, `"directory"`, `"FIFO (named
    /// pipe)"`, `"character device"`, ...
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "regular file",
            FileKind::Directory => "directory",
            FileKind::Symlink => "symbolic link",
            FileKind::Fifo => "FIFO (named pipe)",
            FileKind::Socket => "socket",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
            FileKind::Other => "special file",
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Reading or writing, for [`FileError::NotRegular`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The file was to be read.
    Read,
    /// The file was to be written (replaced).
    Write,
}

/// Why a file could not be opened, written or replaced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The path names something other than a regular file.
    #[error("{} `{}`: it is a {kind}, not a regular file{}",
        match access { Access::Read => "cannot read", Access::Write => "refusing to write" },
        path.display(),
        match access {
            Access::Read => "",
            Access::Write => " (only regular files are replaced)",
        })]
    NotRegular {
        /// The path as given.
        path: PathBuf,
        /// What it is.
        kind: FileKind,
        /// Whether it was to be read or written.
        access: Access,
    },
    /// The destination's directory does not exist.
    #[error("cannot write `{}`: the directory `{}` does not exist", path.display(), dir.display())]
    MissingDirectory {
        /// The destination as given.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// The destination's parent exists but is not a directory.
    #[error("cannot write `{}`: `{}` is a {kind}, not a directory", path.display(), dir.display())]
    ParentNotDirectory {
        /// The destination as given.
        path: PathBuf,
        /// Its parent.
        dir: PathBuf,
        /// What the parent is.
        kind: FileKind,
    },
    /// The destination is a symbolic link to a file that does not exist.
    #[error(
        "cannot write `{}`: it is a symbolic link to `{}`, which does not exist \
         (links are followed, not replaced)",
        path.display(), target.display()
    )]
    DanglingSymlink {
        /// The link as given.
        path: PathBuf,
        /// What the link points to.
        target: PathBuf,
    },
    /// Another process holds an exclusive `flock` on the file (it is being
    /// rewritten in place).
    #[error(
        "`{}` is locked by another process that is rewriting it (flock LOCK_EX); \
         waited {waited_ms} ms",
        path.display()
    )]
    Locked {
        /// The file.
        path: PathBuf,
        /// How long we waited for the lock, in milliseconds.
        waited_ms: u64,
    },
    /// An operating-system call failed (`op` says which).
    #[error("I/O error {op} `{}`: {source}", path.display())]
    Io {
        /// The path as given (for a write: the destination, not the
        /// temporary file).
        path: PathBuf,
        /// What was being done, e.g. `"opening"`, `"writing"`.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> FileError + 'a {
    move |source| FileError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

/// Opens `path` for reading if it is a regular file (symbolic links are
/// followed).
///
/// The type is checked before opening (`stat`), and again on the open
/// descriptor (`fstat`); the open itself uses `O_NONBLOCK | O_NOCTTY`, so a
/// FIFO swapped in between cannot make it block. The returned file is in
/// ordinary blocking mode.
///
/// # Errors
/// [`FileError::NotRegular`] (with [`Access::Read`]) for a directory, FIFO,
/// device or socket; [`FileError::Io`] with `op` `"opening"` when the file
/// does not exist or cannot be opened.
pub fn open_regular(path: impl AsRef<Path>) -> Result<File, FileError> {
    let path = path.as_ref();
    let not_regular = |kind| FileError::NotRegular {
        path: path.to_path_buf(),
        kind,
        access: Access::Read,
    };
    let meta = fs::metadata(path).map_err(io_err(path, "opening"))?;
    if !meta.is_file() {
        return Err(not_regular(FileKind::of(&meta)));
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io_err(path, "opening"))?;
    let meta = file
        .metadata()
        .map_err(io_err(path, "reading metadata of"))?;
    if !meta.is_file() {
        return Err(not_regular(FileKind::of(&meta)));
    }
    sys::clear_nonblock(&file).map_err(io_err(path, "opening"))?;
    Ok(file)
}

/// Reads the whole of `path` if it is a regular file ([`open_regular`] then
/// `read_to_end`).
///
/// # Errors
/// As [`open_regular`], and [`FileError::Io`] with `op` `"reading"`.
pub fn read_regular(path: impl AsRef<Path>) -> Result<Vec<u8>, FileError> {
    use std::io::Read as _;
    let path = path.as_ref();
    let mut file = open_regular(path)?;
    let mut out = Vec::new();
    file.read_to_end(&mut out)
        .map_err(io_err(path, "reading"))?;
    Ok(out)
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

/// Where an [`AtomicFile`] will land.
#[derive(Debug)]
struct Destination {
    /// The file that will be replaced or created (a symlink resolved).
    target: PathBuf,
    /// Its metadata, if it exists.
    existing: Option<Metadata>,
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn destination(path: &Path) -> Result<Destination, FileError> {
    // `out/` names a folder (`Path::file_name` would read it as `out`).
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(FileError::Io {
            path: path.to_path_buf(),
            op: "writing",
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path ends in `/`, which names a folder, not a file",
            ),
        });
    }
    if path.file_name().is_none() {
        return Err(FileError::Io {
            path: path.to_path_buf(),
            op: "writing",
            source: io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"),
        });
    }
    let not_regular = |kind| FileError::NotRegular {
        path: path.to_path_buf(),
        kind,
        access: Access::Write,
    };
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match fs::metadata(path) {
            Ok(t) if t.is_file() => Ok(Destination {
                target: fs::canonicalize(path).map_err(io_err(path, "resolving the link"))?,
                existing: Some(t),
            }),
            Ok(t) => Err(not_regular(FileKind::of(&t))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(FileError::DanglingSymlink {
                path: path.to_path_buf(),
                target: fs::read_link(path).unwrap_or_default(),
            }),
            Err(e) => Err(io_err(path, "resolving the link")(e)),
        },
        Ok(m) if m.is_file() => Ok(Destination {
            target: path.to_path_buf(),
            existing: Some(m),
        }),
        Ok(m) => Err(not_regular(FileKind::of(&m))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = parent_dir(path);
            match fs::metadata(dir) {
                Ok(d) if d.is_dir() => Ok(Destination {
                    target: path.to_path_buf(),
                    existing: None,
                }),
                Ok(d) => Err(FileError::ParentNotDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                    kind: FileKind::of(&d),
                }),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Err(FileError::MissingDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                }),
                Err(e) => Err(io_err(path, "checking the directory of")(e)),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            // A component of the directory part is a file.
            Err(FileError::MissingDirectory {
                path: path.to_path_buf(),
                dir: parent_dir(path).to_path_buf(),
            })
        }
        Err(e) => Err(io_err(path, "checking")(e)),
    }
}

/// Checks, without writing anything, that [`AtomicFile::create`] would
/// accept `path` as a destination. Call it before expensive work whose
/// result is to be written there.
///
/// # Errors
/// As [`AtomicFile::create`] (except the errors creating the temporary
/// file).
pub fn check_destination(path: impl AsRef<Path>) -> Result<(), FileError> {
    destination(path.as_ref()).map(|_| ())
}

/// [`check_destination`], then creates and removes one empty temporary file where
/// [`AtomicFile::create`] would (same name form, same folder): a folder that accepts no new
/// file (read-only, not permitted, a virtual file system such as `/proc`) is found before
/// the work instead of after it. The destination itself is not touched.
///
/// # Errors
/// As [`AtomicFile::create`]; [`FileError::Io`] with `op` "creating a temporary file next
/// to" when the folder takes no new file.
pub fn check_writable(path: impl AsRef<Path>) -> Result<(), FileError> {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let path = path.as_ref();
    let dest = destination(path)?;
    let dir = parent_dir(&dest.target);
    let file_name = dest.target.file_name().unwrap_or(OsStr::new("file"));
    // A name of the temporary form whose counter cannot meet AtomicFile's (its counter
    // counts up from 0; this one down from u64::MAX).
    let n = u64::MAX - PROBES.fetch_add(1, Ordering::Relaxed);
    let probe = dir.join(temp_name(file_name, std::process::id(), n));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(io_err(path, "creating a temporary file next to"))?;
    fs::remove_file(&probe).map_err(io_err(path, "removing a temporary file next to"))
}

/// Longest part of the destination's name kept in a temporary file's name
/// (bytes), so that `.NAME.tmp-PID-N` stays within the usual 255-byte limit.
const TEMP_NAME_KEEP: usize = 200;
const TEMP_MARK: &[u8] = b".tmp-";

fn temp_name(file_name: &OsStr, pid: u32, n: u64) -> OsString {
    let name = file_name.as_bytes();
    let name = name.get(..TEMP_NAME_KEEP).unwrap_or(name);
    let mut out = Vec::with_capacity(name.len() + 32);
    out.push(b'.');
    out.extend_from_slice(name);
    out.extend_from_slice(TEMP_MARK);
    out.extend_from_slice(format!("{pid}-{n}").as_bytes());
    OsString::from_vec(out)
}

/// Whether `name` has the form of an [`AtomicFile`] temporary file,
/// `.NAME.tmp-PID-N` (PID and N decimal); returns the PID if so.
pub fn is_temp_file_name(name: &OsStr) -> Option<u32> {
    let b = name.as_bytes();
    let rest = b.strip_prefix(b".")?;
    let at = rest
        .windows(TEMP_MARK.len())
        .rposition(|w| w == TEMP_MARK)?;
    if at == 0 {
        return None;
    }
    let tail = rest.get(at + TEMP_MARK.len()..)?;
    let dash = tail.iter().position(|&c| c == b'-')?;
    let (pid, n) = (tail.get(..dash)?, tail.get(dash + 1..)?);
    let digits = |s: &[u8]| !s.is_empty() && s.len() <= 20 && s.iter().all(u8::is_ascii_digit);
    if !digits(pid) || !digits(n) {
        return None;
    }
    std::str::from_utf8(pid).ok()?.parse().ok()
}

/// Removes the temporary files left in `dir` by [`AtomicFile`]s of
/// processes that no longer exist: regular files named `.NAME.tmp-PID-N`,
/// owned by this process's user, whose PID is not a live process (`kill(PID,
/// 0)` fails with `ESRCH`). Returns the paths removed.
///
/// [`AtomicFile::create`] calls this once per directory and process. PIDs
/// are those of this host's PID namespace: do not share one output
/// directory between containers that write the same files at once.
///
/// # Errors
/// [`FileError::Io`] if `dir` cannot be listed; files that cannot be
/// inspected or removed are skipped.
pub fn sweep_stale_temp_files(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, FileError> {
    let dir = dir.as_ref();
    let me = std::process::id();
    let uid = sys::effective_uid();
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir, "listing"))? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(pid) = is_temp_file_name(&name) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || meta.uid() != uid || sys::process_exists(pid) {
            continue;
        }
        let path = entry.path();
        if fs::remove_file(&path).is_ok() {
            log::info!("removed stale temporary file {}", path.display());
            removed.push(path);
        }
    }
    Ok(removed)
}

fn sweep_once(dir: &Path) {
    static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let key = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    {
        let mut swept = SWEPT.lock().unwrap_or_else(|e| e.into_inner());
        if swept.contains(&key) {
            return;
        }
        swept.push(key);
    }
    if let Err(e) = sweep_stale_temp_files(dir) {
        log::debug!("not sweeping stale temporary files: {e}");
    }
}

/// Makes `SIGINT`, `SIGTERM`, `SIGHUP` and `SIGPIPE` remove the temporary
/// files of unfinished [`AtomicFile`]s before they kill the process: a
/// process-wide change an **application** makes (at the start of `main`, as
/// the `tether` CLI does); the library never calls it.
///
/// Only signals whose disposition is the default (kill the process) are
/// covered: a program that handles or ignores a signal keeps its
/// disposition (it can call [`remove_unfinished_temp_files`] from its own
/// handler), and a handler installed later replaces this one for its signal.
/// The handler unlinks the registered files, restores the default action and
/// re-raises the signal, so the process still dies of it (a shell reports
/// exit status 128 + signal number: 130 for `SIGINT`, 143 for `SIGTERM`).
///
/// Calls after the first do nothing. Returns how many of the four signals
/// are covered.
pub fn remove_temp_files_on_signal() -> usize {
    sys::install_cleanup_handler().len()
}

/// Removes the temporary files of every unfinished [`AtomicFile`] of this
/// process now, and returns how many were removed: for an application that
/// handles `SIGINT`/`SIGTERM` itself and is about to exit without dropping
/// them. The `AtomicFile`s themselves stay valid to drop (a later `persist`
/// fails: its file is gone).
///
/// Async-signal-safe (atomics, a stack buffer, `unlink`): it may be called
/// from inside a signal handler as well as from a thread woken by one
/// (`ctrlc`, `signal-hook`).
pub fn remove_unfinished_temp_files() -> usize {
    sys::remove_registered_temp_files()
}

/// A file being written next to its destination, renamed over it by
/// [`persist`](Self::persist). See the [module documentation](self).
///
/// Writes are buffered; `AtomicFile` implements [`Write`] and [`Seek`].
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    target: PathBuf,
    temp: PathBuf,
    file: Option<BufWriter<File>>,
    keep: Option<(Permissions, u32, u32)>,
    persisted: bool,
    // Last: unregistered after Drop::drop has removed the file.
    _signal: Option<sys::TempRegistration>,
}

impl AtomicFile {
    /// Checks the destination `path` and creates the temporary file next to
    /// it (see the [module documentation](self) for what is accepted).
    ///
    /// # Errors
    /// [`FileError::NotRegular`] (with [`Access::Write`]),
    /// [`FileError::MissingDirectory`], [`FileError::ParentNotDirectory`],
    /// [`FileError::DanglingSymlink`], or [`FileError::Io`] (naming `path`)
    /// when the temporary file cannot be created.
    pub fn create(path: impl AsRef<Path>) -> Result<AtomicFile, FileError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = path.as_ref();
        let dest = destination(path)?;
        let dir = parent_dir(&dest.target).to_path_buf();
        let file_name = dest.target.file_name().unwrap_or(OsStr::new("file"));
        sweep_once(&dir);

        let temp = dir.join(temp_name(
            file_name,
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
        ));
        let absolute = if temp.is_absolute() {
            Some(temp.clone())
        } else {
            std::env::current_dir().ok().map(|d| d.join(&temp))
        };
        // Registered before the file exists, so no signal can leave it behind.
        let signal = absolute
            .as_deref()
            .and_then(sys::TempRegistration::register);
        let keep = dest
            .existing
            .as_ref()
            .map(|m| (m.permissions(), m.uid(), m.gid()));
        let mut open = OpenOptions::new();
        open.write(true).create_new(true);
        if keep.is_some() {
            // Private until persist() gives it the old file's permissions.
            open.mode(0o600);
        }
        let file = open
            .open(&temp)
            .map_err(io_err(path, "creating a temporary file next to"))?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            target: dest.target,
            temp,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            keep,
            persisted: false,
            _signal: signal,
        })
    }

    /// The destination as given to [`create`](Self::create).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file that [`persist`](Self::persist) replaces or creates: the
    /// destination with a symbolic link resolved.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary file.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// A [`FileError::Io`] naming the destination, for errors from the
    /// [`Write`] methods: `out.write_all(b).map_err(|e| out.io_error("writing", e))`.
    pub fn io_error(&self, op: &'static str, source: io::Error) -> FileError {
        FileError::Io {
            path: self.path.clone(),
            op,
            source,
        }
    }

    fn writer(&mut self) -> io::Result<&mut BufWriter<File>> {
        self.file
            .as_mut()
            .ok_or_else(|| io::Error::other("the file was already persisted"))
    }

    /// Flushes, syncs and renames the temporary file over the destination,
    /// then syncs the directory. On error the temporary file is removed and
    /// the destination is untouched.
    ///
    /// # Errors
    /// [`FileError::Io`] (`"writing"`, `"syncing"`, `"renaming into place"`),
    /// and [`FileError::NotRegular`] if something other than a regular file
    /// appeared at the destination since [`create`](Self::create).
    pub fn persist(mut self) -> Result<(), FileError> {
        let path = self.path.clone();
        let w = self
            .file
            .take()
            .ok_or_else(|| io_err(&path, "writing")(io::Error::other("already persisted")))?;
        let file = w
            .into_inner()
            .map_err(|e| io_err(&path, "writing")(e.into_error()))?;
        if let Some((perm, uid, gid)) = &self.keep {
            file.set_permissions(perm.clone())
                .map_err(io_err(&path, "setting the permissions of"))?;
            let now = file.metadata().map(|m| (m.uid(), m.gid())).ok();
            if now.is_some_and(|o| o != (*uid, *gid)) {
                // Keeps the owner where allowed (root); otherwise the new
                // file belongs to us, as any new file would.
                if std::os::unix::fs::fchown(&file, Some(*uid), Some(*gid)).is_ok() {
                    // fchown clears set-id bits; put the mode back.
                    let _ = file.set_permissions(perm.clone());
                }
            }
        }
        file.sync_all().map_err(io_err(&path, "syncing"))?;
        drop(file);
        match fs::symlink_metadata(&self.target) {
            Ok(m) if m.is_file() => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(m) => {
                return Err(FileError::NotRegular {
                    path,
                    kind: FileKind::of(&m),
                    access: Access::Write,
                });
            }
            Err(e) => return Err(io_err(&path, "checking")(e)),
        }
        fs::rename(&self.temp, &self.target).map_err(io_err(&path, "renaming into place"))?;
        self.persisted = true;
        // Make the rename durable; not every file system can sync a directory.
        if let Ok(d) = File::open(parent_dir(&self.target)) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer()?.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.writer()?.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.writer()?.flush()
    }
}

impl Seek for AtomicFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.writer()?.seek(pos)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.persisted {
            drop(self.file.take());
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// Writes `bytes` to `path` through an [`AtomicFile`].
///
/// # Errors
/// As [`AtomicFile::create`] and [`AtomicFile::persist`].
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<(), FileError> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes).map_err(|e| f.io_error("writing", e))?;
    f.persist()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_round_trip() {
        let n = temp_name(OsStr::new("model.bundle"), 1234, 7);
        assert_eq!(n, ".model.bundle.tmp-1234-7");
        assert_eq!(is_temp_file_name(&n), Some(1234));
        let long = "x".repeat(255);
        let n = temp_name(OsStr::new(&long), 99, 0);
        assert!(n.len() <= 255, "{}", n.len());
        assert_eq!(is_temp_file_name(&n), Some(99));
        for bad in [
            "model.bundle",
            ".model.bundle",
            ".tmp-1-2",
            ".a.tmp-1",
            ".a.tmp-x-2",
            ".a.tmp-1-",
            ".a.tmp--1",
            ".a.tmp-1-2.png",
        ] {
            assert_eq!(is_temp_file_name(OsStr::new(bad)), None, "{bad}");
        }
    }
}
