//! The width of a counting filter's counters.

/// Bits per counter. Counters saturate at `2^w - 1` (001: "if the count ever
/// exceeds 15, we can simply let it stay at 15").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterWidth {
    /// 4-bit counters.
    W4 = 4,
    /// 8-bit counters.
    W8 = 8,
    /// 16-bit counters.
    W16 = 16,
}

impl CounterWidth {
    /// From a bit count (4, 8 or 16).
    pub fn from_bits(bits: u32) -> Option<CounterWidth> {
        match bits {
            4 => Some(CounterWidth::W4),
            8 => Some(CounterWidth::W8),
            16 => Some(CounterWidth::W16),
            _ => None,
        }
    }

    /// Bits per counter.
    pub fn bits(self) -> u32 {
        self as u32
    }

    /// The saturation value.
    pub fn max(self) -> u64 {
        (1u64 << self.bits()) - 1
    }

    /// Counters per 64-bit word.
    pub fn per_word(self) -> usize {
        64 / self.bits() as usize
    }

    /// `log2` of [`CounterWidth::per_word`] (every width divides 64).
    #[inline]
    fn per_word_log2(self) -> u32 {
        match self {
            CounterWidth::W4 => 4,
            CounterWidth::W8 => 3,
            CounterWidth::W16 => 2,
        }
    }

    /// Adds one to the counter at `shift` in `word` unless it is saturated,
    /// counting in `saturated` a counter that reaches the maximum; returns
    /// the counter's new value.
    #[inline]
    pub(crate) fn bump(self, word: &mut u64, shift: u32, saturated: &mut u64) -> u64 {
        let max = self.max();
        let c = (*word >> shift) & max;
        if c < max {
            *word += 1 << shift;
            if c + 1 == max {
                *saturated += 1;
            }
            c + 1
        } else {
            c
        }
    }

    /// [`CounterWidth::bump`] for a width known at compile time (`BITS`
    /// of 4, 8 or 16): the same arithmetic, with no branch on the width.
    #[inline(always)]
    pub(crate) fn bump_fixed<const BITS: u32>(
        words: &mut [u64],
        i: usize,
        saturated: &mut u64,
    ) -> Option<u64> {
        let (w, shift) = Self::locate_fixed::<BITS>(i);
        let word = words.get_mut(w)?;
        let max = (1u64 << BITS) - 1;
        let c = (*word >> shift) & max;
        Some(if c < max {
            *word += 1 << shift;
            if c + 1 == max {
                *saturated += 1;
            }
            c + 1
        } else {
            c
        })
    }

    /// [`CounterWidth::locate`] for a width known at compile time.
    #[inline(always)]
    pub(crate) fn locate_fixed<const BITS: u32>(i: usize) -> (usize, u32) {
        let l = (64 / BITS).trailing_zeros();
        let within = (i & ((1 << l) - 1)) as u32;
        (i >> l, within * BITS)
    }

    /// The (word, shift) of counter `i`.
    ///
    /// Shifts and masks, not `/` and `%`: the divisor is only known at run
    /// time, so the compiler emitted a hardware division per counter, which
    /// was most of a k = 11 insert's cost.
    #[inline]
    pub fn locate(self, i: usize) -> (usize, u32) {
        let l = self.per_word_log2();
        let within = (i & ((1 << l) - 1)) as u32;
        (i >> l, within * self.bits())
    }
}

/// Why a counter width could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("counter width must be 4, 8 or 16 bits (got '{0}')")]
pub struct CounterWidthError(pub String);

impl std::str::FromStr for CounterWidth {
    type Err = CounterWidthError;
    /// `4`, `8` or `16`.
    fn from_str(s: &str) -> Result<CounterWidth, CounterWidthError> {
        s.trim()
            .parse::<u32>()
            .ok()
            .and_then(CounterWidth::from_bits)
            .ok_or_else(|| CounterWidthError(s.to_string()))
    }
}

impl std::fmt::Display for CounterWidth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.bits())
    }
}
