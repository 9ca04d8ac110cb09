//! Chat templates: the checkpoint's own Jinja template rendered with `minijinja` under the
//! conventions of Hugging Face transformers (`utils/chat_template_utils.py`), which
//! llama-cpp-python's `Jinja2ChatFormatter` also follows:
//!
//! - environment: `trim_blocks` and `lstrip_blocks` on, a single trailing newline dropped,
//!   loop controls (`break`, `continue`);
//! - variables: `messages` (list of `{role, content}` maps), `add_generation_prompt`,
//!   `bos_token`, `eos_token`, `tools` (none unless given);
//! - functions: `raise_exception(message)` (a [`LlmError::Template`] carrying the message),
//!   `strftime_now(format)` (the current UTC time, or the fixed time set with
//!   [`ChatTemplate::set_now`], formatted like Python's `strftime` for the usual
//!   directives);
//! - filters: `tojson` as transformers defines it (Python `json.dumps` with
//!   `ensure_ascii=False`, separators `", "`/`": "`, optional `indent`, keys in insertion
//!   order) instead of minijinja's HTML-safe one;
//! - Python string and dict methods (`.strip()`, `.startswith()`, `.items()`, ...) through
//!   `minijinja-contrib`'s `pycompat`.
//!
//! Rendering is bounded: a template runs on a fuel budget ([`FUEL`]) so a hostile template
//! cannot loop for ever.
//!
//! Whether the prompt goes through the template at all (`--raw`) is the caller's choice.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use crate::error::LlmError;

/// Instructions a render may execute (minijinja fuel): far above any real chat template
/// over a long conversation, small enough to stop a runaway loop in well under a second.
pub const FUEL: u64 = 5_000_000;

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// Unix seconds for `strftime_now`; `i64::MIN`: the clock.
    now: Arc<AtomicI64>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

fn terr(e: Error) -> LlmError {
    // minijinja's Display includes the line; the detail names the failing construct.
    let mut s = e.to_string();
    if let Some(d) = e.detail()
        && !s.contains(d)
    {
        s.push_str(": ");
        s.push_str(d);
    }
    LlmError::Template(s)
}

