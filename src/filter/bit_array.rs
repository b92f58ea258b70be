//! A fixed-size array of bits in 64-bit words.

/// `len` bits, all initially 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitArray {
    words: Vec<u64>,
    len: usize,
}

impl BitArray {
    /// `len` zero bits.
    pub fn new(len: usize) -> BitArray {
        BitArray {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// Number of bits.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length array.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bit `i` (false beyond the end).
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Asks the CPU to fetch the word of bit `i`; reads nothing.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        crate::prefetch::prefetch(self.words.as_ptr().wrapping_add(i / 64).cast::<u8>());
    }

    /// Sets bit `i`; returns true if it was 0. Ignores `i` beyond the end.
    #[inline]
    pub fn set(&mut self, i: usize) -> bool {
        match self.words.get_mut(i / 64) {
            Some(w) => {
                let mask = 1 << (i % 64);
                let was = *w & mask != 0;
                *w |= mask;
                !was
            }
            None => false,
        }
    }

    /// All bits to 0.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Sets to 0 the whole word holding each of `positions` (ignoring
    /// positions beyond the end): a clear of an array whose set bits all
    /// lie in those words, at a word a position instead of all of them.
    ///
    /// ```
    /// use flowsieve::filter::BitArray;
    /// let mut a = BitArray::new(1000);
    /// a.set(3);
    /// a.set(700);
    /// a.clear_words_at(&[60, 700, 5000]);
    /// assert_eq!(a, BitArray::new(1000));
    /// ```
    pub fn clear_words_at(&mut self, positions: &[usize]) {
        for &p in positions {
            if let Some(w) = self.words.get_mut(p / 64) {
                *w = 0;
            }
        }
    }

    /// Faults the array's memory pages in as writable now, if the array
    /// fits in `*budget` bytes (which it then takes from the budget);
    /// returns whether it fitted. Changes no bit: it only moves the first
    /// touch of each page to now and makes it a write, which a page first
    /// read and later written pays for with a TLB flush on every core (see
    /// the pipeline's shard workers, which call it when they start).
    ///
    /// ```
    /// use flowsieve::filter::BitArray;
    /// let mut a = BitArray::new(1 << 20);
    /// a.set(12345);
    /// let mut budget = 1 << 20;
    /// assert!(a.prefault(&mut budget));
    /// assert_eq!(budget, (1 << 20) - (1 << 17));
    /// assert_eq!(a.count_ones(), 1);
    /// assert!(!BitArray::new(1 << 24).prefault(&mut budget));
    /// ```
    pub fn prefault(&mut self, budget: &mut usize) -> bool {
        super::prefault_words(&mut self.words, budget)
    }

    /// Number of bits set.
    pub fn count_ones(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// Bitwise OR of another array of the same length into this one.
    pub fn union_with(&mut self, other: &BitArray) -> bool {
        if other.len != self.len {
            return false;
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
        true
    }

    /// The words (bit `i` is bit `i % 64` of word `i / 64`).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The positions of the set bits, increasing: a word at a time, each
    /// set bit found by its trailing zeros, so the walk costs the words
    /// plus the set bits, not every bit.
    ///
    /// ```
    /// use flowsieve::filter::BitArray;
    /// let mut b = BitArray::new(200);
    /// for i in [130, 3, 64, 199] {
    ///     b.set(i);
    /// }
    /// assert_eq!(b.ones().collect::<Vec<_>>(), [3, 64, 130, 199]);
    /// ```
    pub fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(n, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let at = n * 64 + w.trailing_zeros() as usize;
                    w &= w - 1;
                    at
                })
            })
        })
    }
}
