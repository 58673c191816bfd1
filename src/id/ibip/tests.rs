//! Known-answer vectors (Example 2, Table 7.3 through whole IBIps, the ARCHITECTURE.md
//! fraction examples) and encode/decode round trips.

use super::*;
use crate::id::base::IBIP;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn example_2_ibip() {
    let ibip = Ibip::new(ip("150.163.34.243"), 800, Timestamp::from_seconds(1_234_806_360)).unwrap();
    assert_eq!(ibip.to_string(), "8JMKD3MGP8W/34PGRBS");
    let back = Ibip::parse("8jmkd3mgp8w/34pgrbs").unwrap();
    assert_eq!(back, ibip);
    assert_eq!(back.date().to_rfc3339(), "2009-02-16T17:46:00Z");
}

#[test]
fn table_7_2_and_7_3_through_prefixes() {
    let v4 = Ibip::new(ip("150.163.2.174"), 800, Timestamp::from_seconds(IBIP_EPOCH_SECONDS + 1)).unwrap();
    assert_eq!(v4.to_string(), "J8LNKAN8PW/3");
    let v6 = Ibip::new(ip("2001:252:0:1::2008:6"), 19050, Timestamp::from_seconds(IBIP_EPOCH_SECONDS + 480_992_662))
        .unwrap();
    assert_eq!(v6.to_string(), "7URMDHLL9SSN2D89MXU5H/38G3TS3");
    assert_eq!(Ibip::parse(&v6.to_string()).unwrap(), v6);
}

#[test]
fn design_fraction_code_examples() {
    let at = |frac: &str| {
        let date = Timestamp::parse_decimal(&format!("{}{frac}", IBIP_EPOCH_SECONDS)).unwrap();
        Ibip::new(ip("150.163.34.243"), 800, date).unwrap().suffix()
    };
    assert_eq!(at(".5"), "2W7");
    assert_eq!(at(".05"), "2W27");
    assert_eq!(at(".25"), "2WT");
    assert_eq!(at(".3"), "2W5");
    assert_eq!(at(".03"), "2W25");
}

#[test]
fn ipv6_canonical_form_is_rfc_5952() {
    assert_eq!(ipv6_canonical(&"2001:0db8:0:0:1:0:0:1".parse().unwrap()), "2001:db8::1:0:0:1");
    assert_eq!(ipv6_canonical(&"::ffff:1.2.3.4".parse().unwrap()), "::ffff:102:304");
    assert_eq!(ipv6_canonical(&"2001:db8:0:1:1:1:1:1".parse().unwrap()), "2001:db8:0:1:1:1:1:1");
    assert_eq!(ipv6_canonical(&Ipv6Addr::UNSPECIFIED), "::");
    let same_a = Ibip::new(ip("2001:DB8::1"), 800, Timestamp::from_seconds(IBIP_EPOCH_SECONDS)).unwrap();
    let same_b = Ibip::new(ip("2001:db8:0:0:0:0:0:1"), 800, Timestamp::from_seconds(IBIP_EPOCH_SECONDS)).unwrap();
    assert_eq!(same_a.to_string(), same_b.to_string());
}

#[test]
fn unencodable_inputs_are_errors() {
    let early = Timestamp::from_seconds(IBIP_EPOCH_SECONDS - 1);
    assert!(Ibip::new(ip("150.163.34.243"), 800, early).is_err());
    assert!(Ibip::new(ip("0.1.2.3"), 800, Timestamp::from_seconds(IBIP_EPOCH_SECONDS)).is_err());
}

#[test]
fn non_canonical_codes_are_rejected() {
    for bad in ["8JMKD3MGP8W/234PGRBS", "8JMKD3MGP8W/34PGRBSW", "8JMKD3MGP8W/34PGRBSW2", "8JMKD3MGP8W34K/34PGRBS"] {
        assert!(Ibip::parse(bad).is_err(), "{bad}");
    }
    // "34K" is port 800, which must be written as an empty port code.
    assert_eq!(IBIP.encode_u128(800), "34K");
    // 10 in base 27 is "C": a fraction ".10" has a trailing zero.
    assert!(Ibip::parse("8JMKD3MGP8W/34PGRBSWC").is_err());
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (1u8.., any::<[u8; 3]>()).prop_map(|(a, r)| IpAddr::V4(Ipv4Addr::new(a, r[0], r[1], r[2]))),
        (1u16.., any::<[u16; 7]>(), 0usize..7, 0usize..8).prop_map(|(a, rest, start, len)| {
            let mut s = [a, rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6]];
            for seg in s.iter_mut().skip(start + 1).take(len) {
                *seg = 0;
            }
            IpAddr::V6(Ipv6Addr::from(s))
        }),
    ]
}

fn any_date() -> impl Strategy<Value = Timestamp> {
    let nanos = prop_oneof![
        Just(0u32),
        0u32..1_000_000_000,
        (0u32..10).prop_map(|d| d * 1_000_000),
        (0u32..100).prop_map(|d| d * 1_000),
    ];
    (IBIP_EPOCH_SECONDS..IBIP_EPOCH_SECONDS + 5_000_000_000, nanos)
        .prop_map(|(s, n)| Timestamp::from_nanos(s as i128 * NANOS_PER_SECOND + n as i128))
}

