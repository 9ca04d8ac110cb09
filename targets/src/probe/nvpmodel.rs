//! The Jetson power mode, read from nvpmodel's files (no `nvpmodel`
//! binary, no root).
//!
//! * `/etc/nvpmodel.conf` (usually a link to
//!   `/etc/nvpmodel/nvpmodel_<board>.conf`) defines the modes,
//!   `< POWER_MODEL ID=<id> NAME=<name> >`, and the boot default,
//!   `< PM_CONFIG DEFAULT=<id> >`.
//! * `/var/lib/nvpmodel/status` holds the mode nvpmodel last set, as
//!   `pmode:<id, zero-padded>` (`pmode:0002`), sometimes followed by other
//!   `key:value` words.
//!
//! Format: [`sources::NVPMODEL_FORMAT`](crate::sources::NVPMODEL_FORMAT).

/// The modes and default of an nvpmodel configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NvpModelConf {
    /// `(id, name)` of every `POWER_MODEL`, in file order.
    pub modes: Vec<(u32, String)>,
    /// `PM_CONFIG DEFAULT`.
    pub default: Option<u32>,
}

impl NvpModelConf {
    /// The name of mode `id`.
    pub fn name(&self, id: u32) -> Option<&str> {
        self.modes
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| n.as_str())
    }
}

/// Where the active power mode was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum PowerModeSource {
    /// `/var/lib/nvpmodel/status` (the mode nvpmodel last set).
    Status,
    /// No saved status: the configuration's `PM_CONFIG DEFAULT`, which
    /// nvpmodel applies at boot.
    ConfigDefault,
}

/// The active nvpmodel power mode.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PowerMode {
    /// Mode id.
    pub id: u32,
    /// Its name from the configuration (`MAXN`, `MODE_30W`, `120W`).
    pub name: Option<String>,
    /// The configuration's default mode id.
    pub default_id: Option<u32>,
    /// Where `id` came from.
    pub source: PowerModeSource,
    /// Every mode the configuration defines, `(id, name)`.
    pub modes: Vec<(u32, String)>,
}

/// Parses an nvpmodel configuration. Lines that are not `POWER_MODEL` or
/// `PM_CONFIG` headers are ignored.
pub fn parse_conf(text: &str) -> NvpModelConf {
    let mut conf = NvpModelConf::default();
    for line in text.lines() {
        let Some(inner) = line
            .trim()
            .strip_prefix('<')
            .and_then(|l| l.trim_end().strip_suffix('>'))
        else {
            continue;
        };
        let mut words = inner.split_whitespace();
        match words.next() {
            Some("POWER_MODEL") => {
                let (mut id, mut name) = (None, None);
                for w in words {
                    if let Some(v) = w.strip_prefix("ID=") {
                        id = v.parse().ok();
                    } else if let Some(v) = w.strip_prefix("NAME=") {
                        name = Some(v.to_string());
                    }
                }
                if let (Some(id), Some(name)) = (id, name) {
                    conf.modes.push((id, name));
                }
            }
            Some("PM_CONFIG") => {
                for w in words {
                    if let Some(v) = w.strip_prefix("DEFAULT=") {
                        conf.default = v.parse().ok();
                    }
                }
            }
            _ => {}
        }
    }
    conf
}

/// Parses `/var/lib/nvpmodel/status`: the number after `pmode:`.
pub fn parse_status(text: &str) -> Option<u32> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("pmode:"))
        .and_then(|v| v.parse().ok())
}

/// The active mode from the two files' contents (either may be missing).
/// `None` when neither names a mode.
pub fn power_mode(conf: Option<&str>, status: Option<&str>) -> Option<PowerMode> {
    let conf = conf.map(parse_conf).unwrap_or_default();
    let (id, source) = match status.and_then(parse_status) {
        Some(id) => (id, PowerModeSource::Status),
        None => (conf.default?, PowerModeSource::ConfigDefault),
    };
    Some(PowerMode {
        id,
        name: conf.name(id).map(str::to_string),
        default_id: conf.default,
        source,
        modes: conf.modes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIN: &str = "# comment\n< PARAM TYPE=FILE NAME=CPU_ONLINE >\nCORE_0 /sys/devices/system/cpu/cpu0/online\n\
        < POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=1 NAME=MODE_15W >\n\
        < POWER_MODEL ID=2 NAME=MODE_30W >\n< POWER_MODEL ID=3 NAME=MODE_50W >\n< PM_CONFIG DEFAULT=2 >\n";

    #[test]
    fn conf() {
        let c = parse_conf(ORIN);
        assert_eq!(c.modes.len(), 4);
        assert_eq!(c.default, Some(2));
        assert_eq!(c.name(3), Some("MODE_50W"));
    }

    #[test]
    fn status() {
        assert_eq!(parse_status("pmode:0002\n"), Some(2));
        assert_eq!(parse_status("pmode:0000 fmode:quiet"), Some(0));
        assert_eq!(parse_status("garbage"), None);
    }

    #[test]
    fn active_mode() {
        let m = power_mode(Some(ORIN), Some("pmode:0000")).unwrap();
        assert_eq!(
            (m.id, m.name.as_deref(), m.source),
            (0, Some("MAXN"), PowerModeSource::Status)
        );
        let m = power_mode(Some(ORIN), None).unwrap();
        assert_eq!(
            (m.id, m.name.as_deref(), m.source),
            (2, Some("MODE_30W"), PowerModeSource::ConfigDefault)
        );
        let m = power_mode(None, Some("pmode:0001")).unwrap();
        assert_eq!((m.id, m.name), (1, None));
        assert_eq!(power_mode(None, None), None);
    }
}
