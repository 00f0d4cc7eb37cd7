//! TODO(model helper): sse
