//! Which of a network's tensors plays a role (the detection head, the token embeddings, the
//! image input): one rule for every family, at build and at run.
//!
//! 1. **By name.** A tensor named as the exporters of the family's reference name it (the
//!    Ultralytics export's `output0`, Hugging Face's `last_hidden_state`) is the one, and its
//!    shape must then fit the role.
//! 2. **By shape.** Otherwise the one tensor whose shape fits the role.
//! 3. **Ambiguous or absent: refused**, naming every tensor and its shape. Position in the
//!    model's list is never a reason: an auxiliary output exported before the head must not
//!    be taken for it.
//!
//! A family may break a tie left after the shape with a check of its own (the value range
//! of a test run, for the detection head) through [`select_with`].

/// A tensor as the rule sees it: its name and its dimensions (`-1`, or any negative value,
/// for a dimension not fixed).
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The tensor's name in the model.
    pub name: &'a str,
    /// Its dimensions.
    pub dims: &'a [i64],
}

/// The candidates of `(name, dims)` pairs (the tensors an ONNX file declares).
pub fn declared<'a>(tensors: impl IntoIterator<Item = (&'a str, &'a [i64])>) -> Vec<Candidate<'a>> {
    tensors
        .into_iter()
        .map(|(name, dims)| Candidate { name, dims })
        .collect()
}

/// The dimensions of a prepared network's tensors (their shapes as the rule's `i64`), for
/// [`prepared`] to borrow.
pub fn dims_of(tensors: &[tether_runtime::TensorSpec]) -> Vec<Vec<i64>> {
    tensors
        .iter()
        .map(|t| t.shape.iter().map(|&d| d as i64).collect())
        .collect()
}

/// The candidates of a prepared network's `tensors`, `dims[i]` the dimensions of
/// `tensors[i]` ([`dims_of`]).
pub fn prepared<'a>(
    tensors: &'a [tether_runtime::TensorSpec],
    dims: &'a [Vec<i64>],
) -> Vec<Candidate<'a>> {
    declared(
        tensors
            .iter()
            .zip(dims)
            .map(|(t, d)| (t.name.as_str(), d.as_slice())),
    )
}

/// The role a tensor must play.
pub struct Role<'a> {
    /// What it is, for messages ("the detection head").
    pub what: &'a str,
    /// `input` or `output`, for messages.
    pub kind: &'static str,
    /// Names that identify it, most specific first.
    pub names: &'a [&'a str],
    /// The shape it must have, in words ("[1, 4 + C, anchors] with C = 80").
    pub expected: &'a str,
    /// Whether a shape fits (a negative dimension is one the model leaves open).
    pub fits: &'a dyn Fn(&[i64]) -> bool,
}

/// No tensor, or more than one, plays the role.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// The tensor with the role's name does not have the role's shape.
    #[error("{kind} `{name}` ({what} by its name) is {dims}; expected {expected}")]
    NamedMismatch {
        /// `input` or `output`.
        kind: &'static str,
        /// The role.
        what: String,
        /// The tensor.
        name: String,
        /// Its dimensions, written out.
        dims: String,
        /// The shape expected.
        expected: String,
    },
    /// No tensor has the role's name or shape.
    #[error(
        "no {kind} is {what} ({}the only one shaped {expected}); the {kind}s are {all}",
        if names.is_empty() { String::new() } else { format!("named {names}, or ") }
    )]
    Missing {
        /// `input` or `output`.
        kind: &'static str,
        /// The role.
        what: String,
        /// The names looked for (empty: the role is found by its shape alone).
        names: String,
        /// The shape expected.
        expected: String,
        /// Every tensor with its shape.
        all: String,
    },
    /// Several tensors fit the role's shape and none has its name.
    #[error(
        "{count} {kind}s could be {what} ({candidates}: each shaped {expected}{}); re-export the model with one such {kind}{}",
        if names.is_empty() { String::new() } else { format!(", none named {names}") },
        if names.is_empty() { String::new() } else { format!(", or with it named {names}") }
    )]
    Ambiguous {
        /// `input` or `output`.
        kind: &'static str,
        /// The role.
        what: String,
        /// How many fit.
        count: usize,
        /// The candidates with their shapes.
        candidates: String,
        /// The shape expected.
        expected: String,
        /// The names looked for (empty: the role is found by its shape alone).
        names: String,
    },
}

fn dims_text(d: &[i64]) -> String {
    let parts: Vec<String> = d
        .iter()
        .map(|&v| if v < 0 { "?".into() } else { v.to_string() })
        .collect();
    format!("[{}]", parts.join(", "))
}

fn list(c: &[Candidate<'_>]) -> String {
    let parts: Vec<String> = c
        .iter()
        .map(|t| format!("`{}` {}", t.name, dims_text(t.dims)))
        .collect();
    parts.join(", ")
}

fn names_text(names: &[&str]) -> String {
    let parts: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    parts.join(" or ")
}

/// The index in `tensors` of the one that plays `role` (see the module docs).
///
/// # Errors
/// [`SelectError`] naming the tensors.
pub fn select(role: &Role<'_>, tensors: &[Candidate<'_>]) -> Result<usize, SelectError> {
    select_with(role, tensors, |_| true)
}

