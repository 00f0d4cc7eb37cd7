//! TODO(model helper): preset
