//! Durable event log (SQLite, WAL, one group-committing writer) and its projections.
