//! RIFF/WAVE files, read the way the reference reads them, in bounded memory.
//!
//! The reference (`silero_vad.read_audio` with torchaudio 2.8) decodes a file with
//! libsndfile (the `soundfile` backend of `torchaudio.load`, `normalize=True`); ffmpeg,
//! sox and every audio editor read the same files. This reader accepts what they accept:
//!
//! - **Containers**: `RIFF` (little-endian), `RIFX` (big-endian) and `RF64`/`BW64` (64-bit
//!   sizes in a `ds64` chunk, EBU Tech 3306), each with a `WAVE` form.
//! - **Encodings** (`fmt ` field `wFormatTag`, or the first two bytes of the
//!   `WAVE_FORMAT_EXTENSIBLE` SubFormat GUID, Microsoft KSDATAFORMAT or Ambisonic B-format):
//!   integer PCM (1) of 1 to
//!   32 bits in a 1- to 4-byte container, IEEE float (3) of 32 or 64 bits, ITU-T G.711 A-law
//!   (6) and mu-law (7).
//! - **Sizes**: a `data` size larger than the file (a recording cut off: a
//!   [`Truncation`] is reported and the samples present are used, whole frames only, as
//!   libsndfile does); the streaming sizes `0xFFFFFFFF` and `0x7FFFFFFF` that ffmpeg and
//!   arecord write to a pipe (the data runs to the end of the file; not a truncation), and a
//!   `data` size of 0 with bytes after it (a writer that never filled the size in) read the
//!   same way, with a warning: as FFmpeg reads it (`libavformat/wavdec.c`), which is what
//!   silero-vad's `read_audio` uses with torchaudio 2.9 (torchcodec); libsndfile (its reader
//!   with torchaudio 2.8) reads no samples there, a silent empty result.
//! - **Chunks**: any chunk before `data` is skipped (`LIST`, `fact`, `bext`, `JUNK`, ...),
//!   with the RIFF pad byte after an odd-sized chunk; a writer that left the pad byte out is
//!   recognised (the next chunk id is checked at both offsets).
//!
//! Samples are normalised as libsndfile's float reads normalise them: integer PCM divided by
//! 2^(8 x container bytes - 1) (8-bit PCM is unsigned: `(v - 128) / 128`); 12-bit samples in a
//! 16-bit container are therefore read as the 16-bit values they are stored as, left-justified;
//! A-law and mu-law expanded to 16-bit linear (ITU-T G.711 section 4 tables) then divided by
//! 32768; 64-bit float rounded to 32-bit float.
//!
//! Refused, each with a [`WavError`] naming the field and its value: compressed encodings
//! (ADPCM, GSM 6.10, MPEG, ... in `wFormatTag`), an unknown SubFormat GUID, PCM wider than 32
//! bits, float other than 32/64 bits, zero channels or sample rate, an `nBlockAlign` other
//! than `nChannels` x the sample's container bytes ([`WavError::Inconsistent`], naming the
//! value seen and the value expected), a `data` chunk before `fmt `. A file that is not
//! RIFF/WAVE at all is named by what it looks like. A float sample that is NaN or infinite,
//! or a 64-bit one beyond float32's range, is refused as it is read
//! ([`WavError::NonFiniteSample`], naming its frame, channel and value), and so are finite
//! samples whose channel mean overflows float32 ([`WavError::MeanOverflow`]).

use std::io::Read;

/// Bytes read from the file per call at most (the reader holds one such buffer).
const READ_BLOCK: usize = 64 * 1024;

/// The GUID tail (bytes 2..16) of the KSDATAFORMAT_SUBTYPE_* SubFormat GUIDs
/// (`XXXXXXXX-0000-0010-8000-00AA00389B71`, the first two bytes being the format tag).
const KSDATAFORMAT_TAIL: [u8; 14] = [
    0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71,
];

/// The GUID tail (bytes 2..16) of the Ambisonic B-format SubFormat GUIDs
/// (`XXXXXXXX-0721-11D3-8644-C8C1CA000000`, PCM and IEEE float), which libsndfile reads.
const AMBISONIC_TAIL: [u8; 14] = [
    0x00, 0x00, 0x21, 0x07, 0xD3, 0x11, 0x86, 0x44, 0xC8, 0xC1, 0xCA, 0x00, 0x00, 0x00,
];

/// How samples are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Integer PCM (unsigned for a 1-byte container, two's complement otherwise).
    Pcm,
    /// IEEE 754 float (32 or 64 bits).
    Float,
    /// ITU-T G.711 A-law, 8 bits.
    ALaw,
    /// ITU-T G.711 mu-law, 8 bits.
    MuLaw,
}

impl Encoding {
    /// A short name (`"PCM"`, `"float"`, `"A-law"`, `"mu-law"`).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Pcm => "PCM",
            Encoding::Float => "float",
            Encoding::ALaw => "A-law",
            Encoding::MuLaw => "mu-law",
        }
    }
}

/// The container of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// `RIFF`: little-endian.
    Riff,
    /// `RIFX`: big-endian.
    Rifx,
    /// `RF64` or `BW64`: little-endian with 64-bit sizes in `ds64`.
    Rf64,
}

/// What the `fmt ` chunk says, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WavFormat {
    /// The container.
    pub container: Container,
    /// `wFormatTag` as stored (`0xFFFE` for WAVE_FORMAT_EXTENSIBLE).
    pub format_tag: u16,
    /// The encoding (from the tag, or the extensible SubFormat).
    pub encoding: Encoding,
    /// `nChannels`.
    pub channels: u16,
    /// `nSamplesPerSec`, in Hz.
    pub sample_rate: u32,
    /// `wBitsPerSample` as stored.
    pub bits_per_sample: u16,
    /// Meaningful bits per sample (`wValidBitsPerSample` of an extensible header, else
    /// `wBitsPerSample`).
    pub valid_bits: u16,
    /// Bytes per sample in the data (`ceil(wBitsPerSample / 8)`).
    pub container_bytes: u16,
}

