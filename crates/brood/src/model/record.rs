//! TODO(model helper): record
