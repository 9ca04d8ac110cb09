//! The `tether` subcommands, and what they share: error reporting, output that fails
//! cleanly, safe file writes.

pub mod bench;
pub mod build;
pub mod doctor;
pub mod family_args;
pub mod inspect;
pub mod run;
pub mod selftest;
pub mod text;

use std::io::Write;

/// Every number of `v` that is an `f32` widened to `f64` (it converts back exactly) becomes
/// the shortest decimal that reads back as the same `f32`: `0.7f32` prints `0.7`, not
/// `0.699999988079071` (serde_json stores every number as `f64`). Integers and values that
/// are not exactly an `f32` are left as they are. Applied to every JSON document the CLI
/// prints (docs/cli-json.md, "Numbers").
pub fn tidy(mut v: serde_json::Value) -> serde_json::Value {
    shortest_f32(&mut v);
    v
}

/// [`tidy`] in place.
pub fn shortest_f32(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(x) = n.as_f64() {
                let f = x as f32;
                if f64::from(f) == x
                    && f.is_finite()
                    && let Ok(short) = f.to_string().parse::<f64>()
                    && let Some(m) = serde_json::Number::from_f64(short)
                {
                    *n = m;
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(shortest_f32),
        Value::Object(o) => o.values_mut().for_each(shortest_f32),
        _ => {}
    }
}

use tether_bundle::BundleError;

/// Exit status for a usage error (clap's own, and out-of-range values found after parsing).
pub const EXIT_USAGE: u8 = 2;

/// A usage error found after parsing (a value out of range): exit status [`EXIT_USAGE`].
pub use tether_family::family::UsageError;

/// Exit status after Ctrl-C (128 + SIGINT), as shells report a process ended by it.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Record a Ctrl-C in `flag`; a second one (the flag already set) ends the process at once
/// with [`EXIT_INTERRUPTED`] and one line on stderr, without waiting for the run in flight
/// (a long warm-up, a load) and without a report, as llama.cpp's CLI does on its second
/// Ctrl-C. Called from the `ctrlc` handler's thread; `_exit` runs no exit handlers, so a
/// GPU context in use on the main thread is not torn down under it.
pub(crate) fn ctrl_c(flag: &std::sync::atomic::AtomicBool) {
    if flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
        let line = b"\nsecond Ctrl-C: stopped at once, without a report\n";
        // SAFETY: write(2) of a static buffer to stderr and _exit(2) are async-signal-safe
        // and need no state of this process; the buffer outlives the call.
        unsafe {
            libc::write(2, line.as_ptr().cast(), line.len());
            libc::_exit(i32::from(EXIT_INTERRUPTED));
        }
    }
}

/// The existing file `p` names, as its device and inode (links followed, so links and
/// other spellings of a path give the same pair); `None` when it cannot be read.
pub(crate) fn file_id(p: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether `a` and `b` name one existing file ([`file_id`]); false when either cannot be
/// read.
pub(crate) fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    file_id(a).is_some_and(|x| file_id(b) == Some(x))
}

/// A usage error when the output `out` (given as `out_arg`) is the same file as an input
/// (given as `in_arg`): writing it would destroy that input.
pub(crate) fn refuse_output_over_input(
    out_arg: &str,
    out: &std::path::Path,
    in_arg: &str,
    input: &std::path::Path,
) -> anyhow::Result<()> {
    if same_file(out, input) {
        crate::usage!(
            "{out_arg} {}: the same file as {in_arg} {}, which writing there would destroy: choose another output path",
            out.display(),
            input.display()
        );
    }
    Ok(())
}

/// Bail out with a [`UsageError`].
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::cli::UsageError(format!($($t)*))))
    };
}

/// The exit status for an error: [`EXIT_USAGE`] for usage errors, 1 otherwise.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.downcast_ref::<UsageError>().is_some()) {
        EXIT_USAGE
    } else {
        1
    }
}

