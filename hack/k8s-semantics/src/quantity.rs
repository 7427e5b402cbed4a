//! Kubernetes resource quantities (`16Gi`, `500m`, `1.5G`, `4e9`) as Go's `resource.Quantity`
//! reads, writes, compares and scales them: what a quantity in a providerSpec becomes after a round
//! trip through the upstream Go type (kube-sim's webhooks), and the amounts the autoscaler reads
//! from annotations and pod requests (the sandbox).
//!
//! Every rule is k8s.io/apimachinery `pkg/api/resource` (as vendored by
//! openshift/machine-api-operator at v0.36.2): `ParseQuantity` and `parseQuantityString`
//! (quantity.go; the fast path keeps the text as written when it is already canonical),
//! `CanonicalizeBytes`, `MarshalJSON`, `NewQuantity`, `IsZero`, `Value` and `MilliValue`
//! (quantity.go), `AsCanonicalBytes` and `AsCanonicalBase1024Bytes` (amount.go), the suffix tables
//! (suffix.go).
//!
//! Not simulated: values whose digits do not fit 128 bits (Go keeps arbitrary precision); they are
//! refused as [`QuantityError::TooLarge`] instead.

/// Why a quantity cannot be read; the first three are Go's own errors and messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// `ErrFormatWrong`.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// `ErrSuffix`.
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// `ErrNumeric`.
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// Beyond what this simulation computes (see the module documentation).
    #[error("quantity {0:?} is too large for this simulation of resource.Quantity")]
    TooLarge(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    DecimalExponent,
    BinarySI,
    DecimalSI,
}

/// A quantity: `mantissa × 10^exponent`, its format, and the text Go keeps when it was canonical.
///
/// Equality is Go's `==` on the struct, not `Cmp`: value, scale, format and kept text must all
/// match, so `"0"`, `"0m"`, `"00"` and [`Quantity::new`]`(0)` are four different zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exponent: i32,
    format: Format,
    kept: Option<String>,
}

impl Quantity {
    /// The zero value (a JSON `null` unmarshals to it).
    pub fn zero() -> Self {
        Self {
            negative: false,
            mantissa: 0,
            exponent: 0,
            format: Format::DecimalSI,
            kept: None,
        }
    }

    /// `NewQuantity(value, DecimalSI)`: a whole number of units, no text kept.
    pub fn new(value: i64) -> Self {
        Self {
            negative: value < 0,
            mantissa: u128::from(value.unsigned_abs()),
            exponent: 0,
            format: Format::DecimalSI,
            kept: None,
        }
    }

    /// `MustParse("0")`: the zero whose text `"0"` is kept, the only one Go's `==` finds equal to
    /// a `zeroQuantity` made that way.
    pub fn parsed_zero() -> Self {
        Self {
            kept: Some("0".to_owned()),
            ..Self::zero()
        }
    }

