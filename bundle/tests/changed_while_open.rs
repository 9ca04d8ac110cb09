//! A bundle file truncated or rewritten in place while a process has it
//! mapped: the process never dies of `SIGBUS`; what it reads afterwards is
//! reported as `BundleError::ChangedWhileOpen`; what it copied at load stays
//! good. Also the shared `flock` an open bundle holds.

mod common;

use std::fs::OpenOptions;
use std::io::{BufRead as _, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, pattern};
use tether_bundle::files::FileError;
use tether_bundle::*;

/// A bundle with a 4 MiB model and a small labels section, so that a
/// truncation lands in the middle of reading it.
fn big_writer() -> BundleWriter {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "big".into(),
        family: "detect".into(),
        ..Default::default()
    });
    w.add_section(
        SectionKind::Labels,
        "labels",
        None,
        b"person\ncar\n".to_vec(),
    )
    .unwrap();
    w.add_section(SectionKind::Onnx, "model.onnx", None, pattern(4 << 20, 9))
        .unwrap();
    w
}

fn truncate(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn is_changed(e: &BundleError, path: &Path) -> bool {
    matches!(e, BundleError::ChangedWhileOpen { path: p } if p == path)
}

#[test]
fn truncation_after_open_is_an_error_not_a_crash() {
    let dir = TempDir::new("truncated-lazy");
    let path = dir.path().join("b.bundle");
    big_writer().write(&path).unwrap();

    let b = Bundle::open(&path, Verify::Lazy).unwrap();
    let labels = b.section("labels").unwrap();
    let model = b.section("model.onnx").unwrap();
    let copied = b.section_vec(&labels).unwrap();
    assert!(!b.changed_while_open());

    // Keep only the header page: the manifest and every payload are gone.
    truncate(&path, 4096);
    assert!(b.changed_while_open(), "the length changed");
    let e = b.section_vec(&model).unwrap_err();
    assert!(is_changed(&e, &path), "{e:?}");
    assert!(e.to_string().contains("b.bundle"), "{e}");
    let e = b.section_bytes(&model).unwrap_err();
    assert!(is_changed(&e, &path), "{e:?}");
    let e = b.verify_all().unwrap_err();
    assert!(is_changed(&e, &path), "{e:?}");
    assert!(is_changed(&b.ensure_unchanged().unwrap_err(), &path));
    // Borrowing accessors read what is there now (zeros), without dying.
    let _ = (b.identity().name, b.sections().count(), format!("{b:?}"));
    // What was copied at load is intact.
    assert_eq!(copied, b"person\ncar\n");
}

#[test]
fn bytes_borrowed_before_a_truncation_read_as_zeros_and_are_flagged() {
    let dir = TempDir::new("truncated-eager");
    let path = dir.path().join("b.bundle");
    big_writer().write(&path).unwrap();

    let b = Bundle::open(&path, Verify::Eager).unwrap();
    let model = b.section("model.onnx").unwrap();
    let data = b.section_bytes(&model).unwrap(); // verified at open: no read here
    truncate(&path, 0);
    // An engine consuming the borrowed bytes now reads zeros instead of
    // dying; the check after consumption says what happened.
    assert!(data.iter().all(|&x| x == 0));
    let e = b.ensure_unchanged().unwrap_err();
    assert!(is_changed(&e, &path), "{e:?}");
    let e = b.section_bytes(&model).unwrap_err();
    assert!(is_changed(&e, &path), "{e:?}");
}

#[test]
fn an_in_place_rewrite_without_truncation_is_detected() {
    let dir = TempDir::new("rewritten");
    let path = dir.path().join("b.bundle");
    big_writer().write(&path).unwrap();
    let b = Bundle::open(&path, Verify::Lazy).unwrap();
    let model = b.section("model.onnx").unwrap();
    // Same length, different bytes in the payload, and a later mtime.
    std::thread::sleep(Duration::from_millis(20));
    let mut f = OpenOptions::new().write(true).open(&path).unwrap();
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(model.offset + 100)).unwrap();
    f.write_all(&[0xAB; 64]).unwrap();
    drop(f);
    let e = b.section_vec(&model).unwrap_err();
    assert!(is_changed(&e, &path), "{e:?}");
}

