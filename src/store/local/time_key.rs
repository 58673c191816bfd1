//! An item folder's name, `MM.DD.hh.mm[.ss[.f]]` with a fraction of one to
//! nine digits, packed into 58 bits of a `u64` whose order is the order of the
//! names as text: a year's folder holds every item of the year, and its walk
//! reads and sorts them as 8-byte keys (`walk::Listing`) instead of text and
//! places (27 bytes a name). A name of any other form is not packed and is
//! listed as text.
//!
//! From the top: month (4 bits, 1–12), day (5, 1–31), hour (5, 0–23), minute
//! (6, 0–59), second plus one (6, 0 when absent), then nine fraction places
//! in base 11 (a digit d is d + 1, 0 past the last digit; 32 bits). Every
//! field of the text is fixed-width but the fraction, whose digits compare as
//! text position by position with a shorter run first, which is what the
//! base-11 places do; an absent part is 0, below any present one, as a
//! shorter text sorts before a longer one that begins with it.

/// The longest fraction packed (nanoseconds).
const FRACTION_PLACES: u32 = 9;

/// The key of `name`, or `None` when it is not of the packed form.
pub fn pack(name: &[u8]) -> Option<u64> {
    let two = |at: usize| -> Option<u64> {
        match name.get(at..at + 2)? {
            &[a @ b'0'..=b'9', b @ b'0'..=b'9'] => Some(u64::from(a - b'0') * 10 + u64::from(b - b'0')),
            _ => None,
        }
    };
    let dot = |at: usize| name.get(at) == Some(&b'.');
    if name.len() < 11 || !(dot(2) && dot(5) && dot(8)) {
        return None;
    }
    let (month, day, hour, minute) = (two(0)?, two(3)?, two(6)?, two(9)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let (second, fraction) = match name.len() {
        11 => (0, 0),
        14 if dot(11) => (two(12)?.checked_add(1).filter(|s| *s <= 60)?, 0),
        n if n >= 16 && dot(11) && dot(14) => {
            (two(12)?.checked_add(1).filter(|s| *s <= 60)?, fraction_places(&name[15..])?)
        }
        _ => return None,
    };
    Some((((((month << 5 | day) << 5 | hour) << 6 | minute) << 6 | second) << 32) | fraction)
}

/// Nine base-11 places for one to nine digits.
fn fraction_places(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > FRACTION_PLACES as usize {
        return None;
    }
    let mut places = 0u64;
    for at in 0..FRACTION_PLACES as usize {
        let place = match digits.get(at) {
            Some(d @ b'0'..=b'9') => u64::from(d - b'0') + 1,
            Some(_) => return None,
            None => 0,
        };
        places = places * 11 + place;
    }
    Some(places)
}

/// Writes the name of `key` (made by `pack`) into `out`, replacing what it held.
pub fn unpack(key: u64, out: &mut Vec<u8>) {
    let field = |shift: u32, bits: u32| (key >> shift) & ((1 << bits) - 1);
    let (month, day, hour, minute, second) = (field(54, 4), field(49, 5), field(44, 5), field(38, 6), field(32, 6));
    out.clear();
    for (at, value) in [month, day, hour, minute].into_iter().enumerate() {
        if at > 0 {
            out.push(b'.');
        }
        out.extend_from_slice(&[b'0' + (value / 10) as u8, b'0' + (value % 10) as u8]);
    }
    if second == 0 {
        return;
    }
    let second = second - 1;
    out.extend_from_slice(&[b'.', b'0' + (second / 10) as u8, b'0' + (second % 10) as u8]);
    let mut places = key & 0xFFFF_FFFF;
    let mut digits = [0u8; FRACTION_PLACES as usize];
    for at in (0..FRACTION_PLACES as usize).rev() {
        digits[at] = (places % 11) as u8;
        places /= 11;
    }
    let count = digits.iter().take_while(|&&d| d != 0).count();
    if count > 0 {
        out.push(b'.');
        out.extend(digits[..count].iter().map(|d| b'0' + d - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::local::minter::tests::any_suffix;
    use proptest::prelude::*;

    fn text(key: u64) -> String {
        let mut out = Vec::new();
        unpack(key, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_packed_forms_round_trip_and_the_others_are_refused() {
        for name in ["01.01.00.00", "12.31.23.59", "11.27.04.45.05", "11.27.04.45.59.5", "11.27.04.45.00.000000001"] {
            assert_eq!(pack(name.as_bytes()).map(text).as_deref(), Some(name));
        }
        for name in [
            "",
            "stray",
            "13.01.00.00",
            "00.01.00.00",
            "01.32.00.00",
            "01.01.24.00",
            "01.01.00.60",
            "01.01.00.00.60",
            "01.01.00.00.",
            "01.01.00.00.00.",
            "01.01.00.00.00.1234567890",
            "01.01.00.00.00.12a",
            "01.01.00.00x00",
            "01.01.00.00.0",
            "1.01.00.00",
            "01-01.00.00",
        ] {
            assert_eq!(pack(name.as_bytes()), None, "{name:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Keys order as their names do as text, and a key gives its name back.
        #[test]
        fn keys_order_as_their_names_and_give_them_back(a in any_suffix(), b in any_suffix()) {
            let (ka, kb) = (pack(a.as_bytes()).unwrap(), pack(b.as_bytes()).unwrap());
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(text(ka), a);
            prop_assert!(ka < 1 << 58);
        }
    }
}
