//! Known-answer vectors taken from the standard's own tables, kept as data in
//! `fixtures/vectors/` and compiled in, so unit tests, integration tests and
//! the benchmark all read the same rows.

use crate::id::Timestamp;

/// One row of Table 6.2 (temporal distributor, granularity 1 s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributorRow {
    pub item: String,
    pub request: Timestamp,
    pub creation: Timestamp,
    pub date: Timestamp,
    pub suffix: String,
}

const TABLE_6_2: &str = include_str!("../../fixtures/vectors/table-6.2.tsv");

/// The seven rows of Table 6.2, in request order.
pub fn table_6_2() -> Vec<DistributorRow> {
    TABLE_6_2
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let t = |s: &str| Timestamp::parse_decimal(s).expect("Table 6.2 fixture holds decimal times");
            DistributorRow {
                item: f[0].to_string(),
                request: t(f[1]),
                creation: t(f[2]),
                date: t(f[3]),
                suffix: f[4].to_string(),
            }
        })
        .collect()
}
