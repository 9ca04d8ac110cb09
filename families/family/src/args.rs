//! The command-line options the families declare and read (feature `cli`): one way to
//! declare a number or a switch, to read a value that a command may not declare, to check a
//! range (a [`UsageError`] naming the option, the value and the range: exit status 2), and
//! to read an input file named by an option.
//!
//! `tether run` and `tether bench` share a family's runner but not every option, so the
//! readers here answer "not given" for an option the command does not declare instead of
//! panicking as [`clap::ArgMatches::get_one`] does.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::builder::{IntoResettable, ValueParser};
use clap::{Arg, ArgAction, ArgMatches};

use crate::family::{UsageError, check_range};

/// `--NAME VALUE_NAME`, a number parsed by `parser`. A negative value is taken as the
/// option's value (`--top-k -1` is then a range error naming the option, not clap's
/// "unexpected argument").
pub fn number_arg(
    name: &'static str,
    value_name: &'static str,
    parser: impl IntoResettable<ValueParser>,
    help: &'static str,
) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name(value_name)
        .allow_negative_numbers(true)
        .value_parser(parser)
        .help(help)
}

/// `--NAME VALUE_NAME`, a file or folder path.
pub fn path_arg(name: &'static str, value_name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name(value_name)
        .value_parser(clap::value_parser!(PathBuf))
        .help(help)
}

/// `--NAME`, a switch (no value).
pub fn flag_arg(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .action(ArgAction::SetTrue)
        .help(help)
}

/// Whether the switch `--NAME` was given (`false` as well when the command does not
/// declare it).
pub fn flag(args: &ArgMatches, name: &str) -> bool {
    value::<bool>(args, name).unwrap_or(false)
}

/// The value of `--NAME`, `None` when it was not given or the command does not declare it.
/// `T` is the type of the option's value parser.
pub fn value<T: Clone + Send + Sync + 'static>(args: &ArgMatches, name: &str) -> Option<T> {
    args.try_get_one::<T>(name).ok().flatten().cloned()
}

/// The integer option `--NAME` (declared with an `i64` parser, [`number_arg`]) when it
/// lies in `[lo, hi]`; `None` when not given.
///
/// # Errors
/// [`UsageError`] `--NAME V: must be between LO and HI`.
pub fn int_in(args: &ArgMatches, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, UsageError> {
    match value::<i64>(args, name) {
        Some(v) if !(lo..=hi).contains(&v) => Err(UsageError(format!(
            "--{name} {v}: must be between {lo} and {hi}"
        ))),
        v => Ok(v),
    }
}

/// The `f32` option `--NAME` when it lies in `[lo, hi]`; `None` when not given.
///
/// # Errors
/// [`UsageError`] as [`check_range`].
pub fn f32_in(args: &ArgMatches, name: &str, lo: f32, hi: f32) -> Result<Option<f32>, UsageError> {
    let v = value::<f32>(args, name);
    check_range(name, v, lo, hi)?;
    Ok(v)
}

/// The path option `--NAME` (declared with a `PathBuf` parser) that the command requires.
///
/// # Errors
/// `--NAME is required` when it was not given.
pub fn required_path(args: &ArgMatches, name: &str) -> anyhow::Result<PathBuf> {
    value::<PathBuf>(args, name).with_context(|| format!("--{name} is required"))
}

/// The whole of the regular file `path` ([`tether_bundle::files::read_regular`]: no
/// directory, FIFO or device), the error saying `reading PATH`.
///
/// # Errors
/// The file cannot be opened or read, or is not a regular file.
pub fn read_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    tether_bundle::files::read_regular(path).with_context(|| format!("reading {}", path.display()))
}

/// `bytes`, read from `path`, as UTF-8 text.
///
/// # Errors
/// `PATH is not UTF-8 text (invalid byte at offset N)`.
pub fn utf8_text(path: &Path, bytes: Vec<u8>) -> anyhow::Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}