/// Child half of the tests below. `TETHER_TEST_CHILD` selects the role.
#[test]
fn child_role() {
    let Some(role) = std::env::var_os("TETHER_TEST_CHILD") else {
        return; // only meaningful when spawned by the tests below
    };
    let path = PathBuf::from(std::env::var_os("TETHER_TEST_BUNDLE").unwrap());
    match role.to_str().unwrap() {
        "open-loop" => {
            // Open and load repeatedly while the parent rewrites the file.
            let until = Instant::now() + Duration::from_secs(4);
            let (mut ok, mut changed, mut other) = (0u32, 0u32, 0u32);
            while Instant::now() < until {
                let r = Bundle::open(&path, Verify::Eager).and_then(|b| {
                    let labels = b.section("labels")?;
                    b.section_vec(&labels)?;
                    b.verify_all().map(|_| ())
                });
                match r {
                    Ok(()) => ok += 1,
                    Err(BundleError::ChangedWhileOpen { .. }) => changed += 1,
                    Err(_) => other += 1,
                }
            }
            println!("RESULT ok={ok} changed={changed} other={other}");
        }
        "load-then-report" => {
            // Load (copying what results need), wait for the parent to
            // truncate the file, then print results and exit normally.
            let b = Bundle::open(&path, Verify::Eager).unwrap();
            let labels = b.section_vec(&b.section("labels").unwrap()).unwrap();
            let name = b.identity().name.to_owned();
            println!("LOADED");
            std::io::stdout().flush().unwrap();
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            // Touching the mapping after the truncation does not kill us.
            let now = b.identity().name.to_owned();
            let flagged = b.ensure_unchanged().is_err();
            println!(
                "RESULT bundle={name} labels={} now={now:?} flagged={flagged}",
                String::from_utf8(labels).unwrap().trim().replace('\n', ",")
            );
        }
        r => panic!("unknown role {r}"),
    }
}

fn child(role: &str, path: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env("TETHER_TEST_CHILD", role)
        .env("TETHER_TEST_BUNDLE", path)
        .stderr(Stdio::inherit());
    c
}

#[test]
fn a_process_loading_while_the_file_is_rewritten_in_place_never_dies_of_sigbus() {
    let dir = TempDir::new("rewrite-loop");
    let path = dir.path().join("b.bundle");
    let bytes = big_writer().to_bytes().unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let mut c = child("open-loop", &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();

    // What `cp new.bundle b.bundle` does, over and over: truncate the same
    // inode, then write it back in pieces.
    let until = Instant::now() + Duration::from_secs(5);
    let mut rewrites = 0u32;
    while Instant::now() < until {
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        for chunk in bytes.chunks(256 << 10) {
            f.write_all(chunk).unwrap();
        }
        drop(f);
        rewrites += 1;
        if c.try_wait().unwrap().is_some() {
            break;
        }
    }
    let out = c.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.signal(),
        None,
        "the loader was killed by signal {:?} ({rewrites} rewrites); output: {stdout}",
        out.status.signal()
    );
    assert!(out.status.success(), "{:?}: {stdout}", out.status);
    assert!(stdout.contains("RESULT ok="), "{stdout}");
    eprintln!("{rewrites} in-place rewrites; child {}", stdout.trim());
}

#[test]
fn a_process_that_loaded_a_bundle_finishes_after_the_file_is_truncated() {
    let dir = TempDir::new("truncate-after-load");
    let path = dir.path().join("b.bundle");
    big_writer().write(&path).unwrap();
    let mut c = child("load-then-report", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(c.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("child output").unwrap();
        // libtest may print `test child_role ... ` before it on the line.
        if line.ends_with("LOADED") {
            break;
        }
    }
    truncate(&path, 0);
    writeln!(c.stdin.take().unwrap()).unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = c.wait().unwrap();
    assert!(status.success(), "{status:?}: {rest:?}");
    let result = rest
        .iter()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("{rest:?}"));
    assert_eq!(result, "bundle=big labels=person,car now=\"\" flagged=true");
}

#[test]
fn an_open_bundle_holds_a_shared_lock_that_in_place_writers_can_wait_for() {
    let dir = TempDir::new("lock");
    let path = dir.path().join("b.bundle");
    big_writer().write(&path).unwrap();
    let try_ex = |f: &std::fs::File| {
        // SAFETY: flock on a descriptor that `f` keeps open.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }
    };
    let writer = OpenOptions::new().write(true).open(&path).unwrap();
    {
        let _b = Bundle::open(&path, Verify::Lazy).unwrap();
        assert_eq!(try_ex(&writer), -1, "an in-place writer must wait");
    }
    // Dropped: the writer gets the lock, and open waits for it, then gives
    // up with a typed error.
    assert_eq!(try_ex(&writer), 0);
    let t0 = Instant::now();
    let e = Bundle::open(&path, Verify::Lazy).unwrap_err();
    assert!(
        matches!(&e, BundleError::File(FileError::Locked { .. })),
        "{e:?}"
    );
    assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
    // Released during the wait: open succeeds.
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(writer);
    });
    Bundle::open(&path, Verify::Eager).unwrap();
    release.join().unwrap();
}
