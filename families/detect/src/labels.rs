//! Class names: the Ultralytics ONNX metadata format and the bundle's labels section.

use crate::DetectError;

/// Parse the Ultralytics ONNX metadata value `names`, a Python dict literal
/// mapping class index to name, e.g. `{0: 'Caption', 1: "Foot'note"}`
/// (written by ultralytics/engine/exporter.py as `str(model.names)`).
///
/// Returns the names in index order; the indices must be exactly `0..n`.
///
/// # Errors
/// [`DetectError::Labels`] naming the byte position and what was expected.
pub fn parse_ultralytics_names(text: &str) -> Result<Vec<String>, DetectError> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
    };
    let mut pairs: Vec<(usize, String)> = Vec::new();
    p.ws();
    p.expect(b'{')?;
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let idx = p.int()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        let name = p.string()?;
        pairs.push((idx, name));
        p.ws();
        if p.eat(b',') {
            continue;
        }
        p.ws();
        p.expect(b'}')?;
        break;
    }
    pairs.sort_by_key(|(i, _)| *i);
    for (want, (got, _)) in pairs.iter().enumerate() {
        if *got != want {
            return Err(DetectError::Labels(format!(
                "class indices must be 0..{}, found {got} where {want} was expected",
                pairs.len()
            )));
        }
    }
    if pairs.is_empty() {
        return Err(DetectError::Labels("the names dict is empty".into()));
    }
    Ok(pairs.into_iter().map(|(_, n)| n).collect())
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn err<T>(&self, what: &str) -> Result<T, DetectError> {
        Err(DetectError::Labels(format!("{what} at byte {}", self.pos)))
    }
    fn ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }
    fn eat(&mut self, b: u8) -> bool {
        if self.s.get(self.pos) == Some(&b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, b: u8) -> Result<(), DetectError> {
        if self.eat(b) {
            Ok(())
        } else {
            self.err(&format!("expected `{}`", b as char))
        }
    }
    fn int(&mut self) -> Result<usize, DetectError> {
        let start = self.pos;
        while self.s.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos])
            .ok()
            .and_then(|t| t.parse().ok())
            .filter(|&v: &usize| v <= usize::from(u16::MAX))
            .map_or_else(|| self.err("expected a class index (0..=65535)"), Ok)
    }
    fn string(&mut self) -> Result<String, DetectError> {
        let quote = match self.s.get(self.pos) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return self.err("expected a quoted class name"),
        };
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            match self.s.get(self.pos) {
                None => return self.err("unterminated class name"),
                Some(&b) if b == quote => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    let esc = match self.s.get(self.pos + 1) {
                        Some(b'n') => b'\n',
                        Some(b't') => b'\t',
                        Some(&c @ (b'\\' | b'\'' | b'"')) => c,
                        _ => return self.err("unsupported escape in class name"),
                    };
                    out.push(esc);
                    self.pos += 2;
                }
                Some(&b) => {
                    out.push(b);
                    self.pos += 1;
                }
            }
        }
        String::from_utf8(out).map_or_else(|_| self.err("class name is not UTF-8"), Ok)
    }
}

/// Encode names for the labels section: UTF-8, one name per line.
///
/// # Errors
/// [`DetectError::Labels`] when a name contains a line break.
pub fn encode_labels(names: &[String]) -> Result<Vec<u8>, DetectError> {
    let mut out = Vec::new();
    for n in names {
        if n.contains(['\n', '\r']) {
            return Err(DetectError::Labels(format!(
                "class name {n:?} contains a line break"
            )));
        }
        out.extend_from_slice(n.as_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// Decode the labels section written by [`encode_labels`].
///
/// # Errors
/// [`DetectError::Labels`] when the section is not UTF-8.
pub fn decode_labels(bytes: &[u8]) -> Result<Vec<String>, DetectError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| DetectError::Labels(format!("labels section is not UTF-8: {e}")))?;
    Ok(text.lines().map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ultralytics_dicts() {
        let v =
            parse_ultralytics_names("{0: 'Caption', 2: \"Foot'note\", 1: 'List-item'}").unwrap();
        assert_eq!(v, vec!["Caption", "List-item", "Foot'note"]);
        let v = parse_ultralytics_names("{0: 'a\\'b',}").unwrap();
        assert_eq!(v, vec!["a'b"]);
    }

    #[test]
    fn rejects_malformed_dicts() {
        for bad in [
            "",
            "{",
            "{0 'a'}",
            "{0: a}",
            "{1: 'a'}",
            "{0: 'a', 0: 'b'}",
            "{}",
            "{0: 'a",
        ] {
            assert!(parse_ultralytics_names(bad).is_err(), "{bad:?} accepted");
        }
        let e = parse_ultralytics_names("{0: 'a', 2: 'b'}").unwrap_err();
        assert!(e.to_string().contains("found 2 where 1"), "{e}");
    }

    #[test]
    fn labels_round_trip() {
        let names = vec!["person".to_string(), "face".to_string()];
        assert_eq!(
            decode_labels(&encode_labels(&names).unwrap()).unwrap(),
            names
        );
        assert!(encode_labels(&["a\nb".to_string()]).is_err());
        assert!(decode_labels(&[0xff]).is_err());
    }
}
