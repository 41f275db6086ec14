//! [`Rng`]: the driver's deterministic random numbers, and [`fnv1a`] for stable names.
//!
//! Both are written out here rather than taken from a crate so that a seed names the
//! same inputs on every build and every platform, forever: a failure reported as
//! "seed 7" can be replayed by anyone.

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for `seed`, mixed with `stream` so that each target draws its own
    /// sequence whether it runs alone or with the others.
    pub fn new(seed: u64, stream: &str) -> Rng {
        Rng {
            state: seed ^ fnv1a(stream.as_bytes()),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    ///
    /// # Panics
    /// If `n` is zero.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "Rng::below(0)");
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    ///
    /// # Panics
    /// If `hi < lo`.
    pub fn between(&mut self, lo: usize, hi: usize) -> usize {
        assert!(lo <= hi, "Rng::between({lo}, {hi})");
        lo + self.below(hi - lo + 1)
    }

    /// True with probability 1 / `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A random byte.
    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// One element of a non-empty slice.
    ///
    /// # Panics
    /// If `items` is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// FNV-1a, 64 bits: names crash files by content and separates the targets' streams.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_other_stream_other_numbers() {
        let draw = |seed, stream| {
            let mut rng = Rng::new(seed, stream);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7, "frame"), draw(7, "frame"));
        assert_ne!(draw(7, "frame"), draw(7, "metadata"));
        assert_ne!(draw(7, "frame"), draw(8, "frame"));
    }

    #[test]
    fn fnv1a_known_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn bounded_draws_stay_in_range() {
        let mut rng = Rng::new(1, "t");
        for _ in 0..1000 {
            assert!(rng.below(3) < 3);
            let x = rng.between(5, 9);
            assert!((5..=9).contains(&x));
        }
    }
}
