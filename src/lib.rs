//! tether: bundles built from open models, loaded with zero-copy manifests and run
//! allocation-free on Jetson AGX, DRIVE AGX and data-center GPUs.
//!
//! This facade re-exports the workspace crates:
//!
//! - [`bundle`]: the `.bundle` file format (reader, writer, verification);
//! - [`runtime`]: the model API, engines (backends), sessions, the CUDA and TensorRT layers;
//! - [`targets`]: what a device is and what it can run;
//! - [`detect`]: the YOLOv8 detection family (semantic API);
//! - [`ocr`]: the PP-OCR text detection and recognition family (semantic API);
//! - [`vad`]: the Silero voice-activity family (16 kHz audio in 32 ms chunks, speech
//!   probabilities and segments out);
//! - [`embed`]: the sentence-embedding family (MiniLM: texts in, 384-d L2-normalised
//!   embeddings out);
//! - [`llm`]: the text-generation family (GGUF / Hugging Face checkpoints, streamed tokens);
//! - [`family`]: what families share (image types; the tool interface with feature `cli`);
//! - [`families::REGISTRY`] (feature `cli`): the families the `tether` CLI knows.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tether::detect::{Detector, ImageView, PixelFormat};
//! let mut detector = Detector::load("doclaynet.bundle")?;
//! let (w, h) = (640, 480);
//! let rgb = vec![0u8; w * h * 3]; // a camera frame, RGB8, row-major
//! let image = ImageView::new(&rgb, w as u32, h as u32, PixelFormat::Rgb8)?;
//! for d in detector.detect(&image)? {
//!     println!("class {} score {:.3} box {:?}", d.class_id, d.score, d.bbox);
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub use tether_bundle as bundle;
pub use tether_detect as detect;
pub use tether_embed as embed;
pub use tether_family as family;
pub use tether_llm as llm;
pub use tether_ocr as ocr;
pub use tether_runtime as runtime;
pub use tether_targets as targets;
pub use tether_vad as vad;

#[cfg(feature = "cli")]
pub mod families;