    /// `ParseQuantity`.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Format);
        }
        if text == "0" {
            return Ok(Self {
                kept: Some(text.to_owned()),
                ..Self::zero()
            });
        }
        let parts = split(text)?;
        let (base, suffix_exponent, format) =
            interpret(parts.suffix).ok_or(QuantityError::Suffix)?;
        if let Some(fast) = fast_path(text, &parts, suffix_exponent, format)? {
            return Ok(fast);
        }
        slow_path(text, &parts, base, suffix_exponent, format)
    }

    /// What `MarshalJSON` writes (without the quotes).
    pub fn to_go_string(&self) -> String {
        if let Some(kept) = &self.kept {
            return kept.clone();
        }
        if self.mantissa == 0 {
            return "0".to_owned();
        }
        let mut format = self.format;
        let mut integer = None;
        if format == Format::BinarySI {
            if self.below_1024() {
                format = Format::DecimalSI;
            } else {
                match self.as_integer() {
                    Some(value) => integer = Some(value),
                    // Not exact at scale 0: shown as DecimalSI so no precision is lost.
                    None => format = Format::DecimalSI,
                }
            }
        }
        let sign = if self.negative { "-" } else { "" };
        match (format, integer) {
            (Format::BinarySI, Some(mut value)) => {
                let mut times = 0;
                while value >= 1024 && value.is_multiple_of(1024) {
                    value /= 1024;
                    times += 1;
                }
                format!("{sign}{value}{}", binary_suffix(times))
            }
            _ => {
                let (mut mantissa, mut exponent) = (self.mantissa, self.exponent);
                while mantissa >= 10 && mantissa.is_multiple_of(10) {
                    mantissa /= 10;
                    exponent += 1;
                }
                while exponent % 3 != 0 {
                    mantissa = mantissa.saturating_mul(10);
                    exponent -= 1;
                }
                let suffix = if format == Format::DecimalExponent {
                    if exponent == 0 {
                        String::new()
                    } else {
                        format!("e{exponent}")
                    }
                } else {
                    // An exponent with no SI suffix gets none at all, as in Go's lookup.
                    decimal_suffix(exponent).unwrap_or_default().to_owned()
                };
                format!("{sign}{mantissa}{suffix}")
            }
        }
    }

    /// `IsZero`.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// `Value`: whole units, a fraction rounded away from zero, saturated at the int64 bounds.
    pub fn value(&self) -> i64 {
        self.scaled_value(0)
    }

    /// `MilliValue`: thousandths of a unit, rounded as [`Quantity::value`].
    pub fn milli_value(&self) -> i64 {
        self.scaled_value(-3)
    }

    /// `ScaledValue(scale)`: the value in units of `10^scale`, rounded away from zero (Go's
    /// `inf.RoundUp`).
    fn scaled_value(&self, scale: i32) -> i64 {
        if self.mantissa == 0 {
            return 0;
        }
        let shift = i64::from(self.exponent) - i64::from(scale);
        let magnitude = if shift >= 0 {
            u32::try_from(shift)
                .ok()
                .and_then(pow10)
                .and_then(|factor| self.mantissa.checked_mul(factor))
                .unwrap_or(u128::MAX)
        } else {
            // A divisor beyond 10^38 leaves less than one unit, which rounds up to one.
            u32::try_from(-shift)
                .ok()
                .and_then(pow10)
                .map_or(1, |divisor| self.mantissa.div_ceil(divisor))
        };
        let magnitude = i64::try_from(magnitude).unwrap_or(i64::MAX);
        if self.negative { -magnitude } else { magnitude }
    }

    /// Whether -1024 < q < 1024.
    fn below_1024(&self) -> bool {
        match self.as_integer() {
            Some(value) => value < 1024,
            None => {
                // A fraction: compare its integer part.
                let divisor = pow10((-self.exponent) as u32);
                divisor.is_none_or(|d| self.mantissa / d < 1024)
            }
        }
    }

    /// The absolute value when it is a whole number.
    fn as_integer(&self) -> Option<u128> {
        if self.exponent >= 0 {
            pow10(self.exponent as u32).and_then(|p| self.mantissa.checked_mul(p))
        } else {
            let divisor = pow10((-self.exponent) as u32)?;
            self.mantissa
                .is_multiple_of(divisor)
                .then(|| self.mantissa / divisor)
        }
    }
}

fn pow10(power: u32) -> Option<u128> {
    10u128.checked_pow(power)
}

