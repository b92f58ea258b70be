//! A number as a paper prints it, so that "agrees within the paper's
//! rounding" can be checked: `0.0804` is exact to half of `0.0001`.

/// A printed value: its text and what it means.
///
/// ```
/// use flowsieve::reproduce::Printed;
/// let p = Printed::new("8.39e-06");
/// assert_eq!(p.value(), 8.39e-6);
/// assert!((p.half_unit() - 0.005e-6).abs() < 1e-15);
/// assert!(p.agrees(8.3949e-6) && !p.agrees(8.3951e-6));
/// assert_eq!(Printed::new("0.0804").half_unit(), 0.00005);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Printed {
    text: &'static str,
    value: f64,
    half_unit: f64,
}

impl Printed {
    /// Parses the printed text (`0.0804`, `2.13e-07`, `5`); a text that is
    /// not a number is a programming error in the tables, reported as NaN.
    pub fn new(text: &'static str) -> Printed {
        let value = text.parse::<f64>().unwrap_or(f64::NAN);
        let (mantissa, exp) = match text.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
            None => (text, 0),
        };
        let decimals = mantissa.split_once('.').map_or(0, |(_, f)| f.len()) as i32;
        let half_unit = 0.5 * 10f64.powi(exp - decimals);
        Printed {
            text,
            value,
            half_unit,
        }
    }

    /// The text as printed.
    pub fn text(&self) -> &'static str {
        self.text
    }

    /// The value.
    pub fn value(&self) -> f64 {
        self.value
    }

    /// Half a unit of the last printed digit.
    pub fn half_unit(&self) -> f64 {
        self.half_unit
    }

    /// Whether `x` rounds to the printed value (with a relative slack of
    /// 1e-9 for the binary representation).
    pub fn agrees(&self, x: f64) -> bool {
        (x - self.value).abs() <= self.half_unit * (1.0 + 1e-9) + 1e-12 * self.value.abs()
    }
}
