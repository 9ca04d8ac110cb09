//! Scoring OCR output against a reference's (the goldens' acceptance rule,
//! shared by the family's tests and the CLI tests).
//!
//! The rule (the issue's): every reference line is matched by one of ours
//! with polygon IoU >= [`MIN_IOU`], no line of ours is left over, and the
//! character error rate over all lines (Levenshtein distance summed over the
//! matched pairs / reference characters) is <= [`MAX_CER`]. Matching is
//! greedy in reference order: each reference line takes the unused line of
//! ours with the largest IoU.

/// Smallest polygon IoU of a matched pair.
pub const MIN_IOU: f64 = 0.9;
/// Largest accepted character error rate.
pub const MAX_CER: f64 = 0.01;

/// One text line to compare: corners (pixels) and text.
pub type Line<'a> = ([[f32; 2]; 4], &'a str);

/// A reference line and the line of ours it was matched with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    /// Index among the reference lines.
    pub reference: usize,
    /// Index among ours.
    pub ours: usize,
    /// Polygon IoU of the two.
    pub iou: f64,
    /// Levenshtein distance between the texts, in characters.
    pub edits: usize,
}

/// The outcome of [`compare`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// Matched pairs, in reference order.
    pub pairs: Vec<Pair>,
    /// Reference lines without a match, with our best candidate `(index, IoU)`
    /// when there was one.
    pub missing: Vec<(usize, Option<(usize, f64)>)>,
    /// Our lines matched by no reference line.
    pub extra: Vec<usize>,
    /// Edits summed over the pairs.
    pub edits: usize,
    /// Characters in all reference lines.
    pub chars: usize,
}

impl Comparison {
    /// Character error rate: edits / reference characters (0 without any).
    pub fn cer(&self) -> f64 {
        self.edits as f64 / self.chars.max(1) as f64
    }

    /// Every reference line matched, nothing extra, CER <= [`MAX_CER`].
    pub fn passes(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.cer() <= MAX_CER
    }
}

/// Match `ours` against `reference` (see the module docs).
pub fn compare(reference: &[Line<'_>], ours: &[Line<'_>]) -> Comparison {
    let mut used = vec![false; ours.len()];
    let mut out = Comparison::default();
    for (r, (rp, rt)) in reference.iter().enumerate() {
        out.chars += rt.chars().count();
        let best = ours
            .iter()
            .enumerate()
            .filter(|(i, _)| !used[*i])
            .map(|(i, o)| (i, iou(rp, &o.0)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((i, v)) if v >= MIN_IOU => {
                used[i] = true;
                let edits = levenshtein(rt, ours[i].1);
                out.edits += edits;
                out.pairs.push(Pair {
                    reference: r,
                    ours: i,
                    iou: v,
                    edits,
                });
            }
            other => out.missing.push((r, other)),
        }
    }
    out.extra = (0..ours.len()).filter(|&i| !used[i]).collect();
    out
}

/// Shoelace area of a polygon.
fn area(p: &[[f64; 2]]) -> f64 {
    let n = p.len();
    (0..n)
        .map(|i| p[i][0] * p[(i + 1) % n][1] - p[(i + 1) % n][0] * p[i][1])
        .sum::<f64>()
        .abs()
        / 2.0
}

/// Intersection over union of two convex quadrilaterals (Sutherland-Hodgman
/// clipping of `a` by `b`, either orientation).
pub fn iou(a: &[[f32; 2]; 4], b: &[[f32; 2]; 4]) -> f64 {
    let to64 = |q: &[[f32; 2]; 4]| -> Vec<[f64; 2]> {
        q.iter()
            .map(|p| [f64::from(p[0]), f64::from(p[1])])
            .collect()
    };
    let (pa, pb) = (to64(a), to64(b));
    let orient = |p: &[[f64; 2]]| {
        let n = p.len();
        (0..n)
            .map(|i| p[i][0] * p[(i + 1) % n][1] - p[(i + 1) % n][0] * p[i][1])
            .sum::<f64>()
            .signum()
    };
    let s = orient(&pb);
    let mut out = pa.clone();
    for i in 0..pb.len() {
        let (e0, e1) = (pb[i], pb[(i + 1) % pb.len()]);
        let inside = |p: [f64; 2]| {
            s * ((e1[0] - e0[0]) * (p[1] - e0[1]) - (e1[1] - e0[1]) * (p[0] - e0[0])) >= 0.0
        };
        let input = std::mem::take(&mut out);
        for j in 0..input.len() {
            let (p, q) = (input[j], input[(j + 1) % input.len()]);
            let cross = |p: [f64; 2], q: [f64; 2]| {
                let (dx, dy) = (q[0] - p[0], q[1] - p[1]);
                let (ex, ey) = (e1[0] - e0[0], e1[1] - e0[1]);
                let t = (ex * (e0[1] - p[1]) - ey * (e0[0] - p[0])) / (ex * dy - ey * dx);
                [p[0] + t * dx, p[1] + t * dy]
            };
            match (inside(p), inside(q)) {
                (true, true) => out.push(q),
                (true, false) => out.push(cross(p, q)),
                (false, true) => {
                    out.push(cross(p, q));
                    out.push(q);
                }
                (false, false) => {}
            }
        }
        if out.is_empty() {
            return 0.0;
        }
    }
    let inter = area(&out);
    inter / (area(&pa) + area(&pb) - inter)
}

/// Levenshtein distance in characters (insertions, deletions, substitutions).
pub fn levenshtein(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [[f32; 2]; 4] = [[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 10.0]];
    const B: [[f32; 2]; 4] = [[5.0, 0.0], [15.0, 0.0], [15.0, 10.0], [5.0, 10.0]];
    const C: [[f32; 2]; 4] = [[0.0, 20.0], [10.0, 20.0], [10.0, 30.0], [0.0, 30.0]];

    #[test]
    fn iou_and_levenshtein() {
        assert!((iou(&A, &B) - 50.0 / 150.0).abs() < 1e-12);
        assert!((iou(&A, &A) - 1.0).abs() < 1e-12);
        assert_eq!(iou(&A, &C), 0.0);
        // Orientation does not matter.
        let rev = [A[3], A[2], A[1], A[0]];
        assert!((iou(&A, &rev) - 1.0).abs() < 1e-12);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "ab"), 2);
        assert_eq!(levenshtein("文字", "文子"), 1);
    }

    #[test]
    fn compare_matches_misses_and_extras() {
        let reference = [(A, "abcdefghij"), (C, "xyz")];
        let same = compare(&reference, &[(C, "xyz"), (A, "abcdefghij")]);
        assert!(same.passes(), "{same:?}");
        assert_eq!(same.pairs[0].ours, 1);
        assert_eq!(same.chars, 13);
        // One edit in 13 characters is above 1 %.
        let typo = compare(&reference, &[(A, "abcdefghiX"), (C, "xyz")]);
        assert_eq!(typo.edits, 1);
        assert!(!typo.passes());
        // A box that overlaps too little is missing; the left-over line is extra.
        let moved = compare(&reference, &[(B, "abcdefghij"), (C, "xyz")]);
        assert_eq!(moved.missing.len(), 1);
        assert_eq!(moved.missing[0].0, 0);
        assert_eq!(moved.extra, vec![0]);
        assert!(!moved.passes());
        let more = compare(&reference[..1], &[(A, "abcdefghij"), (C, "xyz")]);
        assert_eq!(more.extra, vec![1]);
        assert!(!more.passes());
    }
}
