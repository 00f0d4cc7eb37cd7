//! TODO(tool helper): memory
