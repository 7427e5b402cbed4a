//! Kubernetes resource quantities (`16Gi`, `20G`, `1.5Ti`, `4e9`) as whole bytes.
//!
//! `memorySize`, `systemDiskSize` and `diskSize` are `resource.Quantity` upstream. Go's
//! `Quantity.Value()` rounds a fractional result up to the next integer; so does this parser.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use prism_types::quote::quoted;

/// Bytes in one mebibyte.
pub const MIB: u64 = 1 << 20;
/// Bytes in one gibibyte.
pub const GIB: u64 = 1 << 30;

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "{:?} is not a quantity (expected a number with an optional suffix such as Mi, Gi, G)",
        quoted(.0)
    )]
    Syntax(String),
    #[error("{:?} is negative", quoted(.0))]
    Negative(String),
    #[error("{:?} is too large", quoted(.0))]
    TooLarge(String),
}

/// Reads a quantity as a whole number of bytes (units), rounding a fraction up.
pub fn quantity_bytes(quantity: &Quantity) -> Result<u64, QuantityError> {
    parse_units(&quantity.0)
}

/// Reads quantity text as a whole number of units, rounding a fraction up.
pub fn parse_units(text: &str) -> Result<u64, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_owned());
    let too_large = || QuantityError::TooLarge(text.to_owned());
    let trimmed = text.trim();
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(syntax());
    }
    let digits = format!("{whole}{fraction}");
    // 38 significant digits keep every intermediate value inside u128.
    let significant = digits.trim_start_matches('0');
    if significant.len() > 38 {
        return Err(too_large());
    }
    let mantissa: u128 = if significant.is_empty() {
        0
    } else {
        significant.parse().map_err(|_| syntax())?
    };
    if negative && mantissa != 0 {
        return Err(QuantityError::Negative(text.to_owned()));
    }
    let fraction_digits = i32::try_from(fraction.len()).map_err(|_| too_large())?;

    // value = mantissa * multiplier * 10^(exponent - fraction_digits)
    let (multiplier, exponent): (u128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        exp if exp.starts_with(['e', 'E']) => {
            let power: i32 = exp[1..].parse().map_err(|_| syntax())?;
            (1, power)
        }
        _ => return Err(syntax()),
    };
    let scaled = mantissa.checked_mul(multiplier).ok_or_else(too_large)?;
    // Saturating: past i32::MIN the value is a fraction of one unit either way.
    let power = exponent.saturating_sub(fraction_digits);
    let units = if power >= 0 {
        let factor = 10u128
            .checked_pow(power.unsigned_abs())
            .ok_or_else(too_large)?;
        scaled.checked_mul(factor).ok_or_else(too_large)?
    } else {
        match 10u128.checked_pow(power.unsigned_abs()) {
            Some(divisor) => scaled.div_ceil(divisor),
            // A divisor beyond u128 leaves at most a fraction of one unit.
            None => u128::from(scaled != 0),
        }
    };
    u64::try_from(units).map_err(|_| too_large())
}

/// Whole mebibytes in `bytes`, truncated as upstream does (`bytes / 2^20`).
pub fn mib_floor(bytes: u64) -> u64 {
    bytes / MIB
}

/// Writes a size in MiB as the shortest exact binary quantity: `16Gi`, `1536Mi`, `0`.
pub fn format_mib(mib: u64) -> String {
    if mib == 0 {
        "0".to_owned()
    } else if mib.is_multiple_of(1 << 20) {
        format!("{}Ti", mib >> 20)
    } else if mib.is_multiple_of(1024) {
        format!("{}Gi", mib / 1024)
    } else {
        format!("{mib}Mi")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_upstream_manifests_use() {
        let cases: &[(&str, u64)] = &[
            ("16Gi", 16 * GIB),
            ("120Gi", 120 * GIB),
            ("2048Mi", 2 * GIB),
            ("20G", 20_000_000_000),
            ("1.5Gi", 3 * GIB / 2),
            ("4294967296", 4 * GIB),
            ("1e3", 1000),
            ("1E3", 1000),
            ("100k", 100_000),
            ("0", 0),
            ("+1Ki", 1024),
            ("1500m", 2),
            ("0.1", 1),
            ("1Ti", 1 << 40),
            ("1Ei", 1 << 60),
            (".5Ki", 512),
            ("-0", 0),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_units(text), Ok(*bytes), "{text}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_quantity() {
        for text in [
            "", "Gi", "16GiB", "16 Gi", "1.2.3", "lots", "16gi", "1e", "--1", ".",
        ] {
            assert!(
                matches!(parse_units(text), Err(QuantityError::Syntax(_))),
                "{text}"
            );
        }
        assert!(matches!(
            parse_units("-1Gi"),
            Err(QuantityError::Negative(_))
        ));
        assert!(matches!(
            parse_units("16Ei"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            parse_units("1e40"),
            Err(QuantityError::TooLarge(_))
        ));
    }

    #[test]
    fn formats_mebibytes_as_the_shortest_binary_quantity() {
        assert_eq!(format_mib(16384), "16Gi");
        assert_eq!(format_mib(1536), "1536Mi");
        assert_eq!(format_mib(1 << 20), "1Ti");
        assert_eq!(format_mib(0), "0");
        for mib in [1, 1023, 1024, 8192, 12_345, 1 << 21] {
            assert_eq!(parse_units(&format_mib(mib)), Ok(mib * MIB), "{mib}");
        }
    }
}
