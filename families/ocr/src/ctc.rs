//! CTC greedy decoding with the recogniser's dictionary, as the reference's
//! `CTCLabelDecode` (`rapidocr_onnxruntime/ch_ppocr_rec/utils.py`):
//!
//! - classes: 0 is the CTC blank, `1..=N` the dictionary entries in order (the
//!   rec model's ONNX metadata `character`, split into lines), `N + 1` a space;
//! - per time step the arg-max class (first maximum) and its probability;
//! - a step is kept when its class differs from the previous step's and is
//!   not the blank; the text is the kept classes' characters joined;
//! - the score is the mean probability of the kept steps, 0 when none is kept.

use crate::OcrError;

/// The recogniser's classes as text: entry `i` is class `i + 1`.
#[derive(Clone, Debug)]
pub struct Dictionary {
    /// All entries concatenated.
    text: String,
    /// Byte offsets: entry `i` is `text[ends[i - 1]..ends[i]]` (with `ends[-1] = 0`).
    ends: Vec<u32>,
}

impl Dictionary {
    /// Parse the ONNX metadata value `character` (Python `str.splitlines()`:
    /// `\n`, `\r\n` or `\r` end a line) and append the space class.
    ///
    /// # Errors
    /// [`OcrError::Dictionary`] when it is empty.
    pub fn from_metadata(character: &str) -> Result<Self, OcrError> {
        let mut text = String::with_capacity(character.len() + 1);
        let mut ends = Vec::new();
        for line in split_lines(character) {
            text.push_str(line);
            ends.push(text.len() as u32);
        }
        if ends.is_empty() {
            return Err(OcrError::Dictionary(
                "the rec model's `character` metadata has no entries".into(),
            ));
        }
        text.push(' ');
        ends.push(text.len() as u32);
        Ok(Self { text, ends })
    }

    /// Parse the `ocr/dict` section (one entry per `\n`-terminated line,
    /// without the space class) and append the space class.
    ///
    /// # Errors
    /// [`OcrError::Dictionary`] for invalid UTF-8 or no entries.
    pub fn from_section(bytes: &[u8]) -> Result<Self, OcrError> {
        let s = std::str::from_utf8(bytes).map_err(|e| {
            OcrError::Dictionary(format!("the dictionary section is not UTF-8: {e}"))
        })?;
        let mut text = String::with_capacity(s.len() + 1);
        let mut ends = Vec::new();
        for line in s.split_terminator('\n') {
            text.push_str(line);
            ends.push(text.len() as u32);
        }
        if ends.is_empty() {
            return Err(OcrError::Dictionary(
                "the dictionary section is empty".into(),
            ));
        }
        text.push(' ');
        ends.push(text.len() as u32);
        Ok(Self { text, ends })
    }

    /// The `ocr/dict` section bytes: every entry but the space, each followed
    /// by `\n`.
    ///
    /// # Errors
    /// [`OcrError::Dictionary`] when an entry contains a line break (it could
    /// not be stored one per line).
    pub fn to_section(&self) -> Result<Vec<u8>, OcrError> {
        let mut out = Vec::with_capacity(self.text.len() + self.ends.len());
        for i in 0..self.ends.len() - 1 {
            let e = self.entry(i);
            if e.contains('\n') {
                return Err(OcrError::Dictionary(format!(
                    "entry {i} ({e:?}) contains a line break"
                )));
            }
            out.extend_from_slice(e.as_bytes());
            out.push(b'\n');
        }
        Ok(out)
    }

    /// Entries including the trailing space (`C - 1`, the recogniser's class
    /// count without the blank).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// `true` when there are no entries (never, once constructed).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Entry `i` (class `i + 1`).
    pub fn entry(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }
}

/// Python `str.splitlines()` for the separators a dictionary can hold.
fn split_lines(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.find(['\n', '\r']) {
            Some(i) => {
                let line = &rest[..i];
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[i + skip..];
                Some(line)
            }
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
        }
    })
}

/// Greedy-decode `probs` (`[T, C]` row-major, one softmax row per time step)
/// appending the text to `out`; returns the score (mean in f64, as numpy).
///
/// # Errors
/// [`OcrError::OutputShape`] when `probs` is not a whole number of rows of
/// `dict.len() + 1` classes.
pub fn decode(probs: &[f32], dict: &Dictionary, out: &mut String) -> Result<f64, OcrError> {
    let classes = dict.len() + 1;
    if probs.is_empty() || !probs.len().is_multiple_of(classes) {
        return Err(OcrError::OutputShape {
            network: "rec",
            expected: classes,
            actual: probs.len(),
        });
    }
    let mut prev = usize::MAX;
    let (mut sum, mut kept) = (0.0f64, 0usize);
    for row in probs.chunks_exact(classes) {
        let (mut best, mut best_p) = (0usize, row[0]);
        for (c, &p) in row.iter().enumerate().skip(1) {
            if p > best_p {
                best = c;
                best_p = p;
            }
        }
        if best != prev && best != 0 {
            out.push_str(dict.entry(best - 1));
            sum += f64::from(best_p);
            kept += 1;
        }
        prev = best;
    }
    Ok(if kept == 0 { 0.0 } else { sum / kept as f64 })
}

/// Bytes [`decode`] can append for `steps` time steps at most.
pub fn max_text_bytes(dict: &Dictionary, steps: usize) -> usize {
    let longest = (0..dict.len())
        .map(|i| dict.entry(i).len())
        .max()
        .unwrap_or(0);
    longest * steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_decode_drops_blanks_and_repeats() {
        let dict = Dictionary::from_metadata("a\nb\r\nc").expect("dict");
        assert_eq!(dict.len(), 4);
        assert_eq!(dict.entry(3), " ");
        // classes: blank, a, b, c, space
        let steps: [[f32; 5]; 7] = [
            [0.1, 0.9, 0.0, 0.0, 0.0], // a
            [0.2, 0.8, 0.0, 0.0, 0.0], // a (repeat)
            [0.9, 0.1, 0.0, 0.0, 0.0], // blank
            [0.3, 0.6, 0.1, 0.0, 0.0], // a
            [0.0, 0.0, 0.0, 0.0, 0.7], // space
            [0.0, 0.0, 0.5, 0.5, 0.0], // b (first maximum)
            [0.9, 0.0, 0.0, 0.0, 0.1], // blank
        ];
        let flat: Vec<f32> = steps.iter().flatten().copied().collect();
        let mut s = String::new();
        let score = decode(&flat, &dict, &mut s).expect("decode");
        assert_eq!(s, "aa b");
        let want = (0.9f32 as f64 + 0.6f32 as f64 + 0.7f32 as f64 + 0.5f32 as f64) / 4.0;
        assert_eq!(score, want);
        let mut s = String::new();
        assert_eq!(
            decode(&[1.0, 0.0, 0.0, 0.0, 0.0], &dict, &mut s).expect("ok"),
            0.0
        );
        assert!(decode(&[1.0, 0.0], &dict, &mut s).is_err());
    }

    #[test]
    fn section_round_trip() {
        let dict = Dictionary::from_metadata("x\ny\nz\n").expect("dict");
        let bytes = dict.to_section().expect("bytes");
        assert_eq!(bytes, b"x\ny\nz\n");
        let back = Dictionary::from_section(&bytes).expect("back");
        assert_eq!(back.len(), 4);
        assert_eq!(back.entry(2), "z");
        assert!(Dictionary::from_metadata("").is_err());
        assert!(Dictionary::from_section(&[0xff]).is_err());
    }
}
