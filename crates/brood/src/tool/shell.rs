//! TODO(tool helper): shell