/// An error as one line: its causes joined with `: `, each piece once (a wrapper often
/// repeats its source's text, an OS error in particular). Used for the `error:` line and for
/// the `error` entries of JSON output.
///
/// A context that only says which thing was at work (`input X`, `reading X`, `opening X`: one
/// word, then the thing) is left out when a later cause names the same thing, so that a
/// path is said once (`I/O error opening `x.wav`: No such file or directory`, not
/// `input x.wav: reading x.wav: ...`).
pub fn message(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        let s = s.lines().next().unwrap_or_default().to_string();
        if parts.iter().any(|p| p.contains(&s)) {
            continue;
        }
        parts.push(s);
    }
    let keep: Vec<bool> = (0..parts.len())
        .map(|i| {
            thing_named(&parts[i])
                .is_none_or(|thing| !parts[i + 1..].iter().any(|later| names(later, thing)))
        })
        .collect();
    parts
        .iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p.as_str()))
        .collect::<Vec<_>>()
        .join(": ")
}

/// The thing a context of the form `WORD THING` names (`reading x.wav` -> `x.wav`): one
/// lowercase word, a space, then a thing without `: ` (a path, a label).
fn thing_named(context: &str) -> Option<&str> {
    let (word, thing) = context.split_once(' ')?;
    (!word.is_empty()
        && word.chars().all(|c| c.is_ascii_lowercase())
        && thing.len() >= 2
        && !thing.contains(": "))
    .then_some(thing)
}

/// Whether `text` names `thing` as the subject of its message: quoted (`` `x` ``, `'x'`,
/// `"x"`), at its start followed by `:` or a space (`x.png: ...`, `x.txt is not UTF-8`), or
/// after one leading word and followed by `:` (`WAV x.wav: not a WAV file`).
/// A bare word inside a sentence does not count: an input labelled `prompt` is not named by
/// "no such prompt file".
fn names(text: &str, thing: &str) -> bool {
    ['`', '\'', '"']
        .iter()
        .any(|q| text.contains(&format!("{q}{thing}{q}")))
        || text
            .strip_prefix(thing)
            .is_some_and(|rest| rest.starts_with(':') || rest.starts_with(' '))
        || text.split_once(' ').is_some_and(|(word, rest)| {
            !word.is_empty()
                && word.chars().all(|c| c.is_ascii_alphanumeric())
                && rest.strip_prefix(thing).is_some_and(|r| r.starts_with(':'))
        })
}

/// Print an error as one `error:` line (its causes joined with `: `, each OS error once),
/// then one `hint:` line when a hint fits the failure.
pub fn report(e: &anyhow::Error) {
    let mut err = std::io::stderr().lock();
    let line = message(e);
    let _ = writeln!(err, "error: {}", text::escape_control(&line));
    if let Some(h) = hint(e) {
        let _ = writeln!(err, "hint: {h}");
    } else if e.chain().any(|c| c.downcast_ref::<UsageError>().is_some()) {
        // The real help command: the subcommand this process was given (not repeated when
        // the error already names it).
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let _ = match family_args::help_command(&argv) {
            Some(cmd) if line.contains(&cmd) => Ok(()),
            Some(cmd) => writeln!(
                err,
                "hint: `{cmd}` describes every option and the values it accepts"
            ),
            None => writeln!(err, "hint: `tether --help` lists the commands"),
        };
    }
}

fn bundle_hint(b: &BundleError) -> &'static str {
    match b {
        BundleError::Io { .. } | BundleError::File(_) => {
            "check the path; bundles are written by `tether build`"
        }
        // Refusals of the writer: what was being written, not a corrupt file.
        BundleError::NameTooLong { .. }
        | BundleError::EmptyName { .. }
        | BundleError::InvalidSm { .. }
        | BundleError::NotAnEngineSection { .. }
        | BundleError::DuplicateTensor { .. }
        | BundleError::TooLarge { .. } => {
            "a name or value given to `tether build` (or read from the model's metadata) does not fit the bundle format (bundle/FORMAT.md, section 9 lists the limits)"
        }
        BundleError::BadMagic { found } => match known_format(found) {
            Some(hint) => hint,
            None => {
                "the file is not a tether bundle (or is a damaged copy of one); bundles are written by `tether build`, and `tether verify` checks one"
            }
        },
        BundleError::ChangedWhileOpen { .. } => {
            "the file was overwritten while tether read it; install a new bundle by renaming it over the old one (`mv`, or `tether build -o`), not with `cp`"
        }
        _ => {
            "the file is not a valid tether bundle (truncated or corrupted copy?); rebuild it with `tether build` and check it with `tether verify`"
        }
    }
}

