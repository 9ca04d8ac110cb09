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

use crate::family::{UsageError, check_range, out_of_range};

/// The bound of every `--threads` option (the runtime's, shared with the C API).
pub use tether_runtime::MAX_CPU_THREADS;

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

/// A value parser of whole numbers in `[lo, hi]`, written as decimal digits: a value out of
/// range, negative ones included, is refused as `accepted LO to HI` (clap's own `u64` parser
/// calls `-3` an "invalid digit"), another number (`2.5`, `1e3`) as `not a whole number`,
/// anything else as `not a number`, each with the range. clap prints the reason after
/// `invalid value 'V' for '--NAME <N>'` (exit status 2).
pub fn whole(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |s: &str| match s.trim().parse::<i128>() {
        Ok(v) if (i128::from(lo)..=i128::from(hi)).contains(&v) => Ok(v as u64),
        Ok(_) => Err(format!("accepted {lo} to {hi}")),
        Err(_) if s.trim().parse::<f64>().is_ok() => {
            Err(format!("not a whole number (accepted {lo} to {hi})"))
        }
        Err(_) => Err(format!("not a number (accepted {lo} to {hi})")),
    }
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
/// [`UsageError`] `--NAME V: accepted LO to HI` ([`out_of_range`]).
///
/// An option declared once for several families with different ranges (`--top-k`: embed's
/// neighbours, llm's sampler) is read here, after parsing, with the running family's range;
/// an option with one range has it in its parser ([`whole`]).
pub fn int_in(args: &ArgMatches, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, UsageError> {
    match value::<i64>(args, name) {
        Some(v) if !(lo..=hi).contains(&v) => Err(out_of_range(name, v, lo, hi)),
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

/// `bytes`, read from `path` (`-`: standard input), as UTF-8 text.
///
/// # Errors
/// `PATH is not UTF-8 text (invalid byte at offset N)`, `standard input is not ...` for `-`.
pub fn utf8_text(path: &Path, bytes: Vec<u8>) -> anyhow::Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let name = if path.as_os_str() == "-" {
            "standard input".to_string()
        } else {
            path.display().to_string()
        };
        anyhow::anyhow!(
            "{name} is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::whole;

    #[test]
    fn utf8_text_names_the_file_or_standard_input_and_the_offset() {
        use std::path::Path;
        let bad = b"ab\xc3\x28".to_vec();
        let e = super::utf8_text(Path::new("p.txt"), bad.clone()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.txt is not UTF-8 text (invalid byte at offset 2)"
        );
        let e = super::utf8_text(Path::new("-"), bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            "standard input is not UTF-8 text (invalid byte at offset 2)"
        );
        assert_eq!(
            super::utf8_text(Path::new("-"), b"ok".to_vec()).unwrap(),
            "ok"
        );
    }

    #[test]
    fn whole_names_the_range_for_any_number_outside_it() {
        let p = whole(1, 1024);
        assert_eq!(p("1"), Ok(1));
        assert_eq!(p(" 1024 "), Ok(1024));
        assert_eq!(p("0"), Err("accepted 1 to 1024".into()));
        assert_eq!(p("-3"), Err("accepted 1 to 1024".into()));
        assert_eq!(
            p("99999999999999999999999"),
            Err("accepted 1 to 1024".into())
        );
        assert_eq!(
            p("2.5"),
            Err("not a whole number (accepted 1 to 1024)".into())
        );
        assert_eq!(p("ten"), Err("not a number (accepted 1 to 1024)".into()));
        let all = whole(0, u64::MAX);
        assert_eq!(all("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(all("-1"), Err(format!("accepted 0 to {}", u64::MAX)));
    }
}
