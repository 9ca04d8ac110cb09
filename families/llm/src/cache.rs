//! The key/value cache of one sequence: preallocated for a fixed context at creation, f16,
//! reset per request. It is its own small type (no reference to a model or engine) so that
//! it can live in a session's request state.
//!
//! Layout, per layer: `[kv_head][position][head_dim]` for keys and the same for values
//! (each head's positions are contiguous: attention for one head streams one contiguous
//! block). Storage is IEEE f16 (llama.cpp's default cache type): half the memory of f32,
//! converted with F16C / `fcvtl` on the fly.

/// A prompt or generation that does not fit the context. Displayed as the tokens that were
/// to be added: `17 tokens do not fit the context of 16 tokens` on an empty cache, `7 more
/// tokens do not fit the context of 16 tokens (10 already in the cache)` after others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ContextFull {
    /// Positions the request needs in total (cached + new).
    pub needed: usize,
    /// Positions the cache holds.
    pub context: usize,
    /// Positions already used.
    pub used: usize,
}

impl ContextFull {
    fn describe(&self) -> String {
        let new = self.needed.saturating_sub(self.used);
        if self.used == 0 {
            format!(
                "{new} tokens do not fit the context of {} tokens",
                self.context
            )
        } else {
            format!(
                "{new} more token{} not fit the context of {} tokens ({} already in the cache)",
                if new == 1 { " does" } else { "s do" },
                self.context,
                self.used
            )
        }
    }
}

/// Shape of a cache: layers, KV heads, head dimension, context (positions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Lanes per head.
    pub head_dim: usize,
    /// Positions.
    pub context: usize,
}

impl CacheShape {
    /// f16 elements of one layer's keys (or values).
    pub fn layer_elems(&self) -> usize {
        self.n_head_kv * self.context * self.head_dim
    }

    /// Bytes of the whole cache (keys and values, every layer).
    pub fn bytes(&self) -> usize {
        2 * self.n_layer * self.layer_elems() * 2
    }
}

/// The key/value cache of one sequence (see the [module docs](self)).
pub struct KvCache {
    shape: CacheShape,
    keys: Vec<u16>,
    values: Vec<u16>,
    len: usize,
}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCache")
            .field("shape", &self.shape)
            .field("len", &self.len)
            .finish()
    }
}

impl KvCache {
    /// Allocates (and zeroes) the whole cache once.
    pub fn new(shape: CacheShape) -> KvCache {
        let n = shape.n_layer * shape.layer_elems();
        KvCache {
            shape,
            keys: vec![0; n],
            values: vec![0; n],
            len: 0,
        }
    }

    /// The shape.
    pub fn shape(&self) -> CacheShape {
        self.shape
    }

    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the cache holds.
    pub fn context(&self) -> usize {
        self.shape.context
    }

    /// Forgets every position (a new request); nothing is freed or allocated.
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// Drops positions from `len` on (keeps a shared prefix).
    ///
    /// # Panics
    /// When `len` exceeds the filled length.
    pub fn truncate(&mut self, len: usize) {
        assert!(
            len <= self.len,
            "truncate to {len} beyond {} filled positions",
            self.len
        );
        self.len = len;
    }

    /// Checks that `n` more positions fit.
    ///
    /// # Errors
    /// [`ContextFull`].
    pub fn check_room(&self, n: usize) -> Result<(), ContextFull> {
        if self.len + n > self.shape.context {
            return Err(ContextFull {
                needed: self.len + n,
                context: self.shape.context,
                used: self.len,
            });
        }
        Ok(())
    }

    /// Marks `n` more positions filled (after the forward pass wrote them).
    pub(crate) fn advance(&mut self, n: usize) {
        debug_assert!(self.len + n <= self.shape.context);
        self.len += n;
    }

    /// Raw parts for the forward pass's parallel region: key and value base pointers.
    pub(crate) fn raw(&mut self) -> (*mut u16, *mut u16) {
        (self.keys.as_mut_ptr(), self.values.as_mut_ptr())
    }

    /// Offset of `(layer, kv_head, position)`'s row in the key or value storage.
    #[inline(always)]
    pub(crate) fn offset(&self, layer: usize, kv_head: usize, pos: usize) -> usize {
        Self::offset_in(&self.shape, layer, kv_head, pos)
    }

    /// As [`offset`](Self::offset), from the shape alone.
    #[inline(always)]
    pub(crate) fn offset_in(shape: &CacheShape, layer: usize, kv_head: usize, pos: usize) -> usize {
        ((layer * shape.n_head_kv + kv_head) * shape.context + pos) * shape.head_dim
    }

    /// Key row of `(layer, kv_head, pos)` (f16 bits), for tests and inspection.
    pub fn key(&self, layer: usize, kv_head: usize, pos: usize) -> &[u16] {
        let o = self.offset(layer, kv_head, pos);
        &self.keys[o..o + self.shape.head_dim]
    }

    /// Value row of `(layer, kv_head, pos)` (f16 bits).
    pub fn value(&self, layer: usize, kv_head: usize, pos: usize) -> &[u16] {
        let o = self.offset(layer, kv_head, pos);
        &self.values[o..o + self.shape.head_dim]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_and_reset() {
        let shape = CacheShape {
            n_layer: 2,
            n_head_kv: 3,
            head_dim: 64,
            context: 16,
        };
        assert_eq!(shape.bytes(), 2 * 2 * 3 * 16 * 64 * 2);
        let mut c = KvCache::new(shape);
        assert!(c.check_room(16).is_ok());
        c.advance(10);
        let e = c.check_room(7).unwrap_err();
        assert_eq!(
            e,
            ContextFull {
                needed: 17,
                context: 16,
                used: 10
            }
        );
        assert_eq!(
            e.to_string(),
            "7 more tokens do not fit the context of 16 tokens (10 already in the cache)"
        );
        c.advance(6);
        assert_eq!(
            c.check_room(1).unwrap_err().to_string(),
            "1 more token does not fit the context of 16 tokens (16 already in the cache)"
        );
        c.truncate(10);
        c.truncate(4);
        assert_eq!(c.len(), 4);
        c.reset();
        assert!(c.is_empty() && c.check_room(16).is_ok());
        assert_eq!(c.offset(1, 2, 5), ((3 + 2) * 16 + 5) * 64);
    }
}