impl ChatTemplate {
    /// Compile `source`; `bos_token`/`eos_token` are the texts the template sees.
    ///
    /// # Errors
    /// [`LlmError::Template`] for a syntax error (with its line).
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, LlmError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("raise_exception: {msg}"),
            ))
        });
        let now = Arc::new(AtomicI64::new(i64::MIN));
        let n = now.clone();
        env.add_function(
            "strftime_now",
            move |fmt: String| -> Result<String, Error> {
                let t = match n.load(Ordering::Relaxed) {
                    i64::MIN => std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs() as i64),
                    t => t,
                };
                Ok(strftime(&fmt, t))
            },
        );
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_owned())
            .map_err(terr)?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            now,
        })
    }

    /// Fix the time `strftime_now` sees (Unix seconds, UTC), for reproducible prompts.
    pub fn set_now(&self, unix_s: i64) {
        self.now.store(unix_s, Ordering::Relaxed);
    }

    /// Render `messages`; with `add_generation_prompt`, the template's opening of the
    /// assistant's turn follows.
    ///
    /// # Errors
    /// [`LlmError::Template`]: the template raised an exception (its message), failed on
    /// the input, or ran out of fuel.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, LlmError> {
        self.render_with(messages, add_generation_prompt, Value::from(()))
    }

    /// [`render`](Self::render) with `tools` (a list of tool schemas, as JSON) for templates
    /// that take them.
    ///
    /// # Errors
    /// As [`render`](Self::render).
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        tools: Value,
    ) -> Result<String, LlmError> {
        let t = self.env.get_template("chat").map_err(terr)?;
        t.render(minijinja::context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => tools,
        })
        .map_err(terr)
    }
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent)`.
fn tojson(v: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    dump(v, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn dump(v: &Value, indent: Option<usize>, depth: usize, out: &mut String) -> Result<(), Error> {
    let nl = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * d));
        }
    };
    let (item_sep, key_sep) = if indent.is_some() {
        (",", ": ")
    } else {
        (", ", ": ")
    };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Ok(i) = i64::try_from(v.clone()) {
                out.push_str(&i.to_string());
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                out.push_str(&py_float(f));
            }
        }
        ValueKind::String => json_str(v.as_str().unwrap_or_default(), out),
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                json_str(&k.to_string(), out);
                out.push_str(key_sep);
                dump(&v.get_item(k)?, indent, depth + 1, out)?;
            }
            nl(out, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                dump(x, indent, depth + 1, out)?;
            }
            nl(out, depth);
            out.push(']');
        }
        _ => json_str(&v.to_string(), out),
    }
    Ok(())
}

/// Python's `repr(float)` for the finite values JSON can hold (`1.0`, `0.5`, `1e-05`).
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == f.trunc() && f.abs() < 1e16 {
        return format!("{f:.1}");
    }
    let s = format!("{f:?}");
    // Rust writes 1e-5 as `1e-5`; Python as `1e-05`.
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// A JSON string literal as Python writes it with `ensure_ascii=False`.
fn json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Days since 1970-01-01 to (year, month 1-12, day 1-31): Howard Hinnant's
/// `civil_from_days` (public-domain algorithm, `chrono`-compatible).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Python-style `strftime` of Unix time `t` (UTC) for `%Y %y %m %d %e %H %I %M %S %p %b %B
/// %a %A %j %%`; other directives are copied through.
pub fn strftime(fmt: &str, t: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    let jan1 = {
        // Day of the year: days since 1 January of `y`.
        let mut lo = days - 366;
        while civil_from_days(lo).0 < y {
            lo += 1;
        }
        days - lo + 1
    };
    let wd = DAYS[days.rem_euclid(7) as usize];
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('I') => out.push_str(&format!("{:02}", (hh + 11) % 12 + 1)),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('p') => out.push_str(if hh < 12 { "AM" } else { "PM" }),
            Some('b') => out.push_str(&MONTHS[m as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[m as usize - 1]),
            Some('a') => out.push_str(&wd[..3]),
            Some('A') => out.push_str(wd),
            Some('j') => out.push_str(&format!("{jan1:03}")),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml_like_transformers() {
        let t = ChatTemplate::new(CHATML, "<|im_start|>", "<|im_end|>").unwrap();
        let s = t
            .render(&[ChatMessage::new("user", "Where is Paris?")], true)
            .unwrap();
        assert_eq!(
            s,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhere is Paris?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn hf_conventions() {
        // trim_blocks / lstrip_blocks, python methods, raise_exception, tojson, strftime_now.
        let src = "{% for m in messages %}\n  {% if m.role == 'bad' %}{{ raise_exception('no ' + m.role) }}{% endif %}\n[{{ m.content.strip() | upper }}]\n{% endfor %}{{ {'a': 1, 'b': [1.5, 'é\"'], 'c': none} | tojson }}|{{ strftime_now('%d %b %Y %H:%M') }}\n";
        let t = ChatTemplate::new(src, "", "").unwrap();
        t.set_now(1_720_000_000); // 2024-07-03 09:46:40 UTC
        let s = t
            .render(&[ChatMessage::new("user", "  hi  ")], false)
            .unwrap();
        assert_eq!(
            s,
            "[HI]\n{\"a\": 1, \"b\": [1.5, \"é\\\"\"], \"c\": null}|03 Jul 2024 09:46"
        );
        let e = t
            .render(&[ChatMessage::new("bad", "x")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("raise_exception: no bad"), "{e}");
    }

    #[test]
    fn bad_templates_are_typed_errors() {
        let e = ChatTemplate::new("{% for x in %}", "", "").unwrap_err();
        assert!(matches!(e, LlmError::Template(_)), "{e}");
        let t = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let e = t.render(&[], false).unwrap_err().to_string();
        assert!(e.to_lowercase().contains("fuel"), "{e}");
    }

    #[test]
    fn strftime_matches_python() {
        // python: datetime.utcfromtimestamp(0).strftime(...)
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %a %A %b %B %j %y %I%p %%", 0),
            "1970-01-01 00:00:00 Thu Thursday Jan January 001 70 12AM %"
        );
        // 2000-02-29 23:59:59 (leap day), a Tuesday, day 060.
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %a %j", 951_868_799),
            "2000-02-29 23:59:59 Tue 060"
        );
        assert_eq!(py_float(1e-5), "1e-05");
        assert_eq!(py_float(2.0), "2.0");
    }
}