/// The parts `parseQuantityString` finds.
struct Parts<'a> {
    positive: bool,
    /// Sign, digits, point: what `inf.Dec.SetString` parses on the slow path.
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// `parseQuantityString`.
fn split(text: &str) -> Result<Parts<'_>, QuantityError> {
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut pos = 0;
    let mut positive = true;
    match bytes.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    // Leading zeros.
    while pos < end && bytes[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(Parts {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let num_start = pos;
    while pos < end && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    let mut num = &text[num_start..pos];
    if pos >= end {
        return Ok(Parts {
            positive,
            value: text,
            num,
            denom: "",
            suffix: "",
        });
    }
    if num.is_empty() {
        num = "0";
    }
    let mut denom = "";
    if bytes[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < end && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &text[denom_start..pos];
        if pos >= end {
            return Ok(Parts {
                positive,
                value: text,
                num,
                denom,
                suffix: "",
            });
        }
    }
    let value = &text[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < end && (bytes[pos] == b'-' || bytes[pos] == b'+') {
        pos += 1;
    }
    while pos < end {
        if !bytes[pos].is_ascii_digit() {
            return Err(QuantityError::Format);
        }
        pos += 1;
    }
    Ok(Parts {
        positive,
        value,
        num,
        denom,
        suffix: &text[suffix_start..],
    })
}

/// `suffixHandler.interpret`: base, exponent and format of a suffix.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let decimal = |exponent| Some((10, exponent, Format::DecimalSI));
    let binary = |exponent| Some((2, exponent, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            let exponent: i64 = suffix[1..].parse().ok()?;
            // Go truncates the parsed int64 to int32.
            Some((10, exponent as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

fn decimal_suffix(exponent: i32) -> Option<&'static str> {
    Some(match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

fn binary_suffix(times: u32) -> &'static str {
    match times {
        1 => "Ki",
        2 => "Mi",
        3 => "Gi",
        4 => "Ti",
        5 => "Pi",
        6 => "Ei",
        _ => "",
    }
}

/// The int64 fast path of `ParseQuantity`; `None` when Go takes the slow path.
fn fast_path(
    text: &str,
    parts: &Parts<'_>,
    suffix_exponent: i32,
    format: Format,
) -> Result<Option<Quantity>, QuantityError> {
    let digits = (parts.num.len() + parts.denom.len()) as i32;
    let (mut scale, precision, multiplier): (i32, i32, i64) = match format {
        Format::DecimalExponent | Format::DecimalSI => (suffix_exponent, 18 - digits, 1),
        Format::BinarySI if suffix_exponent >= 0 && parts.denom.is_empty() => {
            // Go: 15 - len(num) - int32(float32(exponent)*3/10) - 1.
            let guard = (suffix_exponent as f32 * 3.0 / 10.0) as i32;
            (
                0,
                15 - parts.num.len() as i32 - guard - 1,
                1i64 << suffix_exponent,
            )
        }
        Format::BinarySI => (0, -1, 1),
    };
    if precision < 0 {
        return Ok(None);
    }
    scale -= parts.denom.len() as i32;
    if scale < -9 {
        return Ok(None);
    }
    let shifted = format!("{}{}", parts.num, parts.denom);
    let value: i64 = shifted.parse().map_err(|_| QuantityError::Numeric)?;
    let Some(result) = value.checked_mul(multiplier) else {
        return Ok(None);
    };
    let canonical = match format {
        Format::BinarySI => suffix_exponent % 10 == 0 && value & 0x07 != 0,
        _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
    };
    Ok(Some(Quantity {
        negative: !parts.positive && result != 0,
        mantissa: u128::from(result.unsigned_abs()),
        exponent: scale,
        format,
        kept: canonical.then(|| text.to_owned()),
    }))
}

/// The arbitrary-precision path of `ParseQuantity`: exact value, rounded up to nano units, binary
/// values capped at the int64 maximum, a binary value below 1 shown as DecimalSI.
fn slow_path(
    text: &str,
    parts: &Parts<'_>,
    base: u32,
    suffix_exponent: i32,
    mut format: Format,
) -> Result<Quantity, QuantityError> {
    let too_large = || QuantityError::TooLarge(text.to_owned());
    // inf.Dec.SetString(value): sign, digits, optional point and digits.
    let unsigned = parts.value.trim_start_matches(['+', '-']);
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return Err(QuantityError::Numeric);
    }
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let mut mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| too_large())?
    };
    let mut exponent = -(fraction.len() as i32);
    if base == 10 {
        exponent += suffix_exponent;
    } else {
        let factor = 1u128
            .checked_shl(suffix_exponent as u32)
            .ok_or_else(too_large)?;
        mantissa = mantissa.checked_mul(factor).ok_or_else(too_large)?;
    }
    if mantissa != 0 && exponent < -9 {
        let divisor = pow10((-9 - exponent) as u32).ok_or_else(too_large)?;
        mantissa = mantissa.div_ceil(divisor);
        exponent = -9;
    }
    let mut quantity = Quantity {
        negative: !parts.positive && mantissa != 0,
        mantissa,
        exponent,
        format,
        kept: None,
    };
    if format == Format::BinarySI {
        let max = u128::from(i64::MAX as u64);
        let above_max = match quantity.as_integer() {
            Some(value) => value > max,
            None => pow10((-exponent) as u32).is_some_and(|d| mantissa / d >= max),
        };
        if above_max {
            quantity.mantissa = max;
            quantity.exponent = 0;
        } else if mantissa != 0
            && quantity.as_integer().is_none()
            && pow10((-exponent) as u32).is_some_and(|d| mantissa < d)
        {
            format = Format::DecimalSI;
            quantity.format = format;
        }
    }
    Ok(quantity)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        Quantity::parse(text).unwrap().to_go_string()
    }

    /// Expected values worked out from apimachinery's rules (module documentation), case by case.
    #[test]
    fn quantities_come_back_as_go_writes_them() {
        for (written, marshalled) in [
            // Canonical already: kept as written, even with a sign or leading zeros (fast path).
            ("16Gi", "16Gi"),
            ("120Gi", "120Gi"),
            ("3Gi", "3Gi"),
            ("+3Gi", "+3Gi"),
            ("100M", "100M"),
            ("007", "007"),
            ("0", "0"),
            // Not canonical: rewritten.
            ("1024Mi", "1Gi"),
            ("16384Mi", "16Gi"),
            ("2048Mi", "2Gi"),
            ("1000M", "1G"),
            ("1.5Gi", "1536Mi"),
            ("1.5G", "1500M"),
            ("0.5G", "500M"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
            ("4096", "4096"),
            ("1e3", "1e3"),
            ("1000e0", "1e3"),
            ("0Gi", "0"),
            (".", "0"),
            // Rounded up to nano units; binary values capped at the int64 maximum.
            ("0.0000000001", "1n"),
            ("16Ei", "9223372036854775807"),
            ("7Ei", "7Ei"),
            ("-1Gi", "-1Gi"),
        ] {
            assert_eq!(round_trip(written), marshalled, "{written}");
        }
    }

    #[test]
    fn malformed_quantities_fail_as_in_go() {
        assert_eq!(Quantity::parse("16GB"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1.2.3"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse(""), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("16K"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("1e"), Err(QuantityError::Suffix));
    }

    /// `MilliValue` and `Value` of the autoscaler's reads, worked out from apimachinery's rules.
    #[test]
    fn parses_as_apimachinery_does() {
        let table: [(&str, i64, i64); 13] = [
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
            // Rounded away from zero, as Go's inf.RoundUp.
            ("-1.5", -1500, -2),
            ("-1.5m", -2, -1),
        ];
        for (text, milli, value) in table {
            let q = Quantity::parse(text).unwrap();
            assert_eq!((q.milli_value(), q.value()), (milli, value), "{text}");
        }
        for bad in ["", "4 Gi", "4GB", "1.2.3", "1e"] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?}");
        }
        // A suffix with no digits before it is a zero to Go (apimachinery v0.34.2, run).
        for zero in ["Gi", "e3"] {
            assert!(Quantity::parse(zero).unwrap().is_zero(), "{zero:?}");
        }
        assert_eq!(Quantity::new(16 << 30).value(), 16 << 30);
        assert_eq!(Quantity::new(-2).milli_value(), -2000);
    }

    /// Go's `==` against `MustParse("0")`, as apimachinery v0.34.2 answers it (run): only the text
    /// `"0"` itself, never another zero.
    #[test]
    fn only_the_text_0_equals_a_parsed_zero() {
        assert_eq!(Quantity::parse("0").unwrap(), Quantity::parsed_zero());
        for other in ["00", "+0", "-0", "0m", "0.0", "0Gi", "Gi"] {
            let q = Quantity::parse(other).unwrap();
            assert!(q.is_zero(), "{other}");
            assert_ne!(q, Quantity::parsed_zero(), "{other}");
        }
        assert_ne!(Quantity::new(0), Quantity::parsed_zero());
        assert_ne!(Quantity::zero(), Quantity::parsed_zero());
    }
}
