//! A recycling filter's sigma as a user writes it: a fraction of a phase's
//! bits, or a count of bits.
//!
//! 004 bounds a filter by sigma, the number of bits that may be set in the
//! active phase before it recycles. The replay's `--recycle sigma:S` takes
//! a fraction below 1 (of a shard's phase) or a bit count, and `model
//! recycle --sigma` takes the same forms, so that the figure a user has in
//! mind from one command can be asked of the other. A fraction is resolved
//! against a phase's size by [`SigmaArg::bits`], rounded to the nearest
//! bit as the replay rounds it.

use std::fmt;
use std::str::FromStr;

/// Sigma as given: a fraction of a phase's bits, or bits.
///
/// ```
/// use flowsieve::model::sigma_arg::SigmaArg;
/// assert_eq!("0.5".parse(), Ok(SigmaArg::Fraction(0.5)));
/// assert_eq!("60000".parse(), Ok(SigmaArg::Bits(60_000)));
/// assert_eq!("1e6".parse(), Ok(SigmaArg::Bits(1_000_000)));
/// assert!("2.5".parse::<SigmaArg>().is_err());
/// assert_eq!(SigmaArg::Fraction(0.5).bits(1000), Ok(500));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SigmaArg {
    /// A fraction of a phase's bits, strictly between 0 and 1.
    Fraction(f64),
    /// Bits (0 included: a filter that recycles at every insertion).
    Bits(u64),
}

/// Why a sigma could not be read: the text given, and what was wrong. The
/// message leaves the text out, since the command line's error names it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{problem}; sigma is a fraction of a phase's bits below 1 (such as 0.5) or a bit count (such as 60000)"
)]
pub struct SigmaArgError {
    /// The text as given.
    pub given: String,
    /// What was wrong with it.
    pub problem: &'static str,
}

impl FromStr for SigmaArg {
    type Err = SigmaArgError;

    fn from_str(s: &str) -> Result<SigmaArg, SigmaArgError> {
        let bad = |problem| SigmaArgError {
            given: s.to_string(),
            problem,
        };
        // Whole numbers first, so that every u64 is exact (an f64 is not
        // above 2^53).
        if let Ok(bits) = s.parse::<u64>() {
            return Ok(SigmaArg::Bits(bits));
        }
        let x: f64 = s.parse().map_err(|_| bad("not a number"))?;
        if !x.is_finite() {
            Err(bad("not a finite number"))
        } else if x < 0.0 {
            Err(bad("negative"))
        } else if x == 0.0 {
            Ok(SigmaArg::Bits(0))
        } else if x < 1.0 {
            Ok(SigmaArg::Fraction(x))
        } else if x.fract() != 0.0 {
            Err(bad("a bit count is a whole number"))
        } else if x >= u64::MAX as f64 {
            Err(bad("too many bits"))
        } else {
            // Whole, finite and below 2^64: the cast is exact.
            Ok(SigmaArg::Bits(x as u64))
        }
    }
}

impl SigmaArg {
    /// The bits this sigma stands for in a phase of `phase_bits`: a
    /// fraction rounded to the nearest bit (as the replay's `sigma:S`
    /// rounds it), bits as given. A fraction that rounds to no bit is
    /// refused, since it would ask about a filter that recycles at every
    /// insertion, which the fraction did not mean.
    pub fn bits(self, phase_bits: u64) -> Result<u64, String> {
        match self {
            SigmaArg::Bits(b) => Ok(b),
            SigmaArg::Fraction(x) => {
                let b = (x * phase_bits as f64).round();
                if b < 1.0 {
                    Err(format!(
                        "{x} of a phase's {phase_bits} bits rounds to 0 bits (a filter that recycles at every insertion)"
                    ))
                } else {
                    // Below phase_bits, since x < 1.
                    Ok(b as u64)
                }
            }
        }
    }
}

impl fmt::Display for SigmaArg {
    /// As it would be given again: `0.5` or `60000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigmaArg::Fraction(x) => write!(f, "{x}"),
            SigmaArg::Bits(b) => write!(f, "{b}"),
        }
    }
}
