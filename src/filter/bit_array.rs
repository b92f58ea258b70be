//! A fixed-size array of bits in 64-bit words.

use super::line_words::LineWords;

/// `len` bits, all initially 0.
///
/// Word 0 starts a 64-byte cache line, so words `8 j .. 8 j + 8` are
/// exactly one line: the blocked recycling filter (see
/// [`crate::filter::BitLayout`]) keeps a message's bits in 512-bit blocks
/// at multiples of 512, which are then each one line. The words come from
/// `calloc` and their pages stay untouched until used (see
/// [`BitArray::prefault`], which faults them in only when asked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitArray {
    /// `len.div_ceil(64)` words.
    words: LineWords,
    len: usize,
}

impl BitArray {
    /// `len` zero bits.
    ///
    /// ```
    /// use flowsieve::filter::BitArray;
    /// let a = BitArray::new(1000);
    /// assert_eq!(a.words().len(), 16);
    /// assert_eq!(a.words().as_ptr() as usize % 64, 0); // a line's start
    /// ```
    pub fn new(len: usize) -> BitArray {
        BitArray {
            words: LineWords::zeroed(len.div_ceil(64)),
            len,
        }
    }

    /// The words in use, as one slice.
    #[inline]
    fn word_slice(&self) -> &[u64] {
        self.words.as_slice()
    }

    /// The words in use, as one mutable slice.
    #[inline]
    fn word_slice_mut(&mut self) -> &mut [u64] {
        self.words.as_mut_slice()
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
        self.word_slice()
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Asks the CPU to fetch the word of bit `i`; reads nothing.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        self.words.prefetch(i / 64);
    }

    /// Sets bit `i`; returns true if it was 0. Ignores `i` beyond the end.
    #[inline]
    pub fn set(&mut self, i: usize) -> bool {
        match self.word_slice_mut().get_mut(i / 64) {
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
        self.word_slice_mut().fill(0);
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
        let words = self.word_slice_mut();
        for &p in positions {
            if let Some(w) = words.get_mut(p / 64) {
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
        self.words.prefault(budget)
    }

    /// Number of bits set.
    pub fn count_ones(&self) -> u64 {
        self.word_slice()
            .iter()
            .map(|w| u64::from(w.count_ones()))
            .sum()
    }

    /// Bitwise OR of another array of the same length into this one.
    pub fn union_with(&mut self, other: &BitArray) -> bool {
        if other.len != self.len {
            return false;
        }
        for (a, b) in self.word_slice_mut().iter_mut().zip(other.word_slice()) {
            *a |= b;
        }
        true
    }

    /// The words (bit `i` is bit `i % 64` of word `i / 64`).
    pub fn words(&self) -> &[u64] {
        self.word_slice()
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
        self.word_slice().iter().enumerate().flat_map(|(n, &w)| {
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
