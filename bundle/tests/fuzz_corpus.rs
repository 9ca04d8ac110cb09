//! Replays the kept fuzzing corpus (`tests/fuzz-corpus/read_bundle/`, the
//! minimised corpus of the last long run, see `fuzz/README.md`) through the
//! fuzz target's own code, as an ordinary test on the stable toolchain: no
//! input may panic or fail an invariant (errors are fine).

#[path = "../fuzz/exercise.rs"]
mod exercise;

#[test]
fn every_kept_fuzz_input_is_handled() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus/read_bundle");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 100,
        "{} inputs in {}",
        files.len(),
        dir.display()
    );
    let mut opened = 0usize;
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        if tether_bundle::Bundle::from_vec(bytes.clone(), tether_bundle::Verify::Lazy).is_ok() {
            opened += 1;
        }
        let r = std::panic::catch_unwind(|| exercise::run(&bytes));
        assert!(r.is_ok(), "fuzz input {} panicked", f.display());
    }
    // The corpus reaches past open, not just into its first checks.
    assert!(opened >= 10, "only {opened} of {} inputs open", files.len());
}
