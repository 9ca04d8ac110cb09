//! Jetson Linux (L4T) release to JetPack release, with the CUDA and TensorRT
//! each JetPack ships.
//!
//! NVIDIA publishes the pairing release by release on its JetPack archive
//! pages ([`sources::JETPACK_ARCHIVE`]) but no single machine-readable table;
//! the revision-level rows follow the table kept by `jetson_stats`
//! ([`sources::L4T_JETPACK_TABLE`]), and the CUDA / TensorRT columns come
//! from the release notes cited per row. `None` means "not verified for this
//! table", never "absent".

use core::fmt;

use crate::sources::{self, Source};
use crate::vocab::{CudaVersion, TrtVersion, serialize_as_display};

/// A Jetson Linux (L4T) version `R<major>.<minor>.<patch>`, as
/// `/etc/nv_tegra_release` states it: `# R36 (release), REVISION: 4.3` is
/// 36.4.3. Serializes (feature `serde`) as the string `"R36.4.3"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct L4tVersion {
    /// Release (`R36`).
    pub major: u16,
    /// First number of `REVISION`.
    pub minor: u16,
    /// Second number of `REVISION` (0 when absent).
    pub patch: u16,
}

impl L4tVersion {
    /// `R<major>.<minor>.<patch>`.
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

serialize_as_display!(L4tVersion);

impl fmt::Display for L4tVersion {
    /// `R36.4.3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "R{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One JetPack release and what it ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct JetPackRelease {
    /// The Jetson Linux release inside it.
    pub l4t: L4tVersion,
    /// JetPack version as NVIDIA names it (`6.2`, `7.0`, `7.2 EA`).
    pub jetpack: &'static str,
    /// CUDA toolkit version it installs, when verified.
    pub cuda: Option<CudaVersion>,
    /// TensorRT version it installs, when verified.
    pub tensorrt: Option<TrtVersion>,
    /// Where the CUDA / TensorRT columns come from.
    pub source: &'static Source,
}

const fn row(
    l4t: (u16, u16, u16),
    jetpack: &'static str,
    cuda: Option<(u32, u32)>,
    tensorrt: Option<(u32, u32, u32)>,
    source: &'static Source,
) -> JetPackRelease {
    JetPackRelease {
        l4t: L4tVersion::new(l4t.0, l4t.1, l4t.2),
        jetpack,
        cuda: match cuda {
            Some((a, b)) => Some(CudaVersion::new(a, b)),
            None => None,
        },
        tensorrt: match tensorrt {
            Some((a, b, c)) => Some(TrtVersion::new(a, b, c)),
            None => None,
        },
        source,
    }
}

/// Every JetPack release from 5.0.2 on (the Orin era), oldest first.
///
/// Rows: L4T 35.x = JetPack 5 (Ubuntu 20.04), 36.x = JetPack 6 (Ubuntu
/// 22.04, Orin only), 38.x = JetPack 7.0/7.1 (Ubuntu 24.04, Thor only),
/// 39.x = JetPack 7.2 (Ubuntu 24.04, Orin and Thor).
pub static JETPACK_RELEASES: &[JetPackRelease] = &[
    row(
        (35, 1, 0),
        "5.0.2",
        Some((11, 4)),
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (35, 2, 1),
        "5.1",
        Some((11, 4)),
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (35, 3, 1),
        "5.1.1",
        Some((11, 4)),
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (35, 4, 1),
        "5.1.2",
        Some((11, 4)),
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (35, 5, 0),
        "5.1.3",
        Some((11, 4)),
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (35, 6, 0),
        "5.1.4",
        Some((11, 4)),
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (36, 2, 0),
        "6.0 DP",
        None,
        None,
        &sources::JETPACK60DP_INTRO,
    ),
    row(
        (36, 3, 0),
        "6.0",
        Some((12, 2)),
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (36, 4, 0),
        "6.1",
        Some((12, 6)),
        Some((10, 3, 0)),
        &sources::JETPACK6_RELEASE_NOTES,
    ),
    row(
        (36, 4, 2),
        "6.1 (rev1)",
        Some((12, 6)),
        Some((10, 3, 0)),
        &sources::JETPACK6_RELEASE_NOTES,
    ),
    row(
        (36, 4, 3),
        "6.2",
        Some((12, 6)),
        Some((10, 3, 0)),
        &sources::JETPACK6_RELEASE_NOTES,
    ),
    row(
        (36, 4, 4),
        "6.2.1",
        Some((12, 6)),
        Some((10, 3, 0)),
        &sources::JETPACK6_RELEASE_NOTES,
    ),
    row(
        (36, 4, 7),
        "6.2.1",
        Some((12, 6)),
        Some((10, 3, 0)),
        &sources::JETPACK6_RELEASE_NOTES,
    ),
    row((36, 5, 0), "6.2.2", None, None, &sources::L4T_JETPACK_TABLE),
    row(
        (38, 2, 0),
        "7.0",
        Some((13, 0)),
        Some((10, 13, 3)),
        &sources::JETPACK70_ARCHIVE,
    ),
    row(
        (38, 2, 1),
        "7.0",
        Some((13, 0)),
        Some((10, 13, 3)),
        &sources::JETPACK70_ARCHIVE,
    ),
    row(
        (38, 2, 2),
        "7.0",
        Some((13, 0)),
        Some((10, 13, 3)),
        &sources::JETPACK70_ARCHIVE,
    ),
    row(
        (38, 4, 0),
        "7.1",
        Some((13, 0)),
        Some((10, 13, 3)),
        &sources::JETPACK71_ARCHIVE,
    ),
    row(
        (39, 0, 0),
        "7.2 EA",
        None,
        None,
        &sources::L4T_JETPACK_TABLE,
    ),
    row(
        (39, 2, 0),
        "7.2",
        Some((13, 2)),
        Some((10, 16, 2)),
        &sources::JETPACK72_COMPONENTS,
    ),
    row(
        (39, 2, 1),
        "7.2.1",
        Some((13, 2)),
        None,
        &sources::JETPACK72_COMPONENTS,
    ),
];

/// How well an L4T version is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum JetPackMatch {
    /// The exact L4T revision is in [`JETPACK_RELEASES`].
    Exact(&'static JetPackRelease),
    /// Only the L4T major is known: the JetPack series (`"6.x"`).
    Series(&'static str),
    /// An L4T major this table does not know (older than R35 or newer than
    /// R39).
    Unknown,
}

impl JetPackMatch {
    /// The JetPack version string, if known at all (`6.2`, `6.x`).
    pub fn jetpack(&self) -> Option<&'static str> {
        match self {
            JetPackMatch::Exact(r) => Some(r.jetpack),
            JetPackMatch::Series(s) => Some(s),
            JetPackMatch::Unknown => None,
        }
    }
}

/// Maps an L4T version to its JetPack release (see [`JETPACK_RELEASES`]).
pub fn jetpack_for(l4t: L4tVersion) -> JetPackMatch {
    if let Some(r) = JETPACK_RELEASES.iter().find(|r| r.l4t == l4t) {
        return JetPackMatch::Exact(r);
    }
    match l4t.major {
        32 => JetPackMatch::Series("4.x"),
        34 | 35 => JetPackMatch::Series("5.x"),
        36 => JetPackMatch::Series("6.x"),
        38 => JetPackMatch::Series("7.0/7.1"),
        39 => JetPackMatch::Series("7.2.x"),
        _ => JetPackMatch::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        for w in JETPACK_RELEASES.windows(2) {
            assert!(w[0].l4t < w[1].l4t, "{} !< {}", w[0].l4t, w[1].l4t);
        }
    }

    #[test]
    fn known_rows() {
        let JetPackMatch::Exact(r) = jetpack_for(L4tVersion::new(36, 4, 3)) else {
            panic!("36.4.3 must be exact");
        };
        assert_eq!(r.jetpack, "6.2");
        assert_eq!(r.tensorrt, Some(TrtVersion(100300)));
        assert_eq!(r.cuda, Some(CudaVersion(12060)));
        let JetPackMatch::Exact(r) = jetpack_for(L4tVersion::new(38, 2, 0)) else {
            panic!("38.2.0 must be exact");
        };
        assert_eq!(r.jetpack, "7.0");
        let JetPackMatch::Exact(r) = jetpack_for(L4tVersion::new(39, 2, 0)) else {
            panic!("39.2.0 must be exact");
        };
        assert_eq!(r.jetpack, "7.2");
    }

    #[test]
    fn fallbacks() {
        assert_eq!(
            jetpack_for(L4tVersion::new(36, 9, 9)),
            JetPackMatch::Series("6.x")
        );
        assert_eq!(
            jetpack_for(L4tVersion::new(41, 0, 0)),
            JetPackMatch::Unknown
        );
        assert_eq!(
            jetpack_for(L4tVersion::new(36, 9, 9)).jetpack(),
            Some("6.x")
        );
    }
}
