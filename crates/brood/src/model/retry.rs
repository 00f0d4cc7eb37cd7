//! TODO(model helper): retry
