//! Data through the scatterlists: bytes written one way into simulated GPU
//! memory and read back the other.  The CPU's way is the CUDA driver's copy
//! by VA (`NVSIM_IOC_MEMCPY`, through the allocation's own pages); the
//! HCA's way is a DMA through the bus addresses of the SG list the client
//! built (`PCSIM_IOC_DMA`).  A consistently wrong address round-trips when
//! one side both writes and reads, so a check always crosses sides.
//!
//! ```text
//! data fill VA LEN SEED        the CPU writes the pattern of SEED
//! data verify VA LEN SEED      the CPU reads; every byte must be SEED's
//! data write H VA LEN SEED     the HCA writes SEED's pattern through H
//! data read H VA LEN SEED      the HCA reads through H; every byte must be SEED's
//! ```
//! The pattern depends on the seed and each byte's VA only, so any part of
//! a buffer can be written or checked on its own.

use crate::cmd::{Captured, CmdError};
use crate::dev::{Devices, Sim};
use crate::num;
use crate::uapi::*;

/// Bytes per ioctl.
const CHUNK: u64 = 4 << 20;

/// The pattern's 8 bytes at the 8-aligned VA `word * 8`: a bijection of
/// the word's index for each seed (an odd multiplier, then the high bits
/// folded into the low ones, which the product alone would leave equal for
/// words a power of two apart), so no two words of a buffer agree; and
/// cheap (the checks move gigabytes under TCG).
fn word(seed: u64, word: u64) -> u64 {
    let z = (word ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^ (z >> 29)
}

/// Fills `buf` with the pattern of `seed` for the bytes at `va..`.
pub fn pattern(seed: u64, va: u64, buf: &mut [u8]) {
    // The bytes before the first 8-aligned VA, the whole words, the rest.
    let head = (((8 - va % 8) % 8) as usize).min(buf.len());
    let (start, rest) = buf.split_at_mut(head);
    let rest_len = rest.len();
    bytes(seed, va, start);
    let mut words = rest.chunks_exact_mut(8);
    let first = (va + head as u64) / 8;
    for (i, c) in (&mut words).enumerate() {
        c.copy_from_slice(&word(seed, first + i as u64).to_le_bytes());
    }
    let tail = words.into_remainder();
    let at = va + head as u64 + (rest_len - tail.len()) as u64;
    bytes(seed, at, tail);
}

/// The pattern byte by byte (a buffer's unaligned ends).
fn bytes(seed: u64, va: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let at = va + i as u64;
        *b = word(seed, at / 8).to_le_bytes()[(at % 8) as usize];
    }
}

/// The first byte of `got` (at `va..`) that is not the pattern's, and how
/// many are wrong; `want` is scratch space of at least `got`'s length.
fn compare(seed: u64, va: u64, got: &[u8], want: &mut [u8]) -> Option<(u64, u8, u8, u64)> {
    let want = &mut want[..got.len()];
    pattern(seed, va, want);
    if got == &want[..] {
        return None;
    }
    let mut first = None;
    let mut wrong = 0u64;
    for (i, (&g, &w)) in got.iter().zip(want.iter()).enumerate() {
        if g != w {
            wrong += 1;
            first.get_or_insert((va + i as u64, g, w));
        }
    }
    first.map(|(at, g, w)| (at, g, w, wrong))
}

fn usage(s: &str) -> CmdError {
    CmdError::Usage(s.to_string())
}

fn arg(a: &[String], i: usize, u: &str) -> Result<u64, CmdError> {
    a.get(i).and_then(|s| num::parse(s)).ok_or_else(|| usage(u))
}

fn os(what: &str) -> impl Fn(std::io::Error) -> CmdError + '_ {
    move |e| CmdError::Os(e.raw_os_error().unwrap_or(5), what.to_string())
}

/// One direction of a copy, chunk by chunk: `io(va, buf, scratch)` moves
/// the chunk.
fn chunks(
    va: u64,
    len: u64,
    mut io: impl FnMut(u64, &mut [u8], &mut [u8]) -> Result<(), CmdError>,
) -> Result<(), CmdError> {
    let mut buf = vec![0u8; CHUNK.min(len) as usize];
    let mut want = vec![0u8; buf.len()];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done) as usize;
        io(va + done, &mut buf[..n], &mut want)?;
        done += n as u64;
    }
    Ok(())
}

