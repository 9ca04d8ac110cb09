//! Valid bundles at the format's limits: 4096 sections and 131,072 tensors.
//! Listing every section's tensors (what `tether inspect` does) must cost
//! about as much as one walk over the tensor table, whether or not the table
//! is grouped by section.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{reseal, tensor_mut};
use tether_bundle::*;

const SECTIONS: u32 = MAX_SECTIONS as u32;
const PER_SECTION: u32 = 32;

fn many_tensors() -> Vec<u8> {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "many".into(),
        ..Default::default()
    });
    for s in 0..SECTIONS {
        let idx = w
            .add_section(SectionKind::Onnx, &format!("s{s}"), None, Vec::new())
            .unwrap();
        for t in 0..PER_SECTION {
            w.add_tensor(
                idx,
                TensorDesc {
                    name: format!("t{t}"),
                    mode: IoMode::Input,
                    dtype: DType::F32,
                    layout: Layout::Nchw,
                    dims: vec![1, 3, 8, 8],
                },
            )
            .unwrap();
        }
    }
    w.to_bytes().unwrap()
}

/// The same bundle with tensor records in reverse section order (valid:
/// readers must not depend on grouping).
fn ungrouped(mut bytes: Vec<u8>) -> Vec<u8> {
    for i in 0..SECTIONS * PER_SECTION {
        tensor_mut(&mut bytes, i)
            .section
            .set(SECTIONS - 1 - i / PER_SECTION);
    }
    reseal(&mut bytes);
    bytes
}

/// Best of `n` timings of `f`.
fn best_of(n: usize, mut f: impl FnMut() -> usize) -> Duration {
    (0..n)
        .map(|_| {
            let t0 = Instant::now();
            black_box(f());
            t0.elapsed()
        })
        .min()
        .unwrap()
}

fn check(b: &Bundle) {
    // Exact: every section yields its 32 tensors, announced up front, in
    // table order; together, the whole table once.
    let mut total = 0usize;
    for s in b.sections() {
        let ts = b.tensors(s.index);
        assert_eq!(ts.len(), PER_SECTION as usize, "section {}", s.index);
        let idx: Vec<u32> = ts.map(|t| t.index).collect();
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "table order");
        assert!(b.tensors(s.index).all(|t| t.section == s.index));
        total += idx.len();
    }
    assert_eq!(total, b.tensor_count() as usize);

    // Linear: listing per section costs about one walk of the table (a
    // quadratic lookup would cost 4096 walks). Both are the best of five
    // runs, and the bound is 10x plus 50 ms, so load on the machine does
    // not make this flaky.
    let walk = || b.all_tensors().map(|t| t.name.len()).sum::<usize>();
    let per_section = || {
        b.sections()
            .map(|s| b.tensors(s.index).map(|t| t.name.len()).sum::<usize>())
            .sum::<usize>()
    };
    assert_eq!(walk(), per_section());
    let base = best_of(5, walk);
    let listed = best_of(5, per_section);
    assert!(
        listed <= base * 10 + Duration::from_millis(50),
        "per-section listing took {listed:?}, one walk of the table {base:?}"
    );
}

#[test]
fn listing_every_sections_tensors_is_linear() {
    let bytes = many_tensors();
    let grouped = Bundle::from_vec(bytes.clone(), Verify::Eager).unwrap();
    assert_eq!(grouped.tensor_count(), SECTIONS * PER_SECTION);
    check(&grouped);
    let mixed = Bundle::from_vec(ungrouped(bytes), Verify::Eager).unwrap();
    assert_eq!(
        mixed.tensors(0).next().unwrap().index,
        (SECTIONS - 1) * PER_SECTION,
        "section 0's tensors are now at the end of the table"
    );
    check(&mixed);
}
