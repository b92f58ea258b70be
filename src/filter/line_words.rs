//! Zeroed 64-bit words that start on a cache line, with pages that stay
//! untouched until used.

/// Words of 64 bits in one cache line.
pub(crate) const LINE_WORDS: usize = 8;

/// `len` zero words; word 0 starts a 64-byte cache line, so words
/// `8 j .. 8 j + 8` are exactly one line.
///
/// The blocked filters keep each key's bits or counters in one such line
/// ([`crate::filter::BitLayout`], [`crate::filter::BlockedCountingFilter`]).
/// A vector of `u64` from the allocator starts 16 bytes into a line
/// (glibc's chunk header), so half its lines would straddle two; this takes
/// up to 7 words more and starts at the first whole line.
///
/// Why not a vector of 64-byte aligned values (`#[repr(align(64))]`): the
/// allocator zeroes an over-aligned allocation by writing it, and
/// `vec![x; n]` of a value type writes every element, so either faults
/// every page in at creation. `vec![0u64; n]` comes from `calloc`, whose
/// fresh pages stay untouched (and take no memory) until used; see
/// [`LineWords::prefault`], which faults them in only when asked.
#[derive(Debug)]
pub(crate) struct LineWords {
    /// The words, from `start` on; the up to 7 before and after stay 0.
    storage: Vec<u64>,
    /// Index of the first word, at a 64-byte boundary.
    start: usize,
    /// Words in use.
    len: usize,
}

impl Clone for LineWords {
    fn clone(&self) -> LineWords {
        // A copy of the storage may sit at another offset from a line: the
        // words are copied into fresh words that found their own start.
        let mut copy = LineWords::zeroed(self.len);
        copy.as_mut_slice().copy_from_slice(self.as_slice());
        copy
    }
}

impl PartialEq for LineWords {
    fn eq(&self, other: &LineWords) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for LineWords {}

impl LineWords {
    /// `len` zero words, none of their pages touched.
    pub(crate) fn zeroed(len: usize) -> LineWords {
        let storage = vec![0u64; len.saturating_add(LINE_WORDS - 1)];
        // At most 7 words on (an 8-byte aligned address is at most 56
        // bytes before a line); `align_offset` may answer "cannot", which
        // only leaves the words unaligned, never out of bounds.
        let start = storage.as_ptr().align_offset(64);
        let start = if start < LINE_WORDS { start } else { 0 };
        LineWords {
            storage,
            start,
            len,
        }
    }

    /// Words in use.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The words, as one slice.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u64] {
        // SAFETY: `start < 8` and `storage` holds `len + 7` words, so
        // `start..start + len` is inside it; the borrow of `self` keeps
        // them alive and unmodified for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.storage.as_ptr().add(self.start), self.len) }
    }

    /// The words, as one mutable slice.
    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u64] {
        // SAFETY: as in `as_slice`; the mutable borrow of `self` makes
        // this the only access for the slice's lifetime.
        unsafe {
            std::slice::from_raw_parts_mut(self.storage.as_mut_ptr().add(self.start), self.len)
        }
    }

    /// Asks the CPU to fetch word `w`; reads nothing, and never faults,
    /// even past the end.
    #[inline]
    pub(crate) fn prefetch(&self, w: usize) {
        super::prefetch_word(&self.storage, self.start.wrapping_add(w));
    }

    /// Faults the words' memory pages in as writable now, if they fit in
    /// `*budget` bytes (which they then take from the budget); returns
    /// whether they fitted. Changes no word (see
    /// [`super::prefault_words`] for why the first touch should be a
    /// write).
    pub(crate) fn prefault(&mut self, budget: &mut usize) -> bool {
        super::prefault_words(self.as_mut_slice(), budget)
    }
}