/// What an input file given where the bundle belongs is, from its first bytes, as
/// `tether_family::sniff` names it: the inputs the families take, `a PNG image`, `a JPEG
/// image` or `WAV audio` (a RIFF file whose form lies beyond the bytes given taken as WAV).
pub(crate) fn input_kind(head: &[u8]) -> Option<&'static str> {
    match tether_family::sniff::looks_like(head) {
        k @ ("a PNG image" | "a JPEG image" | "WAV audio") => Some(k),
        "a RIFF file of another form than WAVE" if head.len() < 12 => Some("WAV audio"),
        _ => None,
    }
}

/// The hint for an input given where the bundle belongs ([`input_kind`]). (The commands
/// catch model files and these inputs before opening, as usage errors:
/// `run::model_format`.)
pub(crate) fn known_format(head: &[u8; 8]) -> Option<&'static str> {
    input_kind(head).map(|_| {
        "this file is an input, not a bundle: a command takes the bundle first (`tether run model.bundle INPUT...`, `tether verify model.bundle`)"
    })
}

fn hint(e: &anyhow::Error) -> Option<&'static str> {
    for cause in e.chain() {
        // Usage errors: `report` prints the real help command.
        if cause.downcast_ref::<UsageError>().is_some() {
            return None;
        }
        if let Some(b) = cause.downcast_ref::<BundleError>() {
            return Some(bundle_hint(b));
        }
        // A family's own errors: the family explains them (the CLI names no family).
        if let Some(h) = tether::families::REGISTRY
            .iter()
            .find_map(|f| f.hint(cause))
        {
            return Some(h);
        }
        if let Some(h) = cause
            .downcast_ref::<tether_runtime::Error>()
            .and_then(runtime_hint)
        {
            return Some(h);
        }
        if let Some(d) = cause.downcast_ref::<tether_family::decode::DecodeError>() {
            use tether_family::decode::DecodeError as D;
            return Some(match d {
                D::TooLarge { .. } => "downscale the image, or split it into tiles",
                D::NotAFile { .. } => "inputs must be regular files",
                D::Io { .. } => "check the path and its permissions",
                D::Format { .. } | D::NotAnImage { .. } => {
                    "inputs must be readable PNG or JPEG images"
                }
            });
        }
        if cause.downcast_ref::<tether_build::OnnxError>().is_some() {
            return Some(
                "the file is not an ONNX model tract can read (check it with `python -m onnx.checker` or re-export it)",
            );
        }
        if let Some(w) = cause.downcast_ref::<OutputError>() {
            return Some(w.hint());
        }
    }
    None
}

fn runtime_hint(r: &tether_runtime::Error) -> Option<&'static str> {
    use tether_runtime::Error as R;
    Some(match r {
        R::Bundle(b) => bundle_hint(b),
        R::DeviceUnavailable { .. } => {
            "`tether doctor` shows what this machine has and every place libcuda was looked for; `--device cpu` runs anywhere"
        }
        R::NotCompiledIn { .. } => {
            "this tether was built without that engine; `--device cpu` runs anywhere"
        }
        // A section the engines read is damaged: the file is at fault, not the device.
        R::NoEnginePrepared {
            damaged: Some(b), ..
        } => bundle_hint(b),
        R::Refused { .. } | R::NoEnginePrepared { .. } => {
            "`tether inspect` lists the bundle's engines; `tether doctor` describes this device"
        }
        R::Prepare(_) => {
            "the network could not be prepared: check the ONNX file (`python -m onnx.checker MODEL.onnx`) or re-export it"
        }
        _ => return None,
    })
}

