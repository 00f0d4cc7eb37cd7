//! TODO(model helper): scripted
