//! Amounts of money: integer micro-units, bounded so that no sum of them can overflow.

/// The largest amount of money the gateway keeps anywhere, in micro-units: 10^16 (ten billion units). An
/// amount, a price, or a pot or sum after a change beyond it is refused, so no arithmetic on money can
/// overflow (three full pots still fit an `i64` many times over).
pub const MAX_MICROS: i64 = 10_000_000_000_000_000;

/// `a + b`, if it stays within `±MAX_MICROS`.
pub fn checked_sum(a: i64, b: i64) -> Option<i64> {
    a.checked_add(b).filter(|sum| sum.abs() <= MAX_MICROS)
}
