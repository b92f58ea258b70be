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
        bump_at(word, shift, self.max(), saturated)
    }

    /// Raises the counter at `shift` in `word` to `target` when it is
    /// below it, counting in `saturated` a counter that reaches the
    /// maximum from below; returns the counter's value after. `target` must
    /// be at most [`CounterWidth::max`].
    ///
    /// What `n` bumps of one key come to, counter by counter: a plain
    /// insert's counter `c` ends at `min(c + n, max)` (a target of its
    /// own), and a conservative insert's counters all end at
    /// `max(c, min(m + n, max))` for the key's minimum `m` (one target for
    /// all). Either way a counter crosses to the maximum at most once, as
    /// the `n` single bumps would have it.
    #[inline]
    pub(crate) fn raise_to(
        self,
        word: &mut u64,
        shift: u32,
        target: u64,
        saturated: &mut u64,
    ) -> u64 {
        let max = self.max();
        let c = (*word >> shift) & max;
        if c >= target {
            return c;
        }
        *word = (*word & !(max << shift)) | (target << shift);
        if target == max {
            *saturated += 1;
        }
        target
    }

    /// Adds `n` to the counter at `shift` in `word`, saturating at the
    /// maximum, as `n` [`CounterWidth::bump`]s would (one saturation event
    /// at most); returns the counter's value after.
    #[inline]
    pub(crate) fn add(self, word: &mut u64, shift: u32, n: u64, saturated: &mut u64) -> u64 {
        let max = self.max();
        let c = (*word >> shift) & max;
        self.raise_to(word, shift, c.saturating_add(n).min(max), saturated)
    }

    /// [`CounterWidth::bump`] for a width known at compile time (`BITS`
    /// of 4, 8 or 16): the same arithmetic, with no branch on the width.
    #[inline(always)]
    pub(crate) fn bump_fixed<const BITS: u32>(
        words: &mut [u64],
        i: usize,
        saturated: &mut u64,
    ) -> Option<u64> {
        let (w, shift) = locate_at(i, (64 / BITS).trailing_zeros(), BITS);
        let word = words.get_mut(w)?;
        Some(bump_at(word, shift, (1u64 << BITS) - 1, saturated))
    }

    /// The (word, shift) of counter `i`.
    ///
    /// Shifts and masks, not `/` and `%`: the divisor is only known at run
    /// time, so the compiler emitted a hardware division per counter, which
    /// was most of a k = 11 insert's cost.
    #[inline]
    pub fn locate(self, i: usize) -> (usize, u32) {
        locate_at(i, self.per_word_log2(), self.bits())
    }
}

/// The arithmetic of [`CounterWidth::bump`] and
/// [`CounterWidth::bump_fixed`]: one place, whether `max` is known at run
/// time or at compile time.
#[inline(always)]
fn bump_at(word: &mut u64, shift: u32, max: u64, saturated: &mut u64) -> u64 {
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

/// Bumps one counter held in a whole unit (`u8`, `u16`) whose maximum is
/// `max`, unless it is saturated, counting the step that reaches `max` in
/// `saturated`; returns the new value. The arithmetic of [`bump_at`] for a
/// counter that is a byte (16-bit unit) of its word on a little-endian
/// machine, where both counting filters' plain inserts bump it in place.
///
/// One test on the common path (a counter two or more below the maximum);
/// the step to the maximum, which counts a saturation, and a saturated
/// counter take the rare branch.
#[inline(always)]
pub(crate) fn bump_unit<U>(c: &mut U, max: U, saturated: &mut u64) -> U
where
    U: Copy + PartialOrd + std::ops::Add<Output = U> + std::ops::Sub<Output = U> + From<u8>,
{
    let v = *c;
    let one = U::from(1);
    let next = if v < max - one {
        v + one
    } else if v == max - one {
        *saturated += 1;
        max
    } else {
        v
    };
    *c = next;
    next
}

/// The (word, shift) of counter `i` with `2^per_word_log2` counters of
/// `bits` bits a word (see [`CounterWidth::locate`]).
#[inline(always)]
fn locate_at(i: usize, per_word_log2: u32, bits: u32) -> (usize, u32) {
    let within = (i & ((1 << per_word_log2) - 1)) as u32;
    (i >> per_word_log2, within * bits)
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
