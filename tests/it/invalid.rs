//! A table of invalid names and IBIps: each must exit 2 with one line that
//! names the problem and its column, and never panic.

use crate::env::TestEnv;

/// (input, fragment the error must contain)
const INVALID: &[(&str, &str)] = &[
    ("sid.inpe.br/mtc-m18/2009/13.16.17.46", "invalid month \"13\" at column 26"),
    ("sid.inpe.br/mtc-m18/2009/00.16.17.46", "invalid month \"00\""),
    ("sid.inpe.br/mtc-m18/2009/02.30.17.46", "invalid day \"30\""),
    ("sid.inpe.br/mtc-m18/2009/02.29.17.46", "invalid day \"29\""),
    ("sid.inpe.br/mtc-m18/2009/04.31.17.46", "invalid day \"31\""),
    ("sid.inpe.br/mtc-m18/2009/02.00.17.46", "invalid day \"00\""),
    ("sid.inpe.br/mtc-m18/2009/02.16.24.46", "invalid hour \"24\""),
    ("sid.inpe.br/mtc-m18/2009/02.16.17.60", "invalid minute \"60\""),
    ("sid.inpe.br/mtc-m18/2009/02.16.17.46.60", "invalid second \"60\""),
    ("sid.inpe.br/mtc-m18/2009/02.16.17.46.5", "invalid second \"5\""),
    ("sid.inpe.br/mtc-m18/2009/2.16.17.46", "invalid month \"2\""),
    ("sid.inpe.br/mtc-m18/2009/02.16.17", "expected MM.DD.hh.mm"),
    ("sid.inpe.br/mtc-m18/2009/02.16.17.46.06.5.1", "after the fraction"),
    ("sid.inpe.br/mtc-m18/2009/02.16.17.46.06.", "expected digits after"),
    ("sid.inpe.br/mtc-m18/209/02.16.17.46", "invalid year \"209\""),
    ("sid.inpe.br/mtc-m18/2009/02.16.17.46/x", "four parts"),
    ("sid.inpe.br/mtc-m18", "a lone prefix"),
    ("sid.inpe.br/mtc-m18/2009", "expected subdomain/word/year"),
    ("sid.inpe.br//2009/02.16.17.46", "empty first word"),
    ("/mtc-m18/2009/02.16.17.46", "empty subdomain"),
    ("sid..br/mtc-m18/2009/02.16.17.46", "empty label"),
    ("-sid.inpe.br/mtc-m18/2009/02.16.17.46", "starts with \"-\""),
    ("sid-.inpe.br/mtc-m18/2009/02.16.17.46", "ends with \"-\""),
    ("sid.inpe.br/-mtc/2009/02.16.17.46", "starts with \"-\""),
    ("sid.inpe.br/mtc-/2009/02.16.17.46", "ends with \"-\""),
    ("sid.inpe.9r/mtc-m18/2009/02.16.17.46", "must start with a letter"),
    ("sid.inpe.br/mtc_m18/2009/02.16.17.46", "invalid character '_'"),
    ("sid.inpe.br/mtc-m18@/2009/02.16.17.46", "missing port"),
    ("sid.inpe.br/mtc-m18.99999/2009/02.16.17.46", "not in 1..65535"),
    ("sid.inpe.br/mtc-m18.080/2009/02.16.17.46", "leading zero"),
    ("sid.inpe.br/mtc m18/2009/02.16.17.46", "invalid character ' '"),
    ("sid.inpé.br/mtc-m18/2009/02.16.17.46", "invalid character 'é'"),
    ("8JMKD3MGP8W/34PGRBO", "excluded character 'O'"),
    ("8JMKD3MGP8W/34PGRB0", "excluded character '0'"),
    ("8JMKD3MGP8W/34PGRB1", "excluded character '1'"),
    ("8JMKD3MGP8W/34PGRBI", "excluded character 'I'"),
    ("8JMKD3MGP8W/34PGRBV", "excluded character 'V'"),
    ("8JMKD3MGP8W/34PGRBY", "excluded character 'Y'"),
    ("8JMKD3MGP8W/34PGRBZ", "excluded character 'Z'"),
    ("8JMKD3MGP8/34PGRBS", "lacks the \"W\""),
    ("8JMKD3MGP8W/", "empty seconds code"),
    ("W/34PGRBS", "empty IP code"),
    ("8JMKD3MGP8W/34PGRBSW", "no significant digits"),
    ("8JMKD3MGP8W/234PGRBS", "leading zero digit"),
    ("8JMKD3MGP8W34K/34PGRBS", "port 800 is written as an empty port code"),
    ("8JMKD3MGP8W/34PGRBSWC", "trailing zero"),
    ("8JMKD3MGP8W/34PG-RBS", "invalid character '-'"),
    ("Y35XYSOQH", "skips the vowels"),
    ("", "empty"),
];

#[test]
fn every_invalid_identifier_exits_2_naming_the_problem() {
    assert!(INVALID.len() >= 30);
    let env = TestEnv::new();
    for (input, fragment) in INVALID {
        let run = env.fails(&["parse", "--", input], 2);
        assert!(run.stderr.contains(fragment), "{input:?}: expected {fragment:?} in {:?}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{input:?}: {}", run.stderr);
        assert!(run.stderr.contains("column"), "{input:?}: {}", run.stderr);
    }
}

#[test]
fn parse_stops_at_the_first_invalid_one() {
    let env = TestEnv::new();
    let run = env.fails(&["parse", "8JMKD3MGP8W/34PGRBS", "8JMKD3MGP8W/34PGRBO", "Y35XYS0QH"], 2);
    assert!(run.stdout.contains("8JMKD3MGP8W/34PGRBS") && !run.stdout.contains("Y35XYS0QH"), "{}", run.stdout);
}

#[test]
fn invalid_mint_arguments_exit_2() {
    let env = TestEnv::new();
    for args in [
        &["mint", "--host", "localhost", "--state", "s"][..],
        &["mint", "--host", "a.b", "--state", "s", "--granularity", "0.5"],
        &["mint", "--host", "a.b", "--state", "s", "--at", "yesterday"],
        &["mint", "--host", "a.b", "--state", "s", "--ip", "0.1.2.3"],
        &["mint", "--host", "a.b"],
        &["ibip", "encode", "--ip", "1.2.3.4", "--name", "a.b/c/2009/13.01.00.00"],
    ] {
        env.fails(args, 2);
    }
}
