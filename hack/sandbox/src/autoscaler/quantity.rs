//! Kubernetes resource quantities as the autoscaler parses them (k8s.io/apimachinery
//! `pkg/api/resource/quantity.go`, `ParseQuantity`): an optionally signed decimal number followed
//! by a binary suffix (`Ki` … `Ei`), a decimal one (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`,
//! `E`) or a decimal exponent (`e3`, `E-2`). Held as an exact count of nano-units.

/// A parsed quantity, in nano-units (so `500m` is 500 000 000 and `1Ki` is 1 024 000 000 000).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity {
    nanos: i128,
    /// Whether the text had a suffix or a fraction: `"0"` and `"0m"` are both zero, but only the
    /// first equals the openshift provider's `zeroQuantity` (see `openshift_utils.go`).
    plain: bool,
}

/// Why a text is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a quantity ({why})")]
pub struct QuantityError {
    pub text: String,
    pub why: &'static str,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

fn ceil_div(value: i128, divisor: i128) -> i128 {
    let quotient = value / divisor;
    if value % divisor > 0 {
        quotient + 1
    } else {
        quotient
    }
}

impl Quantity {
    /// A whole number of units.
    pub fn from_units(units: i64) -> Self {
        Self {
            nanos: i128::from(units) * NANOS_PER_UNIT,
            plain: true,
        }
    }

    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let error = |why| QuantityError {
            text: text.to_owned(),
            why,
        };
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(error("no digits"));
        }
        if fraction.contains('.') {
            return Err(error("two decimal points"));
        }
        let (base, exponent): (i128, i32) = match suffix {
            "" => (10, 0),
            "n" => (10, -9),
            "u" => (10, -6),
            "m" => (10, -3),
            "k" => (10, 3),
            "M" => (10, 6),
            "G" => (10, 9),
            "T" => (10, 12),
            "P" => (10, 15),
            "E" => (10, 18),
            "Ki" => (2, 10),
            "Mi" => (2, 20),
            "Gi" => (2, 30),
            "Ti" => (2, 40),
            "Pi" => (2, 50),
            "Ei" => (2, 60),
            other => {
                let digits = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(|| error("unknown suffix"))?;
                let exponent: i32 = digits.parse().map_err(|_| error("bad exponent"))?;
                if !(-40..=40).contains(&exponent) {
                    return Err(error("exponent out of range"));
                }
                (10, exponent)
            }
        };
        let digits = format!("{whole}{fraction}");
        let mantissa: i128 = digits.parse().map_err(|_| error("too many digits"))?;
        let fraction_digits =
            i32::try_from(fraction.len()).map_err(|_| error("too many digits"))?;
        let overflow = || error("too large");
        // mantissa × base^exponent × 10^(9 − fraction digits), rounded up when it has to divide.
        let mut nanos = mantissa;
        let mut scale10 = 9 - fraction_digits;
        if base == 10 {
            scale10 += exponent;
        } else {
            let factor = 2i128
                .checked_pow(u32::try_from(exponent).map_err(|_| overflow())?)
                .ok_or_else(overflow)?;
            nanos = nanos.checked_mul(factor).ok_or_else(overflow)?;
        }
        if scale10 >= 0 {
            let factor = 10i128
                .checked_pow(u32::try_from(scale10).map_err(|_| overflow())?)
                .ok_or_else(overflow)?;
            nanos = nanos.checked_mul(factor).ok_or_else(overflow)?;
        } else {
            let divisor = 10i128
                .checked_pow(u32::try_from(-scale10).map_err(|_| overflow())?)
                .ok_or_else(overflow)?;
            nanos = ceil_div(nanos, divisor);
        }
        Ok(Self {
            nanos: if negative { -nanos } else { nanos },
            plain: suffix.is_empty() && fraction.is_empty() && !number.contains('.'),
        })
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Whether it is what `resource.MustParse("0")` gives: zero, written without a suffix.
    pub fn is_plain_zero(&self) -> bool {
        self.is_zero() && self.plain
    }

    /// `MilliValue`: thousandths of a unit, rounded up.
    pub fn milli_value(&self) -> i64 {
        i64::try_from(ceil_div(self.nanos, 1_000_000)).unwrap_or(i64::MAX)
    }

    /// `Value`: whole units, rounded up.
    pub fn value(&self) -> i64 {
        i64::try_from(ceil_div(self.nanos, NANOS_PER_UNIT)).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_apimachinery_does() {
        let table: [(&str, i64, i64); 11] = [
            ("4", 4000, 4),
            ("500m", 500, 1),
            ("1.5", 1500, 2),
            ("16Gi", 16 * (1 << 30) * 1000, 16 << 30),
            ("16384Mi", 16384 * (1 << 20) * 1000, 16384 << 20),
            ("1k", 1_000_000, 1000),
            ("2e3", 2_000_000, 2000),
            ("1E-3", 1, 1),
            ("+3", 3000, 3),
            (".5", 500, 1),
            ("100Gi", 100 * (1 << 30) * 1000, 100 << 30),
        ];
        for (text, milli, value) in table {
            let q = Quantity::parse(text).unwrap();
            assert_eq!((q.milli_value(), q.value()), (milli, value), "{text}");
        }
        for bad in ["", "Gi", "4 Gi", "4GB", "1.2.3", "e3", "1e"] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Quantity::parse("0").unwrap().is_plain_zero());
        assert!(!Quantity::parse("0m").unwrap().is_plain_zero());
        assert!(Quantity::parse("0m").unwrap().is_zero());
    }
}
