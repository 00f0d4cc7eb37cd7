//! Reading stored column values leniently: the database is untrusted input (an
//! older brood, or a hand edit, could store anything), so an odd value reads as a
//! neutral one with a note rather than failing the whole listing.

use super::db::{Cell, DbError, Row};

/// A count column read leniently: the database is untrusted input (an older brood
/// could store a REAL or a wrapped negative), so anything but a non-negative integer
/// reads as 0 with a note naming the column and the stored value.
pub(super) fn count_column(
    row: &dyn Row,
    idx: usize,
    name: &str,
    notes: &mut Vec<String>,
) -> Result<u64, DbError> {
    let raw = row.cell(idx)?;
    let odd = match raw {
        Cell::Int(n) => match u64::try_from(n) {
            Ok(n) => return Ok(n),
            Err(_) => format!("{n}"),
        },
        Cell::Null => return Ok(0),
        other => other.describe(),
    };
    notes.push(format!(
        "{name} unknown (stored value {odd} is not a count)"
    ));
    Ok(0)
}
