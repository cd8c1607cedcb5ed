//! Money as a person types it. One convention wherever a person types an amount (the console, the CLI): a
//! decimal number of units (`50`, `1.5`), at most six decimals, since the books keep micro-units. Whole
//! micro-units are taken only where the person said so (`--micros`); the admin HTTP API takes micro-units.

use super::micros::MAX_MICROS;

/// Why a typed amount was refused; each message names the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmountError {
    /// Not a plain decimal number (a sign, a comma, an exponent, a word).
    NotAnAmount,
    /// More than six decimals: the books keep micro-units.
    TooPrecise,
    /// Above the most an amount may be.
    TooLarge,
    /// Micro-units are whole.
    NotWholeMicros,
}

impl AmountError {
    /// The refusal, for the field or argument `name`.
    pub fn message(self, name: &str) -> String {
        let most = MAX_MICROS / 1_000_000;
        match self {
            AmountError::NotAnAmount => {
                format!("`{name}` is an amount in units, written like 50 or 1.5 (no sign, no thousands separators).")
            }
            AmountError::TooPrecise => {
                format!("`{name}` has more than 6 decimals; 0.000001 units is the smallest amount.")
            }
            AmountError::TooLarge => format!("`{name}` is more than {most} units, the most an amount may be."),
            AmountError::NotWholeMicros => format!("`{name}` is a whole number of micro-units (1 unit = 1000000)."),
        }
    }
}

/// A decimal amount of units (`12.5`) as micro-units, exactly.
pub fn parse_units(text: &str) -> Result<i64, AmountError> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(AmountError::NotAnAmount);
    }
    if fraction.len() > 6 {
        return Err(AmountError::TooPrecise);
    }
    let whole: i64 = whole.parse().map_err(|_| AmountError::TooLarge)?;
    let fraction: i64 = format!("{fraction:0<6}").parse().map_err(|_| AmountError::NotAnAmount)?;
    whole
        .checked_mul(1_000_000)
        .and_then(|w| w.checked_add(fraction))
        .filter(|m| *m <= MAX_MICROS)
        .ok_or(AmountError::TooLarge)
}

/// A whole number of micro-units, typed where the person said micro-units.
pub fn parse_micros(text: &str) -> Result<i64, AmountError> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AmountError::NotWholeMicros);
    }
    text.parse::<i64>().ok().filter(|m| *m <= MAX_MICROS).ok_or(AmountError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_read_exactly_or_refused_with_the_reason() {
        let table: &[(&str, Result<i64, AmountError>)] = &[
            ("50", Ok(50_000_000)),
            ("1.5", Ok(1_500_000)),
            (" 3 ", Ok(3_000_000)),
            ("0.000001", Ok(1)),
            ("10000000000", Ok(MAX_MICROS)),
            ("10000000000.000001", Err(AmountError::TooLarge)),
            ("99999999999999999999", Err(AmountError::TooLarge)),
            ("1.0000001", Err(AmountError::TooPrecise)),
            ("", Err(AmountError::NotAnAmount)),
            ("-1", Err(AmountError::NotAnAmount)),
            ("1e3", Err(AmountError::NotAnAmount)),
            (".5", Err(AmountError::NotAnAmount)),
            ("1,5", Err(AmountError::NotAnAmount)),
            ("1,000", Err(AmountError::NotAnAmount)),
        ];
        for (text, parsed) in table {
            assert_eq!(parse_units(text), *parsed, "{text:?}");
        }
    }

    #[test]
    fn micro_units_are_whole() {
        assert_eq!(parse_micros("50000000"), Ok(50_000_000));
        assert_eq!(parse_micros("1.5"), Err(AmountError::NotWholeMicros));
        assert_eq!(parse_micros("-5"), Err(AmountError::NotWholeMicros));
        assert_eq!(parse_micros("10000000000000001"), Err(AmountError::TooLarge));
    }

    #[test]
    fn every_refusal_names_the_unit() {
        for error in [AmountError::NotAnAmount, AmountError::TooPrecise, AmountError::TooLarge] {
            assert!(error.message("amount").contains("units"), "{error:?}");
        }
        assert!(AmountError::NotWholeMicros.message("amount").contains("micro-units"));
    }
}
