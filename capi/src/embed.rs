//! Text embeddings: UTF-8 texts in, L2-normalised vectors into a caller float array.

use tether_embed::{EMBEDDING_DIM, Embedding};

use crate::error::{Failure, Result, non_null, tether_status};
use crate::model::{Family, tether_model, with_model, wrong_family};

/// A caller-owned UTF-8 string: `size` bytes at `data` (no NUL needed; `data` may be null
/// when `size` is 0). Read during the call only.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tether_text {
    /// First byte.
    pub data: *const u8,
    /// Bytes.
    pub size: usize,
}

fn embed_model<'a>(m: &'a mut tether_model, call: &str) -> Result<&'a mut tether_embed::Embedder> {
    match &mut m.family {
        Family::Embed(e) => Ok(e),
        other => Err(wrong_family(
            other,
            &m.bundle_name,
            call,
            tether_embed::FAMILY,
        )),
    }
}

/// The embedding width of an `embed` model into `*dim` (384 for all-MiniLM-L6-v2).
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `dim` points to a
/// writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_embed_dim(
    model: *mut tether_model,
    dim: *mut usize,
) -> tether_status {
    with_model(model, |m| {
        embed_model(m, "tether_embed_dim")?;
        non_null(dim, "dim")?;
        // SAFETY: writable (contract; checked non-null).
        unsafe { dim.write(EMBEDDING_DIM) };
        Ok(())
    })
}

/// Embed `count` texts: row `i` of `embeddings` (floats `i * dim .. (i + 1) * dim`, `dim`
/// from `tether_embed_dim`) receives text `i`'s L2-normalised embedding, computed as
/// sentence-transformers does (WordPiece tokens, truncated to the bundle's maximum
/// sequence length; masked mean pooling; L2 norm). Texts run in batches of the bundle's
/// maximum batch.
///
/// Errors: `TETHER_ERR_CAPACITY` when `capacity` (floats) < `count * dim` (nothing is
/// written; the last error says how many floats are needed); `TETHER_ERR_INVALID_ARGUMENT`
/// for a text that is not UTF-8 (the message gives its index and the byte offset) or null
/// pointers; `TETHER_ERR_WRONG_FAMILY`; `TETHER_ERR_RUNTIME`.
///
/// # Safety
/// `model` is a live handle used by no other thread during the call; `texts` points to
/// `count` readable `tether_text`s, each readable as it describes; `embeddings` points to
/// `capacity` writable floats. Nothing is kept after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_embed(
    model: *mut tether_model,
    texts: *const tether_text,
    count: usize,
    embeddings: *mut f32,
    capacity: usize,
) -> tether_status {
    with_model(model, |m| {
        let e = embed_model(m, "tether_embed")?;
        if count == 0 {
            return Ok(());
        }
        non_null(texts, "texts")?;
        non_null(embeddings, "embeddings")?;
        if !embeddings.is_aligned() {
            return Err(Failure::invalid("`embeddings` is not aligned to 4 bytes"));
        }
        let needed = count
            .checked_mul(EMBEDDING_DIM)
            .ok_or_else(|| Failure::invalid(format!("count {count} is too large")))?;
        if capacity < needed {
            return Err(Failure::capacity("embedding floats", capacity, needed));
        }
        // SAFETY: `count` readable records (contract; checked non-null).
        let records = unsafe { std::slice::from_raw_parts(texts, count) };
        let mut strs = Vec::with_capacity(count);
        for (i, t) in records.iter().enumerate() {
            let bytes: &[u8] = if t.size == 0 {
                &[]
            } else {
                non_null(t.data, &format!("texts[{i}].data"))?;
                // SAFETY: `size` readable bytes (contract; checked non-null).
                unsafe { std::slice::from_raw_parts(t.data, t.size) }
            };
            let s = std::str::from_utf8(bytes).map_err(|err| {
                Failure::invalid(format!(
                    "texts[{i}] is not UTF-8: invalid byte at offset {}",
                    err.valid_up_to()
                ))
            })?;
            strs.push(s);
        }
        // SAFETY: `capacity` >= count * DIM writable floats, aligned (checked); an
        // `Embedding` is `[f32; DIM]` (same layout as DIM floats).
        let out = unsafe { std::slice::from_raw_parts_mut(embeddings.cast::<Embedding>(), count) };
        Ok(e.embed_batch(&strs, out)?)
    })
}
