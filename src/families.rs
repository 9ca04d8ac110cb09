//! The families the `tether` CLI knows. Adding a family: implement
//! [`tether_family::family::Family`] in its crate (feature `cli`) and list it here.

use tether_family::family::Registry;

/// Every family, in `--help` order.
pub static REGISTRY: Registry = &[
    &tether_detect::cli::DETECT,
    &tether_ocr::cli::OCR,
    &tether_vad::cli::VAD,
    &tether_embed::cli::EMBED,
    &tether_llm::cli::LLM,
];
