//! `/etc/nv_tegra_release`: the Jetson Linux (L4T) release of a JetPack
//! system.
//!
//! Format (written by the `nvidia-l4t-core` package; see
//! [`sources::NV_TEGRA_RELEASE_FORMAT`](crate::sources::NV_TEGRA_RELEASE_FORMAT)),
//! JetPack 6.2 on an Orin:
//!
//! ```text
//! # R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025
//! # KERNEL_VARIANT: oot
//! TARGET_USERSPACE_LIB_DIR=nvidia
//! TARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia
//! ```
//!
//! The first line carries the release (`R36` = 36) and `REVISION: 4.3`
//! (minor 4, patch 3): L4T 36.4.3 = JetPack 6.2.

use crate::jetpack::L4tVersion;

/// The parsed contents of `/etc/nv_tegra_release`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct L4tRelease {
    /// `R<major>` + `REVISION: <minor>.<patch>`.
    pub version: L4tVersion,
    /// The word in parentheses after the release, normally `release`.
    pub kind: String,
    /// `GCID` (NVIDIA's build id).
    pub gcid: Option<String>,
    /// `BOARD` (`generic` on JetPack 6/7).
    pub board: Option<String>,
    /// `EABI` (`aarch64`).
    pub eabi: Option<String>,
    /// `DATE` (build date, free text).
    pub date: Option<String>,
    /// `# KERNEL_VARIANT:` (`oot` = out-of-tree NVIDIA modules).
    pub kernel_variant: Option<String>,
    /// `TARGET_USERSPACE_LIB_DIR_PATH`, made absolute
    /// (`/usr/lib/aarch64-linux-gnu/nvidia`): where this release puts its
    /// user-space driver libraries, `libcuda.so.1` among them.
    pub userspace_lib_dir: Option<String>,
}

/// Why `/etc/nv_tegra_release` could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum L4tParseError {
    /// The file is empty.
    #[error("/etc/nv_tegra_release is empty")]
    Empty,
    /// The first line does not start with `# R<number>`.
    #[error("first line of /etc/nv_tegra_release does not start with \"# R<number>\": {0:?}")]
    BadRelease(String),
    /// No `REVISION:` field on the first line.
    #[error("no REVISION field in /etc/nv_tegra_release: {0:?}")]
    MissingRevision(String),
    /// `REVISION:` is not `<number>[.<number>]`.
    #[error("REVISION {0:?} in /etc/nv_tegra_release is not <number>.<number>")]
    BadRevision(String),
}

/// Parses the contents of `/etc/nv_tegra_release`.
///
/// # Errors
///
/// [`L4tParseError`] when the first line lacks `# R<n>` or a numeric
/// `REVISION`.
pub fn parse_nv_tegra_release(text: &str) -> Result<L4tRelease, L4tParseError> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().ok_or(L4tParseError::Empty)?;
    let mut fields = first.split(',').map(str::trim);
    let head = fields.next().unwrap_or_default();
    let bad = || L4tParseError::BadRelease(first.to_string());
    let rest = head
        .strip_prefix('#')
        .map(str::trim_start)
        .and_then(|h| h.strip_prefix('R'))
        .ok_or_else(bad)?;
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u16 = rest[..digits_end].parse().map_err(|_| bad())?;
    let kind = rest[digits_end..]
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .to_string();

    let mut revision = None;
    let mut release = L4tRelease {
        version: L4tVersion::new(major, 0, 0),
        kind,
        gcid: None,
        board: None,
        eabi: None,
        date: None,
        kernel_variant: None,
        userspace_lib_dir: None,
    };
    for field in fields {
        let Some((key, value)) = field.split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match key.trim() {
            "REVISION" => revision = Some(value),
            "GCID" => release.gcid = Some(value),
            "BOARD" => release.board = Some(value),
            "EABI" => release.eabi = Some(value),
            "DATE" => release.date = Some(value),
            _ => {}
        }
    }
    let revision = revision.ok_or_else(|| L4tParseError::MissingRevision(first.to_string()))?;
    let (minor, patch) = match revision.split_once('.') {
        Some((a, b)) => (a.parse(), b.parse()),
        None => (revision.parse(), Ok(0)),
    };
    let (Ok(minor), Ok(patch)) = (minor, patch) else {
        return Err(L4tParseError::BadRevision(revision));
    };
    release.version = L4tVersion::new(major, minor, patch);

    for line in lines {
        if let Some(v) = line
            .strip_prefix('#')
            .map(str::trim)
            .and_then(|l| l.strip_prefix("KERNEL_VARIANT:"))
        {
            release.kernel_variant = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("TARGET_USERSPACE_LIB_DIR_PATH=") {
            let v = v.trim();
            if !v.is_empty() {
                release.userspace_lib_dir = Some(format!("/{}", v.trim_start_matches('/')));
            }
        }
    }
    Ok(release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jetpack6_orin() {
        let r = parse_nv_tegra_release(
            "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n\
             # KERNEL_VARIANT: oot\n\
             TARGET_USERSPACE_LIB_DIR=nvidia\n\
             TARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
        )
        .unwrap();
        assert_eq!(r.version, L4tVersion::new(36, 4, 3));
        assert_eq!(r.kind, "release");
        assert_eq!(r.gcid.as_deref(), Some("38968081"));
        assert_eq!(r.board.as_deref(), Some("generic"));
        assert_eq!(r.date.as_deref(), Some("Wed Jan  8 01:49:37 UTC 2025"));
        assert_eq!(r.kernel_variant.as_deref(), Some("oot"));
        assert_eq!(
            r.userspace_lib_dir.as_deref(),
            Some("/usr/lib/aarch64-linux-gnu/nvidia")
        );
    }

    #[test]
    fn jetpack7_thor_and_short_forms() {
        let r = parse_nv_tegra_release(
            "# R38 (release), REVISION: 2.2, GCID: 42205042, BOARD: generic, EABI: aarch64, DATE: Thu Sep 25 22:47:11 UTC 2025\n",
        )
        .unwrap();
        assert_eq!(r.version, L4tVersion::new(38, 2, 2));
        assert_eq!(r.userspace_lib_dir, None);
        // Older releases wrote a one-number revision.
        let r = parse_nv_tegra_release("# R32 (release), REVISION: 7\n").unwrap();
        assert_eq!(r.version, L4tVersion::new(32, 7, 0));
    }

    #[test]
    fn errors() {
        assert_eq!(parse_nv_tegra_release(""), Err(L4tParseError::Empty));
        assert!(matches!(
            parse_nv_tegra_release("hello"),
            Err(L4tParseError::BadRelease(_))
        ));
        assert!(matches!(
            parse_nv_tegra_release("# R36 (release), GCID: 1"),
            Err(L4tParseError::MissingRevision(_))
        ));
        assert!(matches!(
            parse_nv_tegra_release("# R36 (release), REVISION: x.y"),
            Err(L4tParseError::BadRevision(_))
        ));
    }
}
