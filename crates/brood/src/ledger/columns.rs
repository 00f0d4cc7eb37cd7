//! Reading stored column values leniently: the database is untrusted input (an
//! older brood, or a hand edit, could store anything), so an odd value reads as a
//! neutral one with a note rather than failing the whole listing.

use rusqlite::Row;

/// A count column read leniently: the database is untrusted input (an older brood
/// could store a REAL or a wrapped negative), so anything but a non-negative integer
/// reads as 0 with a note naming the column and the stored value.
pub(super) fn count_column(
    row: &Row<'_>,
    idx: usize,
    name: &str,
    notes: &mut Vec<String>,
) -> rusqlite::Result<u64> {
    use rusqlite::types::ValueRef;
    let raw = row.get_ref(idx)?;
    let odd = match raw {
        ValueRef::Integer(n) => match u64::try_from(n) {
            Ok(n) => return Ok(n),
            Err(_) => format!("{n}"),
        },
        ValueRef::Null => return Ok(0),
        ValueRef::Real(f) => format!("{f}"),
        ValueRef::Text(t) => format!("{:?}", String::from_utf8_lossy(t.get(..40).unwrap_or(t))),
        ValueRef::Blob(b) => format!("a {}-byte blob", b.len()),
    };
    notes.push(format!(
        "{name} unknown (stored value {odd} is not a count)"
    ));
    Ok(0)
}
