//! Family-specific arguments: the CLI knows no family, so before parsing it finds out which
//! family a command is about and adds that family's own arguments to the subcommand.
//!
//! - `build`: the value of `--family` (when it names a known family);
//! - `run` / `bench`: the family recorded in the bundle (the first argument after the
//!   subcommand that opens as a bundle); when none does, every family's arguments (each
//!   once, the help of one that several families define giving each family's meaning), so
//!   that parsing and `--help` still work and the bundle error surfaces later.

use std::ffi::OsString;
use std::path::Path;

use clap::{Arg, Command};
use tether_family::family::{Family, find};

use tether::families::REGISTRY;

fn subcommand_position(argv: &[OsString]) -> Option<(usize, &str)> {
    argv.iter().enumerate().skip(1).find_map(|(i, a)| {
        let s = a.to_str()?;
        ["build", "run", "bench", "inspect", "verify", "doctor"]
            .contains(&s)
            .then_some((i, s))
    })
}

/// The help command for the subcommand of `argv`, with what selects the family's own
/// options: `tether build --family NAME --help`, `tether run BUNDLE --help`, `tether inspect
/// --help`; `None` without a subcommand.
pub fn help_command(argv: &[OsString]) -> Option<String> {
    let (pos, name) = subcommand_position(argv)?;
    Some(match name {
        "build" => match family_flag(argv, pos + 1) {
            Some(f) if find(REGISTRY, &f).is_some() => format!("tether build --family {f} --help"),
            _ => "tether build --help".to_string(),
        },
        "run" | "bench" => match bundle_and_family(argv, pos + 1) {
            Some((bundle, _)) => format!("tether {name} {bundle} --help"),
            None => format!("tether {name} --help"),
        },
        other => format!("tether {other} --help"),
    })
}

/// The value of `--family` after position `from`.
fn family_flag(argv: &[OsString], from: usize) -> Option<String> {
    let mut it = argv[from..].iter();
    while let Some(a) = it.next() {
        let a = a.to_str()?;
        if a == "--family" {
            return it.next().and_then(|v| v.to_str()).map(str::to_string);
        }
        if let Some(v) = a.strip_prefix("--family=") {
            return Some(v.to_string());
        }
    }
    None
}

/// The first argument after `from` that opens as a bundle, with its family.
fn bundle_and_family(argv: &[OsString], from: usize) -> Option<(&str, &'static dyn Family)> {
    opened_bundle(argv, from).map(|(s, _, f)| (s, f))
}

/// [`bundle_and_family`] with the bundle opened.
fn opened_bundle(
    argv: &[OsString],
    from: usize,
) -> Option<(&str, tether_bundle::Bundle, &'static dyn Family)> {
    for a in &argv[from..] {
        let Some(s) = a.to_str() else { continue };
        if s.starts_with('-') {
            continue;
        }
        let p = Path::new(s);
        if !p.is_file() {
            continue;
        }
        if let Ok(b) = tether_bundle::Bundle::open(p, tether_bundle::Verify::Lazy) {
            let f = find(REGISTRY, b.identity().family)?;
            return Some((s, b, f));
        }
    }
    None
}

/// The first argument after `from` that is a regular file but does not open as a bundle,
/// with the reader's error, or a `.bundle` path that names nothing, with "no such file" (one
/// line, control characters escaped).
fn unopened_file(argv: &[OsString], from: usize) -> Option<(String, String)> {
    argv[from..].iter().find_map(|a| {
        let s = a.to_str()?;
        let p = Path::new(s);
        let why = if s.starts_with('-') {
            return None;
        } else if p.is_file() {
            tether_bundle::Bundle::open(p, tether_bundle::Verify::Lazy)
                .err()?
                .to_string()
        } else if s.ends_with(".bundle") && !p.exists() {
            // A bundle's name that names nothing (a typo): said, rather than every family's
            // options shown as if for it. Other arguments that are not files are option
            // values (`--device cuda`) or inputs.
            "no such file".to_string()
        } else {
            return None;
        };
        Some((
            crate::cli::text::escape_control(s).into_owned(),
            crate::cli::text::escape_control(&why).into_owned(),
        ))
    })
}

fn add_args(cmd: Command, args: Vec<Arg>) -> Command {
    let mut cmd = cmd;
    for a in args {
        let id = a.get_id().clone();
        if cmd.get_arguments().any(|x| *x.get_id() == id) {
            continue;
        }
        cmd = cmd.arg(a);
    }
    cmd
}