/// [`select`], with `tie_break` keeping, among several tensors that fit the shape (and none
/// named), those it accepts; still ambiguous after it: refused.
///
/// # Errors
/// [`SelectError`] naming the tensors.
pub fn select_with(
    role: &Role<'_>,
    tensors: &[Candidate<'_>],
    mut tie_break: impl FnMut(usize) -> bool,
) -> Result<usize, SelectError> {
    for name in role.names {
        if let Some(i) = tensors.iter().position(|t| t.name == *name) {
            let t = &tensors[i];
            if (role.fits)(t.dims) {
                return Ok(i);
            }
            return Err(SelectError::NamedMismatch {
                kind: role.kind,
                what: role.what.into(),
                name: t.name.into(),
                dims: dims_text(t.dims),
                expected: role.expected.into(),
            });
        }
    }
    let fitting: Vec<usize> = (0..tensors.len())
        .filter(|&i| (role.fits)(tensors[i].dims))
        .collect();
    match fitting.as_slice() {
        [one] => Ok(*one),
        [] => Err(SelectError::Missing {
            kind: role.kind,
            what: role.what.into(),
            names: names_text(role.names),
            expected: role.expected.into(),
            all: list(tensors),
        }),
        several => {
            let kept: Vec<usize> = several.iter().copied().filter(|&i| tie_break(i)).collect();
            if let [one] = kept.as_slice() {
                return Ok(*one);
            }
            let shown: Vec<Candidate<'_>> = several.iter().map(|&i| tensors[i]).collect();
            Err(SelectError::Ambiguous {
                kind: role.kind,
                what: role.what.into(),
                count: several.len(),
                candidates: list(&shown),
                expected: role.expected.into(),
                names: names_text(role.names),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Role<'static> {
        Role {
            what: "the detection head",
            kind: "output",
            names: &["output0"],
            expected: "[1, 84, anchors]",
            fits: &|d| d.len() == 3 && d[1] == 84,
        }
    }

    /// A role found by its shape alone (no names) says so, without an empty name list.
    #[test]
    fn a_role_without_names_is_described_by_its_shape() {
        let role = Role {
            names: &[],
            ..head()
        };
        let small = [1i64, 4, 10];
        let t = [Candidate {
            name: "y",
            dims: &small,
        }];
        let e = select(&role, &t).unwrap_err().to_string();
        assert_eq!(
            e,
            "no output is the detection head (the only one shaped [1, 84, anchors]); the outputs are `y` [1, 4, 10]"
        );
        let a = [1i64, 84, 8400];
        let t = [
            Candidate {
                name: "a",
                dims: &a,
            },
            Candidate {
                name: "b",
                dims: &a,
            },
        ];
        let e = select(&role, &t).unwrap_err().to_string();
        assert!(!e.contains("named"), "{e}");
        assert!(
            e.ends_with("re-export the model with one such output"),
            "{e}"
        );
    }

    #[test]
    fn name_first_then_shape_then_refused() {
        let a = [1i64, 84, 8400];
        let aux = [1i64, 84, 8400];
        let proto = [1i64, 32, 160, 160];
        // The name wins over the position.
        let t = [
            Candidate {
                name: "aux",
                dims: &aux,
            },
            Candidate {
                name: "output0",
                dims: &a,
            },
        ];
        assert_eq!(select(&head(), &t), Ok(1));
        // No name: the only fitting shape, wherever it is.
        let t = [
            Candidate {
                name: "protos",
                dims: &proto,
            },
            Candidate {
                name: "head",
                dims: &a,
            },
        ];
        assert_eq!(select(&head(), &t), Ok(1));
        // Two fit, none named: refused, both named in the message.
        let t = [
            Candidate {
                name: "aux",
                dims: &aux,
            },
            Candidate {
                name: "head",
                dims: &a,
            },
        ];
        let e = select(&head(), &t).unwrap_err().to_string();
        assert!(
            e.contains("`aux` [1, 84, 8400], `head` [1, 84, 8400]"),
            "{e}"
        );
        // ... unless a tie-break settles it.
        assert_eq!(select_with(&head(), &t, |i| i == 1), Ok(1));
        // The named one must fit.
        let t = [Candidate {
            name: "output0",
            dims: &proto,
        }];
        let e = select(&head(), &t).unwrap_err().to_string();
        assert!(
            e.contains("`output0`") && e.contains("[1, 32, 160, 160]"),
            "{e}"
        );
        // None fits.
        let t = [Candidate {
            name: "protos",
            dims: &proto,
        }];
        let e = select(&head(), &t).unwrap_err().to_string();
        assert!(e.contains("no output is the detection head"), "{e}");
    }
}
