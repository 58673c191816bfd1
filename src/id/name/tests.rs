//! Known-answer vectors from the standard (Example 1, Table 6.2 suffixes, the legacy
//! `@80` form) and property tests for repository names.

use super::*;
use proptest::prelude::*;

fn t(decimal: &str) -> Timestamp {
    Timestamp::parse_decimal(decimal).unwrap()
}

#[test]
fn example_1_prefix_suffix_and_name() {
    let prefix = Prefix::from_host("mtc-m18.sid.inpe.br", 80).unwrap();
    assert_eq!(prefix.to_string(), "sid.inpe.br/mtc-m18");
    let date = Timestamp::parse_user("2009-02-16T17:46:00Z").unwrap();
    let name = RepositoryName::from_prefix_and_date(&prefix, date).unwrap();
    assert_eq!(name.to_string(), "sid.inpe.br/mtc-m18/2009/02.16.17.46");
    assert_eq!(name.components(), ["sid.inpe.br", "mtc-m18", "2009", "02.16.17.46"].map(String::from));
}

#[test]
fn example_1_legacy_at_port_form_parses_and_keeps_its_text() {
    let legacy = RepositoryName::parse("sid.inpe.br/mtc-m18@80/2009/02.16.17.46").unwrap();
    assert_eq!(legacy.to_string(), "sid.inpe.br/mtc-m18@80/2009/02.16.17.46");
    assert_eq!(legacy.prefix().port(), Some((PortSeparator::At, 80)));
    assert_eq!(legacy.date(), t("1234806360"));
    let upper = RepositoryName::parse("sid.INPE.br/MTC-m18@80/2009/02.16.17.46").unwrap();
    assert_eq!(upper, legacy, "names are case-insensitive");
}

#[test]
fn ports_other_than_80_join_with_a_dot_and_never_an_at() {
    let prefix = Prefix::from_host("Mtc-M18.Sid.Inpe.Br", 8080).unwrap();
    assert_eq!(prefix.to_string(), "sid.inpe.br/mtc-m18.8080");
    assert!(!prefix.to_string().contains('@'));
}

#[test]
fn table_6_2_suffixes_from_dates() {
    let rows = [
        ("1287587646", "2010/10.20.15.14.06"),
        ("1287588000", "2010/10.20.15.20"),
        ("1287588060", "2010/10.20.15.21"),
        ("1287588115", "2010/10.20.15.21.55"),
        ("1287588116", "2010/10.20.15.21.56"),
        ("1287588117", "2010/10.20.15.21.57"),
        ("1287588480", "2010/10.20.15.28"),
    ];
    for (date, suffix) in rows {
        assert_eq!(Suffix::from_date(t(date)).unwrap().to_string(), suffix);
    }
}

#[test]
fn fractions_use_the_fewest_digits_and_keep_seconds() {
    assert_eq!(Suffix::from_date(t("1287587640.5")).unwrap().to_string(), "2010/10.20.15.14.00.5");
    assert_eq!(Suffix::from_date(t("1287587646.000000001")).unwrap().to_string(), "2010/10.20.15.14.06.000000001");
    let name = RepositoryName::parse("a.b/c/2010/10.20.15.14.00.5").unwrap();
    assert_eq!(name.date(), t("1287587640.5"));
}

#[test]
fn host_must_have_two_labels_and_valid_words() {
    for bad in ["localhost", "-a.b", "a-.b", "a.b-", "a.1b", "a..b", "a_b.c", "a.b c", "é.b"] {
        assert!(Prefix::from_host(bad, 80).is_err(), "{bad}");
    }
    assert!(Prefix::from_host("a.b", 0).is_err());
}

#[test]
fn trailing_dot_of_a_fully_qualified_subdomain_is_dropped() {
    let name = RepositoryName::parse("dpi.inpe.br./banon/2009/02.16.17.46").unwrap();
    assert_eq!(name.to_string(), "dpi.inpe.br/banon/2009/02.16.17.46");
}

#[test]
fn errors_name_the_field_and_column() {
    let input = "sid.inpe.br/mtc-m18/2009/13.16.17.46";
    let e = RepositoryName::parse(input).unwrap_err();
    assert_eq!(e.problem, "invalid month \"13\"");
    assert_eq!(e.column, 26);
    assert_eq!(&input[e.column - 1..e.column + 1], "13");
    let e = RepositoryName::parse("sid.inpe.br/mtc-m18/2009/02.29.17.46").unwrap_err();
    assert!(e.problem.starts_with("invalid day \"29\""), "{}", e.problem);
    assert_eq!(e.column, 29);
}

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"
}

fn last_label() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,6}[a-z0-9])?"
}

