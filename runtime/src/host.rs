//! Typed views of engine host buffers, without copying.

use zerocopy::FromBytes;

use crate::engine::RunError;

/// View a host buffer as `f32` values (native endianness, as engines write them).
///
/// # Errors
/// [`RunError::BadHostBuffer`] when the buffer is not 4-byte aligned or its
/// length is not a multiple of 4; engines allocate aligned buffers, so this
/// indicates a backend bug rather than bad input.
pub fn f32_mut(bytes: &mut [u8]) -> Result<&mut [f32], RunError> {
    let len = bytes.len();
    <[f32]>::mut_from_bytes(bytes).map_err(|_| RunError::BadHostBuffer { len })
}

/// Read-only counterpart of [`f32_mut`].
///
/// # Errors
/// As [`f32_mut`].
pub fn f32_ref(bytes: &[u8]) -> Result<&[f32], RunError> {
    <[f32]>::ref_from_bytes(bytes).map_err(|_| RunError::BadHostBuffer { len: bytes.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_aligned_buffers_and_rejects_ragged_ones() {
        let mut v = vec![0f32; 4];
        let bytes: &mut [u8] = zerocopy::IntoBytes::as_mut_bytes(v.as_mut_slice());
        assert_eq!(f32_mut(bytes).map(|s| s.len()), Ok(4));
        assert_eq!(
            f32_ref(&bytes[..7]),
            Err(RunError::BadHostBuffer { len: 7 })
        );
        assert_eq!(
            f32_ref(&bytes[1..5]),
            Err(RunError::BadHostBuffer { len: 4 })
        );
    }
}
