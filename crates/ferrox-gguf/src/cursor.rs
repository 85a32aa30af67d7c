//! A bounds-checked little-endian reader over the file's bytes.
//!
//! Invariant: no read goes past the end of the buffer, and no length the file
//! claims is used to allocate before it has been checked against the bytes that
//! remain (`take` and `check_count` are the only ways to consume a claimed length).

use crate::error::{GgufError, Result};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos,
                needed: n as u64,
                file_len: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: u64 length, then that many UTF-8 bytes.
    pub(crate) fn string(&mut self, what: &'static str) -> Result<String> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > self.remaining() as u64 {
            return Err(GgufError::StringPastEnd {
                offset: at,
                len,
                remaining: self.remaining(),
            });
        }
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::InvalidUtf8 { offset: at })
    }

    /// Checks that `count` items of at least `min_len` bytes each can still fit.
    pub(crate) fn fits(&self, count: u64, min_len: usize) -> bool {
        count
            .checked_mul(min_len as u64)
            .is_some_and(|need| need <= self.remaining() as u64)
    }
}