impl WavFormat {
    /// Bytes per frame (one sample of every channel).
    pub fn frame_bytes(&self) -> u64 {
        u64::from(self.container_bytes) * u64::from(self.channels)
    }

    /// A short description, e.g. `"16-bit PCM"`, `"12-bit PCM in 16 bits"`, `"A-law"`.
    pub fn describe(&self) -> String {
        match self.encoding {
            Encoding::ALaw | Encoding::MuLaw => self.encoding.name().to_string(),
            e if self.valid_bits != self.container_bytes * 8 => format!(
                "{}-bit {} in {} bits",
                self.valid_bits,
                e.name(),
                self.container_bytes * 8
            ),
            e => format!("{}-bit {}", self.valid_bits, e.name()),
        }
    }
}

/// A `data` chunk that claims more bytes than the file holds (a recording cut off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Data bytes the header declares.
    pub declared_bytes: u64,
    /// Data bytes present in the file.
    pub present_bytes: u64,
}

impl std::fmt::Display for Truncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the file is shorter than its header says: the data chunk declares {} bytes, {} are present (a recording cut off?); using the samples present",
            self.declared_bytes, self.present_bytes
        )
    }
}

/// Why a file cannot be read as WAV.
#[derive(Debug, thiserror::Error)]
pub enum WavError {
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not a RIFF/WAVE file.
    #[error(
        "not a WAV file (it looks like {looks_like}); the vad family reads WAV (RIFF/WAVE) audio: convert other files first, e.g. `ffmpeg -i INPUT -ac 1 -ar 16000 OUTPUT.wav`"
    )]
    NotWav {
        /// What the first bytes look like.
        looks_like: &'static str,
    },
    /// The RIFF structure is broken.
    #[error("malformed WAV: {0}")]
    Malformed(String),
    /// A `fmt ` field has a value no decoder of this crate reads (or no tool could).
    #[error("`fmt ` field {field} = {value}: {reason}")]
    Unsupported {
        /// The field (`wFormatTag`, `SubFormat`, `wBitsPerSample`, `nChannels`, ...).
        field: &'static str,
        /// Its value as stored.
        value: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A `fmt ` field disagrees with the others: `nBlockAlign` (bytes per frame) that is
    /// not `nChannels` x the bytes of one sample's container (`ceil(wBitsPerSample / 8)`),
    /// so the frame size, and with it the length and every sample, would be a guess.
    #[error("`fmt ` field {field} = {value}, expected {expected} ({reason})")]
    Inconsistent {
        /// The field (`nBlockAlign`).
        field: &'static str,
        /// Its value as stored.
        value: u64,
        /// The value the other fields imply.
        expected: u64,
        /// Which fields imply it.
        reason: String,
    },
    /// A float sample that is not a finite float32: NaN, an infinity, or a 64-bit float
    /// beyond float32's range (+-3.4e38), which the float32 read would make infinite.
    #[error(
        "the sample at frame {frame}, channel {channel} is {value}, not a finite number: audio samples must be finite (nominally in [-1, 1])"
    )]
    NonFiniteSample {
        /// Frame (sample per channel) index from the start of the data, 0-based.
        frame: u64,
        /// Channel, 0-based.
        channel: u16,
        /// The sample as stored (a 32-bit float widened losslessly).
        value: f64,
    },
    /// Finite samples whose channel mean overflows float32 (samples beyond +-1.7e38).
    #[error(
        "the mean of the {channels} channels of frame {frame} is {mean}: the samples are too large for float32 (nominally in [-1, 1])"
    )]
    MeanOverflow {
        /// Frame index from the start of the data, 0-based.
        frame: u64,
        /// `nChannels`.
        channels: u16,
        /// The mean computed in float32.
        mean: f32,
    },
}

/// Name of a known `wFormatTag` (the registered codes of RFC 2361 / mmreg.h that files
/// in the field carry).
fn tag_name(tag: u16) -> &'static str {
    match tag {
        0x0001 => "PCM",
        0x0002 => "Microsoft ADPCM",
        0x0003 => "IEEE float",
        0x0006 => "A-law",
        0x0007 => "mu-law",
        0x0011 => "IMA ADPCM",
        0x0022 => "TrueSpeech",
        0x0031 => "GSM 6.10",
        0x0040 => "G.721 ADPCM",
        0x0050 => "MPEG",
        0x0055 => "MPEG Layer III",
        0x0092 => "Dolby AC-3 SPDIF",
        0x00FF => "AAC",
        0x0161..=0x0163 => "Windows Media Audio",
        0x1610 => "HE-AAC",
        0xF1AC => "FLAC",
        0xFFFE => "WAVE_FORMAT_EXTENSIBLE",
        _ => "unregistered",
    }
}

/// A plausible RIFF chunk id: four printable ASCII characters.
fn plausible_id(id: &[u8]) -> bool {
    id.len() == 4 && id.iter().all(|b| (0x20..0x7F).contains(b))
}

/// A byte source with a small push-back buffer (for the missing-pad-byte check) that counts
/// what it has consumed.
struct Source<R> {
    inner: R,
    back: Vec<u8>,
}

