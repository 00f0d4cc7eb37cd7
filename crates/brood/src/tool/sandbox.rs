//! TODO(tool helper): sandbox