/// Every family's arguments of one kind (`of`), each id once: an id that several families
/// define (`--top-k`: embed's neighbours, llm's sampler) keeps the first family's definition,
/// and its help gives each family's meaning ("embed: ...; llm: ...").
fn every_family_args(of: impl Fn(&dyn Family) -> Vec<Arg>) -> Vec<Arg> {
    let mut args: Vec<(Arg, Vec<(&str, String)>)> = Vec::new();
    for f in REGISTRY {
        for a in of(*f) {
            let help = a.get_help().map(ToString::to_string).unwrap_or_default();
            match args.iter_mut().find(|(x, _)| x.get_id() == a.get_id()) {
                Some((_, helps)) => helps.push((f.name(), help)),
                None => args.push((a, vec![(f.name(), help)])),
            }
        }
    }
    args.into_iter()
        .map(|(a, helps)| {
            if helps.len() < 2 {
                return a;
            }
            // The family's own tag in its help ("(llm; default 40)") is said once, in front.
            let joined: Vec<String> = helps
                .iter()
                .map(|(f, h)| {
                    let h = h
                        .replace(&format!("({f}; "), "(")
                        .replace(&format!(" ({f})"), "");
                    format!("{f}: {h}")
                })
                .collect();
            a.help(joined.join("; "))
        })
        .collect()
}

/// Add the arguments of the family `argv` is about to the matching subcommand of `cmd`.
pub fn augment(cmd: Command, argv: &[OsString]) -> Command {
    let Some((pos, name)) = subcommand_position(argv) else {
        return cmd;
    };
    match name {
        "build" => {
            let flag = family_flag(argv, pos + 1);
            match flag.as_deref().map(|f| find(REGISTRY, f)) {
                Some(Some(f)) => cmd.mut_subcommand("build", |b| {
                    let b = add_args(b, f.build_args());
                    // A family whose bundles carry no TensorRT plans (llm) leaves the plans'
                    // options out of its help; given, they are still refused by name.
                    if f.no_tensorrt_plans().is_some() {
                        let b = b.mut_arg("engine", |a| a.hide(true));
                        super::build::TRT_PLAN_OPTIONS
                            .iter()
                            .fold(b, |b, (_, id)| b.mut_arg(*id, |a| a.hide(true)))
                    } else {
                        b
                    }
                }),
                // An unknown family: every family's arguments, so that clap reaches the
                // `--family` value (refused naming the known families) instead of stopping
                // at the first family argument ("unexpected argument '--onnx'").
                Some(None) => cmd.mut_subcommand("build", |b| {
                    add_args(b, every_family_args(|f| f.build_args()))
                }),
                None => cmd,
            }
        }
        "run" | "bench" => match opened_bundle(argv, pos + 1) {
            Some((path, bundle, f)) => cmd.mut_subcommand(name, |c| {
                let c = for_family(add_args(c, f.run_args()), name, f);
                match f.bundle_values(&bundle) {
                    Ok(values) => with_bundle_values(c, values),
                    // The configuration does not read: said, rather than the build defaults
                    // left to look like the values that apply (a run reports the error).
                    Err(e) => c.after_help(format!(
                        "note: the configuration of {} does not read ({}): the values it was built with cannot be shown, and a run will fail",
                        crate::cli::text::escape_control(path),
                        crate::cli::text::escape_control(&format!("{e:#}"))
                    )),
                }
            }),
            // No bundle (or one that does not open): every family's options, less on `run`
            // those only `bench` takes.
            None => cmd.mut_subcommand(name, |c| {
                let c = add_args(c, every_family_args(|f| f.run_args()));
                // `run B --help` where B is a file that does not open: say so (the help
                // lists every family's options, not B's).
                let c = match unopened_file(argv, pos + 1) {
                    Some((path, why)) => c.after_help(format!(
                        "note: {path} does not open as a bundle ({why}): the options above are every family's"
                    )),
                    None => c,
                };
                if name == "run" {
                    hide(
                        c,
                        REGISTRY.iter().flat_map(|f| f.bench_only_args()).copied(),
                    )
                } else {
                    hide(c, REGISTRY.iter().flat_map(|f| f.run_only_args()).copied())
                }
            }),
        },
        _ => cmd,
    }
}

/// `run`/`bench` (`command`) for a bundle of `family`: its help lists only the options the
/// family takes (no `--text` for an image family, no `--annotate` where there is no image, no
/// `--precision` where the engines have no choice, no bench-only option on `run`, no
/// run-only option on `bench`), and `run` says what the family's INPUTs are.
fn for_family(cmd: Command, command: &str, family: &dyn Family) -> Command {
    let mut hidden: Vec<&str> = Vec::new();
    if !family.takes_text() {
        hidden.push("text");
    }
    if !family.has_precision() {
        hidden.push("precision");
    }
    let mut cmd = cmd;
    if command == "run" {
        if !family.annotates() {
            hidden.push("annotate");
        }
        hidden.extend(family.bench_only_args());
        cmd = cmd.about(format!(
            "Run a bundle of the {} family: {}",
            family.name(),
            family.about()
        ));
        if cmd.get_arguments().any(|a| a.get_id() == "inputs") {
            cmd = cmd.mut_arg("inputs", |a| a.help(family.inputs_help()));
        }
    }
    if command == "bench" {
        hidden.extend(family.run_only_args());
    }
    hide(cmd, hidden)
}

