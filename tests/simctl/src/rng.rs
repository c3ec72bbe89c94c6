//! A small seeded generator (SplitMix64): the stress campaign and the
//! fuzz loop derive one per process, life and thread from the seed, so a
//! seed names the same sequence of operations every time.

/// SplitMix64 (Steele, Lea, Flood 2014).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` and a path of indices (process, life, thread):
    /// each distinct path gives an independent stream.
    pub fn derive(seed: u64, path: &[u64]) -> Self {
        let mut r = Rng(seed ^ 0x5eed_5eed_5eed_5eed);
        for &p in path {
            let v = r.next_u64();
            r = Rng(v ^ p.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; 0 gives 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `num`/`den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, s: &'a [T]) -> &'a T {
        &s[self.below(s.len() as u64) as usize]
    }

    /// An index chosen by weight.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut x = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if x < u64::from(w) {
                return i;
            }
            x -= u64::from(w);
        }
        weights.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn deterministic_and_independent() {
        let a: Vec<u64> = (0..4).map(|_| Rng::derive(7, &[1, 2]).next_u64()).collect();
        assert!(a.iter().all(|&x| x == a[0]));
        let mut x = Rng::derive(7, &[1, 2]);
        let mut y = Rng::derive(7, &[1, 3]);
        let mut z = Rng::derive(8, &[1, 2]);
        let (xs, ys, zs): (Vec<_>, Vec<_>, Vec<_>) = (0..8)
            .map(|_| (x.next_u64(), y.next_u64(), z.next_u64()))
            .fold((vec![], vec![], vec![]), |mut v, t| {
                v.0.push(t.0);
                v.1.push(t.1);
                v.2.push(t.2);
                v
            });
        assert_ne!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn bounds() {
        let mut r = Rng::derive(1, &[]);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let v = r.range(5, 9);
            assert!((5..=9).contains(&v));
            assert!(r.weighted(&[0, 3, 0]) == 1);
        }
        assert_eq!(r.below(0), 0);
    }
}
