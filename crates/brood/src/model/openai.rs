//! TODO(model helper): openai
