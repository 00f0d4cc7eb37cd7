//! TODO(tool helper): search