impl<R: Read> Source<R> {
    /// Read up to `buf.len()` bytes, fewer only at the end of the file.
    fn read_full(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() && !self.back.is_empty() {
            buf[n] = self.back.remove(0);
            n += 1;
        }
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    fn unread(&mut self, bytes: &[u8]) {
        let mut v = bytes.to_vec();
        v.extend_from_slice(&self.back);
        self.back = v;
    }

    /// Skip `n` bytes; returns how many were there.
    fn skip(&mut self, n: u64) -> std::io::Result<u64> {
        let mut buf = [0u8; 4096];
        let mut left = n;
        while left > 0 {
            let k = self.read_full(&mut buf[..left.min(4096) as usize])?;
            if k == 0 {
                break;
            }
            left -= k as u64;
        }
        Ok(n - left)
    }
}

/// A WAV file being read: its format, then its samples frame by frame, down-mixed to mono.
pub struct WavReader<R> {
    src: Source<R>,
    format: WavFormat,
    /// Data bytes the header declares (`None`: a streaming size, the data runs to the end).
    declared: Option<u64>,
    /// Data bytes read so far.
    read: u64,
    /// Bytes of a partial frame carried to the next read.
    carry: Vec<u8>,
    buf: Vec<u8>,
    frame: Vec<f32>,
    truncation: Option<Truncation>,
    ended: bool,
    /// Frames decoded so far.
    frames_read: u64,
}

impl<R> std::fmt::Debug for WavReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WavReader")
            .field("format", &self.format)
            .field("declared", &self.declared)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

fn u16_of(b: &[u8], big: bool) -> u16 {
    let a = [b[0], b[1]];
    if big {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

fn u32_of(b: &[u8], big: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

fn u64_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

impl<R: Read> WavReader<R> {
    /// Read the header (up to the start of the `data` chunk's samples).
    ///
    /// `file_len`, when known, is the file's size in bytes: a truncated file is then
    /// reported by [`WavReader::truncation`] right away (otherwise when the data ends).
    ///
    /// # Errors
    /// [`WavError`] naming what is wrong.
    pub fn new(reader: R, file_len: Option<u64>) -> Result<Self, WavError> {
        let mut src = Source {
            inner: reader,
            back: Vec::new(),
        };
        let mut head = [0u8; 12];
        let n = src.read_full(&mut head)?;
        let container = match &head[..4.min(n)] {
            b"RIFF" => Container::Riff,
            b"RIFX" => Container::Rifx,
            b"RF64" | b"BW64" => Container::Rf64,
            _ => {
                return Err(WavError::NotWav {
                    looks_like: tether_family::sniff::looks_like(&head[..n]),
                });
            }
        };
        if n < 12 || &head[8..12] != b"WAVE" {
            return Err(WavError::NotWav {
                looks_like: tether_family::sniff::looks_like(&head[..n]),
            });
        }
        let big = container == Container::Rifx;
        let mut pos: u64 = 12;
        let mut format: Option<WavFormat> = None;
        let mut ds64_data: Option<u64> = None;
        let mut pad_pending = false;
        loop {
            let mut h = [0u8; 9];
            let (id, size) = if pad_pending {
                // RIFF: an odd-sized chunk is followed by a pad byte. Some writers leave it
                // out: take whichever reading gives a plausible chunk id.
                let k = src.read_full(&mut h)?;
                if k >= 9 && plausible_id(&h[1..5]) {
                    pos += 9;
                    ([h[1], h[2], h[3], h[4]], u32_of(&h[5..9], big))
                } else if k >= 8 && plausible_id(&h[..4]) {
                    src.unread(&h[8..k]);
                    pos += 8;
                    ([h[0], h[1], h[2], h[3]], u32_of(&h[4..8], big))
                } else {
                    return Err(missing_data(format.is_some(), pos));
                }
            } else {
                let k = src.read_full(&mut h[..8])?;
                if k < 8 {
                    return Err(missing_data(format.is_some(), pos));
                }
                pos += 8;
                ([h[0], h[1], h[2], h[3]], u32_of(&h[4..8], big))
            };
            match &id {
                b"fmt " => {
                    let mut body = vec![0u8; (size as usize).min(1 << 16)];
                    let got = src.read_full(&mut body)?;
                    if got < body.len() || (size as usize) < 16 {
                        return Err(WavError::Malformed(format!(
                            "the `fmt ` chunk at byte {} holds {} bytes ({} present); it needs at least 16",
                            pos - 8,
                            size,
                            got
                        )));
                    }
                    src.skip(u64::from(size) - body.len() as u64)?;
                    format = Some(parse_fmt(&body, container)?);
                }
                b"ds64" if container == Container::Rf64 => {
                    let mut body = vec![0u8; (size as usize).min(1 << 16)];
                    let got = src.read_full(&mut body)?;
                    if got < 24 {
                        return Err(WavError::Malformed(format!(
                            "the `ds64` chunk holds {got} bytes; it needs at least 24"
                        )));
                    }
                    src.skip(u64::from(size).saturating_sub(body.len() as u64))?;
                    ds64_data = Some(u64_le(&body[8..16]));
                }
                b"data" => {
                    let Some(format) = format else {
                        return Err(WavError::Malformed(format!(
                            "the `data` chunk (byte {}) comes before the `fmt ` chunk; rewrite the file with `fmt ` first (e.g. `ffmpeg -i IN.wav OUT.wav`)",
                            pos - 8
                        )));
                    };
                    let declared = match (size, container, ds64_data) {
                        (0xFFFF_FFFF, Container::Rf64, Some(d)) => Some(d),
                        // ffmpeg (0xFFFFFFFF) and arecord (0x7FFFFFFF) writing to a pipe
                        // cannot go back to fill in the size: the data runs to the end of
                        // the file. A size of 0 too, as FFmpeg reads it (libsndfile reads
                        // nothing): a writer stopped before it filled the size in.
                        (0xFFFF_FFFF | 0x7FFF_FFFF | 0, _, _) => None,
                        (s, _, _) => Some(u64::from(s)),
                    };
                    if size == 0
                        && let Some(len) = file_len
                        && len > pos
                    {
                        log::warn!(
                            "the data chunk declares 0 bytes (a writer that never filled the size in?); reading the {} bytes after it to the end of the file, as FFmpeg does",
                            len - pos
                        );
                    }
                    let truncation = match (declared, file_len) {
                        (Some(d), Some(len)) if pos + d > len => Some(Truncation {
                            declared_bytes: d,
                            present_bytes: len.saturating_sub(pos),
                        }),
                        _ => None,
                    };
                    return Ok(Self {
                        src,
                        format,
                        declared,
                        read: 0,
                        carry: Vec::new(),
                        buf: Vec::new(),
                        frame: vec![0.0; usize::from(format.channels)],
                        truncation,
                        ended: false,
                        frames_read: 0,
                    });
                }
                _ => {
                    let skipped = src.skip(u64::from(size))?;
                    if skipped < u64::from(size) {
                        return Err(missing_data(format.is_some(), pos));
                    }
                }
            }
            pos += u64::from(size);
            pad_pending = size % 2 == 1;
        }
    }

    /// The checked format.
    pub fn format(&self) -> &WavFormat {
        &self.format
    }

    /// Frames the header declares (`None` for a streaming size).
    pub fn declared_frames(&self) -> Option<u64> {
        self.declared.map(|d| d / self.format.frame_bytes())
    }

    /// Frames the file holds when that is known before reading (the declared size of a
    /// file that is not truncated, or the bytes present of one that is).
    pub fn frames(&self) -> Option<u64> {
        match (self.truncation, self.declared) {
            (Some(t), _) => Some(t.present_bytes / self.format.frame_bytes()),
            (None, Some(d)) => Some(d / self.format.frame_bytes()),
            (None, None) => None,
        }
    }

    /// The truncation, once known (at open when the file length was given, else once the
    /// data has ended early).
    pub fn truncation(&self) -> Option<Truncation> {
        self.truncation
    }

    /// Append up to `max_frames` frames to `out`, each the mean of its channels in float32
    /// (the reference's `wav.mean(dim=0)`), and return how many were appended: 0 once the
    /// data has ended. A partial frame at the end of the data is dropped.
    ///
    /// # Errors
    /// [`WavError::Io`] when reading fails; [`WavError::NonFiniteSample`] for a float
    /// sample that is NaN or infinite (or a 64-bit one beyond float32's range), naming its
    /// frame and channel; [`WavError::MeanOverflow`] when finite samples' channel mean
    /// overflows float32. `out` may then hold the frames before that one.
    pub fn read_mono(&mut self, out: &mut Vec<f32>, max_frames: usize) -> Result<usize, WavError> {
        if self.ended || max_frames == 0 {
            return Ok(0);
        }
        let fb = self.format.frame_bytes() as usize;
        let room = max_frames.min((READ_BLOCK / fb).max(1)) * fb;
        // A partial frame carried from the last call is shorter than a frame.
        let mut fresh = (room - self.carry.len()) as u64;
        if let Some(d) = self.declared {
            fresh = fresh.min(d.saturating_sub(self.read));
        }
        self.buf.clear();
        self.buf.extend_from_slice(&self.carry);
        self.carry.clear();
        let have = self.buf.len();
        self.buf.resize(have + fresh as usize, 0);
        let got = self.src.read_full(&mut self.buf[have..])?;
        self.read += got as u64;
        self.buf.truncate(have + got);
        let eof = (got as u64) < fresh || self.declared.is_some_and(|d| self.read >= d);
        let whole = self.buf.len() / fb * fb;
        if eof {
            self.ended = true;
            if let Some(d) = self.declared
                && self.read < d
                && self.truncation.is_none()
            {
                self.truncation = Some(Truncation {
                    declared_bytes: d,
                    present_bytes: self.read,
                });
            }
        } else {
            self.carry.extend_from_slice(&self.buf[whole..]);
        }
        let channels = usize::from(self.format.channels);
        let n = channels as f32;
        let big = self.format.container == Container::Rifx;
        let cb = usize::from(self.format.container_bytes);
        let frames = whole / fb;
        out.reserve(frames);
        for (i, frame) in self.buf[..whole].chunks_exact(fb).enumerate() {
            for (s, bytes) in self.frame.iter_mut().zip(frame.chunks_exact(cb)) {
                *s = sample(self.format.encoding, bytes, big);
            }
            let mono = if channels == 1 {
                self.frame[0]
            } else {
                self.frame.iter().copied().sum::<f32>() / n
            };
            // One check per frame: a non-finite sample of any channel makes the mean
            // non-finite too (NaN or infinite); which one it was is found on that path only.
            if !mono.is_finite() {
                return Err(self.non_finite(self.frames_read + i as u64, frame, mono));
            }
            out.push(mono);
        }
        self.frames_read += frames as u64;
        Ok(frames)
    }

    /// The error for frame `index` (its bytes `frame`), whose mean `mono` is not finite.
    fn non_finite(&self, index: u64, frame: &[u8], mono: f32) -> WavError {
        let big = self.format.container == Container::Rifx;
        let cb = usize::from(self.format.container_bytes);
        for (channel, bytes) in frame.chunks_exact(cb).enumerate() {
            let v = sample(self.format.encoding, bytes, big);
            if !v.is_finite() {
                return WavError::NonFiniteSample {
                    frame: index,
                    channel: channel as u16,
                    // Only float samples can be non-finite; a 64-bit one as stored.
                    value: match (self.format.encoding, bytes) {
                        (Encoding::Float, &[a, b, c, d, e, f, g, h]) => {
                            let x = [a, b, c, d, e, f, g, h];
                            if big {
                                f64::from_be_bytes(x)
                            } else {
                                f64::from_le_bytes(x)
                            }
                        }
                        _ => f64::from(v),
                    },
                };
            }
        }
        WavError::MeanOverflow {
            frame: index,
            channels: self.format.channels,
            mean: mono,
        }
    }
}

fn missing_data(have_fmt: bool, pos: u64) -> WavError {
    WavError::Malformed(if have_fmt {
        format!("the file ends at byte {pos} without a `data` chunk")
    } else {
        format!("the file ends at byte {pos} without a `fmt ` chunk")
    })
}

/// Parse and check a `fmt ` chunk body (at least 16 bytes).
fn parse_fmt(b: &[u8], container: Container) -> Result<WavFormat, WavError> {
    let big = container == Container::Rifx;
    let tag = u16_of(&b[0..2], big);
    let channels = u16_of(&b[2..4], big);
    let sample_rate = u32_of(&b[4..8], big);
    let bits = u16_of(&b[14..16], big);
    let unsupported = |field: &'static str, value: String, reason: String| WavError::Unsupported {
        field,
        value,
        reason,
    };
    let (code, valid_bits) = if tag == 0xFFFE {
        if b.len() < 40 {
            return Err(WavError::Malformed(format!(
                "a WAVE_FORMAT_EXTENSIBLE `fmt ` chunk holds {} bytes; it needs 40",
                b.len()
            )));
        }
        let valid = u16_of(&b[18..20], big);
        let guid = &b[24..40];
        if guid[2..] != KSDATAFORMAT_TAIL && guid[2..] != AMBISONIC_TAIL {
            let hex: String = guid.iter().map(|v| format!("{v:02x}")).collect();
            return Err(unsupported(
                "SubFormat",
                hex,
                "not a KSDATAFORMAT subtype (PCM, IEEE float, A-law or mu-law); convert the file to PCM, e.g. `ffmpeg -i IN.wav -c:a pcm_s16le OUT.wav`".into(),
            ));
        }
        let code = u16_of(&guid[0..2], false);
        (code, if valid == 0 { bits } else { valid })
    } else {
        (tag, bits)
    };
    let field = if tag == 0xFFFE {
        "SubFormat"
    } else {
        "wFormatTag"
    };
    let encoding = match code {
        1 => Encoding::Pcm,
        3 => Encoding::Float,
        6 => Encoding::ALaw,
        7 => Encoding::MuLaw,
        other => {
            return Err(unsupported(
                field,
                format!("0x{other:04X} ({})", tag_name(other)),
                "a compressed or unknown encoding tether does not decode (it reads PCM, IEEE float, A-law and mu-law); convert the file to PCM, e.g. `ffmpeg -i IN.wav -c:a pcm_s16le OUT.wav`".into(),
            ));
        }
    };
    if channels == 0 {
        return Err(unsupported(
            "nChannels",
            "0".into(),
            "a file needs at least one channel".into(),
        ));
    }
    if sample_rate == 0 {
        return Err(unsupported(
            "nSamplesPerSec",
            "0".into(),
            "the sample rate must be positive".into(),
        ));
    }
    let container_bytes = match encoding {
        Encoding::Pcm if (1..=32).contains(&bits) => bits.div_ceil(8),
        Encoding::Pcm => {
            return Err(unsupported(
                "wBitsPerSample",
                bits.to_string(),
                "integer PCM of 1 to 32 bits is read".into(),
            ));
        }
        Encoding::Float if bits == 32 || bits == 64 => bits / 8,
        Encoding::Float => {
            return Err(unsupported(
                "wBitsPerSample",
                bits.to_string(),
                "IEEE float samples are 32 or 64 bits".into(),
            ));
        }
        Encoding::ALaw | Encoding::MuLaw if bits == 8 => 1,
        Encoding::ALaw | Encoding::MuLaw => {
            return Err(unsupported(
                "wBitsPerSample",
                bits.to_string(),
                "G.711 A-law and mu-law samples are 8 bits".into(),
            ));
        }
    };
    // Every encoding read here stores a frame as one container per channel: a block align
    // that says otherwise leaves the frame size unknown (0 or 60000 for 16-bit mono, 2 for
    // 24-bit mono were read as 2 and 3 bytes: a length and samples the file may not mean).
    let block_align = u16_of(&b[12..14], big);
    let expected = u32::from(channels) * u32::from(container_bytes);
    if u32::from(block_align) != expected {
        return Err(WavError::Inconsistent {
            field: "nBlockAlign",
            value: block_align.into(),
            expected: expected.into(),
            reason: format!(
                "nChannels {channels} x {container_bytes} bytes per sample of wBitsPerSample {bits}; the header's fields disagree, so its frame size is unknown"
            ),
        });
    }
    if valid_bits == 0 || valid_bits > container_bytes * 8 {
        return Err(unsupported(
            "wValidBitsPerSample",
            valid_bits.to_string(),
            format!(
                "must be 1 to {} for {bits}-bit samples",
                container_bytes * 8
            ),
        ));
    }
    Ok(WavFormat {
        container,
        format_tag: tag,
        encoding,
        channels,
        sample_rate,
        bits_per_sample: bits,
        valid_bits,
        container_bytes,
    })
}

/// One sample, normalised as libsndfile's float read normalises it.
fn sample(encoding: Encoding, b: &[u8], big: bool) -> f32 {
    match (encoding, b.len()) {
        (Encoding::Pcm, 1) => (f32::from(b[0]) - 128.0) / 128.0,
        (Encoding::Pcm, 2) => f32::from(u16_of(b, big) as i16) / 32_768.0,
        (Encoding::Pcm, 3) => {
            let v = if big {
                i32::from_be_bytes([b[0], b[1], b[2], 0])
            } else {
                i32::from_le_bytes([0, b[0], b[1], b[2]])
            } >> 8;
            v as f32 / 8_388_608.0
        }
        (Encoding::Pcm, _) => u32_of(b, big) as i32 as f32 / 2_147_483_648.0,
        (Encoding::Float, 4) => f32::from_bits(u32_of(b, big)),
        (Encoding::Float, _) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[..8]);
            (if big {
                f64::from_be_bytes(a)
            } else {
                f64::from_le_bytes(a)
            }) as f32
        }
        (Encoding::ALaw, _) => f32::from(alaw_to_linear(b[0])) / 32_768.0,
        (Encoding::MuLaw, _) => f32::from(ulaw_to_linear(b[0])) / 32_768.0,
    }
}

/// ITU-T G.711 A-law to 16-bit linear PCM (the 13-bit segment value shifted left by 3):
/// the even bits are inverted (XOR 0x55), bits 4-6 are the segment, bits 0-3 the step; the
/// decision value is the middle of the step.
pub fn alaw_to_linear(code: u8) -> i16 {
    let a = code ^ 0x55;
    let segment = (a >> 4) & 0x07;
    let step = i16::from(a & 0x0F);
    let magnitude = match segment {
        0 => (step << 4) + 8,
        s => ((step << 4) + 0x108) << (s - 1),
    };
    if a & 0x80 != 0 { magnitude } else { -magnitude }
}

/// ITU-T G.711 mu-law to 16-bit linear PCM (the 14-bit value shifted left by 2): the code
/// is stored inverted; bits 4-6 are the segment, bits 0-3 the step, bias 0x84.
pub fn ulaw_to_linear(code: u8) -> i16 {
    let u = !code;
    let segment = (u >> 4) & 0x07;
    let step = i16::from(u & 0x0F);
    let magnitude = (((step << 3) + 0x84) << segment) - 0x84;
    if u & 0x80 != 0 { -magnitude } else { magnitude }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A canonical 44-byte-header WAV (or with extra chunks before `data`).
    fn wav(
        fmt: &[u8],
        extra: &[(&[u8; 4], &[u8])],
        data: &[u8],
        data_size: Option<u32>,
    ) -> Vec<u8> {
        let mut v = b"RIFF\0\0\0\0WAVE".to_vec();
        v.extend_from_slice(b"fmt ");
        v.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
        v.extend_from_slice(fmt);
        for (id, body) in extra {
            v.extend_from_slice(*id);
            v.extend_from_slice(&(body.len() as u32).to_le_bytes());
            v.extend_from_slice(body);
            if body.len() % 2 == 1 {
                v.push(0);
            }
        }
        v.extend_from_slice(b"data");
        v.extend_from_slice(&data_size.unwrap_or(data.len() as u32).to_le_bytes());
        v.extend_from_slice(data);
        let riff = (v.len() - 8) as u32;
        v[4..8].copy_from_slice(&riff.to_le_bytes());
        v
    }

    fn fmt(tag: u16, channels: u16, rate: u32, bits: u16) -> Vec<u8> {
        let block = channels * bits.div_ceil(8);
        let mut f = Vec::new();
        f.extend_from_slice(&tag.to_le_bytes());
        f.extend_from_slice(&channels.to_le_bytes());
        f.extend_from_slice(&rate.to_le_bytes());
        f.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
        f.extend_from_slice(&block.to_le_bytes());
        f.extend_from_slice(&bits.to_le_bytes());
        f
    }

    fn extensible(sub: u16, channels: u16, bits: u16, valid: u16) -> Vec<u8> {
        let mut f = fmt(0xFFFE, channels, 16_000, bits);
        f.extend_from_slice(&22u16.to_le_bytes());
        f.extend_from_slice(&valid.to_le_bytes());
        f.extend_from_slice(&4u32.to_le_bytes());
        f.extend_from_slice(&sub.to_le_bytes());
        f.extend_from_slice(&KSDATAFORMAT_TAIL);
        f
    }

    fn read_all(
        bytes: &[u8],
        len: Option<u64>,
    ) -> Result<(Vec<f32>, WavFormat, Option<Truncation>), WavError> {
        let mut r = WavReader::new(bytes, len)?;
        let mut out = Vec::new();
        while r.read_mono(&mut out, 3)? > 0 {}
        Ok((out, *r.format(), r.truncation()))
    }

    #[test]
    fn g711_tables_match_the_standard() {
        // ITU-T G.711 Tables 1 and 2 (A-law, mu-law): end points and a few decision values,
        // as 16-bit linear (A-law: 13-bit << 3; mu-law: 14-bit << 2).
        assert_eq!(alaw_to_linear(0xD5), 8);
        assert_eq!(alaw_to_linear(0x55), -8);
        assert_eq!(alaw_to_linear(0xAA), 32_256);
        assert_eq!(alaw_to_linear(0x2A), -32_256);
        assert_eq!(ulaw_to_linear(0xFF), 0);
        assert_eq!(ulaw_to_linear(0x7F), 0);
        assert_eq!(ulaw_to_linear(0x80), 32_124);
        assert_eq!(ulaw_to_linear(0x00), -32_124);
        assert_eq!(ulaw_to_linear(0xEF), 132);
        assert_eq!(alaw_to_linear(0x00), -5504);
        // Monotonic in the magnitude bits within a sign.
        let mut last = 0;
        for c in (0x80u8..=0xFF).rev() {
            let v = ulaw_to_linear(c);
            assert!(v >= last, "mu-law 0x{c:02x}");
            last = v;
        }
    }

    #[test]
    fn reads_every_encoding_and_container_width() {
        let pcm16 = [0i16, 16_384, -32_768]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>();
        let (s, f, _) = read_all(&wav(&fmt(1, 1, 16_000, 16), &[], &pcm16, None), None).unwrap();
        assert_eq!(
            (s.as_slice(), f.describe().as_str()),
            ([0.0, 0.5, -1.0].as_slice(), "16-bit PCM")
        );
        // 12 bits in a 16-bit container: read as the stored 16-bit values.
        let (s, f, _) = read_all(&wav(&fmt(1, 1, 16_000, 12), &[], &pcm16, None), None).unwrap();
        assert_eq!(
            (s.as_slice(), f.describe().as_str()),
            ([0.0, 0.5, -1.0].as_slice(), "12-bit PCM in 16 bits")
        );
        let f64s = [0.25f64, -1.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>();
        let (s, _, _) = read_all(&wav(&fmt(3, 1, 16_000, 64), &[], &f64s, None), None).unwrap();
        assert_eq!(s, [0.25, -1.0]);
        let (s, _, _) =
            read_all(&wav(&fmt(6, 1, 8_000, 8), &[], &[0xD5, 0xAA], None), None).unwrap();
        assert_eq!(s, [8.0 / 32_768.0, 32_256.0 / 32_768.0]);
        let (s, _, _) =
            read_all(&wav(&fmt(7, 1, 8_000, 8), &[], &[0xFF, 0x00], None), None).unwrap();
        assert_eq!(s, [0.0, -32_124.0 / 32_768.0]);
        let (s, _, _) = read_all(
            &wav(&fmt(1, 2, 16_000, 8), &[], &[192, 64, 128, 0], None),
            None,
        )
        .unwrap();
        assert_eq!(s, [0.0, -0.5]);
        let pcm24 = [0x00, 0x00, 0x40, 0x00, 0x00, 0x80];
        let (s, _, _) = read_all(&wav(&fmt(1, 1, 16_000, 24), &[], &pcm24, None), None).unwrap();
        assert_eq!(s, [0.5, -1.0]);
        // WAVE_FORMAT_EXTENSIBLE with each subformat.
        for (sub, bits, valid, data, want) in [
            (1u16, 16u16, 12u16, pcm16.clone(), vec![0.0, 0.5, -1.0]),
            (3, 64, 64, f64s.clone(), vec![0.25, -1.0]),
            (3, 32, 32, 0.5f32.to_le_bytes().to_vec(), vec![0.5]),
            (6, 8, 8, vec![0xD5], vec![8.0 / 32_768.0]),
            (7, 8, 8, vec![0xFF], vec![0.0]),
        ] {
            let (s, f, _) = read_all(
                &wav(&extensible(sub, 1, bits, valid), &[], &data, None),
                None,
            )
            .unwrap();
            assert_eq!(s, want, "subformat {sub}");
            assert_eq!((f.format_tag, f.valid_bits), (0xFFFE, valid));
        }
    }

    #[test]
    fn reads_cut_off_streaming_and_padded_files() {
        let data: Vec<u8> = (0..100u8)
            .flat_map(|v| i16::from(v).to_le_bytes())
            .collect();
        // Declared larger than the file: the bytes present, whole frames only, and a
        // truncation, whether or not the length is known up front.
        let mut cut = wav(&fmt(1, 1, 16_000, 16), &[], &data, Some(1000));
        cut.pop();
        for len in [Some(cut.len() as u64), None] {
            let (s, _, t) = read_all(&cut, len).unwrap();
            assert_eq!(s.len(), 99);
            assert_eq!(
                t,
                Some(Truncation {
                    declared_bytes: 1000,
                    present_bytes: 199
                })
            );
        }
        // Streaming sizes: to the end of the file, not a truncation.
        for size in [0xFFFF_FFFF, 0x7FFF_FFFF] {
            let mut v = wav(&fmt(1, 1, 16_000, 16), &[], &data, Some(size));
            v[4..8].copy_from_slice(&size.to_le_bytes());
            let (s, _, t) = read_all(&v, Some(v.len() as u64)).unwrap();
            assert_eq!((s.len(), t), (100, None), "size {size:#x}");
        }
        // Size 0 with bytes after it: to the end of the file as well (FFmpeg), not a
        // truncation; with nothing after it, no samples.
        let v = wav(&fmt(1, 1, 16_000, 16), &[], &data, Some(0));
        for len in [Some(v.len() as u64), None] {
            let (s, _, t) = read_all(&v, len).unwrap();
            assert_eq!((s.len(), t), (100, None));
        }
        let v = wav(&fmt(1, 1, 16_000, 16), &[], &[], Some(0));
        assert_eq!(read_all(&v, Some(v.len() as u64)).unwrap().0.len(), 0);
        // An odd-sized chunk with its pad byte, and one whose writer left it out.
        let v = wav(
            &fmt(1, 1, 16_000, 16),
            &[(b"LIST", b"abc"), (b"fact", &[1, 2, 3, 4])],
            &data,
            None,
        );
        assert_eq!(read_all(&v, None).unwrap().0.len(), 100);
        let mut v = wav(&fmt(1, 1, 16_000, 16), &[(b"LIST", b"abc")], &data, None);
        let at = 12 + 8 + 16 + 8 + 3;
        assert_eq!(v.remove(at), 0, "the pad byte");
        assert_eq!(read_all(&v, None).unwrap().0.len(), 100);
        // A data size shorter than the file: the rest is other chunks, not samples.
        let mut v = wav(&fmt(1, 1, 16_000, 16), &[], &data, Some(20));
        v.extend_from_slice(b"LIST\x02\0\0\0ab");
        assert_eq!(read_all(&v, None).unwrap().0.len(), 10);
    }

    #[test]
    fn refuses_a_block_align_other_than_channels_times_container_bytes() {
        let with_align = |mut f: Vec<u8>, align: u16| {
            f[12..14].copy_from_slice(&align.to_le_bytes());
            f
        };
        let data = [0u8; 32_000];
        // (format, nBlockAlign stored, expected): before the fix the first three read as
        // 1.00 s, 1.00 s and 0.67 s of audio.
        for (f, align, expected) in [
            (fmt(1, 1, 16_000, 16), 0u16, 2u64),
            (fmt(1, 1, 16_000, 16), 60_000, 2),
            (fmt(1, 1, 16_000, 24), 2, 3),
            (fmt(1, 2, 16_000, 16), 2, 4),
            (fmt(1, 1, 16_000, 12), 1, 2),
            (fmt(3, 1, 16_000, 32), 8, 4),
            (fmt(3, 2, 16_000, 64), 8, 16),
            (fmt(6, 2, 8_000, 8), 1, 2),
            // WAVE_FORMAT_EXTENSIBLE: the container is wBitsPerSample (32), not the 24
            // valid bits.
            (extensible(1, 1, 32, 24), 3, 4),
            (extensible(3, 2, 32, 32), 4, 8),
        ] {
            let e = match read_all(&wav(&with_align(f, align), &[], &data, None), None) {
                Err(e) => e,
                Ok((s, f, _)) => panic!("nBlockAlign {align}: read {} frames of {f:?}", s.len()),
            };
            match &e {
                WavError::Inconsistent {
                    field: "nBlockAlign",
                    value,
                    expected: want,
                    ..
                } if *value == u64::from(align) && *want == expected => {}
                other => panic!("nBlockAlign {align}: {other:?}"),
            }
            assert!(
                e.to_string().contains(&format!(
                    "`fmt ` field nBlockAlign = {align}, expected {expected} (nChannels "
                )),
                "{e}"
            );
        }
        // The consistent value of each is read (the containers of 12 and 24 valid bits
        // included).
        for f in [
            fmt(1, 1, 16_000, 24),
            fmt(1, 2, 16_000, 16),
            fmt(1, 1, 16_000, 12),
            extensible(1, 1, 32, 24),
        ] {
            read_all(&wav(&f, &[], &data, None), None).expect("consistent nBlockAlign");
        }
    }

    #[test]
    fn refuses_non_finite_float_samples_naming_frame_channel_and_value() {
        let le32 = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>();
        // Mono 32-bit float, NaN at frame 4 (read 3 frames per call: in the second).
        let mut v = vec![0.25f32; 10];
        v[4] = f32::NAN;
        let e = read_all(&wav(&fmt(3, 1, 16_000, 32), &[], &le32(&v), None), None).unwrap_err();
        assert!(
            matches!(e, WavError::NonFiniteSample { frame: 4, channel: 0, value } if value.is_nan()),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("the sample at frame 4, channel 0 is NaN, not a finite number"),
            "{e}"
        );
        // Stereo, +inf in channel 1 of frame 7; -inf in channel 0 of frame 0.
        let mut v = vec![0.5f32; 20];
        v[15] = f32::INFINITY;
        let e = read_all(&wav(&fmt(3, 2, 16_000, 32), &[], &le32(&v), None), None).unwrap_err();
        assert!(e.to_string().contains("frame 7, channel 1 is inf"), "{e}");
        v[0] = f32::NEG_INFINITY;
        let e = read_all(&wav(&fmt(3, 2, 16_000, 32), &[], &le32(&v), None), None).unwrap_err();
        assert!(e.to_string().contains("frame 0, channel 0 is -inf"), "{e}");
        // 64-bit float beyond float32's range (infinite once read as float32): its value as
        // stored; in an extensible header too.
        let f64s = [0.5f64, 1e300]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>();
        for f in [fmt(3, 1, 16_000, 64), extensible(3, 1, 64, 64)] {
            let e = read_all(&wav(&f, &[], &f64s, None), None).unwrap_err();
            assert!(
                matches!(e, WavError::NonFiniteSample { frame: 1, channel: 0, value } if value == 1e300),
                "{e:?}"
            );
        }
        // Finite samples whose channel mean overflows float32.
        let e = read_all(
            &wav(
                &fmt(3, 2, 16_000, 32),
                &[],
                &le32(&[0.0, 0.0, f32::MAX, f32::MAX]),
                None,
            ),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(e, WavError::MeanOverflow { frame: 1, channels: 2, mean } if mean == f32::INFINITY),
            "{e:?}"
        );
        // The largest finite samples of a mono file are read as they are.
        let (s, _, _) = read_all(
            &wav(
                &fmt(3, 1, 16_000, 32),
                &[],
                &le32(&[f32::MAX, f32::MIN]),
                None,
            ),
            None,
        )
        .unwrap();
        assert_eq!(s, [f32::MAX, f32::MIN]);
    }

    #[test]
    fn refuses_what_no_decoder_here_reads_naming_the_field() {
        let e = read_all(&wav(&fmt(0x11, 1, 16_000, 4), &[], &[0; 8], None), None).unwrap_err();
        assert!(
            e.to_string().contains("wFormatTag = 0x0011 (IMA ADPCM)"),
            "{e}"
        );
        let e = read_all(&wav(&fmt(1, 1, 16_000, 40), &[], &[0; 10], None), None).unwrap_err();
        assert!(e.to_string().contains("wBitsPerSample = 40"), "{e}");
        let e = read_all(&wav(&fmt(1, 0, 16_000, 16), &[], &[0; 2], None), None).unwrap_err();
        assert!(e.to_string().contains("nChannels = 0"), "{e}");
        let mut ext = extensible(1, 1, 16, 16);
        ext[24] = 0x99;
        ext[30] = 0x42;
        let e = read_all(&wav(&ext, &[], &[0; 2], None), None).unwrap_err();
        assert!(e.to_string().contains("SubFormat"), "{e}");
        let e = read_all(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", None).unwrap_err();
        assert!(
            e.to_string()
                .contains("not a WAV file (it looks like a PNG image)"),
            "{e}"
        );
        assert!(e.to_string().contains("ffmpeg"), "{e}");
        let e = read_all(b"RIFF\x04\0\0\0WAVE", None).unwrap_err();
        assert!(e.to_string().contains("without a `fmt ` chunk"), "{e}");
    }
}