proptest! {
    #[test]
    fn decode_inverts_encode(ip in any_ip(), port in 1u16.., date in any_date()) {
        prop_assume!(!ip_canonical(&ip).starts_with('0'));
        let ibip = Ibip::new(ip, port, date).unwrap();
        let text = ibip.to_string();
        let back = Ibip::parse(&text).unwrap();
        prop_assert_eq!((back.ip(), back.port(), back.date()), (ip, port, date));
        prop_assert_eq!(Ibip::parse(&text.to_lowercase()).unwrap(), ibip);
    }

    #[test]
    fn parse_never_panics(s in "[2-9A-Za-z/]{0,40}") {
        if let Ok(ibip) = Ibip::parse(&s) {
            prop_assert_eq!(ibip.to_string(), s.to_ascii_uppercase());
        }
    }

    /// Any text, multi-byte characters included: a refusal names a column
    /// within the text, counted in characters, and an accepted IBIp is
    /// written back as its upper-case text.
    #[test]
    fn any_text_is_refused_at_a_character_or_read_back(s in "[2-9A-Za-z/é€\\PC]{0,30}") {
        match Ibip::parse(&s) {
            Ok(ibip) => prop_assert_eq!(ibip.to_string(), s.to_ascii_uppercase()),
            Err(e) => prop_assert!(e.column >= 1 && e.column <= s.chars().count() + 1, "{e:?}"),
        }
    }
}

/// The prefix last decoded (or encoded) is remembered per thread: IBIps of
/// different subsystems, in turn, each come back with their own IP and port,
/// and an invalid prefix is refused even right after a valid one.
#[test]
fn a_remembered_prefix_answers_only_its_own_text() {
    let a = Ibip::new(ip("150.163.34.243"), 800, Timestamp::from_seconds(1_234_806_360)).unwrap();
    let b = Ibip::new(ip("2001:252:0:1::2008:6"), 19050, Timestamp::from_seconds(1_234_806_361)).unwrap();
    for _ in 0..3 {
        for ibip in [a, b] {
            let text = ibip.to_string();
            assert_eq!(Ibip::parse(&text).unwrap(), ibip, "{text}");
            assert_eq!(Ibip::parse(&text.to_lowercase()).unwrap(), ibip, "{text}");
        }
    }
    let valid = a.to_string();
    assert!(Ibip::parse(&valid).is_ok());
    assert!(Ibip::parse(&valid.replacen('W', "WW", 1)).is_err(), "a second separator after a good prefix");
    assert_eq!(a.prefix(), "8JMKD3MGP8W");
    assert_eq!(b.prefix(), "7URMDHLL9SSN2D89MXU5H");
    assert_eq!(a.prefix(), "8JMKD3MGP8W");
}

/// The fraction code read as the standard's text reads it: the digits are the
/// leading `2`s as zeros, then the rest's value in decimal, padded to nine.
fn fraction_by_text(code: &str) -> Result<u32, ()> {
    let significant = code.trim_start_matches('2');
    if significant.is_empty() {
        return Err(());
    }
    let value = IBIP.decode(significant).map_err(|_| ())?;
    let digits = format!("{}{value}", "0".repeat(code.len() - significant.len()));
    if digits.ends_with('0') || digits.len() > 9 {
        return Err(());
    }
    Ok(format!("{digits:0<9}").parse().unwrap())
}

proptest! {
    /// The fraction is decoded in machine words, with no text made: it agrees
    /// with the reading by decimal text on every code, valid or not.
    #[test]
    fn fraction_decoding_agrees_with_the_decimal_text_reading(code in "[2-9A-HJ-NP-U]{1,7}|[2-9A-HJ-NP-U]{8,40}") {
        prop_assert_eq!(decode_fraction(&code).map_err(|_| ()), fraction_by_text(&code), "{}", code);
    }
}

proptest! {
    /// The fraction is encoded in machine words: its leading zeros and the rest's
    /// value are those of its decimal digits (`fraction_digits`) read as text.
    #[test]
    fn fraction_encoding_agrees_with_the_decimal_text(nanos in 1u32..1_000_000_000) {
        let digits = crate::id::time::fraction_digits(nanos);
        let significant = digits.trim_start_matches('0');
        let by_text = (digits.len() - significant.len(), significant.parse::<u32>().unwrap());
        prop_assert_eq!(fraction_parts(nanos), by_text);
    }
}

/// A suffix's seconds are refused from 2^40 on; every date below that has a
/// calendar, so decoding checks none.
#[test]
fn the_latest_ibip_date_has_a_calendar() {
    let latest = (IBIP_EPOCH_SECONDS as i128 + (1 << 40) - 1) * NANOS_PER_SECOND + 999_999_999;
    let calendar = Timestamp::from_nanos(latest).calendar().expect("a calendar");
    assert_eq!(calendar.year, 36_837);
    let code = IBIP.encode_u128((1 << 40) - 1);
    assert!(decode_suffix(&code).is_ok());
    assert!(decode_suffix(&IBIP.encode_u128(1 << 40)).is_err(), "2^40 seconds is out of range");
}
