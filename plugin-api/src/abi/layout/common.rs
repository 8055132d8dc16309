//! The C data every kind of plugin exchanges: borrowed byte slices, the sink that carries
//! variable-size results back, the status and sink-part codes, and IP addresses.

use std::ffi::c_void;

/// A borrowed byte slice crossing the boundary: `ptr` may be null only when `len` is 0.
///
/// Who owns the bytes and how long they stay valid is stated by each function that passes one.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiBytes {
    /// The first byte.
    pub ptr: *const u8,
    /// The number of bytes.
    pub len: usize,
}

impl AbiBytes {
    /// The empty slice.
    pub const EMPTY: AbiBytes = AbiBytes {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// Borrows `bytes` (the caller keeps them alive as long as the other side may read them).
    #[inline]
    pub fn from_slice(bytes: &[u8]) -> Self {
        Self {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// Borrows a string's bytes.
    #[inline]
    pub fn from_text(text: &str) -> Self {
        Self::from_slice(text.as_bytes())
    }

    /// The bytes, or `None` for a null pointer with a non-zero length or a length no allocation
    /// can have.
    ///
    /// # Safety
    ///
    /// Unless `ptr` is null or `len` is 0, `ptr` must be valid for reads of `len` bytes for `'a`,
    /// and nothing may write to them during `'a`.
    #[inline]
    pub unsafe fn as_slice<'a>(self) -> Option<&'a [u8]> {
        if self.len == 0 {
            return Some(&[]);
        }
        if self.ptr.is_null() || self.len > isize::MAX as usize {
            return None;
        }
        // SAFETY: non-null, length within isize::MAX, and the caller guarantees the bytes are
        // readable and unchanged for 'a.
        Some(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }

    /// The bytes as UTF-8, or `None` (see [`AbiBytes::as_slice`]).
    ///
    /// # Safety
    ///
    /// As for [`AbiBytes::as_slice`].
    pub unsafe fn as_str<'a>(self) -> Option<&'a str> {
        // SAFETY: forwarded to the caller.
        let bytes = unsafe { self.as_slice() }?;
        std::str::from_utf8(bytes).ok()
    }
}

/// Writes one part of a variable-size result: `part` says which (a `PART_*` code of the call),
/// `bytes` are borrowed for the duration of the `write` call only.
pub type SinkWriteFn = unsafe extern "C" fn(context: *mut c_void, part: u32, bytes: AbiBytes);

/// Where a callee writes variable-size results: it calls `write` zero or more times before it
/// returns, and the caller copies each part.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiSink {
    /// The caller's state, passed back to `write`.
    pub context: *mut c_void,
    /// Copies one part (null: results are discarded).
    pub write: Option<SinkWriteFn>,
}

/// The call succeeded.
pub const STATUS_OK: u32 = 0;
/// The plugin reported a failure; the message is in the sink's [`PART_ERROR`].
pub const STATUS_ERROR: u32 = 1;
/// The plugin panicked; the panic message is in the sink's [`PART_ERROR`]. Any status a host
/// does not know counts as a failure too.
pub const STATUS_PANICKED: u32 = 2;

/// A sink part: the message of an error or a panic (UTF-8), or for `create` an encoded
/// creation error (see `codec`).
pub const PART_ERROR: u32 = 0;
/// A sink part: the first value of the result (its meaning is the call's).
pub const PART_VALUE: u32 = 1;
/// A sink part: a second value (its meaning is the call's).
pub const PART_SECOND: u32 = 2;

// ---- IP addresses ------------------------------------------------------------------------------

/// An IPv4 address: the first 4 address bytes are used.
pub const ADDRESS_FAMILY_V4: u32 = 4;
/// An IPv6 address: all 16 address bytes are used.
pub const ADDRESS_FAMILY_V6: u32 = 6;

/// An IP address in C layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbiAddress {
    /// [`ADDRESS_FAMILY_V4`] or [`ADDRESS_FAMILY_V6`].
    pub family: u32,
    /// The address in network byte order.
    pub bytes: [u8; 16],
}

impl From<std::net::IpAddr> for AbiAddress {
    fn from(address: std::net::IpAddr) -> Self {
        match address {
            std::net::IpAddr::V4(v4) => {
                let mut bytes = [0u8; 16];
                for (slot, byte) in bytes.iter_mut().zip(v4.octets()) {
                    *slot = byte;
                }
                Self {
                    family: ADDRESS_FAMILY_V4,
                    bytes,
                }
            }
            std::net::IpAddr::V6(v6) => Self {
                family: ADDRESS_FAMILY_V6,
                bytes: v6.octets(),
            },
        }
    }
}

impl From<AbiAddress> for std::net::IpAddr {
    /// An unknown family reads as `0.0.0.0`.
    fn from(address: AbiAddress) -> Self {
        let [a, b, c, d, ..] = address.bytes;
        match address.family {
            ADDRESS_FAMILY_V6 => std::net::IpAddr::V6(address.bytes.into()),
            ADDRESS_FAMILY_V4 => std::net::IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)),
            _ => std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        }
    }
}
