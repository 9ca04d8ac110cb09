//! `tether_bundle::files`: what a destination may be, what an output keeps
//! (permissions, links), temporary files removed on every exit path, and
//! inputs that are not regular files refused without blocking.

mod common;

use std::ffi::CString;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{TempDir, sample, sample_writer};
use tether_bundle::files::{
    self, Access, AtomicFile, FileError, FileKind, is_temp_file_name, open_regular,
};
use tether_bundle::{Bundle, BundleError, Verify};

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn temp_files(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| is_temp_file_name(n.as_ref()).is_some())
        .collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn special_files_are_refused_as_destinations_and_left_alone() {
    let dir = TempDir::new("dest-kinds");
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let sock_path = dir.path().join("sock");
    let _sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    let sub = dir.path().join("subdir");
    std::fs::create_dir(&sub).unwrap();

    for (path, kind) in [
        (&fifo, FileKind::Fifo),
        (&sock_path, FileKind::Socket),
        (&sub, FileKind::Directory),
    ] {
        // Both the facility and the bundle writer refuse, before writing.
        let e = AtomicFile::create(path).unwrap_err();
        assert!(
            matches!(&e, FileError::NotRegular { kind: k, access: Access::Write, .. } if *k == kind),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains(kind.describe()),
            "{msg}"
        );
        let e = sample_writer().write(path).unwrap_err();
        assert!(
            matches!(&e, BundleError::File(FileError::NotRegular { .. })),
            "{e:?}"
        );
        let e = files::write_atomic(path, b"x").unwrap_err();
        assert!(matches!(e, FileError::NotRegular { .. }), "{e:?}");
    }
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(
        std::fs::metadata(&sock_path)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert!(std::fs::metadata(&sub).unwrap().is_dir());
    assert!(temp_files(dir.path()).is_empty(), "{:?}", names(dir.path()));

    // A device node: only the check (never a write to /dev, even as root).
    let e = files::check_destination("/dev/null").unwrap_err();
    assert!(
        matches!(
            e,
            FileError::NotRegular {
                kind: FileKind::CharDevice,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "refusing to write `/dev/null`: it is a character device, not a regular file \
         (only regular files are replaced)"
    );
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

/// `check_writable` makes and removes its probe (nothing left, the destination untouched),
/// and refuses a folder that takes no new file (`/proc`) with the operation named.
#[test]
fn check_writable_probes_the_folder_and_leaves_nothing() {
    let dir = TempDir::new("dest-probe");
    let new = dir.path().join("out.json");
    files::check_writable(&new).unwrap();
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    let old = dir.path().join("old.json");
    std::fs::write(&old, b"kept").unwrap();
    files::check_writable(&old).unwrap();
    assert_eq!(std::fs::read(&old).unwrap(), b"kept");
    assert_eq!(names(dir.path()).len(), 1, "{:?}", names(dir.path()));
    // /proc/version is a regular file, and check_destination accepts it; no file can be
    // created beside it (ENOENT from procfs, even as root).
    files::check_destination("/proc/version").unwrap();
    let e = files::check_writable("/proc/version").unwrap_err();
    assert!(
        matches!(&e, FileError::Io { op, .. } if op.contains("temporary file")),
        "{e:?}"
    );
    assert!(e.to_string().contains("/proc/version"), "{e}");
    // A path ending in `/` names a folder: refused, nothing made.
    let slash = format!("{}/", dir.path().join("out").display());
    let e = files::check_writable(&slash).unwrap_err();
    assert!(e.to_string().contains("ends in `/`"), "{e}");
    assert!(files::write_atomic(&slash, b"x").is_err());
    assert_eq!(names(dir.path()).len(), 1, "{:?}", names(dir.path()));
    // What check_destination refuses, check_writable refuses the same way.
    let e = files::check_writable("/dev/null").unwrap_err();
    assert!(matches!(e, FileError::NotRegular { .. }), "{e:?}");
}

#[test]
fn missing_directory_names_the_given_path() {
    let dir = TempDir::new("dest-missing");
    let path = dir.path().join("no/such/dir/out.bundle");
    let e = sample_writer().write(&path).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            &e,
            BundleError::File(FileError::MissingDirectory { path: p, .. }) if *p == path
        ),
        "{e:?}"
    );
    assert!(msg.contains("no/such/dir/out.bundle"), "{msg}");
    assert!(!msg.contains(".tmp-"), "{msg}");

    // A file where a directory should be.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"").unwrap();
    let e = AtomicFile::create(file.join("out.bundle")).unwrap_err();
    assert!(
        matches!(e, FileError::MissingDirectory { .. }),
        "{e:?}: {e}"
    );
}

#[test]
fn an_existing_file_keeps_its_permissions_and_a_new_one_gets_the_default() {
    let dir = TempDir::new("dest-mode");
    let private = dir.path().join("private.bundle");
    std::fs::write(&private, b"old").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    sample_writer().write(&private).unwrap();
    assert_eq!(std::fs::read(&private).unwrap(), sample());
    assert_eq!(mode(&private), 0o600);

    let odd = dir.path().join("odd.json");
    std::fs::write(&odd, b"old").unwrap();
    std::fs::set_permissions(&odd, std::fs::Permissions::from_mode(0o640)).unwrap();
    files::write_atomic(&odd, b"{}").unwrap();
    assert_eq!(mode(&odd), 0o640);

    // A new file gets what any new file gets here (0666 minus the umask).
    let reference = dir.path().join("reference");
    std::fs::write(&reference, b"").unwrap();
    let fresh = dir.path().join("fresh.bundle");
    sample_writer().write(&fresh).unwrap();
    assert_eq!(mode(&fresh), mode(&reference));
    assert!(temp_files(dir.path()).is_empty());
}

#[test]
fn a_symlink_is_followed_and_stays_a_link() {
    let dir = TempDir::new("dest-link");
    let real = dir.path().join("v3.bundle");
    std::fs::write(&real, b"old").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.path().join("current.bundle");
    std::os::unix::fs::symlink("v3.bundle", &link).unwrap();

    let summary = sample_writer().write(&link).unwrap();
    assert_eq!(summary.path, link);
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    assert_eq!(std::fs::read(&real).unwrap(), sample());
    assert_eq!(mode(&real), 0o600);
    assert!(temp_files(dir.path()).is_empty());

    // A link to nothing is refused, and stays as it was.
    let dangling = dir.path().join("dangling.bundle");
    std::os::unix::fs::symlink("nowhere/x.bundle", &dangling).unwrap();
    let e = sample_writer().write(&dangling).unwrap_err();
    assert!(
        matches!(&e, BundleError::File(FileError::DanglingSymlink { .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("nowhere/x.bundle"), "{e}");
    assert!(
        std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A link to a FIFO is a FIFO.
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let to_fifo = dir.path().join("to-fifo");
    std::os::unix::fs::symlink("fifo", &to_fifo).unwrap();
    let e = AtomicFile::create(&to_fifo).unwrap_err();
    assert!(
        matches!(
            e,
            FileError::NotRegular {
                kind: FileKind::Fifo,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn dropped_without_persist_leaves_nothing_and_the_destination_untouched() {
    let dir = TempDir::new("dest-drop");
    let path = dir.path().join("out.png");
    std::fs::write(&path, b"old image").unwrap();
    {
        let mut f = AtomicFile::create(&path).unwrap();
        assert_eq!(f.path(), path);
        assert!(is_temp_file_name(f.temp_path().file_name().unwrap()).is_some());
        f.write_all(&[1u8; 3 << 20]).unwrap();
        f.flush().unwrap();
        assert!(f.temp_path().exists());
        // An error (or early return, or unwinding panic) drops it here.
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"old image");
    assert_eq!(names(dir.path()), ["out.png"]);

    // Write + Seek, as an image encoder uses it.
    let mut f = AtomicFile::create(&path).unwrap();
    f.write_all(b"XXXXworld").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(b"hell").unwrap();
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(b"!").unwrap();
    f.persist().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"hellworld!");
    assert_eq!(names(dir.path()), ["out.png"]);
}

/// A PID that is not a live process: a child that has exited and been
/// reaped.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn stale_temp_files_of_dead_processes_are_swept() {
    let dir = TempDir::new("dest-sweep");
    let dead = dead_pid();
    let stale = format!(".out.bundle.tmp-{dead}-3");
    let live = ".out.bundle.tmp-1-0".to_string(); // PID 1 always exists
    let other = format!(".notes.tmp-{dead}"); // not our naming
    for n in [&stale, &live, &other] {
        std::fs::write(dir.path().join(n), vec![0u8; 1000]).unwrap();
    }
    sample_writer()
        .write(dir.path().join("out.bundle"))
        .unwrap();
    let left = names(dir.path());
    assert!(!left.contains(&stale), "{left:?}");
    assert!(left.contains(&live), "{left:?}");
    assert!(left.contains(&other), "{left:?}");
    assert!(left.contains(&"out.bundle".to_string()), "{left:?}");

    // Called directly: reports what it removed.
    std::fs::write(dir.path().join(&stale), b"").unwrap();
    let removed = files::sweep_stale_temp_files(dir.path()).unwrap();
    assert_eq!(removed, [dir.path().join(&stale)]);
}

/// Child half of the signal tests: installs the cleanup handler when
/// `TETHER_TEST_OPT_IN` is 1 (as the `tether` CLI does at start), creates an
/// `AtomicFile`, writes to it, says where, and waits to be killed.
#[test]
fn child_writes_until_killed() {
    let Some(dest) = std::env::var_os("TETHER_TEST_ATOMIC_DEST") else {
        return; // only meaningful when spawned by the signal tests
    };
    if std::env::var_os("TETHER_TEST_OPT_IN").is_some_and(|v| v == "1") {
        assert_eq!(
            files::remove_temp_files_on_signal(),
            3,
            "SIGPIPE is ignored by libtest"
        );
    }
    let mut f = AtomicFile::create(PathBuf::from(dest)).unwrap();
    f.write_all(&[7u8; 1 << 20]).unwrap();
    f.flush().unwrap();
    println!("TEMP {}", f.temp_path().display());
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
    panic!("not killed");
}

/// The child's SIGINT, SIGTERM and SIGHUP set back to their default action before it
/// starts: the signal tests model an application started from a terminal, while a test
/// run may inherit ignored ones (`nohup` ignores SIGHUP; a shell's background job
/// ignores SIGINT), which the library rightly leaves alone.
fn with_default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only `signal`, which is async-signal-safe, is called.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        })
    }
}

/// Spawns `child_writes_until_killed`, kills it with `sig` once its temporary
/// file exists, and returns that file's path.
fn kill_writer(dest: &Path, sig: libc::c_int, opt_in: bool) -> PathBuf {
    use std::io::BufRead as _;
    use std::os::unix::process::ExitStatusExt;
    let mut child = with_default_signals(&mut Command::new(std::env::current_exe().unwrap()))
        .args(["--exact", "child_writes_until_killed", "--nocapture"])
        .env("TETHER_TEST_ATOMIC_DEST", dest)
        .env("TETHER_TEST_OPT_IN", if opt_in { "1" } else { "0" })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let temp = loop {
        let line = lines.next().expect("child output").unwrap();
        // libtest may print `test child_writes_until_killed ... ` first.
        if let Some((_, t)) = line.split_once("TEMP ") {
            break PathBuf::from(t);
        }
    };
    assert!(temp.exists(), "{}", temp.display());
    // SAFETY: kill with a valid signal number to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(sig), "dies of the signal: {status:?}");
    temp
}

/// With the cleanup the application asked for, a terminating signal removes
/// the temporary file and leaves the destination untouched.
#[test]
fn temp_file_is_removed_on_signals() {
    let dir = TempDir::new("dest-signal");
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let dest = dir.path().join(format!("out-{sig}.bundle"));
        std::fs::write(&dest, b"old").unwrap();
        let temp = kill_writer(&dest, sig, true);
        assert!(!temp.exists(), "temp file left after signal {sig}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"old");
    }
    assert!(temp_files(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

/// The library takes no signal of the application's: without the opt-in,
/// `AtomicFile` installs no handler, so a signal kills the process as it
/// would have, leaving the temporary file for the next sweep.
#[test]
fn the_library_installs_no_handler_for_terminating_signals() {
    let dir = TempDir::new("dest-no-handler");
    let dest = dir.path().join("out.bundle");
    std::fs::write(&dest, b"old").unwrap();
    let temp = kill_writer(&dest, libc::SIGTERM, false);
    assert!(
        temp.exists(),
        "removed without a handler? {}",
        temp.display()
    );
    assert_eq!(std::fs::read(&dest).unwrap(), b"old");
    // The next AtomicFile in that directory sweeps it (its process is gone).
    let removed = files::sweep_stale_temp_files(dir.path()).unwrap();
    assert_eq!(removed, [temp]);
}

/// Child half of `unfinished_temp_files_are_removed_on_request` (its own
/// process: the call removes every unfinished temporary file of the process).
#[test]
fn child_removes_unfinished_temp_files() {
    let Some(dir) = std::env::var_os("TETHER_TEST_UNFINISHED_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let mut a = AtomicFile::create(dir.join("a.bin")).unwrap();
    let b = AtomicFile::create(dir.join("b.bin")).unwrap();
    a.write_all(b"partial").unwrap();
    let temps = [a.temp_path().to_path_buf(), b.temp_path().to_path_buf()];
    assert!(temps.iter().all(|t| t.exists()));
    assert_eq!(files::remove_unfinished_temp_files(), 2);
    assert!(temps.iter().all(|t| !t.exists()), "{temps:?}");
    assert!(a.persist().is_err(), "its file is gone");
    drop(b);
    assert_eq!(
        files::remove_unfinished_temp_files(),
        0,
        "none registered now"
    );
    // What the library changed about SIGINT, SIGTERM and SIGHUP: nothing.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid; with a null `act`, sigaction
        // only reads the current disposition into `old`.
        let handler = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut old), 0);
            old.sa_sigaction
        };
        assert_eq!(handler, libc::SIG_DFL, "signal {sig}");
    }
    println!("CHILD OK");
}

/// An application with signal handlers of its own removes the unfinished
/// temporary files itself, with one async-signal-safe call.
#[test]
fn unfinished_temp_files_are_removed_on_request() {
    let dir = TempDir::new("unfinished");
    let out = with_default_signals(&mut Command::new(std::env::current_exe().unwrap()))
        .args([
            "--exact",
            "child_removes_unfinished_temp_files",
            "--nocapture",
        ])
        .env("TETHER_TEST_UNFINISHED_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHILD OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(temp_files(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

#[test]
fn inputs_that_are_not_regular_files_are_refused_without_blocking() {
    let dir = TempDir::new("input-kinds");
    let fifo = dir.path().join("model.bundle");
    mkfifo(&fifo);
    let (tx, rx) = std::sync::mpsc::channel();
    let f2 = fifo.clone();
    std::thread::spawn(move || {
        let r = (
            open_regular(&f2).map(|_| ()),
            Bundle::open(&f2, Verify::Eager).map(|_| ()),
        );
        let _ = tx.send(r);
    });
    let (plain, bundle) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("opening a FIFO blocked");
    let e = plain.unwrap_err();
    assert!(
        matches!(
            e,
            FileError::NotRegular {
                kind: FileKind::Fifo,
                access: Access::Read,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "cannot read `{}`: it is a FIFO (named pipe), not a regular file",
            fifo.display()
        )
    );
    let e = bundle.unwrap_err();
    assert!(
        matches!(
            &e,
            BundleError::File(FileError::NotRegular {
                kind: FileKind::Fifo,
                ..
            })
        ),
        "{e:?}"
    );
    let e = Bundle::open(dir.path(), Verify::Lazy).unwrap_err();
    assert!(
        matches!(
            &e,
            BundleError::File(FileError::NotRegular {
                kind: FileKind::Directory,
                ..
            })
        ),
        "{e:?}"
    );
    let e = Bundle::open("/dev/zero", Verify::Lazy).unwrap_err();
    assert!(
        matches!(
            &e,
            BundleError::File(FileError::NotRegular {
                kind: FileKind::CharDevice,
                ..
            })
        ),
        "{e:?}"
    );
    // A regular file read through a symlink is fine.
    let real = dir.path().join("real.bundle");
    std::fs::write(&real, sample()).unwrap();
    let link = dir.path().join("link.bundle");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(files::read_regular(&link).unwrap(), sample());
    Bundle::open(&link, Verify::Eager).unwrap();
}

#[test]
fn write_to_streams_the_same_bytes() {
    let mut out = Vec::new();
    let s = sample_writer().write_to(&mut out).unwrap();
    assert_eq!(out, sample());
    assert_eq!(s.file_len, out.len() as u64);
    assert_eq!(s.path, PathBuf::new());
}