prop_compose! {
    fn any_name()(
        labels in proptest::collection::vec(label(), 0..3),
        last in last_label(),
        word in label(),
        port in proptest::option::of((any::<bool>(), 1u16..)),
        secs in 0i64..10_000_000_000,
        nanos in prop_oneof![Just(0u32), 0u32..1_000_000_000, (0u32..1000).prop_map(|m| m * 1_000_000)],
    ) -> RepositoryName {
        let mut subdomain = labels.join(".");
        if !subdomain.is_empty() { subdomain.push('.'); }
        subdomain.push_str(&last);
        let port = port.map(|(at, p)| (if at { PortSeparator::At } else { PortSeparator::Dot }, p));
        let prefix = Prefix { subdomain: subdomain.into(), word: word.into(), port };
        let date = Timestamp::from_nanos(secs as i128 * 1_000_000_000 + nanos as i128);
        RepositoryName::from_prefix_and_date(&prefix, date).unwrap()
    }
}

#[test]
fn names_with_nested_prefixes_order_as_their_text() {
    let texts = [
        "sid.inpe.br/mtc-m18/2009/02.16.17.46",
        "sid.inpe.br/mtc-m18.8080/2009/02.16.17.46",
        "sid.inpe.br/mtc-m18@8080/2009/02.16.17.46",
        "sid.inpe.br/mtc-m18.65535/2009/02.16.17.46",
        "sid.inpe.br/mtc-m18.9/2009/02.16.17.46",
        "sid.inpe.br/mtc-m18/2009/02.16.17.46.05",
        "sid.inpe.br/mtc-m18/12009/02.16.17.46",
        "sid.inpe.br/mtc/2009/02.16.17.46",
    ];
    let mut names: Vec<RepositoryName> = texts.iter().map(|t| RepositoryName::parse(t).unwrap()).collect();
    names.sort();
    let mut sorted = texts.to_vec();
    sorted.sort();
    assert_eq!(names.iter().map(|n| n.to_string()).collect::<Vec<_>>(), sorted);
}

proptest! {
    #[test]
    fn parse_format_round_trip(name in any_name()) {
        let text = name.to_string();
        let parsed = RepositoryName::parse(&text).unwrap();
        prop_assert_eq!(&parsed, &name);
        prop_assert_eq!(parsed.to_string(), text.clone());
        prop_assert_eq!(parsed.suffix().text(), parsed.suffix().to_string());
        prop_assert_eq!(RepositoryName::parse(&text.to_uppercase()).unwrap(), name);
    }

    #[test]
    fn suffix_is_injective_on_dates(a in 0i128..4_000_000_000_000_000_000, b in 0i128..4_000_000_000_000_000_000) {
        let sa = Suffix::from_date(Timestamp::from_nanos(a)).unwrap().to_string();
        let sb = Suffix::from_date(Timestamp::from_nanos(b)).unwrap().to_string();
        prop_assert_eq!(sa == sb, a == b);
    }

    #[test]
    fn names_order_as_their_text(a in any_name(), b in any_name(), secs in 0i64..10_000_000_000) {
        prop_assert_eq!(a.cmp(&b), a.to_string().cmp(&b.to_string()));
        let same_prefix = RepositoryName::from_prefix_and_date(a.prefix(), Timestamp::from_nanos(secs as i128 * 1_000_000_000)).unwrap();
        prop_assert_eq!(a.cmp(&same_prefix), a.to_string().cmp(&same_prefix.to_string()));
    }

    /// The fields of a time, split at the byte `.`, are `str::split`'s.
    #[test]
    fn time_fields_are_the_pieces_split_gives(time in "[0-9.é]{0,24}") {
        let (fields, count) = super::time_fields(&time);
        let pieces: Vec<&str> = time.split('.').collect();
        prop_assert_eq!(count, pieces.len());
        prop_assert_eq!(&fields[..count.min(6)], &pieces[..count.min(6)]);
    }

    /// A sibling parsed from its time alone is the whole parse of its name,
    /// for any time, including those that are not one (then neither parses).
    #[test]
    fn a_sibling_of_any_time_agrees_with_the_whole_parse(time in "[0-9]{1,2}(\\.[0-9]{1,3}){0,6}") {
        let first = RepositoryName::parse("sid.inpe.br/mtc-m18/2024/02.16.17.46").unwrap();
        let whole = RepositoryName::parse(&format!("sid.inpe.br/mtc-m18/2024/{time}")).ok();
        let sibling = first.sibling(&time);
        prop_assert_eq!(sibling.map(|n| (n.to_string(), n.date())), whole.map(|n| (n.to_string(), n.date())));
    }

    /// Names of one prefix and year compare by their times: as their texts do.
    #[test]
    fn names_of_one_year_order_as_their_text(a in any_name(), x in 0i64..31_622_400_000_000, y in 0i64..31_622_400_000_000) {
        let in_2024 = |micros: i64| Timestamp::from_nanos((1_704_067_200_000_000 + micros) as i128 * 1_000);
        let (p, q) = (RepositoryName::from_prefix_and_date(a.prefix(), in_2024(x)).unwrap(), RepositoryName::from_prefix_and_date(a.prefix(), in_2024(y)).unwrap());
        prop_assert_eq!(p.cmp(&q), p.to_string().cmp(&q.to_string()));
    }

    #[test]
    fn parse_never_panics(s in "\\PC{0,60}") {
        let _ = RepositoryName::parse(&s);
    }

    /// Times shaped to straddle the 24 bytes a name holds inline (valid
    /// fields or a three-digit minute, fractions of 7 to 11 digits, a piece
    /// after them): every way a name
    /// is made agrees with the whole parse, and none panics; what is accepted
    /// is kept whole.
    #[test]
    fn times_near_the_inline_bound_are_kept_whole_or_refused(
        time in "0[1-9]\\.1[0-9]\\.[01][0-9]\\.[0-5][0-9]{1,2}(\\.[0-5][0-9])?(\\.[0-9]{7,11})?(\\.[0-9]{1,3})?"
    ) {
        let first = RepositoryName::parse("a.b/c/2024/02.16.17.46").unwrap();
        let whole = RepositoryName::parse(&format!("a.b/c/2024/{time}")).ok().map(|n| n.to_string());
        prop_assert_eq!(first.sibling(&time).map(|n| n.to_string()), whole.clone());
        prop_assert_eq!(first.under_same_prefix(&format!("2024/{time}")).map(|n| n.to_string()), whole.clone());
        if let Some(text) = whole {
            prop_assert!(time.len() <= TIME_MAX);
            prop_assert_eq!(text, format!("a.b/c/2024/{time}"));
        }
    }
}

