//! Networks: how engine sections are grouped (format 1.1, `FORMAT.md` section 4.8).
//!
//! A bundle may hold several networks (OCR: a detector, a recogniser and a classifier).
//! Engine sections (kinds `onnx` and `tensorrt-plan`) are named
//! `<family>/<network>/<file>`: every engine section whose name has the same first two
//! components belongs to the same network, one payload per target (an ONNX model for the
//! portable engines, a TensorRT plan per GPU). A 1.0 bundle names its single network's
//! sections `<family>/<file>`; a reader groups those into one network called
//! [`DEFAULT_NETWORK`].

/// Name of the network of a bundle written before format 1.1 (its engine sections are
/// named `<family>/<file>`).
pub const DEFAULT_NETWORK: &str = "model";

/// The network an engine section belongs to, from its name: the second component of
/// `<family>/<network>/<file>`, or [`DEFAULT_NETWORK`] for a two-component 1.0 name
/// `<family>/<file>` (and for a name without `/`).
///
/// ```
/// use tether_bundle::network_of;
/// assert_eq!(network_of("ocr/rec/model.onnx"), "rec");
/// assert_eq!(network_of("detect/plan.sm90-trt11.4"), "model");
/// assert_eq!(network_of("model.onnx"), "model");
/// ```
pub fn network_of(section_name: &str) -> &str {
    let mut parts = section_name.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(network), Some(_)) if !network.is_empty() => network,
        _ => DEFAULT_NETWORK,
    }
}

/// The section name of `file` of `network` in a `family` bundle, as format 1.1 writers name
/// it: `<family>/<network>/<file>`.
pub fn network_section_name(family: &str, network: &str, file: &str) -> String {
    format!("{family}/{network}/{file}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_group_into_networks() {
        assert_eq!(network_of("detect/model/model.onnx"), "model");
        assert_eq!(network_of("ocr/det/plan.sm87-trt10.3"), "det");
        assert_eq!(network_of("detect/model.onnx"), DEFAULT_NETWORK);
        assert_eq!(network_of("a//b"), DEFAULT_NETWORK);
        assert_eq!(network_of(""), DEFAULT_NETWORK);
        assert_eq!(
            network_section_name("ocr", "rec", "model.onnx"),
            "ocr/rec/model.onnx"
        );
        assert_eq!(
            network_of(&network_section_name("vad", "vad", "plan.x")),
            "vad"
        );
    }
}
