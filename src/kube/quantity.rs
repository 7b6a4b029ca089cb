//! Kubernetes quantities as bytes: what a claim asks for and holds, compared with what the
//! spec asks for. "1Gi", "1073741824", "1G" and "1e9" name sizes in any of the forms the API
//! server accepts and keeps as written, so they are compared as numbers, never as text.

/// The number of bytes `quantity` names (rounded up to a whole byte), or `None` when it is
/// not a quantity the API server would accept, or is negative, or does not fit.
pub fn bytes(quantity: &str) -> Option<u64> {
    let q = quantity.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    // value = mantissa / 10^scale × base^power, in whole numbers so that no size is rounded
    // on its way (a float holds 2^53 exactly, a claim may ask for more).
    let (base, power): (u128, i32) = match suffix {
        "" => (10, 0),
        "Ki" => (1024, 1),
        "Mi" => (1024, 2),
        "Gi" => (1024, 3),
        "Ti" => (1024, 4),
        "Pi" => (1024, 5),
        "Ei" => (1024, 6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        s if s.starts_with(['e', 'E']) => (10, s[1..].parse().ok()?),
        _ => return None,
    };
    let (mantissa, scale) = decimal(number)?;
    let (mut numerator, mut denominator) = (mantissa, 10u128.checked_pow(scale)?);
    let factor = base.checked_pow(power.unsigned_abs())?;
    if power >= 0 {
        numerator = numerator.checked_mul(factor)?;
    } else {
        denominator = denominator.checked_mul(factor)?;
    }
    u64::try_from(numerator.div_ceil(denominator)).ok()
}

/// A non-negative decimal as its digits and how many of them follow the point.
fn decimal(number: &str) -> Option<(u128, u32)> {
    let n = number.strip_prefix('+').unwrap_or(number);
    let (whole, fraction) = n.split_once('.').unwrap_or((n, ""));
    let digits = format!("{whole}{fraction}");
    if digits.is_empty() || digits.len() > 30 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, u32::try_from(fraction.len()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn every_form_the_api_server_keeps_names_the_same_size() {
        let gib = 1u64 << 30;
        for q in ["1Gi", "1024Mi", "1048576Ki", "1073741824", "0.5Gi+0.5Gi"] {
            let expected = (q != "0.5Gi+0.5Gi").then_some(gib);
            assert_eq!(bytes(q), expected, "{q}");
        }
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1e9"), Some(1_000_000_000));
        assert_eq!(bytes("2E"), Some(2_000_000_000_000_000_000));
        assert_eq!(bytes("3E2"), Some(300));
        assert_eq!(bytes("1.5Gi"), Some(gib + gib / 2));
        assert_eq!(bytes("2Ti"), Some(2 << 40));
        assert_eq!(bytes("500M"), Some(500_000_000));
        assert_eq!(bytes("1500m"), Some(2));
        assert_eq!(bytes("16Ei"), None, "does not fit");
        assert_eq!(bytes("7Ei"), Some(7 << 60));
        assert_eq!(bytes("123456789012345678"), Some(123_456_789_012_345_678));
        assert_eq!(bytes(" 3Mi "), Some(3 << 20));
    }

    #[test]
    fn what_is_not_a_size_is_none() {
        for q in ["", "Gi", "1GB", "1gi", "-1Gi", "1.2.3Mi", "x", "1Zi"] {
            assert_eq!(bytes(q), None, "{q}");
        }
    }
}
