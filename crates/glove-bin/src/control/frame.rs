//! Framing: one JSON-RPC message per frame, a 4-byte big-endian length
//! followed by that many bytes of UTF-8 JSON.
//!
//! A length above the configured bound is refused before any of the
//! payload is read; since the payload is then never consumed, the stream
//! is out of step and the connection is closed after an error frame. A
//! zero-length frame is well framed but not valid JSON.

use glove_types::codes::control::CONTROL_FRAME_TOO_LARGE;
use glove_types::Rejection;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Checks a frame header and returns the payload length.
pub fn payload_len(header: [u8; HEADER_LEN], max_frame_bytes: u32) -> Result<usize, Rejection> {
    let len = u32::from_be_bytes(header);
    if len > max_frame_bytes {
        return Err(Rejection::new(
            CONTROL_FRAME_TOO_LARGE,
            format!("frame of {len} bytes exceeds the bound of {max_frame_bytes} bytes"),
        ));
    }
    Ok(len as usize)
}

/// Decodes the first frame of `buf`: `Ok(None)` when `buf` does not yet
/// hold a whole frame, else the payload and the bytes consumed.
pub fn decode(buf: &[u8], max_frame_bytes: u32) -> Result<Option<(&[u8], usize)>, Rejection> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let mut h = [0u8; HEADER_LEN];
    h.copy_from_slice(header);
    let len = payload_len(h, max_frame_bytes)?;
    let end = HEADER_LEN + len;
    Ok(buf.get(HEADER_LEN..end).map(|payload| (payload, end)))
}

/// Encodes one frame.
pub fn encode(payload: &[u8], max_frame_bytes: u32) -> Result<Vec<u8>, Rejection> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l <= max_frame_bytes)
        .ok_or_else(|| {
            Rejection::new(
                CONTROL_FRAME_TOO_LARGE,
                format!(
                    "message of {} bytes exceeds the frame bound of {max_frame_bytes} bytes",
                    payload.len()
                ),
            )
        })?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_partial() {
        let f = encode(b"{}", 16).expect("encode");
        assert_eq!(f, [0, 0, 0, 2, b'{', b'}']);
        assert_eq!(decode(&f[..3], 16).expect("ok"), None);
        assert_eq!(decode(&f[..5], 16).expect("ok"), None);
        assert_eq!(decode(&f, 16).expect("ok"), Some((&b"{}"[..], 6)));
    }

    #[test]
    fn oversized_is_refused_from_the_header() {
        let e = decode(&[0, 0, 0, 17], 16).expect_err("too large");
        assert_eq!(e.code(), CONTROL_FRAME_TOO_LARGE);
        assert!(encode(&[0; 17], 16).is_err());
    }
}
