//! TODO(tool helper): todo