/// `cmd` with each option of `values` (argument id, the bundle's value) showing the
/// bundle's value after its help (`[this bundle: 0.6]`), as clap shows a default, and the
/// help's own default called the build default (which a bundle built with another value
/// overrides at run time).
fn with_bundle_values(mut cmd: Command, values: Vec<(&'static str, String)>) -> Command {
    for (id, v) in values {
        if cmd.get_arguments().any(|a| a.get_id() == id) {
            cmd = cmd.mut_arg(id, |a| {
                // "(default 0.5" is the build's default: said so beside the bundle's value.
                let help = a.get_help().map(ToString::to_string).unwrap_or_default();
                let help = help.replacen("(default ", "(build default ", 1);
                a.help(format!("{help} [this bundle: {v}]"))
            });
        }
    }
    cmd
}

/// `cmd` with the options `ids` (those it has) left out of its help.
fn hide<'a>(mut cmd: Command, ids: impl IntoIterator<Item = &'a str>) -> Command {
    for id in ids {
        if cmd.get_arguments().any(|a| a.get_id() == id) {
            cmd = cmd.mut_arg(id, |a| a.hide(true));
        }
    }
    cmd
}

/// When parsing `run`/`bench` found an unknown option that another family defines
/// (`--score-threshold` on an llm bundle, `--text-score` on a vad bundle): a message naming
/// the option, the family that has it, the bundle's family and the help command, instead of
/// clap's look-alike suggestion. `None` otherwise (clap's own
/// message stands).
pub fn foreign_option(argv: &[OsString]) -> Option<String> {
    let (pos, name) = subcommand_position(argv)?;
    if name == "build" {
        return foreign_build_option(argv, pos);
    }
    if !matches!(name, "run" | "bench") {
        return None;
    }
    let (bundle, family) = bundle_and_family(argv, pos + 1)?;
    let (opt, others) = first_foreign(&argv[pos + 1..], family, |f| f.run_args())?;
    let owners = match others.as_slice() {
        [] => return None,
        // An option only another family's `bench` takes (llm's `--n-gen`) is named so.
        [one] if find(REGISTRY, one).is_some_and(|f| f.bench_only_args().contains(&opt)) => {
            format!("the {one} family's `tether bench`")
        }
        [one] => format!("the {one} family"),
        [rest @ .., last] => format!("the {} and {last} families", rest.join(", ")),
    };
    Some(format!(
        "--{opt} is an option of {owners}; this bundle is of the {f} family, which does not take it (`tether {name} {bundle} --help` lists its options)",
        f = family.name()
    ))
}

/// The first `--OPT` of `args` that `family` does not define (among `of`'s arguments, by
/// long name or alias) but other families do, with those families' names (at least one).
fn first_foreign<'a>(
    args: &'a [OsString],
    family: &dyn Family,
    of: impl Fn(&dyn Family) -> Vec<Arg>,
) -> Option<(&'a str, Vec<&'static str>)> {
    let has = |f: &dyn Family, opt: &str| {
        of(f).iter().any(|a| {
            a.get_long() == Some(opt) || a.get_all_aliases().is_some_and(|v| v.contains(&opt))
        })
    };
    args.iter().find_map(|a| {
        let opt = a.to_str()?.strip_prefix("--")?;
        let opt = opt.split_once('=').map_or(opt, |(o, _)| o);
        if opt.is_empty() || has(family, opt) {
            return None;
        }
        let others: Vec<&'static str> = REGISTRY
            .iter()
            .filter(|f| f.name() != family.name() && has(**f, opt))
            .map(|f| f.name())
            .collect();
        (!others.is_empty()).then_some((opt, others))
    })
}

/// `build --family F` with an option of another family's recipe (`--onnx` for `llm`): a
/// message naming the option, the families that take it, and `F`'s help command; a recipe's
/// option with no `--family` at all: a message saying that it selects the recipe.
fn foreign_build_option(argv: &[OsString], pos: usize) -> Option<String> {
    let Some(flag) = family_flag(argv, pos + 1) else {
        // A recipe's option before any `--family`: say what selects the recipe.
        let names: Vec<&str> = REGISTRY.iter().map(|f| f.name()).collect();
        return Some(format!(
            "`tether build` needs `--family NAME` ({}) before the family's own options (`tether build --family NAME --help` lists them)",
            names.join(", ")
        ));
    };
    let family = find(REGISTRY, &flag)?;
    let (opt, others) = first_foreign(&argv[pos + 1..], family, |f| f.build_args())?;
    Some(format!(
        "--{opt} is an option of the {} build; the {f} family does not take it (`tether build --family {f} --help` lists its options)",
        others.join(" / "),
        f = family.name()
    ))
}
