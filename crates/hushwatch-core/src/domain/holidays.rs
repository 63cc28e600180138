//! Holiday dates: explicit dates and inclusive ranges from config, plus any
//! iCalendar files. A holiday removes the windows that *start* on that date.

use super::ics::IcsCalendar;
use chrono::NaiveDate;
use std::fmt;

#[derive(Debug, Clone, Default)]
pub struct Holidays {
    /// Sorted, merged, inclusive date ranges.
    ranges: Vec<(NaiveDate, NaiveDate)>,
    files: Vec<IcsCalendar>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolidayError(String);

impl fmt::Display for HolidayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HolidayError {}

/// Parses `2026-12-31` or an inclusive range `2027-01-01..2027-01-03`.
pub fn parse_holiday(text: &str) -> Result<(NaiveDate, NaiveDate), HolidayError> {
    let date = |s: &str| {
        NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").map_err(|_| {
            HolidayError(format!(
                "{text:?} is not a date or range (use \"YYYY-MM-DD\" or \"YYYY-MM-DD..YYYY-MM-DD\")"
            ))
        })
    };
    match text.split_once("..") {
        Some((from, to)) => {
            let (from, to) = (date(from)?, date(to)?);
            if to < from {
                return Err(HolidayError(format!("{text:?} ends before it starts")));
            }
            Ok((from, to))
        }
        None => date(text).map(|d| (d, d)),
    }
}

impl Holidays {
    pub fn new(mut ranges: Vec<(NaiveDate, NaiveDate)>, files: Vec<IcsCalendar>) -> Holidays {
        ranges.sort();
        let mut merged: Vec<(NaiveDate, NaiveDate)> = Vec::with_capacity(ranges.len());
        for (from, to) in ranges {
            match merged.last_mut() {
                Some(last) if from <= last.1.succ_opt().unwrap_or(last.1) => {
                    last.1 = last.1.max(to)
                }
                _ => merged.push((from, to)),
            }
        }
        Holidays {
            ranges: merged,
            files,
        }
    }

    pub fn contains(&self, date: NaiveDate) -> bool {
        self.in_ranges(date) || self.files.iter().any(|f| f.covers(date))
    }

    fn in_ranges(&self, date: NaiveDate) -> bool {
        // Binary search over merged ranges keeps a long list of dates cheap.
        let idx = self.ranges.partition_point(|(from, _)| *from <= date);
        idx > 0 && self.ranges[idx - 1].1 >= date
    }

    /// Number of explicitly listed holiday dates (for summaries).
    pub fn listed_days(&self) -> i64 {
        self.ranges
            .iter()
            .map(|(from, to)| (*to - *from).num_days() + 1)
            .sum()
    }

    pub fn file_count(&self) -> usize {
        self.files.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn dates_and_ranges() {
        let ranges = ["2026-12-31", "2027-01-01..2027-01-03", "2027-05-05"]
            .iter()
            .map(|s| parse_holiday(s).unwrap())
            .collect();
        let h = Holidays::new(ranges, vec![]);
        for yes in [
            "2026-12-31",
            "2027-01-01",
            "2027-01-02",
            "2027-01-03",
            "2027-05-05",
        ] {
            assert!(h.contains(d(yes)), "{yes}");
        }
        for no in ["2026-12-30", "2027-01-04", "2027-05-04", "2027-05-06"] {
            assert!(!h.contains(d(no)), "{no}");
        }
        assert_eq!(h.listed_days(), 5);
    }

    #[test]
    fn bad_holidays_are_explained() {
        assert!(parse_holiday("2026-13-01")
            .unwrap_err()
            .to_string()
            .contains("is not a date"));
        assert!(parse_holiday("2027-01-03..2027-01-01")
            .unwrap_err()
            .to_string()
            .contains("ends before"));
    }
}
