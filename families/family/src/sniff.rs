//! What a file is, from its first bytes, for an error that refuses it: "not a WAV file (it
//! looks like a PNG image)", "not an image this build decodes (it looks like WAV audio)".
//! The signatures are the formats' published magic numbers (PNG, JPEG, GIF, BMP, RIFF forms,
//! FLAC, Ogg, MP3, AIFF, AU, ISO BMFF `ftyp`, Matroska, ZIP, PDF) and the tether bundle's
//! ([`tether_bundle::MAGIC`]); the first 12 bytes suffice for every one.

/// What the first bytes `head` (12 are enough) look like, as a phrase: "a PNG image", "WAV
/// audio", "a tether bundle", "an empty file", "text", "data of an unknown kind".
pub fn looks_like(head: &[u8]) -> &'static str {
    let starts = |m: &[u8]| head.starts_with(m);
    let riff_form = |form: &[u8]| head.len() >= 12 && &head[8..12] == form;
    if starts(b"\x89PNG\r\n\x1a\n") {
        "a PNG image"
    } else if starts(&[0xFF, 0xD8, 0xFF]) {
        "a JPEG image"
    } else if starts(b"GIF8") {
        "a GIF image"
    } else if starts(b"BM") && head.len() >= 12 {
        "a BMP image"
    } else if (starts(b"RIFF") || starts(b"RIFX")) && riff_form(b"WEBP") {
        "a WebP image"
    } else if ["RIFF", "RIFX", "RF64", "BW64"]
        .iter()
        .any(|m| starts(m.as_bytes()))
        && riff_form(b"WAVE")
    {
        "WAV audio"
    } else if (starts(b"RIFF") || starts(b"RIFX")) && riff_form(b"AVI ") {
        "an AVI video"
    } else if starts(b"RIFF") || starts(b"RIFX") {
        "a RIFF file of another form than WAVE"
    } else if starts(b"fLaC") {
        "FLAC audio"
    } else if starts(b"OggS") {
        "Ogg audio (Vorbis or Opus)"
    } else if starts(b"ID3") || (head.len() >= 2 && head[0] == 0xFF && head[1] & 0xE0 == 0xE0) {
        "MP3 audio"
    } else if starts(b"FORM")
        && head.len() >= 12
        && (&head[8..12] == b"AIFF" || &head[8..12] == b"AIFC")
    {
        "AIFF audio"
    } else if starts(b".snd") {
        "Sun/NeXT AU audio"
    } else if head.len() >= 8 && &head[4..8] == b"ftyp" {
        "an MP4/M4A/MOV file"
    } else if starts(b"\x1a\x45\xdf\xa3") {
        "a Matroska/WebM file"
    } else if starts(&tether_bundle::MAGIC[..5]) {
        "a tether bundle"
    } else if starts(b"PK\x03\x04") {
        "a ZIP archive"
    } else if starts(b"%PDF") {
        "a PDF document"
    } else if head.is_empty() {
        "an empty file"
    } else if head
        .iter()
        .all(|&b| b == b'\n' || b == b'\r' || b == b'\t' || (0x20..0x7F).contains(&b))
    {
        "text"
    } else {
        "data of an unknown kind"
    }
}

#[cfg(test)]
mod tests {
    use super::looks_like;

    #[test]
    fn each_signature_is_named_and_the_rest_is_text_or_unknown() {
        let mut bundle = tether_bundle::MAGIC.to_vec();
        bundle.extend_from_slice(&[1, 0, 1, 0]);
        for (head, says) in [
            (&b"\x89PNG\r\n\x1a\n\0\0\0\r"[..], "a PNG image"),
            (&[0xFF, 0xD8, 0xFF, 0xE0][..], "a JPEG image"),
            (&b"RIFF\x24\0\0\0WAVEfmt "[..], "WAV audio"),
            (&b"BW64\xff\xff\xff\xffWAVE"[..], "WAV audio"),
            (&b"BM\x36\x10\0\0\0\0\0\0\x36\0"[..], "a BMP image"),
            (&b"RIFF\x24\0\0\0WEBPVP8 "[..], "a WebP image"),
            (&b"RIFF\x24\0\0\0AVI LIST"[..], "an AVI video"),
            (&bundle[..], "a tether bundle"),
            (&b"fLaC\0\0\0\x22"[..], "FLAC audio"),
            (&b""[..], "an empty file"),
            (&b"hello, world"[..], "text"),
            (&[0u8, 1, 2, 3][..], "data of an unknown kind"),
        ] {
            assert_eq!(looks_like(head), says, "{head:?}");
        }
    }
}
