//! TODO(tool helper): fs
