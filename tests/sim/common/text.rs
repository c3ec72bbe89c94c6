// SPDX-License-Identifier: GPL-2.0

//! `Text`: a growable byte buffer that implements `core::fmt::Write`, for
//! the simulators' "key=value" reports and for NUL-terminated messages.

use core::fmt;
use kernel::prelude::*;

/// A text being built.
pub(crate) struct Text {
    buf: KVec<u8>,
}

#[allow(dead_code)]
impl Text {
    /// An empty text.
    pub(crate) const fn new() -> Self {
        Self { buf: KVec::new() }
    }

    /// The bytes written so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Appends a NUL so the text can be handed to C as a string.
    pub(crate) fn terminate(&mut self) -> Result {
        self.buf.push(0, GFP_KERNEL)?;
        Ok(())
    }
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.buf
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| fmt::Error)
    }
}

/// A name read from a fixed-size C char array: the bytes up to the first NUL
/// (or all of them), shown as text with non-printable bytes replaced.
#[allow(dead_code)]
pub(crate) struct CName<'a>(pub(crate) &'a [u8]);

impl fmt::Display for CName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in self.0.iter().take_while(|&&b| b != 0) {
            let c = if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            };
            fmt::Write::write_char(f, c)?;
        }
        Ok(())
    }
}