/// A file tether could not write: names the path and the cause (the cause alone when it
/// names the path itself: `refusing to write `/tmp`: it is a directory ...`).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct OutputError {
    /// The file.
    pub path: std::path::PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

impl OutputError {
    fn describe(&self) -> String {
        let path = self.path.display().to_string();
        let cause = self.source.to_string();
        if cause.contains(&format!("`{path}`")) {
            cause
        } else {
            format!("cannot write {path}: {cause}")
        }
    }

    fn hint(&self) -> &'static str {
        use std::io::ErrorKind as K;
        match self.source.kind() {
            K::PermissionDenied | K::ReadOnlyFilesystem => {
                "the folder is not writable: choose another output path"
            }
            K::StorageFull | K::QuotaExceeded => "the disk is full: free space or write elsewhere",
            // The folder exists but a file cannot be made in it (`/proc`).
            K::NotFound
                if self
                    .path
                    .parent()
                    .is_some_and(|d| d.as_os_str().is_empty() || d.is_dir()) =>
            {
                "the folder takes no new files: write elsewhere"
            }
            K::NotFound => "create the folder first, or write elsewhere",
            K::InvalidInput => "give the path of a regular file in a folder that exists",
            K::NotADirectory => "the path names a file where a folder is needed: name a folder",
            _ => "check the output path",
        }
    }
}

/// `writeln!` to stdout that returns the write error instead of panicking (a full disk, a
/// closed pipe under `SIGPIPE` ignored): the command then fails with one `error:` line.
#[macro_export]
macro_rules! outln {
    () => { $crate::cli::write_out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::cli::write_out(format_args!("{}\n", format_args!($($t)*))) };
}

/// Write to stdout, mapping a failure to a one-line error.
///
/// # Errors
/// "writing to stdout" with the OS error.
pub fn write_out(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("writing to stdout: {e}"))
}

pub use text::escape_control as escape;

#[cfg(test)]
mod tests {
    use super::message;
    use anyhow::anyhow;

    #[test]
    fn message_says_a_path_once() {
        let e = anyhow!("I/O error opening `a/x.wav`: No such file or directory")
            .context("reading a/x.wav")
            .context("input a/x.wav");
        assert_eq!(
            message(&e),
            "I/O error opening `a/x.wav`: No such file or directory"
        );
        // A context whose thing the causes do not name stays, and so does one whose thing
        // is more than a name (`in x.png at 2x`).
        let e = anyhow!("file truncated").context("opening b.bundle");
        assert_eq!(message(&e), "opening b.bundle: file truncated");
        let e = anyhow!("x.png: bad").context("detecting in x.png at 2x");
        assert_eq!(message(&e), "detecting in x.png at 2x: x.png: bad");
        // Only a whole name counts: `a.png` is not named by `aa.png`; nor is a word inside a
        // sentence (an input labelled `prompt`).
        let e = anyhow!("aa.png: bad").context("input a.png");
        assert_eq!(message(&e), "input a.png: aa.png: bad");
        let e = anyhow!("no such prompt file").context("input prompt");
        assert_eq!(message(&e), "input prompt: no such prompt file");
        let e = anyhow!("x.txt is not UTF-8 text").context("input x.txt");
        assert_eq!(message(&e), "x.txt is not UTF-8 text");
        // A cause that names the path after its format (`WAV x.png: ...`).
        let e = anyhow!("WAV x.png: not a WAV file")
            .context("reading x.png")
            .context("input x.png");
        assert_eq!(message(&e), "WAV x.png: not a WAV file");
        let e = anyhow!("WAV x.png is odd").context("input x.png");
        assert_eq!(message(&e), "input x.png: WAV x.png is odd");
        // A cause that repeats an earlier one's text is left out, as before.
        let e = anyhow!("No such file").context("reading c: No such file");
        assert_eq!(message(&e), "reading c: No such file");
    }
}
