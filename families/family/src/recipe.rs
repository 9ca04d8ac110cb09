//! What every family's build recipe shares: the options common to all of them
//! ([`BuildCommon`]: the bundle identity's name, model version and creation time) and the
//! SHA-256 digests by which a recipe recognises the pinned model files its goldens belong to.
//!
//! A family's `BuildOptions` holds a [`BuildCommon`] and only its own fields beyond it; the
//! CLI fills the common part from `tether build`'s `--name`, `--model-version` and
//! `SOURCE_DATE_EPOCH`.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tether_bundle::{
    Bundle, BundleError, BundleWriter, CpuArch, EngineKind, IdentityDesc, SectionKind, TargetDesc,
    Verify,
};
use zerocopy::{Immutable, IntoBytes};

/// The part of every recipe's options that becomes the bundle identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildCommon {
    /// Bundle name (`--name`); `None`: the family picks (the CLI passes the model file's
    /// stem, see [`BuildCommon::or_name`]; a recipe given none uses its family name).
    pub name: Option<String>,
    /// Model version recorded in the identity (`--model-version`); `None`: the family's
    /// default (the pinned model's name when the digests match, metadata, or `unspecified`).
    pub model_version: Option<String>,
    /// Creation time, seconds since the Unix epoch (`SOURCE_DATE_EPOCH` when set; the writer
    /// never reads the clock, so a build is reproducible).
    pub created_unix_s: u64,
}

impl BuildCommon {
    /// Options naming the bundle `name`, everything else default.
    pub fn named(name: impl Into<String>) -> Self {
        BuildCommon {
            name: Some(name.into()),
            ..BuildCommon::default()
        }
    }

    /// These options, named `name` unless a name is already set.
    #[must_use]
    pub fn or_name(mut self, name: impl Into<String>) -> Self {
        if self.name.is_none() {
            self.name = Some(name.into());
        }
        self
    }

    /// The bundle identity: this name (else `family`), this model version (else
    /// `default_version()`), `tool_version` (`tether-<family> <crate version>`), this
    /// creation time.
    pub fn identity(
        &self,
        family: &str,
        tool_version: &str,
        default_version: impl FnOnce() -> String,
    ) -> IdentityDesc {
        IdentityDesc {
            name: self.name.clone().unwrap_or_else(|| family.to_string()),
            family: family.to_string(),
            model_version: self.model_version.clone().unwrap_or_else(default_version),
            tool_version: tool_version.to_string(),
            created_unix_s: self.created_unix_s,
        }
    }
}

/// Add the target a recipe files its ONNX networks under and return its index: `portable`
/// (any CPU architecture, no SM, the tract CPU engine's kind), which every engine that reads
/// ONNX offers itself for at load (tract CPU, tract-cuda, the native GPU engine).
///
/// # Errors
/// The writer's ([`BundleError`]).
pub fn add_portable_target(writer: &mut BundleWriter) -> Result<u32, BundleError> {
    writer.add_target(TargetDesc {
        name: "portable".into(),
        arch: CpuArch::Any,
        sm: None,
        engine: EngineKind::TractCpu,
        tensorrt_version: 0,
        hardware_compat: 0,
        flags: 0,
    })
}

/// Add a family's configuration record (zerocopy, little-endian, versioned) as section
/// `name`, kind `FamilyConfig`.
///
/// # Errors
/// The writer's ([`BundleError`]).
pub fn add_config<T: IntoBytes + Immutable>(
    writer: &mut BundleWriter,
    name: &str,
    record: &T,
) -> Result<(), BundleError> {
    writer.add_section(
        SectionKind::FamilyConfig,
        name,
        None,
        record.as_bytes().to_vec(),
    )?;
    Ok(())
}

/// The model version a recipe records when none is given: `version` for the pinned model
/// file(s) it recognises, else `unspecified`.
pub fn pinned_version(pinned: bool, version: &str) -> String {
    if pinned { version } else { "unspecified" }.to_string()
}

/// The bundle `writer` holds, opened in memory with every checksum verified: what a recipe
/// runs on the CPU engine before the bundle is written (its self-test).
///
/// # Errors
/// The writer's or the reader's ([`BundleError`]).
pub fn in_memory(writer: &BundleWriter) -> Result<Arc<Bundle>, BundleError> {
    Ok(Arc::new(Bundle::from_vec(
        writer.to_bytes()?,
        Verify::Eager,
    )?))
}

/// The stem of a model file's name (`yolov8n` of `/m/yolov8n.onnx`), the default bundle
/// name; `fallback` when the path has none that is UTF-8.
pub fn file_stem(path: &Path, fallback: &str) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(fallback)
        .to_string()
}

/// SHA-256 of `bytes`, lower-case hex: how recipes recognise the pinned model files (the
/// digests `tests/assets.sha256` and the goldens record).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_defaults_come_from_the_family() {
        let c = BuildCommon {
            created_unix_s: 7,
            ..BuildCommon::default()
        };
        let id = c.identity("vad", "tether-vad 0.1.0", || "unspecified".into());
        assert_eq!(
            (
                id.name.as_str(),
                id.family.as_str(),
                id.model_version.as_str()
            ),
            ("vad", "vad", "unspecified")
        );
        assert_eq!(id.created_unix_s, 7);
        let id = BuildCommon::named("x")
            .or_name("ignored")
            .identity("vad", "t", || "v".into());
        assert_eq!((id.name.as_str(), id.model_version.as_str()), ("x", "v"));
        assert_eq!(
            BuildCommon::default().or_name("stem").name.as_deref(),
            Some("stem")
        );
    }

    #[test]
    fn stems_and_digests() {
        assert_eq!(file_stem(Path::new("/m/yolov8n.onnx"), "model"), "yolov8n");
        assert_eq!(file_stem(Path::new("/"), "model"), "model");
        // FIPS 180-2 test vector.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