/// The mismatch report of a check that read through `how`.
fn mismatch(how: &str, va: u64, len: u64, m: (u64, u8, u8, u64)) -> CmdError {
    CmdError::Check(format!(
        "{how} of [{va:#x}, +{len:#x}): {} wrong byte(s) in the first wrong chunk, the first at VA {:#x} \
         (offset {:#x}): {:#04x}, expected {:#04x}",
        m.3,
        m.0,
        m.0 - va,
        m.1,
        m.2
    ))
}

/// Runs `data SUB ...`.
pub fn run(
    dev: &Devices,
    sub: &str,
    a: &[String],
    out: &dyn Fn(String),
) -> Result<Captured, CmdError> {
    match sub {
        "fill" | "verify" => {
            let u = "data fill|verify VA LEN SEED";
            let (va, len, seed) = (arg(a, 0, u)?, arg(a, 1, u)?, arg(a, 2, u)?);
            let fill = sub == "fill";
            chunks(va, len, |at, buf, want| {
                if fill {
                    pattern(seed, at, buf);
                }
                let mut m = NvsimMemcpy {
                    va: at,
                    buf: buf.as_mut_ptr() as u64,
                    len: buf.len() as u64,
                    dir: if fill { MEMCPY_HTOD } else { MEMCPY_DTOH },
                    reserved: 0,
                };
                dev.ioctl(Sim::Gpu, NVSIM_IOC_MEMCPY, &mut m)
                    .map_err(os("gpu memcpy"))?;
                match (fill, compare(seed, at, buf, want)) {
                    (false, Some(m)) => Err(mismatch("cuMemcpyDtoH", va, len, m)),
                    _ => Ok(()),
                }
            })?;
            out(format!("data {sub} va={va:#x} len={len:#x} seed={seed} ok"));
            Ok(None)
        }
        "write" | "read" => {
            let u = "data write|read H VA LEN SEED";
            let handle = arg(a, 0, u)? as u32;
            let (va, len, seed) = (arg(a, 1, u)?, arg(a, 2, u)?, arg(a, 3, u)?);
            let write = sub == "write";
            chunks(va, len, |at, buf, want| {
                if write {
                    pattern(seed, at, buf);
                }
                let mut d = PcsimDma {
                    handle,
                    write: u32::from(write),
                    va: at,
                    len: buf.len() as u64,
                    buf: buf.as_mut_ptr() as u64,
                };
                dev.ioctl(Sim::Core, PCSIM_IOC_DMA, &mut d)
                    .map_err(os(if write {
                        "HCA DMA write"
                    } else {
                        "HCA DMA read"
                    }))?;
                match (write, compare(seed, at, buf, want)) {
                    (false, Some(m)) => Err(mismatch("the HCA's DMA read", va, len, m)),
                    _ => Ok(()),
                }
            })?;
            out(format!(
                "data {sub} handle={handle} va={va:#x} len={len:#x} seed={seed} ok"
            ));
            Ok(None)
        }
        _ => Err(usage(
            "data fill|verify VA LEN SEED | data write|read H VA LEN SEED",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_depends_on_the_address_only() {
        let mut whole = vec![0u8; 64];
        pattern(7, 0x1000, &mut whole);
        let mut part = vec![0u8; 13];
        pattern(7, 0x1000 + 21, &mut part);
        assert_eq!(&whole[21..34], &part[..]);
        let mut other = vec![0u8; 64];
        pattern(8, 0x1000, &mut other);
        assert_ne!(whole, other);
    }

    #[test]
    fn unaligned_ends_agree_with_the_bytewise_pattern() {
        for (va, len) in [
            (0x1001u64, 3usize),
            (0x1003, 21),
            (0x1000, 17),
            (0x1007, 1),
            (0x1000, 0),
        ] {
            let mut fast = vec![0u8; len];
            pattern(9, va, &mut fast);
            let mut slow = vec![0u8; len];
            bytes(9, va, &mut slow);
            assert_eq!(fast, slow, "va {va:#x} len {len}");
        }
    }

    #[test]
    fn a_page_shifted_copy_is_caught() {
        let mut got = vec![0u8; 8192];
        let mut want = vec![0u8; 8192];
        pattern(3, 0x2000, &mut got);
        assert!(compare(3, 0x2000, &got, &mut want).is_none());
        // What a read through an address one page off returns.
        pattern(3, 0x3000, &mut got[..4096]);
        let (at, _, _, wrong) = compare(3, 0x2000, &got, &mut want).unwrap();
        // (A byte may agree by chance; its word does not.)
        assert!((0x2000..0x2008).contains(&at));
        assert!(wrong > 4000);
    }
}
