//! The little CSV reading the loaders share: numbered records, named columns, typed fields.
//!
//! The reference files are plain comma-separated text without quoting, so this is a split on
//! commas, not a CSV parser; it must never guess a value it cannot parse.

use std::path::Path;
use std::str::FromStr;

use super::DataError;

/// The whole file as text.
pub(crate) fn read_text(path: &Path) -> Result<String, DataError> {
    std::fs::read_to_string(path).map_err(|e| DataError::file(path, format!("cannot read: {e}")))
}

/// `(1-based line number, trimmed fields)` of one non-blank line.
pub(crate) type Record<'a> = (usize, Vec<&'a str>);

/// Non-blank lines as records.
pub(crate) fn records(text: &str) -> impl Iterator<Item = Record<'_>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.split(',').map(str::trim).collect()))
}

/// The header (first non-blank line) and the records after it.
pub(crate) fn header_and_records<'a>(
    path: &Path,
    text: &'a str,
) -> Result<(Record<'a>, impl Iterator<Item = Record<'a>>), DataError> {
    let mut recs = records(text);
    let header = recs
        .next()
        .ok_or_else(|| DataError::file(path, "empty file"))?;
    Ok((header, recs))
}

/// Index of each wanted column in the header, or an error naming the missing one.
pub(crate) fn column_indices<const N: usize>(
    path: &Path,
    line: usize,
    header: &[&str],
    wanted: [&str; N],
) -> Result<[usize; N], DataError> {
    let mut out = [0; N];
    for (slot, name) in out.iter_mut().zip(wanted) {
        *slot = header.iter().position(|h| *h == name).ok_or_else(|| {
            DataError::at(
                path,
                line,
                format!("header has no column `{name}` (got {header:?})"),
            )
        })?;
    }
    Ok(out)
}

/// The raw text of column `idx`, or an error if the row is too short.
pub(crate) fn raw<'a>(
    path: &Path,
    line: usize,
    fields: &[&'a str],
    idx: usize,
    name: &str,
) -> Result<&'a str, DataError> {
    fields.get(idx).copied().ok_or_else(|| {
        DataError::at(
            path,
            line,
            format!("missing column `{name}` ({} fields)", fields.len()),
        )
    })
}

/// Column `idx` parsed as `T`; empty or unparsable text is an error naming the column.
pub(crate) fn field<T: FromStr>(
    path: &Path,
    line: usize,
    fields: &[&str],
    idx: usize,
    name: &str,
) -> Result<T, DataError> {
    let text = raw(path, line, fields, idx, name)?;
    if text.is_empty() {
        return Err(DataError::at(
            path,
            line,
            format!("empty value for `{name}`"),
        ));
    }
    text.parse()
        .map_err(|_| DataError::at(path, line, format!("cannot parse `{name}` from {text:?}")))
}

/// Column `idx` as a finite number (NaN and infinities are errors).
pub(crate) fn finite(
    path: &Path,
    line: usize,
    fields: &[&str],
    idx: usize,
    name: &str,
) -> Result<f64, DataError> {
    let v: f64 = field(path, line, fields, idx, name)?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(DataError::at(
            path,
            line,
            format!("`{name}` is not finite: {v}"),
        ))
    }
}