/// A walk parses each item after the first in a year's folder as a sibling of
/// the one before: the same name as a whole parse, and none for a time that is
/// not one (the whole parse then says why).
#[test]
fn a_sibling_is_the_name_a_whole_parse_gives() {
    let first = RepositoryName::parse("sid.inpe.br/mtc-m18.8080/2009/02.16.17.46").unwrap();
    for time in ["02.16.17.46.01", "12.31.23.59.59.9999", "01.01.00.00", "02.16.17.46.00.5"] {
        let whole = RepositoryName::parse(&format!("sid.inpe.br/mtc-m18.8080/2009/{time}")).unwrap();
        let sibling = first.sibling(time).unwrap();
        assert_eq!((sibling.to_string(), sibling.date()), (whole.to_string(), whole.date()), "{time}");
        assert_eq!(sibling.components(), whole.components());
    }
    for not_a_time in ["", "13.01.00.00", "02.16.17", "02.16.17.46.x", "02/16", "02.16.17.46.01.5.5"] {
        assert!(first.sibling(not_a_time).is_none(), "{not_a_time:?}");
        assert!(RepositoryName::parse(&format!("sid.inpe.br/mtc-m18.8080/2009/{not_a_time}")).is_err());
    }
}

#[test]
fn a_name_under_the_same_prefix_is_the_name_a_whole_parse_gives() {
    let first = RepositoryName::parse("sid.inpe.br/mtc-m18.8080/2009/02.16.17.46").unwrap();
    for suffix in ["2009/02.16.17.46.01", "2010/12.31.23.59.59.9999", "1999/01.01.00.00", "2024/02.29.17.46.00.5"] {
        let whole = RepositoryName::parse(&format!("sid.inpe.br/mtc-m18.8080/{suffix}")).unwrap();
        let under = first.under_same_prefix(suffix).unwrap();
        assert_eq!((under.to_string(), under.date()), (whole.to_string(), whole.date()), "{suffix}");
        assert_eq!(under.components(), whole.components());
    }
    let bad = [
        "",
        "2009",
        "2009/",
        "2009/13.01.00.00",
        "2023/02.29.00.00",
        "2009/02.16.17.46/x",
        "20x9/02.16.17.46",
        "2009/02.16.17.4é",
    ];
    for not_a_suffix in bad {
        assert!(first.under_same_prefix(not_a_suffix).is_none(), "{not_a_suffix:?}");
        assert!(RepositoryName::parse(&format!("sid.inpe.br/mtc-m18.8080/{not_a_suffix}")).is_err());
    }
}

/// The longest time a suffix can have fits the inline text it is held in, by
/// every way a name is made; one byte more is refused, not truncated.
#[test]
fn the_longest_time_is_held_whole_and_a_longer_one_refused() {
    let longest = "a.b/c/2010/10.20.15.14.06.123456789";
    let name = RepositoryName::parse(longest).unwrap();
    assert_eq!(name.to_string(), longest);
    assert_eq!(name.components()[3].len(), TIME_MAX);
    let sibling = name.sibling("12.31.23.59.59.987654321").unwrap();
    assert_eq!(sibling.to_string(), "a.b/c/2010/12.31.23.59.59.987654321");
    let under = name.under_same_prefix("2011/01.01.00.00.00.000000001").unwrap();
    assert_eq!(under.to_string(), "a.b/c/2011/01.01.00.00.00.000000001");
    assert_eq!(Suffix::from_date(t("1287587646.123456789")).unwrap().to_string(), "2010/10.20.15.14.06.123456789");
    for longer in ["10.20.15.14.06.1234567891", "10.20.15.14.06.12345678.1", "10.20.15.14.066.12345678"] {
        assert!(RepositoryName::parse(&format!("a.b/c/2010/{longer}")).is_err(), "{longer}");
        assert!(name.sibling(longer).is_none(), "{longer}");
    }
}
